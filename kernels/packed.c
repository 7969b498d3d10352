/* Packed storage of one quantized tensor (quant.h qk_packed): allocation, the quantize
 * entry points (whole tensor, or a chunk of rows) and dequantization. */
#include <stdatomic.h>
#include <stdlib.h>

#include "scale_rules.h"

/* The last version given (quant.h); 0 is never given: it marks an empty packed tensor. */
static atomic_uint_fast64_t last_version;

uint64_t qk_version_new(void) {
    return (uint64_t)atomic_fetch_add(&last_version, 1) + 1;
}

void qk_packed_changed(qk_packed *p) {
    p->version = qk_version_new();
}

qs_status qk_packed_init(qk_packed *pk, const qk_format *fmt, const qk_quant_options *opt,
                         size_t rows, size_t k, qs_error *err) {
    static const qk_quant_options defaults;
    if (!opt) opt = &defaults;
    if (!pk) return qs_error_set(err, QS_EINVAL, "kernels: packed is NULL");
    memset(pk, 0, sizeof *pk);
    qk_plan p;
    qs_status st = qk_plan_shape(&p, fmt, opt, rows, k, err);
    if (st) return st;
    if (fmt->rule == QK_RULE_IDENTITY)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "kernels: %s is the unquantized reference and has no packed form",
                            fmt->name);
    pk->fmt = fmt;
    pk->rows = rows;
    pk->k = k;
    pk->block = p.block;
    pk->blocks_per_row = p.nblk;
    pk->row_bytes = fmt->elem->bits == 4 ? (k + 1) / 2 : k;
    pk->tensor_scale = 1.0f;
    size_t code_bytes = rows * pk->row_bytes;
    size_t nscales = rows * p.nblk;
    size_t scale_bytes = 0;
    if (fmt->storage == QK_STORE_E4M3 || fmt->storage == QK_STORE_E8M0) scale_bytes = nscales;
    if (fmt->storage == QK_STORE_F32) scale_bytes = nscales * sizeof(float);
    /* FP32 scales first so they are aligned; codes and byte scales after them */
    uint8_t *mem = calloc(1, scale_bytes + code_bytes + 1);
    if (!mem)
        return qs_error_set(err, QS_ENOMEM, "kernels: %s: %zu bytes of packed storage", fmt->name,
                            scale_bytes + code_bytes);
    pk->storage_ = mem;
    if (fmt->storage == QK_STORE_F32) pk->scales_f32 = (float *)(void *)mem;
    if (fmt->storage == QK_STORE_E4M3 || fmt->storage == QK_STORE_E8M0) pk->scales = mem;
    pk->codes = mem + scale_bytes;
    qk_packed_changed(pk);
    return QS_OK;
}

void qk_packed_release(qk_packed *pk) {
    if (!pk) return;
    free(pk->storage_);
    memset(pk, 0, sizeof *pk);
}

/* The checks both quantize entry points make: the plan for pk's whole tensor, x and pk's
 * storage present and of this format, shape and block. */
static qs_status packed_call(qk_plan *p, const qk_format *fmt, const qk_quant_options *opt,
                             const float *x, size_t rows, size_t k, const qk_packed *pk,
                             qs_error *err) {
    qs_status st = qk_plan_shape(p, fmt, opt, rows, k, err);
    if (st) return st;
    if (!x || !pk || !pk->storage_)
        return qs_error_set(err, QS_EINVAL, "kernels: %s: x or packed storage missing", fmt->name);
    if (pk->fmt != fmt || pk->rows != rows || pk->k != k || pk->block != p->block)
        return qs_error_set(err, QS_EINVAL,
                            "kernels: packed storage is %s [%zu x %zu] block %zu, the call "
                            "is %s [%zu x %zu] block %zu",
                            qk_format_name(pk->fmt), pk->rows, pk->k, pk->block, fmt->name, rows, k,
                            p->block);
    return QS_OK;
}

static void set_packed_scales(const qk_plan *p, qk_packed *pk) {
    pk->tensor_scale = p->s_dec;
    pk->tensor_amax = p->amax_t;
    pk->tensor_scale_exp2 = -p->exp2;
}

