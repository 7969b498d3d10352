/* Hugging Face tokenizer.json (the serialization of tokenizers' Tokenizer: model, normalizer,
 * pre_tokenizer, post_processor, decoder, added_tokens). Read: model BPE (vocab, merges as
 * "a b" strings or [a, b] pairs, unk_token, byte_fallback, fuse_unk, ignore_merges);
 * normalizer null / Prepend / Replace (String or Regex pattern) / Sequence of those; pre_tokenizer
 * null / Split (Regex or String; Isolated, Removed, MergedWithPrevious, MergedWithNext; invert) /
 * Digits / ByteLevel (add_prefix_space false) / Metaspace (first) / Sequence of those;
 * post_processor TemplateProcessing (or one inside a Sequence) for BOS/EOS. Anything else is
 * refused as unsupported, by name. */
#include "tokenizer_internal.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct qw_hfctx {
    qw_tokenizer *t;
    qs_error *err;
    int byte_level; /* a ByteLevel pre-tokenizer was seen */
} qw_hfctx;

static qs_status qw_bad(qw_hfctx *c, const char *field, const char *what) {
    return qs_error_set(c->err, QS_EFORMAT, "%s: field \"%s\": %s", c->t->source, field, what);
}

static qs_status qw_unsupported(qw_hfctx *c, const char *field, const char *type) {
    return qs_error_set(c->err, QS_EUNSUPPORTED, "%s: field \"%s\": type \"%s\" is not supported",
                        c->t->source, field, type);
}

static char *qw_dup(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

static qs_status qw_normalizer(qw_hfctx *c, json_t *n, const char *field) {
    qw_tokenizer *t = c->t;
    if (!n || json_is_null(n)) return QS_OK;
    const char *type = json_string_value(json_object_get(n, "type"));
    if (!type) return qw_bad(c, field, "no \"type\" string");
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(n, "normalizers");
        if (!json_is_array(list)) return qw_bad(c, field, "\"normalizers\" is not an array");
        size_t i;
        json_t *v;
        json_array_foreach(list, i, v) {
            char f[64];
            snprintf(f, sizeof f, "normalizer.normalizers[%zu]", i);
            qs_status st = qw_normalizer(c, v, f);
            if (st) return st;
        }
        return QS_OK;
    }
    if (strcmp(type, "Prepend") == 0) {
        json_t *p = json_object_get(n, "prepend");
        if (!json_is_string(p)) return qw_bad(c, field, "\"prepend\" is not a string");
        if (t->prepend || t->n_repl)
            return qs_error_set(c->err, QS_EUNSUPPORTED,
                                "%s: field \"%s\": Prepend is read only as the first normalizer",
                                t->source, field);
        t->prepend_len = json_string_length(p);
        t->prepend = qw_dup(json_string_value(p), t->prepend_len);
        if (!t->prepend) return qs_error_set(c->err, QS_ENOMEM, "%s: out of memory", t->source);
        return QS_OK;
    }
    if (strcmp(type, "Replace") == 0) {
        json_t *pattern = json_object_get(n, "pattern");
        json_t *pat = json_object_get(pattern, "String");
        json_t *to = json_object_get(n, "content");
        int regex = !pat && json_is_string(json_object_get(pattern, "Regex"));
        if (regex) pat = json_object_get(pattern, "Regex");
        if (!json_is_string(pat))
            return qw_bad(c, field,
                          "\"pattern\" is neither {\"String\": ...} nor {\"Regex\": ...}");
        if (!json_is_string(to)) return qw_bad(c, field, "\"content\" is not a string");
        if (json_string_length(pat) == 0) return qw_bad(c, field, "empty pattern");
        if (t->n_repl == (int)(sizeof t->repl / sizeof t->repl[0]))
            return qs_error_set(c->err, QS_EUNSUPPORTED, "%s: field \"%s\": too many Replace steps",
                                t->source, field);
        qw_replace *r = &t->repl[t->n_repl];
        r->from_len = json_string_length(pat);
        r->to_len = json_string_length(to);
        r->from = qw_dup(json_string_value(pat), r->from_len);
        r->to = qw_dup(json_string_value(to), r->to_len);
        t->n_repl++;
        if (!r->from || !r->to)
            return qs_error_set(c->err, QS_ENOMEM, "%s: out of memory", t->source);
        if (regex) {
            int code;
            PCRE2_SIZE at;
            r->re = pcre2_compile((PCRE2_SPTR)r->from, r->from_len, PCRE2_UTF | PCRE2_UCP, &code,
                                  &at, NULL);
            if (!r->re) {
                PCRE2_UCHAR msg[256];
                pcre2_get_error_message(code, msg, sizeof msg);
                return qs_error_set(c->err, QS_EFORMAT,
                                    "%s: field \"%s\": PCRE2 refuses the Replace pattern at "
                                    "offset %zu: %s",
                                    t->source, field, (size_t)at, (const char *)msg);
            }
        }
        return QS_OK;
    }
    return qw_unsupported(c, field, type);
}

