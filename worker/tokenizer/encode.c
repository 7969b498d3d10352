/* Encoding: UTF-8 check, added tokens cut out, normalizer, pre-tokenizer steps, the model
 * (BPE or SPM) on each word, BOS/EOS. The order is Hugging Face tokenizers'
 * (tokenizer/mod.rs encode_single_sequence: added-token split, normalize, pre_tokenize,
 * model, post-process) and llama.cpp's (llama_vocab::impl::tokenize: tokenizer_st_partition,
 * then each raw fragment through the session). */
#include "tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

/* A cache of words already encoded in this call (HF's BPE keeps one too: models/bpe/model.rs
 * cache): key = the word's bytes (copied: a normalized word lives in a buffer that the next
 * fragment reuses), value = its ids. Words longer than QW_CACHE_MAX_WORD bytes are not cached;
 * once QW_CACHE_SLOTS / 2 words are in, no more are added. */
enum { QW_CACHE_SLOTS = 1 << 16, QW_CACHE_MAX_WORD = 64 };

typedef struct qw_cache_slot {
    uint32_t key_at, len; /* len 0 = empty */
    uint32_t at, n;
} qw_cache_slot;

typedef struct qw_word_cache {
    qw_cache_slot *slot;
    size_t used;
    uint8_t *keys; /* QW_CACHE_SLOTS / 2 * QW_CACHE_MAX_WORD bytes */
    size_t keys_n;
    qw_token_vec ids;
} qw_word_cache;

typedef struct qw_enc {
    qw_word_cache cache;
    const qw_tokenizer *t;
    qw_bpe_scratch *bpe;
    pcre2_match_data *md[QW_TOK_MAX_STEPS];
    qw_token_vec *out;
    qs_error *err;
    size_t base; /* offset of the current fragment in the caller's text, for messages */
    char *norm;  /* normalizer output */
    size_t norm_cap;
    char *ms; /* Metaspace output */
    size_t ms_cap;
} qw_enc;

static qs_status qw_spm_words(qw_enc *e, const uint8_t *p, size_t n);

static uint64_t qw_word_hash(const uint8_t *w, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a 64 */
    for (size_t i = 0; i < n; i++)
        h = (h ^ w[i]) * 0x100000001b3ull;
    return h;
}

/* The model on one word, through the cache. */
static qs_status qw_model_word(qw_enc *e, const uint8_t *w, size_t n) {
    const qw_tokenizer *t = e->t;
    if (t->kind == QW_TOK_BYTE_BPE) return qw_bpe_word_bytes(t, e->bpe, w, n, e->out, e->err);
    if (t->kind == QW_TOK_SPM) return qw_spm_tokenize(t, w, n, e->out, e->err);
    return qw_bpe_word_utf8(t, e->bpe, w, n, e->out, e->err);
}

static qs_status qw_cached_word(qw_enc *e, const uint8_t *w, size_t n) {
    qw_word_cache *c = &e->cache;
    if (!c->slot || n == 0 || n > QW_CACHE_MAX_WORD) return qw_model_word(e, w, n);
    size_t i = (size_t)qw_word_hash(w, n) & (QW_CACHE_SLOTS - 1);
    for (; c->slot[i].len; i = (i + 1) & (QW_CACHE_SLOTS - 1)) {
        qw_cache_slot *s = &c->slot[i];
        if (s->len == n && memcmp(c->keys + s->key_at, w, n) == 0) {
            for (uint32_t k = 0; k < s->n; k++) {
                qs_status st = qw_token_vec_push(e->out, c->ids.ids[s->at + k], e->err);
                if (st) return st;
            }
            return QS_OK;
        }
    }
    size_t before = e->out->n;
    qs_status st = qw_model_word(e, w, n);
    if (st || c->used >= QW_CACHE_SLOTS / 2) return st;
    qw_cache_slot s = {(uint32_t)c->keys_n, (uint32_t)n, (uint32_t)c->ids.n,
                       (uint32_t)(e->out->n - before)};
    for (size_t k = before; k < e->out->n; k++)
        if (qw_token_vec_push(&c->ids, e->out->ids[k], NULL)) return QS_OK; /* cache is optional */
    memcpy(c->keys + c->keys_n, w, n);
    c->keys_n += n;
    c->slot[i] = s;
    c->used++;
    return QS_OK;
}

