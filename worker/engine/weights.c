/* The engine's weights (weights.h): forms, row fetch, and the loader over a checkpoint. */
#include "weights.h"

#include "element.h"
#include "format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

qw_weight qw_weight_from_view(const qw_stored_tensor *v) {
    qw_weight w = {0};
    w.rows = v->rows;
    w.cols = v->cols;
    w.f32 = qw_stored_f32(v);
    w.form = w.f32 ? QW_WEIGHT_F32 : QW_WEIGHT_STORED;
    w.view = *v;
    return w;
}

qw_weight qw_weight_from_packed(const qk_packed *p) {
    qw_weight w = {0};
    w.form = QW_WEIGHT_PACKED;
    w.rows = (int64_t)p->rows;
    w.cols = (int64_t)p->k;
    w.packed = p;
    return w;
}

/* Decodes rows [r0, r0+n) of p into dst [n x k]: value = elem(code) * block decode scale, then
 * times the tensor decode scale when the format has one, multiplied in that order, as
 * qk_dequantize does (quant.h, format.h) and with the kernels' own decoders (qk_codec_decode,
 * qk_e8m0_decode), tabulated per call: every code of a codec is an exact FP32 value, so the
 * table gives the same bits as decoding each element, and the loop is a lookup and one or two
 * multiplies (qk_dequantize decodes element by element, several times slower, which the
 * forward pass would pay on every quantized linear). tests/engine/test_ops.c checks the bits
 * against qk_fake_quant for every format family. */
static void packed_rows_f32(const qk_packed *p, size_t r0, size_t n, float *dst) {
    const qk_format *f = p->fmt;
    float tab[256];
    uint32_t ncodes = 1u << f->elem->bits;
    for (uint32_t c = 0; c < ncodes; c++)
        tab[c] = qk_codec_decode(f->elem, c);
    int four = f->elem->bits == 4;
    for (size_t r = r0; r < r0 + n; r++) {
        const uint8_t *codes = p->codes + r * p->row_bytes;
        float *y = dst + (r - r0) * p->k;
        for (size_t b = 0; b < p->blocks_per_row; b++) {
            size_t i = r * p->blocks_per_row + b;
            float dec = 1.0f;
            if (f->storage == QK_STORE_E4M3) dec = qk_codec_decode(&qk_codec_e4m3, p->scales[i]);
            if (f->storage == QK_STORE_E8M0) dec = qk_e8m0_decode(p->scales[i]);
            if (f->storage == QK_STORE_F32) dec = p->scales_f32[i];
            size_t c0 = b * p->block, c1 = c0 + p->block < p->k ? c0 + p->block : p->k;
            if (four) {
                for (size_t c = c0; c < c1; c++)
                    y[c] = tab[(c & 1) ? codes[c >> 1] >> 4 : codes[c >> 1] & 0xFu] * dec;
            } else {
                for (size_t c = c0; c < c1; c++)
                    y[c] = tab[codes[c]] * dec;
            }
            if (f->tensor_scale)
                for (size_t c = c0; c < c1; c++)
                    y[c] = y[c] * p->tensor_scale;
        }
    }
}

qs_status qw_weight_rows_f32(const qw_weight *w, int64_t r0, int64_t n, float *dst,
                             qs_error *err) {
    if (r0 < 0 || n < 1 || r0 + n > w->rows)
        return qs_error_set(err, QS_EINVAL, "weight rows %lld..%lld outside 0..%lld",
                            (long long)r0, (long long)(r0 + n - 1), (long long)w->rows - 1);
    switch (w->form) {
    case QW_WEIGHT_F32:
        memcpy(dst, w->f32 + (size_t)r0 * w->cols, (size_t)n * w->cols * sizeof *dst);
        return QS_OK;
    case QW_WEIGHT_STORED:
        qw_stored_rows_f32(&w->view, r0, n, dst);
        return QS_OK;
    case QW_WEIGHT_PACKED:
        packed_rows_f32(w->packed, (size_t)r0, (size_t)n, dst);
        return QS_OK;
    }
    return qs_error_set(err, QS_EINVAL, "weight: unknown form %d", (int)w->form);
}

size_t qw_weight_bytes(const qw_weight *w) {
    switch (w->form) {
    case QW_WEIGHT_F32:
        return (size_t)w->rows * (size_t)w->cols * sizeof(float);
    case QW_WEIGHT_STORED:
        return (size_t)w->rows * w->view.row_bytes;
    case QW_WEIGHT_PACKED: {
        const qk_packed *p = w->packed;
        size_t n = p->rows * p->row_bytes;
        if (p->scales) n += p->rows * p->blocks_per_row;
        if (p->scales_f32) n += p->rows * p->blocks_per_row * sizeof(float);
        return n;
    }
    }
    return 0;
}

qs_status qw_config_check(const qw_config *c, qs_error *err) {
#define NEED(cond, field)                                                                          \
    if (!(cond)) return qs_error_set(err, QS_EINVAL, "model config: %s out of range", field)
    NEED(c->dim > 0, "dim");
    NEED(c->hidden_dim > 0, "hidden_dim");
    NEED(c->n_layers > 0, "n_layers");
    NEED(c->n_heads > 0, "n_heads");
    NEED(c->n_kv_heads > 0 && c->n_heads % c->n_kv_heads == 0, "n_kv_heads");
    NEED(c->head_dim > 0 && c->head_dim % 2 == 0, "head_dim");
    NEED(c->vocab_size > 0, "vocab_size");
    NEED(c->rope_theta > 0.0f, "rope_theta");
    NEED(c->norm_eps >= 0.0f, "norm_eps");
    NEED(c->rope_factor <= 0.0f ||
             (c->rope_original_max_pos > 0 && c->rope_high_freq_factor > c->rope_low_freq_factor &&
              c->rope_low_freq_factor > 0.0f),
         "rope_scaling");
#undef NEED
    return QS_OK;
}