qs_status qk_quantize(const qk_format *fmt, const qk_quant_options *opt, const float *x,
                      size_t rows, size_t k, qk_packed *pk, qs_error *err) {
    static const qk_quant_options defaults;
    if (!opt) opt = &defaults;
    qk_plan p;
    qs_status st = packed_call(&p, fmt, opt, x, rows, k, pk, err);
    if (st) return st;
    qk_plan_tensor_scales(&p, x, opt);
    set_packed_scales(&p, pk);
    qk_quantize_groups(&p, opt, x, 0, rows, pk);
    qk_packed_changed(pk);
    return QS_OK;
}

qs_status qk_quantize_rows(const qk_format *fmt, const qk_quant_options *opt, const float *x,
                           size_t row0, size_t n, qk_packed *pk, qs_error *err) {
    static const qk_quant_options defaults;
    if (!opt) opt = &defaults;
    if (!pk || !pk->storage_)
        return qs_error_set(err, QS_EINVAL, "kernels: quantize rows: packed storage missing");
    qk_plan p;
    qs_status st = packed_call(&p, fmt, opt, x, pk->rows, pk->k, pk, err);
    if (st) return st;
    if (n == 0 || row0 >= pk->rows || n > pk->rows - row0)
        return qs_error_set(err, QS_EINVAL,
                            "kernels: %s: rows [%zu, %zu + %zu) are not inside the tensor's %zu "
                            "rows (or empty)",
                            fmt->name, row0, row0, n, pk->rows);
    if (row0 % p.brows != 0 || (row0 + n != pk->rows && n % p.brows != 0))
        return qs_error_set(err, QS_EINVAL,
                            "kernels: %s: rows [%zu, %zu + %zu) split its %zu-row blocks (start "
                            "and length must be multiples of %zu, except a chunk that ends the "
                            "tensor)",
                            fmt->name, row0, row0, n, p.brows, p.brows);
    if (fmt->tensor_scale && !opt->tensor_amax_given)
        return qs_error_set(err, QS_EINVAL,
                            "kernels: %s: quantize rows needs options.tensor_amax_given (the amax "
                            "of the whole tensor, qk_joint_amax over its chunks): a chunk's own "
                            "amax would give it another tensor scale",
                            fmt->name);
    qk_plan_tensor_scales(&p, x, opt);
    p.xrow0 = row0;
    set_packed_scales(&p, pk);
    qk_quantize_groups(&p, opt, x, row0, n, pk);
    qk_packed_changed(pk);
    return QS_OK;
}

static uint32_t get_code(const qk_packed *pk, size_t r, size_t c) {
    const uint8_t *row = pk->codes + r * pk->row_bytes;
    if (pk->fmt->elem->bits == 4)
        return (c & 1) ? (uint32_t)(row[c >> 1] >> 4) : row[c >> 1] & 0xFu;
    return row[c];
}

qs_status qk_dequantize(const qk_packed *pk, float *y, int threads, qs_error *err) {
    if (!pk || !pk->storage_ || !y)
        return qs_error_set(err, QS_EINVAL, "kernels: dequantize: packed storage or y missing");
    qk_quant_options o = {0};
    o.threads = threads;
    qk_plan p;
    qs_status st = qk_plan_shape(&p, pk->fmt, &o, pk->rows, pk->k, err);
    if (st) return st;
    p.block = pk->block;
    p.nblk = pk->blocks_per_row;
    p.s_dec = pk->tensor_scale;
    p.exp2 = -pk->tensor_scale_exp2;
    if (p.exp2 < 0 || p.exp2 > 252)
        return qs_error_set(err, QS_EINVAL,
                            "kernels: dequantize: packed tensor_scale_exp2 %d is outside -252..0",
                            pk->tensor_scale_exp2);
    size_t rows = pk->rows;
#pragma omp parallel for schedule(static) num_threads(p.threads)
    for (size_t r = 0; r < rows; r++) {
        for (size_t b = 0; b < p.nblk; b++) {
            block_scale bs = scale_from_packed(&p, pk, r, b);
            size_t c0 = b * p.block;
            size_t n = p.k - c0 < p.block ? p.k - c0 : p.block;
            for (size_t c = c0; c < c0 + n; c++)
                y[r * p.k + c] =
                    decoded_output(&p, &bs, qk_codec_decode(p.elem, get_code(pk, r, c)));
        }
    }
    return QS_OK;
}