static qs_status qw_word(qw_enc *e, const uint8_t *w, size_t n) {
    if (e->t->kind != QW_TOK_BYTE_BPE) return qw_spm_words(e, w, n);
    return qw_cached_word(e, w, n);
}

static qs_status qw_steps(qw_enc *e, int k, const uint8_t *p, size_t n);

/* SentencePiece families: the model on p[0..n), cut before each "▁" run when the vocabulary
 * allows it (cut_at_space), or whole. */
static qs_status qw_spm_words(qw_enc *e, const uint8_t *p, size_t n) {
    const qw_tokenizer *t = e->t;
    size_t start = 0;
    for (size_t i = 1; t->cut_at_space && i + 3 <= n; i++) {
        if (memcmp(p + i, "\xe2\x96\x81", 3) != 0) continue;
        if (i >= 3 && memcmp(p + i - 3, "\xe2\x96\x81", 3) == 0) continue;
        /* a "▁" that another character precedes: a word ends here */
        qs_status st = qw_cached_word(e, p + start, i - start);
        if (st) return st;
        start = i;
        i += 2;
    }
    /* a text that was not cut is one word: too long for the cache, run as it is */
    return t->cut_at_space ? qw_cached_word(e, p + start, n - start)
                           : qw_model_word(e, p + start, n - start);
}

/* Hands the piece [s, s+len) of a fragment to the next step. */
static qs_status qw_emit(qw_enc *e, int k, const uint8_t *p, size_t s, size_t len) {
    if (len == 0) return QS_OK;
    return qw_steps(e, k + 1, p + s, len);
}

/* Applies step k to the fragment p[0..n), then the later steps to each piece. */
static qs_status qw_steps(qw_enc *e, int k, const uint8_t *p, size_t n) {
    if (k == e->t->n_steps) return qw_word(e, p, n);
    const qw_pretok_step *st = &e->t->step[k];
    qs_status rc;
    size_t pos = 0;  /* where the next search starts */
    size_t done = 0; /* bytes of the fragment already handed on */
    /* a pending piece [ps, pe) for the merged behaviours; pend_match: it ends with a match */
    size_t ps = 0, pe = 0;
    int pending = 0;
    for (;;) {
        size_t ms = n, me = n;
        int found = 0;
        while (pos <= n) {
            int r = st->jit ? pcre2_jit_match(st->re, p, n, pos, PCRE2_NO_UTF_CHECK, e->md[k], NULL)
                            : pcre2_match(st->re, p, n, pos, PCRE2_NO_UTF_CHECK, e->md[k], NULL);
            if (r == PCRE2_ERROR_NOMATCH) break;
            if (r < 0) {
                PCRE2_UCHAR msg[256];
                pcre2_get_error_message(r, msg, sizeof msg);
                return qs_error_set(e->err, QS_EFORMAT,
                                    "%s: pre-tokenizer pattern %d failed on the text at byte "
                                    "offset %zu: %s",
                                    e->t->source, k, e->base, (const char *)msg);
            }
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md[k]);
            if (ov[1] > ov[0]) {
                ms = ov[0];
                me = ov[1];
                found = 1;
                break;
            }
            /* an empty match cuts nothing: search again one character further */
            if (ov[0] >= n) break;
            uint32_t cp;
            size_t cl = qw_utf8_char(p + ov[0], n - ov[0], &cp);
            pos = ov[0] + (cl ? cl : 1);
        }
        /* segments: the gap [done, ms) then, when found, the match [ms, me) */
        size_t gs = done, ge = ms;
        int gap_is_match = st->invert, match_is_match = !st->invert;
        for (int seg = 0; seg < (found ? 2 : 1); seg++) {
            size_t s = seg ? ms : gs, en = seg ? me : ge;
            int is_match = seg ? match_is_match : gap_is_match;
            if (en == s) continue;
            switch (st->behavior) {
            case QW_SPLIT_ISOLATED:
                if ((rc = qw_emit(e, k, p, s, en - s))) return rc;
                break;
            case QW_SPLIT_REMOVED:
                if (!is_match && (rc = qw_emit(e, k, p, s, en - s))) return rc;
                break;
            case QW_SPLIT_MERGED_PREV:
                /* "the-final--countdown" on "-": "the-", "final-", "-", "countdown" */
                if (is_match) {
                    if (pending) {
                        rc = qw_emit(e, k, p, ps, en - ps);
                        pending = 0;
                    } else {
                        rc = qw_emit(e, k, p, s, en - s);
                    }
                    if (rc) return rc;
                } else {
                    if (pending && (rc = qw_emit(e, k, p, ps, pe - ps))) return rc;
                    ps = s;
                    pe = en;
                    pending = 1;
                }
                break;
            case QW_SPLIT_MERGED_NEXT:
                /* "the-final--countdown" on "-": "the", "-final", "-", "-countdown" */
                if (is_match) {
                    if (pending && (rc = qw_emit(e, k, p, ps, pe - ps))) return rc;
                    ps = s;
                    pe = en;
                    pending = 1;
                } else {
                    if (pending) {
                        rc = qw_emit(e, k, p, ps, en - ps);
                        pending = 0;
                    } else {
                        rc = qw_emit(e, k, p, s, en - s);
                    }
                    if (rc) return rc;
                }
                break;
            }
        }
        if (!found) break;
        done = pos = me;
    }
    if (pending) return qw_emit(e, k, p, ps, pe - ps);
    return QS_OK;
}

