/* GGUF v3 files (ggml docs/gguf.md): little-endian header "GGUF", u32 version, u64 tensor
 * count, u64 metadata count; metadata key/values; tensor infos (name, n_dims, ne[n_dims]
 * innermost first, ggml type, offset); padding to general.alignment (default 32); tensor data.
 * Hugging Face names and the llama.* keys follow llama.cpp's convert_hf_to_gguf.py and
 * gguf-py/gguf/tensor_mapping.py (MODEL_ARCH.LLAMA). */
#include "checkpoint_internal.h"
#include "gguf_meta.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    QW_GGUF_VERSION = 3,
    QW_GGUF_DEFAULT_ALIGNMENT = 32,
    QW_GGUF_MAX_DEPTH = 8,
    QW_GGUF_MAX_NAME = 256,
    QW_GGUF_MAX_ROPE_PAIRS = 512 /* head_dim up to 1024 */
};

/* gguf_type (value types of metadata), gguf.md "Metadata". */
enum {
    GT_U8 = 0,
    GT_I8,
    GT_U16,
    GT_I16,
    GT_U32,
    GT_I32,
    GT_F32,
    GT_BOOL,
    GT_STRING,
    GT_ARRAY,
    GT_U64,
    GT_I64,
    GT_F64,
    GT_COUNT
};

/* A bounds-checked little-endian reader over the mapped file. */
typedef struct qw_rd {
    const char *file;
    const uint8_t *p;
    size_t size, off;
    qs_error *err;
} qw_rd;

static qs_status qw_rd_need(qw_rd *r, uint64_t n, const char *what) {
    if (n > r->size - r->off)
        return qs_error_set(r->err, QS_EFORMAT,
                            "%s: offset %zu: truncated reading %s (%llu bytes needed, %zu left)",
                            r->file, r->off, what, (unsigned long long)n, r->size - r->off);
    return QS_OK;
}
/* An array count that cannot fit in what is left of the file (n * min_size may overflow, so
 * the message gives the count rather than a byte total). */
static qs_status qw_rd_array_too_long(qw_rd *r, uint64_t n, size_t min_size, const char *what) {
    return qs_error_set(r->err, QS_EFORMAT,
                        "%s: offset %zu: truncated reading %s (an array of %llu elements of at "
                        "least %zu bytes each, %zu bytes left)",
                        r->file, r->off, what, (unsigned long long)n, min_size, r->size - r->off);
}
static qs_status qw_rd_u32(qw_rd *r, uint32_t *v, const char *what) {
    if (qw_rd_need(r, 4, what)) return QS_EFORMAT;
    memcpy(v, r->p + r->off, 4);
    r->off += 4;
    return QS_OK;
}
static qs_status qw_rd_u64(qw_rd *r, uint64_t *v, const char *what) {
    if (qw_rd_need(r, 8, what)) return QS_EFORMAT;
    memcpy(v, r->p + r->off, 8);
    r->off += 8;
    return QS_OK;
}
/* gguf_string_t: u64 length, bytes (not NUL-terminated). */
static qs_status qw_rd_str(qw_rd *r, const char **s, uint64_t *len, const char *what) {
    if (qw_rd_u64(r, len, what) || qw_rd_need(r, *len, what)) return QS_EFORMAT;
    *s = (const char *)r->p + r->off;
    r->off += (size_t)*len;
    return QS_OK;
}

static const int qw_gt_size[GT_COUNT] = {
    [GT_U8] = 1,  [GT_I8] = 1,   [GT_U16] = 2, [GT_I16] = 2, [GT_U32] = 4, [GT_I32] = 4,
    [GT_F32] = 4, [GT_BOOL] = 1, [GT_U64] = 8, [GT_I64] = 8, [GT_F64] = 8};