static qs_status qw_behavior(qw_hfctx *c, json_t *b, const char *field, qw_split_behavior *out) {
    const char *s = json_string_value(b);
    if (!s) return qw_bad(c, field, "\"behavior\" is not a string");
    if (strcmp(s, "Isolated") == 0)
        *out = QW_SPLIT_ISOLATED;
    else if (strcmp(s, "Removed") == 0)
        *out = QW_SPLIT_REMOVED;
    else if (strcmp(s, "MergedWithPrevious") == 0)
        *out = QW_SPLIT_MERGED_PREV;
    else if (strcmp(s, "MergedWithNext") == 0)
        *out = QW_SPLIT_MERGED_NEXT;
    else
        return qw_unsupported(c, field, s);
    return QS_OK;
}

static qs_status qw_pre_tokenizer(qw_hfctx *c, json_t *p, const char *field) {
    qw_tokenizer *t = c->t;
    if (!p || json_is_null(p)) return QS_OK;
    const char *type = json_string_value(json_object_get(p, "type"));
    if (!type) return qw_bad(c, field, "no \"type\" string");
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(p, "pretokenizers");
        if (!json_is_array(list)) return qw_bad(c, field, "\"pretokenizers\" is not an array");
        size_t i;
        json_t *v;
        json_array_foreach(list, i, v) {
            char f[64];
            snprintf(f, sizeof f, "pre_tokenizer.pretokenizers[%zu]", i);
            qs_status st = qw_pre_tokenizer(c, v, f);
            if (st) return st;
        }
        return QS_OK;
    }
    if (strcmp(type, "Split") == 0) {
        json_t *pat = json_object_get(p, "pattern");
        json_t *re = json_object_get(pat, "Regex"), *lit = json_object_get(pat, "String");
        qw_split_behavior b = QW_SPLIT_ISOLATED;
        qs_status st = qw_behavior(c, json_object_get(p, "behavior"), field, &b);
        if (st) return st;
        int invert = json_is_true(json_object_get(p, "invert"));
        if (json_is_string(re))
            return qw_pretok_add(t, json_string_value(re), json_string_length(re), b, invert, field,
                                 c->err);
        if (json_is_string(lit) && json_string_length(lit) > 0)
            return qw_pretok_add_literal(t, json_string_value(lit), json_string_length(lit), b,
                                         invert, field, c->err);
        return qw_bad(c, field, "\"pattern\" has neither a Regex nor a non-empty String");
    }
    if (strcmp(type, "Digits") == 0) {
        /* pre_tokenizers/digits.rs: char::is_numeric (Nd, Nl, No: \p{N}), Isolated */
        const char *re =
            json_is_true(json_object_get(p, "individual_digits")) ? "\\p{N}" : "\\p{N}+";
        return qw_pretok_add(t, re, strlen(re), QW_SPLIT_ISOLATED, 0, field, c->err);
    }
    if (strcmp(type, "Metaspace") == 0) {
        json_t *rep = json_object_get(p, "replacement");
        if (!json_is_string(rep) || json_string_length(rep) == 0 ||
            json_string_length(rep) >= sizeof t->ms_rep)
            return qw_bad(c, field, "\"replacement\" is not a one-character string");
        if (t->n_steps > 0 || t->ms)
            return qs_error_set(c->err, QS_EUNSUPPORTED,
                                "%s: field \"%s\": Metaspace is read only as the first "
                                "pre-tokenizer",
                                t->source, field);
        t->ms = 1;
        t->ms_rep_len = json_string_length(rep);
        memcpy(t->ms_rep, json_string_value(rep), t->ms_rep_len);
        const char *scheme = json_string_value(json_object_get(p, "prepend_scheme"));
        json_t *aps = json_object_get(p, "add_prefix_space"); /* tokenizers < 0.19 */
        if (!scheme) scheme = aps && !json_is_true(aps) ? "never" : "always";
        if (strcmp(scheme, "always") == 0)
            t->ms_scheme = 0;
        else if (strcmp(scheme, "first") == 0)
            t->ms_scheme = 1;
        else if (strcmp(scheme, "never") == 0)
            t->ms_scheme = 2;
        else
            return qw_unsupported(c, field, scheme);
        json_t *split = json_object_get(p, "split");
        if (split && !json_is_true(split)) return QS_OK;
        return qw_pretok_add_literal(t, t->ms_rep, t->ms_rep_len, QW_SPLIT_MERGED_NEXT, 0, field,
                                     c->err);
    }
    if (strcmp(type, "ByteLevel") == 0) {
        if (json_is_true(json_object_get(p, "add_prefix_space")))
            return qs_error_set(c->err, QS_EUNSUPPORTED,
                                "%s: field \"%s\": ByteLevel with add_prefix_space true is not "
                                "supported",
                                t->source, field);
        c->byte_level = 1;
        json_t *ur = json_object_get(p, "use_regex");
        if (ur && !json_is_true(ur)) return QS_OK;
        return qw_pretok_add(t, QW_GPT2_PATTERN, strlen(QW_GPT2_PATTERN), QW_SPLIT_ISOLATED, 0,
                             field, c->err);
    }
    return qw_unsupported(c, field, type);
}