qs_status qw_weights_alloc(qw_weights *w, const qw_config *cfg, qs_error *err) {
    memset(w, 0, sizeof *w);
    qs_status st = qw_config_check(cfg, err);
    if (st != QS_OK) return st;
    size_t L = (size_t)cfg->n_layers;
    size_t bytes = 2 * L * sizeof(const float *) + QW_LINEAR_KINDS * L * sizeof(qw_weight);
    char *mem = calloc(1, bytes);
    if (!mem) return qs_error_set(err, QS_ENOMEM, "weights: arrays for %zu layers", L);
    w->cfg = *cfg;
    w->arrays_ = mem;
    qw_weight *lin = (qw_weight *)(void *)mem;
    for (int k = 0; k < QW_LINEAR_KINDS; k++)
        w->lin[k] = lin + (size_t)k * L;
    w->attn_norm = (const float **)(void *)(mem + QW_LINEAR_KINDS * L * sizeof(qw_weight));
    w->ffn_norm = w->attn_norm + L;
    return QS_OK;
}

void qw_weights_release(qw_weights *w) {
    if (!w) return;
    free(w->arrays_);
    free(w->owned_);
    memset(w, 0, sizeof *w);
}

size_t qw_weights_bytes(const qw_weights *w) {
    size_t n = qw_weight_bytes(&w->embed) + (size_t)(w->cfg.n_layers * 2 + 1) * w->cfg.dim * 4;
    if (!w->cfg.tied_embeddings) n += qw_weight_bytes(&w->lm_head);
    for (int k = 0; k < QW_LINEAR_KINDS; k++)
        for (int l = 0; l < w->cfg.n_layers; l++)
            n += qw_weight_bytes(&w->lin[k][l]);
    return n;
}

/* Looks a tensor up and checks its HF shape [rows x cols] (cols 1 for vectors). */
static qs_status check_shape(const char *name, const int64_t shape[2], int64_t rows, int64_t cols,
                             qs_error *err) {
    if (shape[0] != rows || shape[1] != cols)
        return qs_error_set(
            err, QS_EFORMAT, "tensor %s: shape [%lld x %lld], config expects [%lld x %lld]", name,
            (long long)shape[0], (long long)shape[1], (long long)rows, (long long)cols);
    return QS_OK;
}

static qs_status get_matrix(qw_checkpoint *ck, const char *name, int64_t rows, int64_t cols,
                            qw_weight *out, qs_error *err) {
    int64_t shape[2] = {0, 0};
    int ndim = 0;
    qw_stored_tensor v;
    qs_status st = qw_checkpoint_tensor_stored(ck, name, &v, shape, &ndim, err);
    if (st == QS_OK) st = check_shape(name, shape, rows, cols, err);
    if (st == QS_OK) *out = qw_weight_from_view(&v);
    return st;
}

static qs_status get_vector(qw_checkpoint *ck, const char *name, int64_t n, const float **out,
                            qs_error *err) {
    int64_t shape[2] = {0, 0};
    int ndim = 0;
    qs_status st = qw_checkpoint_tensor(ck, name, out, shape, &ndim, err);
    if (st == QS_OK) st = check_shape(name, shape, n, 1, err);
    return st;
}

qs_status qw_weights_from_checkpoint(qw_checkpoint *ck, qw_weights *w, qs_error *err) {
    const qw_config *c = qw_checkpoint_config(ck);
    qs_status st = qw_weights_alloc(w, c, err);
    if (st != QS_OK) return st;
    int D = c->dim, F = c->hidden_dim, H = c->n_heads, G = c->n_kv_heads, E = c->head_dim,
        V = c->vocab_size;
    st = get_matrix(ck, "model.embed_tokens.weight", V, D, &w->embed, err);
    if (st == QS_OK) st = get_vector(ck, "model.norm.weight", D, &w->final_norm, err);
    if (st == QS_OK) {
        if (c->tied_embeddings)
            w->lm_head = w->embed;
        else
            st = get_matrix(ck, "lm_head.weight", V, D, &w->lm_head, err);
    }
    const int outs[QW_LINEAR_KINDS] = {H * E, G * E, G * E, D, F, F, D};
    const int ins[QW_LINEAR_KINDS] = {D, D, D, H * E, D, D, F};
    char name[160];
    for (int l = 0; l < c->n_layers && st == QS_OK; l++) {
        snprintf(name, sizeof name, "model.layers.%d.input_layernorm.weight", l);
        st = get_vector(ck, name, D, &w->attn_norm[l], err);
        if (st != QS_OK) break;
        snprintf(name, sizeof name, "model.layers.%d.post_attention_layernorm.weight", l);
        st = get_vector(ck, name, D, &w->ffn_norm[l], err);
        for (int k = 0; k < QW_LINEAR_KINDS && st == QS_OK; k++) {
            snprintf(name, sizeof name, "model.layers.%d.%s.weight", l,
                     qw_linear_module_name((qw_linear_kind)k));
            st = get_matrix(ck, name, outs[k], ins[k], &w->lin[k][l], err);
        }
    }
    if (st != QS_OK) qw_weights_release(w);
    return st;
}