/* Skips one value of type t (recursing into arrays), checking every length against the file. */
static qs_status qw_rd_skip_value(qw_rd *r, uint32_t t, int depth, const char *key) {
    if (t >= GT_COUNT)
        return qs_error_set(r->err, QS_EFORMAT, "%s: offset %zu: key \"%s\": unknown value type %u",
                            r->file, r->off, key, t);
    if (t == GT_STRING) {
        const char *s;
        uint64_t n;
        return qw_rd_str(r, &s, &n, key);
    }
    if (t != GT_ARRAY) {
        if (qw_rd_need(r, (uint64_t)qw_gt_size[t], key)) return QS_EFORMAT;
        r->off += (size_t)qw_gt_size[t];
        return QS_OK;
    }
    if (depth >= QW_GGUF_MAX_DEPTH)
        return qs_error_set(r->err, QS_EFORMAT,
                            "%s: offset %zu: key \"%s\": arrays nested deeper than %d", r->file,
                            r->off, key, QW_GGUF_MAX_DEPTH);
    uint32_t et;
    uint64_t n;
    if (qw_rd_u32(r, &et, key) || qw_rd_u64(r, &n, key)) return QS_EFORMAT;
    if (et >= GT_COUNT)
        return qs_error_set(r->err, QS_EFORMAT,
                            "%s: offset %zu: key \"%s\": unknown array element type %u", r->file,
                            r->off - 12, key, et);
    if (et != GT_STRING && et != GT_ARRAY) {
        if (n > (r->size - r->off) / (uint64_t)qw_gt_size[et])
            return qw_rd_array_too_long(r, n, (size_t)qw_gt_size[et], key);
        r->off += (size_t)n * (size_t)qw_gt_size[et];
        return QS_OK;
    }
    /* Strings take at least 8 bytes, arrays 12: larger counts are refused before looping. */
    if (n > (r->size - r->off) / 8) return qw_rd_array_too_long(r, n, 8, key);
    for (uint64_t i = 0; i < n; i++)
        if (qw_rd_skip_value(r, et, depth + 1, key)) return QS_EFORMAT;
    return QS_OK;
}

/* A metadata entry: where its value starts, to be read back when a key is looked up. */
typedef struct qw_kv {
    const char *key;
    size_t key_len;
    uint32_t type;
    size_t value_off;
} qw_kv;

typedef struct qw_gguf {
    qw_rd r;
    qw_kv *kv;
    uint64_t n_kv;
} qw_gguf;

static const qw_kv *qw_kv_find(const qw_gguf *g, const char *key) {
    size_t len = strlen(key);
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (g->kv[i].key_len == len && memcmp(g->kv[i].key, key, len) == 0) return &g->kv[i];
    return NULL;
}

/* Integer value of any integer type; 0 when absent (with *found = 0). */
static qs_status qw_kv_int(qw_gguf *g, const char *key, int required, int64_t *v, int *found) {
    const qw_kv *kv = qw_kv_find(g, key);
    *found = kv != NULL;
    if (!kv) {
        if (required)
            return qs_error_set(g->r.err, QS_EFORMAT, "%s: metadata key \"%s\" is missing",
                                g->r.file, key);
        return QS_OK;
    }
    const uint8_t *p = g->r.p + kv->value_off;
    switch (kv->type) {
    case GT_U8:
        *v = p[0];
        break;
    case GT_I8:
        *v = (int8_t)p[0];
        break;
    case GT_U16: {
        uint16_t x;
        memcpy(&x, p, 2);
        *v = x;
        break;
    }
    case GT_I16: {
        int16_t x;
        memcpy(&x, p, 2);
        *v = x;
        break;
    }
    case GT_U32: {
        uint32_t x;
        memcpy(&x, p, 4);
        *v = x;
        break;
    }
    case GT_I32: {
        int32_t x;
        memcpy(&x, p, 4);
        *v = x;
        break;
    }
    case GT_U64: {
        uint64_t x;
        memcpy(&x, p, 8);
        if (x > INT64_MAX) goto range;
        *v = (int64_t)x;
        break;
    }
    case GT_I64: {
        int64_t x;
        memcpy(&x, p, 8);
        *v = x;
        break;
    }
    default:
        return qs_error_set(g->r.err, QS_EFORMAT,
                            "%s: offset %zu: metadata key \"%s\" has value type %u, not an integer",
                            g->r.file, kv->value_off, key, kv->type);
    }
    return QS_OK;
range:
    return qs_error_set(g->r.err, QS_EFORMAT, "%s: offset %zu: metadata key \"%s\" is out of range",
                        g->r.file, kv->value_off, key);
}

/* A positive int-sized integer key into *out; dflt when optional and absent. */
static qs_status qw_kv_pos_int(qw_gguf *g, const char *key, int required, int dflt, int *out) {
    int64_t v = 0;
    int found;
    if (qw_kv_int(g, key, required, &v, &found)) return QS_EFORMAT;
    if (!found) {
        *out = dflt;
        return QS_OK;
    }
    if (v <= 0 || v > INT32_MAX)
        return qs_error_set(g->r.err, QS_EFORMAT,
                            "%s: metadata key \"%s\" = %lld is out of range (1..%d)", g->r.file,
                            key, (long long)v, INT32_MAX);
    *out = (int)v;
    return QS_OK;
}