/* The special token ids a TemplateProcessing puts before and after $A (its "single"). */
static void qw_template(json_t *pp, const qw_tokenizer *t, int64_t *bos, int64_t *eos) {
    if (!pp || json_is_null(pp)) return;
    const char *type = json_string_value(json_object_get(pp, "type"));
    if (!type) return;
    if (strcmp(type, "Sequence") == 0) {
        size_t i;
        json_t *list = json_object_get(pp, "processors");
        for (i = 0; i < json_array_size(list); i++)
            qw_template(json_array_get(list, i), t, bos, eos);
        return;
    }
    if (strcmp(type, "TemplateProcessing") != 0) return;
    json_t *single = json_object_get(pp, "single");
    json_t *specials = json_object_get(pp, "special_tokens");
    int seen_seq = 0;
    size_t i;
    json_t *v;
    json_array_foreach(single, i, v) {
        if (json_object_get(v, "Sequence")) {
            seen_seq = 1;
            continue;
        }
        const char *name =
            json_string_value(json_object_get(json_object_get(v, "SpecialToken"), "id"));
        if (!name) continue;
        json_t *ids = json_object_get(json_object_get(specials, name), "ids");
        int64_t id = json_is_integer(json_array_get(ids, 0))
                         ? json_integer_value(json_array_get(ids, 0))
                         : qw_strmap_get(t, name, strlen(name));
        if (id < 0 || id >= t->n_vocab) continue;
        if (!seen_seq)
            *bos = id;
        else
            *eos = id;
    }
}

/* Splits a merge given as "a b" (at the first space after the first byte, as llama.cpp's
 * find(' ', 1)) or as ["a", "b"]. */
static int qw_merge_parts(json_t *m, const char **a, size_t *an, const char **b, size_t *bn) {
    if (json_is_string(m)) {
        const char *s = json_string_value(m);
        size_t n = json_string_length(m);
        const char *sp = n > 1 ? memchr(s + 1, ' ', n - 1) : NULL;
        if (!sp) return -1;
        *a = s;
        *an = (size_t)(sp - s);
        *b = sp + 1;
        *bn = n - *an - 1;
        return 0;
    }
    if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
        json_is_string(json_array_get(m, 1))) {
        *a = json_string_value(json_array_get(m, 0));
        *an = json_string_length(json_array_get(m, 0));
        *b = json_string_value(json_array_get(m, 1));
        *bn = json_string_length(json_array_get(m, 1));
        return 0;
    }
    return -1;
}