/* Makes the destination half (*b) of e->norm hold at least `need` bytes: a new buffer of two
 * such halves, the source (*a, an bytes) copied to its first half. cap: the halves' total. */
static qs_status qw_norm_reserve(qw_enc *e, char **a, size_t an, char **b, size_t *cap,
                                 size_t need) {
    if (need <= *cap / 2) return QS_OK;
    size_t ncap = 2 * need;
    char *buf = malloc(ncap);
    if (!buf) return qs_error_set(e->err, QS_ENOMEM, "out of memory normalizing %zu bytes", an);
    memcpy(buf, *a, an);
    free(e->norm);
    e->norm = buf;
    e->norm_cap = *cap = ncap;
    *a = buf;
    *b = buf + ncap / 2;
    return QS_OK;
}

/* Replace with a Regex pattern on (*a, *an) into the other half (*b) of e->norm, which grows
 * when the result may not fit (cap: the whole buffer); then the halves swap as for a String.
 * Every match becomes rp->to; an empty match inserts it and the next character is kept
 * (tokenizers' NormalizedString::replace over the regex's find_iter, as Rust's regex steps
 * past an empty match). */
static qs_status qw_replace_regex(qw_enc *e, const qw_replace *rp, char **a, size_t *an, char **b,
                                  size_t *cap) {
    qs_status st = qw_norm_reserve(e, a, *an, b, cap, (*an + 1) * (rp->to_len + 1) + 16);
    if (st) return st;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(rp->re, NULL);
    if (!md) return qs_error_set(e->err, QS_ENOMEM, "out of memory for PCRE2 match data");
    const uint8_t *src = (const uint8_t *)*a;
    size_t n = *an, pos = 0, bn = 0;
    char *dst = *b;
    while (pos <= n) {
        int rc = pcre2_match(rp->re, src, n, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            pcre2_match_data_free(md);
            return qs_error_set(e->err, QS_EFORMAT,
                                "%s: normalizer Replace pattern failed on the text at byte "
                                "offset %zu: %s",
                                e->t->source, e->base, (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        memcpy(dst + bn, src + pos, ov[0] - pos);
        bn += ov[0] - pos;
        memcpy(dst + bn, rp->to, rp->to_len);
        bn += rp->to_len;
        pos = ov[1];
        if (ov[1] == ov[0]) { /* empty: keep the next character and search after it */
            if (pos >= n) {
                pos = n + 1;
                break;
            }
            uint32_t cp;
            size_t cl = qw_utf8_char(src + pos, n - pos, &cp);
            cl = cl ? cl : 1;
            memcpy(dst + bn, src + pos, cl);
            bn += cl;
            pos += cl;
        }
    }
    if (pos < n) {
        memcpy(dst + bn, src + pos, n - pos);
        bn += n - pos;
    }
    pcre2_match_data_free(md);
    char *tmp = *a;
    *a = *b;
    *b = tmp;
    *an = bn;
    return QS_OK;
}

/* The normalizer of a tokenizer.json (Prepend, then Replace steps) on one fragment. */
static qs_status qw_normalize(qw_enc *e, const uint8_t *p, size_t n, const uint8_t **q,
                              size_t *qn) {
    const qw_tokenizer *t = e->t;
    if (!t->prepend && t->n_repl == 0) {
        *q = p;
        *qn = n;
        return QS_OK;
    }
    /* worst case growth: each byte replaced by the longest replacement */
    size_t grow = 1;
    for (int i = 0; i < t->n_repl; i++)
        if (t->repl[i].to_len > grow) grow = t->repl[i].to_len;
    size_t cap = (t->prepend_len + n) * grow * (size_t)(t->n_repl ? t->n_repl : 1) + 16;
    cap = 2 * cap;
    if (cap > e->norm_cap) {
        char *b = realloc(e->norm, cap);
        if (!b) return qs_error_set(e->err, QS_ENOMEM, "out of memory normalizing %zu bytes", n);
        e->norm = b;
        e->norm_cap = cap;
    }
    /* two halves of the buffer take turns as source and destination */
    char *a = e->norm, *b = e->norm + cap / 2;
    size_t an = 0;
    if (t->prepend && n > 0) {
        memcpy(a, t->prepend, t->prepend_len);
        an = t->prepend_len;
    }
    memcpy(a + an, p, n);
    an += n;
    for (int r = 0; r < t->n_repl; r++) {
        const qw_replace *rp = &t->repl[r];
        size_t bn = 0;
        if (rp->re) {
            qs_status st = qw_replace_regex(e, rp, &a, &an, &b, &cap);
            if (st) return st;
            continue;
        }
        /* a Regex step before may have grown the text past the first estimate */
        qs_status st =
            qw_norm_reserve(e, &a, an, &b, &cap, an * (rp->to_len > 1 ? rp->to_len : 1) + 16);
        if (st) return st;
        for (size_t i = 0; i < an;) {
            if (an - i >= rp->from_len && memcmp(a + i, rp->from, rp->from_len) == 0) {
                memcpy(b + bn, rp->to, rp->to_len);
                bn += rp->to_len;
                i += rp->from_len;
            } else {
                b[bn++] = a[i++];
            }
        }
        char *tmp = a;
        a = b;
        b = tmp;
        an = bn;
    }
    *q = (const uint8_t *)a;
    *qn = an;
    return QS_OK;
}

/* sentencepiece's normalizer (normalizer.cc Normalize, identity rule) with
 * remove_extra_whitespaces: leading spaces dropped (all spaces: nothing at all), then the
 * dummy prefix "▁" when `lead`, every later run of spaces one "▁", and trailing "▁" dropped
 * (a "▁" of the text's own too, as there). */
static qs_status qw_spm_fragment_trimmed(qw_enc *e, const uint8_t *p, size_t n, int lead) {
    size_t i = 0, m = 0;
    while (i < n && p[i] == ' ')
        i++;
    if (i == n) return QS_OK;
    if (lead) {
        memcpy(e->norm, "\xe2\x96\x81", 3);
        m = 3;
    }
    for (int prev_space = 1; i < n; i++) {
        if (p[i] != ' ') {
            e->norm[m++] = (char)p[i];
            prev_space = 0;
        } else if (!prev_space) {
            memcpy(e->norm + m, "\xe2\x96\x81", 3);
            m += 3;
            prev_space = 1;
        }
    }
    while (m >= 3 && memcmp(e->norm + m - 3, "\xe2\x96\x81", 3) == 0)
        m -= 3;
    return qw_spm_words(e, (const uint8_t *)e->norm, m);
}

/* One fragment of plain text (no added token inside). prev_special: it follows an added
 * token or starts the text (llama.cpp's is_prev_special). */
static qs_status qw_fragment(qw_enc *e, const uint8_t *p, size_t n, int prev_special) {
    const qw_tokenizer *t = e->t;
    if (t->kind == QW_TOK_SPM) {
        /* llama.cpp: a space before the text when add_space_prefix and the previous
         * fragment was special, then every ' ' becomes U+2581 (llama_escape_whitespace). */
        size_t cap = 3 * n + 3;
        if (cap > e->norm_cap) {
            char *b = realloc(e->norm, cap);
            if (!b) return qs_error_set(e->err, QS_ENOMEM, "out of memory for %zu bytes", n);
            e->norm = b;
            e->norm_cap = cap;
        }
        size_t m = 0;
        int lead = t->add_space_prefix && prev_special;
        if (t->sp_remove_ws) return qw_spm_fragment_trimmed(e, p, n, lead);
        for (size_t i = 0; i < n + (size_t)lead; i++) {
            uint8_t c = lead ? (i == 0 ? ' ' : p[i - 1]) : p[i];
            if (c == ' ') {
                memcpy(e->norm + m, "\xe2\x96\x81", 3);
                m += 3;
            } else {
                e->norm[m++] = (char)c;
            }
        }
        return qw_spm_words(e, (const uint8_t *)e->norm, m);
    }
    const uint8_t *q = p;
    size_t qn = n;
    qs_status st = qw_normalize(e, p, n, &q, &qn);
    if (st) return st;
    if (t->ms && qn > 0) {
        size_t cap = (qn + 1) * t->ms_rep_len + 1;
        if (cap > e->ms_cap) {
            char *b = realloc(e->ms, cap);
            if (!b) return qs_error_set(e->err, QS_ENOMEM, "out of memory for %zu bytes", qn);
            e->ms = b;
            e->ms_cap = cap;
        }
        size_t m = 0;
        /* HF Metaspace: replace first, then prepend unless it already starts with it */
        int starts =
            q[0] == ' ' || (qn >= t->ms_rep_len && memcmp(q, t->ms_rep, t->ms_rep_len) == 0);
        if (!starts && (t->ms_scheme == 0 || (t->ms_scheme == 1 && e->base == 0))) {
            memcpy(e->ms, t->ms_rep, t->ms_rep_len);
            m = t->ms_rep_len;
        }
        for (size_t i = 0; i < qn; i++) {
            if (q[i] == ' ') {
                memcpy(e->ms + m, t->ms_rep, t->ms_rep_len);
                m += t->ms_rep_len;
            } else {
                e->ms[m++] = (char)q[i];
            }
        }
        q = (const uint8_t *)e->ms;
        qn = m;
    }
    return qw_steps(e, 0, q, qn);
}

/* The added token that starts first at or after `from` (ties: the longest, as the list is
 * sorted longest first). next[] caches each token's next occurrence (SIZE_MAX: none left). */
static int64_t qw_next_added(const qw_tokenizer *t, const uint8_t *text, size_t len, size_t from,
                             unsigned flags, size_t *next, size_t *at) {
    int64_t best = -1;
    size_t best_at = SIZE_MAX;
    for (size_t k = 0; k < t->n_added; k++) {
        const qw_added *a = &t->added[k];
        if (a->special && !(flags & QW_ENCODE_PARSE_SPECIAL)) continue;
        if (next[k] == SIZE_MAX) continue;
        size_t plen = t->off[a->id + 1] - t->off[a->id];
        const char *piece = t->pool + t->off[a->id];
        if (next[k] < from || next[k] == SIZE_MAX - 1) {
            const uint8_t *hit = from < len ? memmem(text + from, len - from, piece, plen) : NULL;
            next[k] = hit ? (size_t)(hit - text) : SIZE_MAX;
        }
        if (next[k] < best_at) {
            best_at = next[k];
            best = (int64_t)k;
        }
    }
    *at = best_at;
    return best;
}

qs_status qw_tokenizer_encode(const qw_tokenizer *t, const char *text, size_t len, unsigned flags,
                              qw_token_vec *out, qs_error *err) {
    const uint8_t *s = (const uint8_t *)text;
    size_t bad = qw_utf8_check(s, len);
    if (bad != len)
        return qs_error_set(err, QS_EINVAL, "text: byte offset %zu: invalid UTF-8 (byte 0x%02x)",
                            bad, s[bad]);
    size_t n0 = out->n;
    qw_enc e = {.t = t, .out = out, .err = err};
    qs_status st = QS_OK;
    size_t *next = calloc(t->n_added ? t->n_added : 1, sizeof *next);
    e.bpe = qw_bpe_scratch_new();
    /* the cache pays for itself only on longer texts */
    if (len > 4096) {
        e.cache.slot = calloc(QW_CACHE_SLOTS, sizeof *e.cache.slot);
        e.cache.keys = malloc((size_t)QW_CACHE_SLOTS / 2 * QW_CACHE_MAX_WORD);
        if (!e.cache.keys) {
            free(e.cache.slot);
            e.cache.slot = NULL; /* the cache is optional */
        }
    }
    if (!next || !e.bpe) {
        st = qs_error_set(err, QS_ENOMEM, "out of memory to encode %zu bytes", len);
        goto done;
    }
    for (size_t k = 0; k < t->n_added; k++)
        next[k] = SIZE_MAX - 1; /* not searched yet */
    for (int k = 0; k < t->n_steps; k++) {
        e.md[k] = pcre2_match_data_create_from_pattern(t->step[k].re, NULL);
        if (!e.md[k]) {
            st = qs_error_set(err, QS_ENOMEM, "out of memory for PCRE2 match data");
            goto done;
        }
    }
    if ((flags & QW_ENCODE_ADD_SPECIAL) && t->add_bos && t->bos_id >= 0 &&
        (st = qw_token_vec_push(out, (uint32_t)t->bos_id, err)))
        goto done;
    int prev_special = 1;
    for (size_t pos = 0; pos < len;) {
        size_t at;
        int64_t k = qw_next_added(t, s, len, pos, flags, next, &at);
        size_t end = k >= 0 ? at : len;
        if (end > pos) {
            e.base = pos;
            if ((st = qw_fragment(&e, s + pos, end - pos, prev_special))) goto done;
            prev_special = 0;
        }
        if (k < 0) break;
        uint32_t id = t->added[k].id;
        if ((st = qw_token_vec_push(out, id, err))) goto done;
        prev_special = 1;
        pos = at + (t->off[id + 1] - t->off[id]);
    }
    if ((flags & QW_ENCODE_ADD_SPECIAL) && t->add_eos && t->eos_id >= 0)
        st = qw_token_vec_push(out, (uint32_t)t->eos_id, err);
done:
    if (st) out->n = n0;
    for (int k = 0; k < t->n_steps; k++)
        pcre2_match_data_free(e.md[k]);
    qw_bpe_scratch_free(e.bpe);
    free(e.cache.slot);
    free(e.cache.keys);
    free(e.ms);
    qw_token_vec_free(&e.cache.ids);
    free(e.norm);
    free(next);
    return st;
}