static qs_status qw_kv_float(qw_gguf *g, const char *key, int required, float dflt, float *out) {
    const qw_kv *kv = qw_kv_find(g, key);
    if (!kv) {
        if (required)
            return qs_error_set(g->r.err, QS_EFORMAT, "%s: metadata key \"%s\" is missing",
                                g->r.file, key);
        *out = dflt;
        return QS_OK;
    }
    const uint8_t *p = g->r.p + kv->value_off;
    double v;
    if (kv->type == GT_F32) {
        float f;
        memcpy(&f, p, 4);
        v = f;
    } else if (kv->type == GT_F64) {
        memcpy(&v, p, 8);
    } else {
        return qs_error_set(g->r.err, QS_EFORMAT,
                            "%s: offset %zu: metadata key \"%s\" has value type %u, not a float",
                            g->r.file, kv->value_off, key, kv->type);
    }
    if (!(v > 0.0) || !(v < 3.4e38))
        return qs_error_set(g->r.err, QS_EFORMAT,
                            "%s: metadata key \"%s\" = %g must be positive and finite", g->r.file,
                            key, v);
    *out = (float)v;
    return QS_OK;
}

/* Compares a string-valued key with want; returns 1 if equal. *found tells whether it exists as a
 * string. */
static int qw_kv_str_eq(const qw_gguf *g, const char *key, const char *want, int *found, char *got,
                        size_t got_cap) {
    const qw_kv *kv = qw_kv_find(g, key);
    *found = 0;
    if (!kv || kv->type != GT_STRING) return 0;
    *found = 1;
    uint64_t n;
    memcpy(&n, g->r.p + kv->value_off, 8);
    const char *s = (const char *)g->r.p + kv->value_off + 8;
    snprintf(got, got_cap, "%.*s", (int)(n < got_cap ? n : got_cap - 1), s);
    return n == strlen(want) && memcmp(s, want, (size_t)n) == 0;
}

static qs_status qw_gguf_config(qw_gguf *g, qw_config *cfg) {
    const char *f = g->r.file;
    qs_error *err = g->r.err;
    char got[64];
    int found;
    if (!qw_kv_str_eq(g, "general.architecture", "llama", &found, got, sizeof got)) {
        if (!found)
            return qs_error_set(err, QS_EFORMAT,
                                "%s: metadata key \"general.architecture\" is missing", f);
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "%s: metadata key \"general.architecture\" = \"%s\": only \"llama\"", f,
                            got);
    }
    memset(cfg, 0, sizeof *cfg);
    if (qw_kv_pos_int(g, "llama.embedding_length", 1, 0, &cfg->dim) ||
        qw_kv_pos_int(g, "llama.feed_forward_length", 1, 0, &cfg->hidden_dim) ||
        qw_kv_pos_int(g, "llama.block_count", 1, 0, &cfg->n_layers) ||
        qw_kv_pos_int(g, "llama.attention.head_count", 1, 0, &cfg->n_heads) ||
        qw_kv_pos_int(g, "llama.attention.head_count_kv", 0, cfg->n_heads, &cfg->n_kv_heads) ||
        qw_kv_pos_int(g, "llama.context_length", 1, 0, &cfg->max_seq_len) ||
        qw_kv_float(g, "llama.attention.layer_norm_rms_epsilon", 1, 0, &cfg->norm_eps) ||
        qw_kv_float(g, "llama.rope.freq_base", 0, 10000.0f, &cfg->rope_theta))
        return err ? err->code : QS_EFORMAT;
    const qw_kv *kl = qw_kv_find(g, "llama.attention.key_length");
    if (!kl && cfg->dim % cfg->n_heads != 0)
        return qs_error_set(err, QS_EFORMAT,
                            "%s: \"llama.embedding_length\" (%d) is not a multiple of "
                            "\"llama.attention.head_count\" (%d) "
                            "and \"llama.attention.key_length\" is absent",
                            f, cfg->dim, cfg->n_heads);
    if (qw_kv_pos_int(g, "llama.attention.key_length", 0, cfg->dim / cfg->n_heads, &cfg->head_dim))
        return err ? err->code : QS_EFORMAT;
    if (cfg->n_heads % cfg->n_kv_heads != 0 || cfg->head_dim % 2 != 0)
        return qs_error_set(err, QS_EFORMAT,
                            "%s: \"llama.attention.head_count\" (%d) must be a multiple of "
                            "\"llama.attention.head_count_kv\" "
                            "(%d) and the head size (%d) even",
                            f, cfg->n_heads, cfg->n_kv_heads, cfg->head_dim);
    /* Vocabulary: llama.vocab_size when written, else the tokenizer's token list length. */
    const qw_kv *tok = qw_kv_find(g, "tokenizer.ggml.tokens");
    if (qw_kv_find(g, "llama.vocab_size")) {
        if (qw_kv_pos_int(g, "llama.vocab_size", 1, 0, &cfg->vocab_size))
            return err ? err->code : QS_EFORMAT;
    } else if (tok && tok->type == GT_ARRAY) {
        uint64_t n;
        memcpy(&n, g->r.p + tok->value_off + 4, 8);
        if (n == 0 || n > INT32_MAX)
            return qs_error_set(err, QS_EFORMAT,
                                "%s: metadata key \"tokenizer.ggml.tokens\" has %llu entries", f,
                                (unsigned long long)n);
        cfg->vocab_size = (int)n;
    } else {
        return qs_error_set(
            err, QS_EFORMAT,
            "%s: neither \"llama.vocab_size\" nor \"tokenizer.ggml.tokens\" gives the vocabulary",
            f);
    }
    /* Rope scaling in GGUF: llama.cpp stores Llama 3.1's as a rope_freqs tensor, not as keys;
     * a linear or YaRN scaling key is a model this loader does not run. */
    if (qw_kv_find(g, "llama.rope.scaling.type") &&
        !qw_kv_str_eq(g, "llama.rope.scaling.type", "none", &found, got, sizeof got))
        return qs_error_set(
            err, QS_EUNSUPPORTED,
            "%s: metadata key \"llama.rope.scaling.type\" = \"%s\" is not supported", f,
            found ? got : "(not a string)");
    int64_t id;
    cfg->bos_token_id = cfg->eos_token_id = -1;
    if (qw_kv_int(g, "tokenizer.ggml.bos_token_id", 0, &id, &found)) return QS_EFORMAT;
    if (found) cfg->bos_token_id = id >= 0 && id < cfg->vocab_size ? (int)id : -2;
    if (qw_kv_int(g, "tokenizer.ggml.eos_token_id", 0, &id, &found)) return QS_EFORMAT;
    if (found) cfg->eos_token_id = id >= 0 && id < cfg->vocab_size ? (int)id : -2;
    if (cfg->bos_token_id == -2 || cfg->eos_token_id == -2)
        return qs_error_set(
            err, QS_EFORMAT,
            "%s: metadata key \"tokenizer.ggml.%s_token_id\" is not below the vocabulary size %d",
            f, cfg->bos_token_id == -2 ? "bos" : "eos", cfg->vocab_size);
    return QS_OK;
}