static qs_status qw_load(qw_hfctx *c, json_t *root, int add_bos, int add_eos) {
    qw_tokenizer *t = c->t;
    qs_error *err = c->err;
    qs_status st;
    if (!json_is_object(root)) return qw_bad(c, "(top)", "not a JSON object");
    json_t *model = json_object_get(root, "model");
    if (!json_is_object(model)) return qw_bad(c, "model", "missing or not an object");
    const char *mtype = json_string_value(json_object_get(model, "type"));
    json_t *vocab = json_object_get(model, "vocab");
    if (!mtype && json_is_object(vocab) && json_object_get(model, "merges")) mtype = "BPE";
    if (!mtype) return qw_bad(c, "model.type", "missing");
    if (strcmp(mtype, "BPE") != 0) return qw_unsupported(c, "model.type", mtype);
    if (!json_is_object(vocab)) return qw_bad(c, "model.vocab", "missing or not an object");
    json_t *added = json_object_get(root, "added_tokens");
    if (added && !json_is_array(added)) return qw_bad(c, "added_tokens", "not an array");
    /* ids: the vocab's and the added tokens'; the vocabulary size is the largest + 1 */
    int64_t max_id = -1;
    size_t pool = 0;
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) >= (int64_t)1 << 31)
            return qs_error_set(err, QS_EFORMAT,
                                "%s: field \"model.vocab\": token \"%.64s\": id "
                                "is not an integer in [0, 2^31)",
                                t->source, key);
        if (json_integer_value(v) > max_id) max_id = json_integer_value(v);
        pool += strlen(key);
    }
    size_t i;
    json_array_foreach(added, i, v) {
        json_t *id = json_object_get(v, "id"), *content = json_object_get(v, "content");
        if (!json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= (int64_t)1 << 31 || !json_is_string(content))
            return qs_error_set(err, QS_EFORMAT,
                                "%s: field \"added_tokens[%zu]\": needs an integer \"id\" in [0, "
                                "2^31) and a string \"content\"",
                                t->source, i);
        if (json_integer_value(id) > max_id) max_id = json_integer_value(id);
        pool += json_string_length(content);
    }
    if (max_id < 0) return qw_bad(c, "model.vocab", "empty");
    /* ids are dense in real vocabularies (the largest has about a million tokens): a file whose
     * ids leave more holes than tokens is refused before anything is allocated for them */
    size_t entries = json_object_size(vocab) + json_array_size(added);
    if (max_id >= QW_TOK_MAX_VOCAB || (uint64_t)max_id >= 2 * (uint64_t)entries + 1024)
        return qs_error_set(err, QS_EFORMAT,
                            "%s: field \"model.vocab\": largest id %lld for %zu tokens (ids must "
                            "be dense and below %d)",
                            t->source, (long long)max_id, entries, QW_TOK_MAX_VOCAB);
    if ((st = qw_tok_alloc(t, (uint32_t)(max_id + 1), pool, err))) return st;
    /* text of each id: the added token's content wins over the vocab's entry */
    const char **text = calloc((size_t)max_id + 1, sizeof *text);
    size_t *tlen = calloc((size_t)max_id + 1, sizeof *tlen);
    if (!text || !tlen) {
        free(text);
        free(tlen);
        return qs_error_set(err, QS_ENOMEM, "%s: out of memory", t->source);
    }
    json_object_foreach(vocab, key, v) {
        int64_t id = json_integer_value(v);
        text[id] = key;
        tlen[id] = strlen(key);
        /* json keys are NUL-terminated: a key with an embedded NUL is cut there */
    }
    json_array_foreach(added, i, v) {
        int64_t id = json_integer_value(json_object_get(v, "id"));
        text[id] = json_string_value(json_object_get(v, "content"));
        tlen[id] = json_string_length(json_object_get(v, "content"));
    }
    size_t at = 0;
    for (int64_t id = 0; id <= max_id; id++) {
        t->off[id] = at;
        if (text[id]) {
            memcpy(t->pool + at, text[id], tlen[id]);
            at += tlen[id];
            t->type[id] = QW_TT_NORMAL;
        }
    }
    t->off[max_id + 1] = at;
    free(text);
    free(tlen);
    if ((st = qw_strmap_build(t, err))) return st;
    json_array_foreach(added, i, v) {
        int64_t id = json_integer_value(json_object_get(v, "id"));
        if ((st = qw_tok_add_added(t, (uint32_t)id, json_is_true(json_object_get(v, "special")),
                                   err)))
            return st;
    }
    t->byte_fallback = json_is_true(json_object_get(model, "byte_fallback"));
    t->fuse_unk = json_is_true(json_object_get(model, "fuse_unk"));
    t->ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));
    const char *unk = json_string_value(json_object_get(model, "unk_token"));
    t->unk_id = unk ? qw_strmap_get(t, unk, strlen(unk)) : -1;
    if (unk && t->unk_id < 0)
        return qs_error_set(err, QS_EFORMAT,
                            "%s: field \"model.unk_token\": \"%.64s\" is not in "
                            "the vocabulary",
                            t->source, unk);
    if (t->unk_id >= 0 && t->type[t->unk_id] == QW_TT_NORMAL) t->type[t->unk_id] = QW_TT_UNKNOWN;
    if (json_object_get(model, "continuing_subword_prefix") &&
        !json_is_null(json_object_get(model, "continuing_subword_prefix")))
        return qw_unsupported(c, "model.continuing_subword_prefix", "set");
    if (json_object_get(model, "end_of_word_suffix") &&
        !json_is_null(json_object_get(model, "end_of_word_suffix")))
        return qw_unsupported(c, "model.end_of_word_suffix", "set");
    json_t *dropout = json_object_get(model, "dropout");
    if (dropout && !json_is_null(dropout) && json_number_value(dropout) != 0.0)
        return qw_unsupported(c, "model.dropout", "non-zero");
    /* merges, by rank */
    json_t *merges = json_object_get(model, "merges");
    if (!json_is_array(merges)) return qw_bad(c, "model.merges", "missing or not an array");
    size_t nm = json_array_size(merges);
    if ((st = qw_pairmap_init(&t->merges, nm, err))) return st;
    t->merge_l = malloc((nm ? nm : 1) * sizeof *t->merge_l);
    t->merge_r = malloc((nm ? nm : 1) * sizeof *t->merge_r);
    char *cat = NULL;
    size_t cat_cap = 0;
    if (!t->merge_l || !t->merge_r)
        return qs_error_set(err, QS_ENOMEM, "%s: out of memory", t->source);
    json_array_foreach(merges, i, v) {
        const char *a, *b;
        size_t an, bn;
        if (qw_merge_parts(v, &a, &an, &b, &bn)) {
            free(cat);
            return qs_error_set(err, QS_EFORMAT,
                                "%s: field \"model.merges[%zu]\": not \"a b\" "
                                "nor a pair of strings",
                                t->source, i);
        }
        int64_t l = qw_strmap_get(t, a, an), r = qw_strmap_get(t, b, bn);
        if (an + bn > cat_cap) {
            cat_cap = 2 * (an + bn) + 64;
            char *p = realloc(cat, cat_cap);
            if (!p) {
                free(cat);
                return qs_error_set(err, QS_ENOMEM, "%s: out of memory", t->source);
            }
            cat = p;
        }
        memcpy(cat, a, an);
        memcpy(cat + an, b, bn);
        int64_t m = qw_strmap_get(t, cat, an + bn);
        if (l < 0 || r < 0 || m < 0) {
            free(cat);
            return qs_error_set(err, QS_EFORMAT,
                                "%s: field \"model.merges[%zu]\": \"%.*s\" + "
                                "\"%.*s\": %s is not in the vocabulary",
                                t->source, i, (int)(an < 64 ? an : 64), a, (int)(bn < 64 ? bn : 64),
                                b,
                                l < 0   ? "the left part"
                                : r < 0 ? "the right part"
                                        : "the merge");
        }
        qw_pairmap_put(&t->merges, (uint32_t)l, (uint32_t)r, (uint32_t)i, (uint32_t)m);
        t->merge_l[i] = (uint32_t)l;
        t->merge_r[i] = (uint32_t)r;
    }
    free(cat);
    t->n_merges = (uint32_t)nm;
    if ((st = qw_normalizer(c, json_object_get(root, "normalizer"), "normalizer"))) return st;
    if ((st = qw_pre_tokenizer(c, json_object_get(root, "pre_tokenizer"), "pre_tokenizer")))
        return st;
    const char *dtype =
        json_string_value(json_object_get(json_object_get(root, "decoder"), "type"));
    if (!c->byte_level && dtype && strcmp(dtype, "ByteLevel") == 0) c->byte_level = 1;
    t->kind = c->byte_level ? QW_TOK_BYTE_BPE : QW_TOK_SPM_BPE;
    int64_t bos = -1, eos = -1;
    qw_template(json_object_get(root, "post_processor"), t, &bos, &eos);
    t->bos_id = bos;
    t->eos_id = eos;
    t->add_bos = add_bos >= 0 ? add_bos : bos >= 0;
    t->add_eos = add_eos >= 0 ? add_eos : eos >= 0;
    return qw_tok_finish(t, err);
}

qs_status qw_tokenizer_from_json(const char *file, const char *text, size_t len, int add_bos,
                                 int add_eos, qw_tokenizer **out, qs_error *err) {
    *out = NULL;
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_ALLOW_NUL, &je);
    if (!root)
        return qs_error_set(err, QS_EFORMAT, "%s: line %d, column %d: not JSON: %s", file, je.line,
                            je.column, je.text);
    qw_tokenizer *t = calloc(1, sizeof *t);
    if (!t || !(t->source = qw_dup(file, strlen(file)))) {
        json_decref(root);
        free(t);
        return qs_error_set(err, QS_ENOMEM, "%s: out of memory", file);
    }
    t->unk_id = t->bos_id = t->eos_id = -1;
    qw_hfctx c = {.t = t, .err = err};
    qs_status st = qw_load(&c, root, add_bos, add_eos);
    json_decref(root);
    if (st) {
        qw_tokenizer_free(t);
        return st;
    }
    *out = t;
    return QS_OK;
}
