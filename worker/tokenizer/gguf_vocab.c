/* The tokenizer embedded in a GGUF file, read as llama.cpp's llama_vocab::impl::load
 * (src/llama-vocab.cpp) reads it: tokenizer.ggml.model "gpt2" (byte-level BPE, merges in
 * tokenizer.ggml.merges, pre-tokenizer regexes chosen by the name in tokenizer.ggml.pre) or
 * "llama" (SentencePiece scores in tokenizer.ggml.scores); tokenizer.ggml.tokens,
 * token_type, bos/eos/unknown_token_id, add_bos_token/add_eos_token, add_space_prefix. */
#include "gguf_meta.h"
#include "tokenizer_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* llama.cpp's llm_tokenizer_bpe regex lists (llama-vocab.cpp), by tokenizer.ggml.pre name. */
typedef struct qw_pre_def {
    const char *names; /* space-separated */
    const char *re[4];
    int ignore_merges, add_bos;
} qw_pre_def;

#define QW_GPT2_LLAMACPP                                                                           \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"

static const qw_pre_def qw_pre_table[] = {
    {"default",
     {"[\\p{P}\\$\\+<=>\\^~\\|]+", QW_GPT2_LLAMACPP, "\\p{N}+", "[0-9][0-9][0-9]"},
     0,
     0},
    {"llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2",
     {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
      "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     1,
     1},
    {"smollm starcoder refact command-r codeshell exaone minerva-7b",
     {"\\p{N}", QW_GPT2_LLAMACPP},
     0,
     0},
    {"gpt-2 phi-2 jina-es jina-de gigachat jina-v2-es jina-v2-de roberta-bpe",
     {QW_GPT2_LLAMACPP},
     0,
     0},
};

static int qw_name_in(const char *names, const char *s, size_t n) {
    for (const char *p = names; *p;) {
        const char *e = strchr(p, ' ');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && memcmp(p, s, n) == 0) return 1;
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

typedef struct qw_gctx {
    const char *file;
    qw_gguf_kv_view *kv;
    size_t n;
    qs_error *err;
} qw_gctx;

static const qw_gguf_kv_view *qw_find(const qw_gctx *g, const char *key) {
    size_t len = strlen(key);
    for (size_t i = 0; i < g->n; i++)
        if (g->kv[i].key_len == len && memcmp(g->kv[i].key, key, len) == 0) return &g->kv[i];
    return NULL;
}

static uint64_t qw_u64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static uint32_t qw_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* A string value: *s, *len. Errors: QS_EFORMAT (another type). */
static qs_status qw_get_str(const qw_gctx *g, const qw_gguf_kv_view *kv, const char **s,
                            size_t *len) {
    if (kv->type != QW_GGUF_STRING)
        return qs_error_set(g->err, QS_EFORMAT, "%s: metadata key \"%.*s\": not a string", g->file,
                            (int)kv->key_len, kv->key);
    *len = (size_t)qw_u64(kv->value);
    *s = (const char *)kv->value + 8;
    return QS_OK;
}

/* An array's element type, count and first element. */
static qs_status qw_get_arr(const qw_gctx *g, const qw_gguf_kv_view *kv, uint32_t want,
                            uint64_t *count, const uint8_t **elems) {
    if (kv->type != QW_GGUF_ARRAY || qw_u32(kv->value) != want)
        return qs_error_set(g->err, QS_EFORMAT,
                            "%s: metadata key \"%.*s\": not an array of value type %u", g->file,
                            (int)kv->key_len, kv->key, want);
    *count = qw_u64(kv->value + 4);
    *elems = kv->value + 12;
    return QS_OK;
}

/* An integer or bool value; found = 0 when the key is absent. */
static qs_status qw_get_int(const qw_gctx *g, const char *key, int64_t *v, int *found) {
    const qw_gguf_kv_view *kv = qw_find(g, key);
    *found = kv != NULL;
    if (!kv) return QS_OK;
    const uint8_t *p = kv->value;
    switch (kv->type) {
    case QW_GGUF_U8:
    case QW_GGUF_BOOL:
        *v = p[0];
        return QS_OK;
    case QW_GGUF_I8:
        *v = (int8_t)p[0];
        return QS_OK;
    case QW_GGUF_U16:
        *v = (uint16_t)(p[0] | p[1] << 8);
        return QS_OK;
    case QW_GGUF_I16:
        *v = (int16_t)(p[0] | p[1] << 8);
        return QS_OK;
    case QW_GGUF_U32:
        *v = qw_u32(p);
        return QS_OK;
    case QW_GGUF_I32:
        *v = (int32_t)qw_u32(p);
        return QS_OK;
    case QW_GGUF_U64:
    case QW_GGUF_I64:
        *v = (int64_t)qw_u64(p);
        return QS_OK;
    }
    return qs_error_set(g->err, QS_EFORMAT, "%s: metadata key \"%s\": not an integer", g->file,
                        key);
}

static qs_status qw_load(qw_tokenizer *t, qw_gctx *g) {
    qs_error *err = g->err;
    qs_status st;
    const qw_gguf_kv_view *km = qw_find(g, "tokenizer.ggml.model");
    if (!km)
        return qs_error_set(err, QS_ENOTFOUND,
                            "%s: metadata key \"tokenizer.ggml.model\" is "
                            "missing (no tokenizer in this GGUF file)",
                            g->file);
    const char *model = "";
    size_t model_len = 0;
    if ((st = qw_get_str(g, km, &model, &model_len))) return st;
    int gpt2 = model_len == 4 && memcmp(model, "gpt2", 4) == 0;
    int llama = model_len == 5 && memcmp(model, "llama", 5) == 0;
    if (!gpt2 && !llama)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "%s: metadata key \"tokenizer.ggml.model\" = "
                            "\"%.*s\" (only \"gpt2\" and \"llama\" are read)",
                            g->file, (int)(model_len < 64 ? model_len : 64), model);
    t->kind = gpt2 ? QW_TOK_BYTE_BPE : QW_TOK_SPM;
    const qw_gguf_kv_view *kt = qw_find(g, "tokenizer.ggml.tokens");
    if (!kt)
        return qs_error_set(err, QS_EFORMAT,
                            "%s: metadata key \"tokenizer.ggml.tokens\" is "
                            "missing",
                            g->file);
    uint64_t n = 0;
    const uint8_t *p = NULL;
    if ((st = qw_get_arr(g, kt, QW_GGUF_STRING, &n, &p))) return st;
    if (n == 0 || n >= QW_TOK_MAX_VOCAB)
        return qs_error_set(err, QS_EFORMAT,
                            "%s: metadata key \"tokenizer.ggml.tokens\": %llu "
                            "tokens",
                            g->file, (unsigned long long)n);
    size_t pool = kt->value_bytes - 12 - 8 * (size_t)n;
    if ((st = qw_tok_alloc(t, (uint32_t)n, pool, err))) return st;
    size_t at = 0;
    for (uint64_t i = 0; i < n; i++) {
        size_t len = (size_t)qw_u64(p);
        t->off[i] = at;
        memcpy(t->pool + at, p + 8, len);
        at += len;
        p += 8 + len;
        t->type[i] = QW_TT_NORMAL;
    }
    t->off[n] = at;
    const qw_gguf_kv_view *ky = qw_find(g, "tokenizer.ggml.token_type");
    if (ky) {
        uint64_t m = 0;
        if ((st = qw_get_arr(g, ky, QW_GGUF_I32, &m, &p))) return st;
        if (m != n)
            return qs_error_set(err, QS_EFORMAT,
                                "%s: metadata key \"tokenizer.ggml.token_type\": "
                                "%llu entries for %llu tokens",
                                g->file, (unsigned long long)m, (unsigned long long)n);
        for (uint64_t i = 0; i < n; i++) {
            int32_t ty = (int32_t)qw_u32(p + 4 * i);
            t->type[i] = ty >= QW_TT_NORMAL && ty <= QW_TT_BYTE ? (uint8_t)ty : QW_TT_UNDEFINED;
        }
    }
    if ((st = qw_strmap_build(t, err))) return st;
    const qw_gguf_kv_view *ks = qw_find(g, "tokenizer.ggml.scores");
    if (llama) {
        t->score = calloc((size_t)n, sizeof *t->score);
        if (!t->score) return qs_error_set(err, QS_ENOMEM, "%s: out of memory", g->file);
        if (ks) {
            uint64_t m = 0;
            if ((st = qw_get_arr(g, ks, QW_GGUF_F32, &m, &p))) return st;
            if (m != n)
                return qs_error_set(err, QS_EFORMAT,
                                    "%s: metadata key \"tokenizer.ggml.scores\": "
                                    "%llu entries for %llu tokens",
                                    g->file, (unsigned long long)m, (unsigned long long)n);
            memcpy(t->score, p, 4 * (size_t)n);
        }
    }
    /* llama.cpp's defaults, then the keys */
    int64_t v;
    int found;
    t->bos_id = llama ? 1 : 11;
    t->eos_id = llama ? 2 : 11;
    t->unk_id = llama ? 0 : -1;
    t->add_bos = llama;
    t->add_eos = 0;
    t->add_space_prefix = llama;
    if (gpt2) {
        const qw_gguf_kv_view *kr = qw_find(g, "tokenizer.ggml.merges");
        if (!kr)
            return qs_error_set(err, QS_EFORMAT,
                                "%s: metadata key \"tokenizer.ggml.merges\" is "
                                "missing",
                                g->file);
        uint64_t m = 0;
        if ((st = qw_get_arr(g, kr, QW_GGUF_STRING, &m, &p))) return st;
        if ((st = qw_pairmap_init(&t->merges, (size_t)m, err))) return st;
        t->merge_l = malloc((m ? (size_t)m : 1) * sizeof *t->merge_l);
        t->merge_r = malloc((m ? (size_t)m : 1) * sizeof *t->merge_r);
        char *cat = malloc(256);
        size_t cat_cap = 256;
        if (!t->merge_l || !t->merge_r || !cat) {
            free(cat);
            return qs_error_set(err, QS_ENOMEM, "%s: out of memory", g->file);
        }
        uint32_t kept = 0;
        for (uint64_t i = 0; i < m; i++) {
            size_t len = (size_t)qw_u64(p);
            const char *s = (const char *)p + 8;
            p += 8 + len;
            /* llama.cpp: word.find(' ', 1) */
            const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
            if (!sp) continue; /* llama.cpp ranks ("", "") for it: never matches */
            size_t an = (size_t)(sp - s), bn = len - an - 1;
            int64_t l = qw_strmap_get(t, s, an), r = qw_strmap_get(t, sp + 1, bn);
            if (len > cat_cap) {
                char *c2 = realloc(cat, 2 * len);
                if (!c2) {
                    free(cat);
                    return qs_error_set(err, QS_ENOMEM, "%s: out of memory", g->file);
                }
                cat = c2;
                cat_cap = 2 * len;
            }
            memcpy(cat, s, an);
            memcpy(cat + an, sp + 1, bn);
            int64_t mm = qw_strmap_get(t, cat, an + bn);
            /* a merge whose parts or result are not tokens can never apply (llama.cpp looks
             * the merged text up and falls back to bytes): it is left out */
            if (l < 0 || r < 0 || mm < 0) continue;
            qw_pairmap_put(&t->merges, (uint32_t)l, (uint32_t)r, (uint32_t)i, (uint32_t)mm);
            t->merge_l[kept] = (uint32_t)l;
            t->merge_r[kept] = (uint32_t)r;
            kept++;
        }
        free(cat);
        t->n_merges = kept;
        const char *pre = "default";
        size_t pre_len = 7;
        const qw_gguf_kv_view *kp = qw_find(g, "tokenizer.ggml.pre");
        if (kp && (st = qw_get_str(g, kp, &pre, &pre_len))) return st;
        const qw_pre_def *def = NULL;
        for (size_t i = 0; i < sizeof qw_pre_table / sizeof qw_pre_table[0]; i++)
            if (qw_name_in(qw_pre_table[i].names, pre, pre_len)) def = &qw_pre_table[i];
        if (!def)
            return qs_error_set(err, QS_EUNSUPPORTED,
                                "%s: metadata key \"tokenizer.ggml.pre\" = "
                                "\"%.*s\": not a pre-tokenizer qsweep implements (default, "
                                "llama3/llama-bpe, smollm, gpt-2 and their aliases)",
                                g->file, (int)(pre_len < 64 ? pre_len : 64), pre);
        for (int i = 0; i < 4 && def->re[i]; i++)
            if ((st = qw_pretok_add(t, def->re[i], strlen(def->re[i]), QW_SPLIT_ISOLATED, 0,
                                    "tokenizer.ggml.pre", err)))
                return st;
        t->ignore_merges = def->ignore_merges;
        t->drop_missing_bytes = 1;
        if (def->add_bos) t->add_bos = 1;
    }
    if ((st = qw_get_int(g, "tokenizer.ggml.bos_token_id", &v, &found))) return st;
    if (found) t->bos_id = v >= 0 && v < (int64_t)n ? v : t->bos_id;
    if ((st = qw_get_int(g, "tokenizer.ggml.eos_token_id", &v, &found))) return st;
    if (found) t->eos_id = v >= 0 && v < (int64_t)n ? v : t->eos_id;
    if ((st = qw_get_int(g, "tokenizer.ggml.unknown_token_id", &v, &found))) return st;
    if (found) t->unk_id = v >= 0 && v < (int64_t)n ? v : t->unk_id;
    if ((st = qw_get_int(g, "tokenizer.ggml.add_bos_token", &v, &found))) return st;
    if (found) t->add_bos = v != 0;
    if ((st = qw_get_int(g, "tokenizer.ggml.add_eos_token", &v, &found))) return st;
    if (found) t->add_eos = v != 0;
    if ((st = qw_get_int(g, "tokenizer.ggml.add_space_prefix", &v, &found))) return st;
    if (found) t->add_space_prefix = v != 0;
    if (t->bos_id >= (int64_t)n) t->bos_id = -1;
    if (t->eos_id >= (int64_t)n) t->eos_id = -1;
    /* llama.cpp's cache_special_tokens: control, user-defined and unknown tokens are cut
     * out of the text first; only user-defined ones without parse_special */
    for (uint32_t id = 0; id < (uint32_t)n; id++) {
        uint8_t ty = t->type[id];
        if (ty == QW_TT_CONTROL || ty == QW_TT_UNKNOWN || ty == QW_TT_USER_DEFINED) {
            if ((st = qw_tok_add_added(t, id, ty != QW_TT_USER_DEFINED, err))) return st;
            t->type[id] = ty; /* keep UNKNOWN as it is */
        }
    }
    return qw_tok_finish(t, err);
}

qs_status qw_tokenizer_from_gguf(const char *file, const uint8_t *data, size_t size,
                                 qw_tokenizer **out, qs_error *err) {
    *out = NULL;
    qw_gctx g = {.file = file, .err = err};
    qs_status st = qw_gguf_metadata(file, data, size, &g.kv, &g.n, err);
    if (st) return st;
    qw_tokenizer *t = calloc(1, sizeof *t);
    if (t) t->source = malloc(strlen(file) + 1);
    if (!t || !t->source) {
        free(t);
        free(g.kv);
        return qs_error_set(err, QS_ENOMEM, "%s: out of memory", file);
    }
    strcpy(t->source, file);
    t->unk_id = t->bos_id = t->eos_id = -1;
    st = qw_load(t, &g);
    free(g.kv);
    if (st) {
        qw_tokenizer_free(t);
        return st;
    }
    *out = t;
    return QS_OK;
}