/* ggml_type numbers (ggml.h) and names, for the types this loader reads and for messages. */
static const char *qw_ggml_type_name(uint32_t t) {
    static const char *const names[] = {
        "F32",      "F16",      "Q4_0",    "Q4_1",  "Q4_2",   "Q4_3",  "Q5_0",  "Q5_1",
        "Q8_0",     "Q8_1",     "Q2_K",    "Q3_K",  "Q4_K",   "Q5_K",  "Q6_K",  "Q8_K",
        "IQ2_XXS",  "IQ2_XS",   "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS",
        "I8",       "I16",      "I32",     "I64",   "F64",    "IQ1_M", "BF16",  "Q4_0_4_4",
        "Q4_0_4_8", "Q4_0_8_8", "TQ1_0",   "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8",
        "MXFP4",
    };
    return t < sizeof names / sizeof names[0] ? names[t] : "unknown";
}

/* The names of the dtypes qsweep reads ("F32, F16, ..."), for the refusal message: every one
 * has a ggml type (dtype.c). */
static void qw_gguf_type_list(char *out, size_t cap) {
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < QW_DT_COUNT; i++) {
        int k =
            snprintf(out + used, cap - used, "%s%s", used ? ", " : "", qw_dtype_name((qw_dtype)i));
        if (k > 0 && (size_t)k < cap - used) used += (size_t)k;
    }
}

/* GGUF tensor name -> Hugging Face name (tensor_mapping.py, LLAMA). Unknown names (e.g.
 * rope_freqs.weight) keep their GGUF name. *qk: 1 for attn_q, 2 for attn_k, else 0. */
static void qw_gguf_hf_name(const char *g, char *out, size_t cap, int *qk) {
    static const struct {
        const char *gguf, *hf;
        int qk;
    } blk[] = {
        {"attn_norm.weight", "input_layernorm.weight", 0},
        {"ffn_norm.weight", "post_attention_layernorm.weight", 0},
        {"attn_q.weight", "self_attn.q_proj.weight", 1},
        {"attn_k.weight", "self_attn.k_proj.weight", 2},
        {"attn_v.weight", "self_attn.v_proj.weight", 0},
        {"attn_output.weight", "self_attn.o_proj.weight", 0},
        {"ffn_gate.weight", "mlp.gate_proj.weight", 0},
        {"ffn_up.weight", "mlp.up_proj.weight", 0},
        {"ffn_down.weight", "mlp.down_proj.weight", 0},
    };
    *qk = 0;
    if (strcmp(g, "token_embd.weight") == 0) {
        snprintf(out, cap, "model.embed_tokens.weight");
        return;
    }
    if (strcmp(g, "output_norm.weight") == 0) {
        snprintf(out, cap, "model.norm.weight");
        return;
    }
    if (strcmp(g, "output.weight") == 0) {
        snprintf(out, cap, "lm_head.weight");
        return;
    }
    unsigned layer;
    int used = 0;
    if (sscanf(g, "blk.%u.%n", &layer, &used) == 1 && used > 0 && layer < 100000) {
        for (size_t i = 0; i < sizeof blk / sizeof blk[0]; i++)
            if (strcmp(g + used, blk[i].gguf) == 0) {
                snprintf(out, cap, "model.layers.%u.%s", layer, blk[i].hf);
                *qk = blk[i].qk;
                return;
            }
    }
    snprintf(out, cap, "%s", g);
}

static qs_status qw_gguf_tensor_info(qw_gguf *g, uint64_t i, const qw_config *cfg, int file_index,
                                     qw_tensor_table *table, size_t *rel_off_out) {
    qw_rd *r = &g->r;
    size_t at = r->off;
    const char *name;
    uint64_t name_len;
    if (qw_rd_str(r, &name, &name_len, "tensor name")) return QS_EFORMAT;
    if (name_len == 0 || name_len >= QW_GGUF_MAX_NAME || memchr(name, '\0', (size_t)name_len))
        return qs_error_set(
            r->err, QS_EFORMAT,
            "%s: offset %zu: tensor info %llu: name of %llu bytes is empty, too long or has a NUL",
            r->file, at, (unsigned long long)i, (unsigned long long)name_len);
    char gname[QW_GGUF_MAX_NAME], hf[QW_GGUF_MAX_NAME + 64];
    memcpy(gname, name, (size_t)name_len);
    gname[name_len] = '\0';
    uint32_t nd, type;
    if (qw_rd_u32(r, &nd, gname)) return QS_EFORMAT;
    if (nd < 1 || nd > QW_MAX_DIMS)
        return qs_error_set(r->err, QS_EFORMAT,
                            "%s: offset %zu: tensor \"%s\": n_dims = %u (1..%d)", r->file,
                            r->off - 4, gname, nd, QW_MAX_DIMS);
    uint64_t ne[QW_MAX_DIMS];
    int64_t numel = 1;
    for (uint32_t d = 0; d < nd; d++) {
        if (qw_rd_u64(r, &ne[d], gname)) return QS_EFORMAT;
        if (ne[d] == 0 || ne[d] > (uint64_t)INT64_MAX / (uint64_t)numel)
            return qs_error_set(
                r->err, QS_EFORMAT,
                "%s: offset %zu: tensor \"%s\": dimension %u = %llu is zero or overflows", r->file,
                r->off - 8, gname, d, (unsigned long long)ne[d]);
        numel *= (int64_t)ne[d];
    }
    uint64_t rel;
    if (qw_rd_u32(r, &type, gname) || qw_rd_u64(r, &rel, gname)) return QS_EFORMAT;
    qw_dtype dt;
    if (!qw_dtype_from_ggml(type, &dt)) {
        char list[256];
        qw_gguf_type_list(list, sizeof list);
        return qs_error_set(r->err, QS_EUNSUPPORTED,
                            "%s: tensor \"%s\": ggml type %u (%s) is not supported (%s)", r->file,
                            gname, type, qw_ggml_type_name(type), list);
    }
    if (ne[0] % (uint64_t)qw_dtype_block(dt) != 0)
        return qs_error_set(
            r->err, QS_EFORMAT,
            "%s: tensor \"%s\": row length %llu is not a multiple of the %s block (%d)", r->file,
            gname, (unsigned long long)ne[0], qw_dtype_name(dt), qw_dtype_block(dt));
    int qk;
    qw_gguf_hf_name(gname, hf, sizeof hf, &qk);
    if (qw_table_find(table, hf))
        return qs_error_set(r->err, QS_EFORMAT, "%s: tensor \"%s\" (%s) appears twice", r->file,
                            gname, hf);
    qw_tensor_entry *e = qw_table_add(table, hf);
    if (!e)
        return qs_error_set(r->err, QS_ENOMEM, "%s: out of memory adding tensor \"%s\"", r->file,
                            gname);
    int overflow = 0;
    e->dtype = dt;
    e->ndim = (int)nd;
    for (uint32_t d = 0; d < nd; d++)
        e->shape[d] = (int64_t)ne[nd - 1 - d]; /* ggml: ne[0] innermost */
    e->numel = numel;
    e->nbytes = qw_dtype_bytes(dt, numel, &overflow);
    if (overflow)
        return qs_error_set(r->err, QS_EFORMAT, "%s: tensor \"%s\": byte size overflows", r->file,
                            gname);
    e->file_index = file_index;
    e->permute_heads = qk == 1 ? cfg->n_heads : qk == 2 ? cfg->n_kv_heads : 0;
    *rel_off_out = (size_t)(rel > SIZE_MAX ? SIZE_MAX : rel);
    return QS_OK;
}

/* The factor convert_hf_to_gguf.py (LlamaModel.generate_extra_tensors) stores for a rotary
 * frequency of wavelength w under Llama 3.1 scaling (factor, lo, hi, original context L);
 * it is modeling_rope_utils.py _compute_llama3_parameters written as a divisor of the frequency. */
static double qw_llama3_divisor(double w, double factor, double lo, double hi, double L) {
    if (w < L / hi) return 1.0;
    if (w > L / lo) return factor;
    double s = (L / w - lo) / (hi - lo);
    return 1.0 / ((1.0 - s) / factor + s);
}

/* Rounds v to a multiple of 1/1024 when that is within 1e-4 relative (release values such as
 * 8, 1, 4 or 32 come back exact), else leaves it. */
static double qw_snap(double v) {
    double r = round(v * 1024.0) / 1024.0;
    return fabs(r - v) <= 1e-4 * fabs(v) ? r : v;
}

/* Llama 3.1 rope scaling from llama.cpp's "rope_freqs.weight" ([head_dim/2] F32 divisors of
 * the rotary frequencies; GGUF has no keys for it). Only L/(hi-lo) and lo/(hi-lo) shape the
 * smooth band, so lo = 1 (every Llama 3.x release) is assumed and hi, L are solved from the
 * band's two outermost points; factor is the largest divisor. The result is accepted only if
 * it reproduces every stored divisor within 1e-4 relative: anything else is refused, never
 * approximated. A tensor of all ones means no scaling. */
static qs_status qw_gguf_rope_freqs(qw_gguf *g, const qw_tensor_entry *e, qw_config *cfg) {
    const char *f = g->r.file;
    int n = cfg->head_dim / 2;
    if (e->dtype != QW_DT_F32 || e->ndim != 1 || e->numel != n)
        return qs_error_set(g->r.err, QS_EFORMAT,
                            "%s: tensor \"rope_freqs.weight\" must be F32 [%d] (head_dim / 2)", f,
                            n);
    double factor = 0, rf[QW_GGUF_MAX_ROPE_PAIRS], w[QW_GGUF_MAX_ROPE_PAIRS];
    if (n > QW_GGUF_MAX_ROPE_PAIRS)
        return qs_error_set(g->r.err, QS_EUNSUPPORTED,
                            "%s: tensor \"rope_freqs.weight\": %d frequencies (at most %d)", f, n,
                            QW_GGUF_MAX_ROPE_PAIRS);
    for (int i = 0; i < n; i++) {
        float v;
        memcpy(&v, e->src + 4 * (size_t)i, 4);
        if (!(v > 0.0f) || !isfinite(v))
            return qs_error_set(
                g->r.err, QS_EFORMAT,
                "%s: tensor \"rope_freqs.weight\" element %d = %g is not a positive "
                "number",
                f, i, v);
        rf[i] = v;
        if (rf[i] > factor) factor = rf[i];
        /* Frequencies as the converter computes them: float32 theta^(-2i/d), then 2 pi / f. */
        float freq = 1.0f / powf(cfg->rope_theta, (float)(2 * i) / (float)cfg->head_dim);
        w[i] = 2.0 * M_PI / (double)freq;
    }
    if (factor <= 1.0 + 1e-6) return QS_OK;
    factor = qw_snap(factor);
    int first = -1, last = -1, last_unscaled = -1, first_scaled = -1;
    for (int i = 0; i < n; i++) {
        if (fabs(rf[i] - 1.0) <= 1e-6)
            last_unscaled = i;
        else if (fabs(rf[i] - factor) <= 1e-6 * factor) {
            if (first_scaled < 0) first_scaled = i;
        } else {
            if (first < 0) first = i;
            last = i;
        }
    }
    double lo = 1.0, hi, L;
    if (first >= 0 && last > first) {
        /* s = (L/w - lo)/(hi - lo) is linear in 1/w: two points give A = L/(hi-lo), B. */
        double s1 = (1.0 / rf[first] - 1.0 / factor) / (1.0 - 1.0 / factor);
        double s2 = (1.0 / rf[last] - 1.0 / factor) / (1.0 - 1.0 / factor);
        double A = (s1 - s2) / (1.0 / w[first] - 1.0 / w[last]), B = s1 - A / w[first];
        if (!(B < 0.0) || !(A > 0.0))
            return qs_error_set(g->r.err, QS_EUNSUPPORTED,
                                "%s: tensor \"rope_freqs.weight\" does not follow Llama 3.1's rope "
                                "scaling rule",
                                f);
        hi = qw_snap(lo - lo / B);
        L = round(A * (hi - lo));
    } else if (first < 0 && last_unscaled >= 0 && first_scaled > last_unscaled) {
        /* No smooth band: any L/hi and L/lo between the two neighbouring wavelengths. */
        L = round(sqrt(w[last_unscaled] * w[first_scaled]));
        hi = sqrt(L / w[last_unscaled]);
    } else {
        return qs_error_set(g->r.err, QS_EUNSUPPORTED,
                            "%s: tensor \"rope_freqs.weight\": the Llama 3.1 scaling parameters "
                            "cannot be recovered from it",
                            f);
    }
    if (!(hi > lo) || !(L >= 1.0) || L > INT32_MAX)
        return qs_error_set(g->r.err, QS_EUNSUPPORTED,
                            "%s: tensor \"rope_freqs.weight\" does not follow Llama 3.1's rope "
                            "scaling rule",
                            f);
    for (int i = 0; i < n; i++) {
        double want = qw_llama3_divisor(w[i], factor, lo, hi, L);
        if (fabs(want - rf[i]) > 1e-4 * rf[i])
            return qs_error_set(
                g->r.err, QS_EUNSUPPORTED,
                "%s: tensor \"rope_freqs.weight\" element %d = %g does not follow "
                "Llama 3.1's rope scaling rule (recovered factor %g, low 1, high %g, "
                "original context %.0f gives %g)",
                f, i, rf[i], factor, hi, L, want);
    }
    cfg->rope_factor = (float)factor;
    cfg->rope_low_freq_factor = (float)lo;
    cfg->rope_high_freq_factor = (float)hi;
    cfg->rope_original_max_pos = (int)L;
    return QS_OK;
}

qs_status qw_gguf_parse(const char *file, const uint8_t *data, size_t size, int file_index,
                        qw_config *cfg, qw_tensor_table *table, qs_error *err) {
    qw_gguf g = {.r = {.file = file, .p = data, .size = size, .off = 0, .err = err}};
    qw_rd *r = &g.r;
    uint32_t magic, version;
    uint64_t n_tensors, n_kv;
    if (qw_rd_u32(r, &magic, "magic")) return QS_EFORMAT;
    if (memcmp(data, "GGUF", 4) != 0)
        return qs_error_set(err, QS_EFORMAT, "%s: offset 0: bad magic (not \"GGUF\")", file);
    if (qw_rd_u32(r, &version, "version")) return QS_EFORMAT;
    if (version != QW_GGUF_VERSION)
        return qs_error_set(err, QS_EUNSUPPORTED, "%s: offset 4: GGUF version %u (only %d is read)",
                            file, version, QW_GGUF_VERSION);
    if (qw_rd_u64(r, &n_tensors, "tensor count") || qw_rd_u64(r, &n_kv, "metadata count"))
        return QS_EFORMAT;
    /* Each key/value takes at least 13 bytes and each tensor info at least 32: larger counts cannot
     * fit. */
    if (n_kv > (size - r->off) / 13 || n_tensors > (size - r->off) / 32)
        return qs_error_set(
            err, QS_EFORMAT,
            "%s: offset 8: %llu tensors and %llu metadata entries cannot fit in %zu bytes", file,
            (unsigned long long)n_tensors, (unsigned long long)n_kv, size);
    g.kv = calloc(n_kv ? (size_t)n_kv : 1, sizeof *g.kv);
    size_t *rel = calloc(n_tensors ? (size_t)n_tensors : 1, sizeof *rel);
    /* Entries are found again by index: adding to the table may move it. */
    size_t base = table->n;
    qs_status st = QS_OK;
    if (!g.kv || !rel) {
        st = qs_error_set(err, QS_ENOMEM, "%s: out of memory for %llu metadata entries", file,
                          (unsigned long long)n_kv);
        goto done;
    }
    for (uint64_t i = 0; i < n_kv; i++) {
        size_t at = r->off;
        uint64_t klen;
        if ((st = qw_rd_str(r, &g.kv[i].key, &klen, "metadata key"))) goto done;
        g.kv[i].key_len = (size_t)klen;
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)(klen < 127 ? klen : 127), g.kv[i].key);
        for (uint64_t j = 0; j < i; j++)
            if (g.kv[j].key_len == klen && memcmp(g.kv[j].key, g.kv[i].key, (size_t)klen) == 0) {
                st = qs_error_set(err, QS_EFORMAT,
                                  "%s: offset %zu: metadata key \"%s\" appears twice", file, at,
                                  key);
                goto done;
            }
        if ((st = qw_rd_u32(r, &g.kv[i].type, key))) goto done;
        g.kv[i].value_off = r->off;
        g.n_kv = i + 1;
        if ((st = qw_rd_skip_value(r, g.kv[i].type, 0, key))) goto done;
    }
    if ((st = qw_gguf_config(&g, cfg))) goto done;
    uint64_t alignment = QW_GGUF_DEFAULT_ALIGNMENT;
    int64_t a;
    int found;
    if ((st = qw_kv_int(&g, "general.alignment", 0, &a, &found))) goto done;
    if (found) {
        if (a <= 0 || a > (1 << 30) || (a & (a - 1)) != 0) {
            st = qs_error_set(err, QS_EFORMAT,
                              "%s: metadata key \"general.alignment\" = %lld is not a power of two",
                              file, (long long)a);
            goto done;
        }
        alignment = (uint64_t)a;
    }
    for (uint64_t i = 0; i < n_tensors; i++)
        if ((st = qw_gguf_tensor_info(&g, i, cfg, file_index, table, &rel[i]))) goto done;
    size_t data_start = (r->off + alignment - 1) / alignment * alignment;
    if (data_start > size) {
        st = qs_error_set(err, QS_EFORMAT,
                          "%s: offset %zu: truncated before the tensor data (aligned to %llu)",
                          file, r->off, (unsigned long long)alignment);
        goto done;
    }
    for (uint64_t i = 0; i < n_tensors; i++) {
        qw_tensor_entry *e = &table->v[base + i];
        if (rel[i] % alignment != 0 || rel[i] > size - data_start ||
            e->nbytes > size - data_start - rel[i]) {
            st = qs_error_set(err, QS_EFORMAT,
                              "%s: tensor \"%s\": data at offset %zu + %zu bytes (%s) is "
                              "misaligned or past the end of the "
                              "%zu-byte file",
                              file, e->name,
                              rel[i] > SIZE_MAX - data_start ? SIZE_MAX : data_start + rel[i],
                              e->nbytes, qw_dtype_name(e->dtype), size);
            goto done;
        }
        e->src = data + data_start + rel[i];
        e->offset = data_start + rel[i];
    }
    const qw_tensor_entry *rope = NULL;
    for (size_t i = base; i < table->n; i++)
        if (strcmp(table->v[i].name, "rope_freqs.weight") == 0) rope = &table->v[i];
    if (rope) st = qw_gguf_rope_freqs(&g, rope, cfg);
done:
    free(g.kv);
    free(rel);
    return st;
}

/* gguf_meta.h: the same header and key/value walk as qw_gguf_parse, without the tensors. */
qs_status qw_gguf_metadata(const char *file, const uint8_t *data, size_t size,
                           qw_gguf_kv_view **kv, size_t *n, qs_error *err) {
    *kv = NULL;
    *n = 0;
    qw_rd rd = {.file = file, .p = data, .size = size, .off = 0, .err = err}, *r = &rd;
    uint32_t magic, version;
    uint64_t n_tensors, n_kv;
    if (qw_rd_u32(r, &magic, "magic")) return QS_EFORMAT;
    if (memcmp(data, "GGUF", 4) != 0)
        return qs_error_set(err, QS_EFORMAT, "%s: offset 0: bad magic (not \"GGUF\")", file);
    if (qw_rd_u32(r, &version, "version")) return QS_EFORMAT;
    if (version != QW_GGUF_VERSION)
        return qs_error_set(err, QS_EUNSUPPORTED, "%s: offset 4: GGUF version %u (only %d is read)",
                            file, version, QW_GGUF_VERSION);
    if (qw_rd_u64(r, &n_tensors, "tensor count") || qw_rd_u64(r, &n_kv, "metadata count"))
        return QS_EFORMAT;
    if (n_kv > (size - r->off) / 13)
        return qs_error_set(err, QS_EFORMAT,
                            "%s: offset 16: %llu metadata entries cannot fit in %zu bytes", file,
                            (unsigned long long)n_kv, size);
    qw_gguf_kv_view *v = calloc(n_kv ? (size_t)n_kv : 1, sizeof *v);
    if (!v)
        return qs_error_set(err, QS_ENOMEM, "%s: out of memory for %llu metadata entries", file,
                            (unsigned long long)n_kv);
    for (uint64_t i = 0; i < n_kv; i++) {
        size_t at = r->off;
        uint64_t klen;
        const char *k;
        if (qw_rd_str(r, &k, &klen, "metadata key")) goto bad;
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)(klen < 127 ? klen : 127), k);
        for (uint64_t j = 0; j < i; j++)
            if (v[j].key_len == klen && memcmp(v[j].key, k, (size_t)klen) == 0) {
                qs_error_set(err, QS_EFORMAT, "%s: offset %zu: metadata key \"%s\" appears twice",
                             file, at, key);
                goto bad;
            }
        v[i].key = k;
        v[i].key_len = (size_t)klen;
        if (qw_rd_u32(r, &v[i].type, key)) goto bad;
        size_t start = r->off;
        if (qw_rd_skip_value(r, v[i].type, 0, key)) goto bad;
        v[i].value = data + start;
        v[i].value_bytes = r->off - start;
    }
    *kv = v;
    *n = (size_t)n_kv;
    return QS_OK;
bad:
    free(v);
    return err ? err->code : QS_EFORMAT;
}
