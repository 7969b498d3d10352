/* cuBLASLt FP4 operand layout, repacking, alpha folding and the CPU GEMM over those buffers;
 * contracts and sources in cublaslt_layout.h. */
#include "cublaslt_layout.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "format.h"
#include "swizzle.h"

static size_t roundup(size_t v, size_t m) {
    return (v + m - 1) / m * m;
}

qs_status qk_lt_layout_init(const qk_format *fmt, size_t rows, size_t k, qk_lt_layout *l,
                            qs_error *err) {
    if (!fmt || !l) return qs_error_set(err, QS_EINVAL, "kernels: lt layout: NULL argument");
    if (rows == 0 || k == 0)
        return qs_error_set(err, QS_EINVAL, "kernels: lt layout: %s: empty operand (%zu x %zu)",
                            fmt->name, rows, k);
    size_t vec;
    qk_lt_scale_mode mode;
    if (fmt->elem == &qk_codec_e2m1 && fmt->rule == QK_RULE_NVFP4 && fmt->block == 16) {
        vec = 16;
        mode = QK_LT_SCALE_VEC16_UE4M3;
    } else if (fmt->elem == &qk_codec_e2m1 && fmt->rule == QK_RULE_MX && fmt->block == 32) {
        vec = 32;
        mode = QK_LT_SCALE_VEC32_UE8M0;
    } else {
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "kernels: lt layout: %s has no cuBLASLt block-scaled FP4 layout "
                            "(only nvfp4, nvfp4_2d and mxfp4)",
                            fmt->name);
    }
    /* every size below stays under SIZE_MAX / 2 */
    if (k > SIZE_MAX / 8 || rows > SIZE_MAX / 8 / (k + 4 * vec))
        return qs_error_set(err, QS_EINVAL, "kernels: lt layout: %s: %zu x %zu overflows",
                            fmt->name, rows, k);
    memset(l, 0, sizeof *l);
    l->mode = mode;
    l->vec = vec;
    l->rows = rows;
    l->k = k;
    l->k_pad = roundup(k, 4 * vec);
    l->ld_bytes = l->k_pad / 2;
    l->codes_bytes = rows * l->ld_bytes;
    l->scale_cols = (k + vec - 1) / vec;
    l->scale_bytes = qk_swizzle_128x4_size(rows, l->scale_cols);
    return QS_OK;
}

static int layout_of(const qk_packed *p, const qk_lt_layout *l) {
    qk_lt_layout want;
    if (qk_lt_layout_init(p->fmt, p->rows, p->k, &want, NULL) != QS_OK) return 0;
    return want.mode == l->mode && want.vec == l->vec && want.rows == l->rows && want.k == l->k &&
           want.k_pad == l->k_pad && want.ld_bytes == l->ld_bytes &&
           want.codes_bytes == l->codes_bytes && want.scale_cols == l->scale_cols &&
           want.scale_bytes == l->scale_bytes && p->block == l->vec &&
           p->blocks_per_row == l->scale_cols && p->scales;
}

qs_status qk_lt_pack(const qk_packed *p, const qk_lt_layout *l, uint8_t *codes, size_t codes_len,
                     uint8_t *scales, size_t scales_len, qs_error *err) {
    if (!p || !l || !codes || !scales || !p->codes)
        return qs_error_set(err, QS_EINVAL, "kernels: lt pack: NULL argument");
    if (!layout_of(p, l))
        return qs_error_set(err, QS_EINVAL,
                            "kernels: lt pack: packed %s [%zu x %zu] does not match the layout "
                            "[%zu x %zu] vec %zu",
                            qk_format_name(p->fmt), p->rows, p->k, l->rows, l->k, l->vec);
    if (codes_len < l->codes_bytes || scales_len < l->scale_bytes)
        return qs_error_set(err, QS_EINVAL,
                            "kernels: lt pack: buffers hold %zu code and %zu scale bytes, the "
                            "layout needs %zu and %zu",
                            codes_len, scales_len, l->codes_bytes, l->scale_bytes);
    memset(codes, 0, l->codes_bytes);
    for (size_t r = 0; r < l->rows; r++) /* an odd k leaves the last high nibble 0 (quant.h) */
        memcpy(codes + r * l->ld_bytes, p->codes + r * p->row_bytes, p->row_bytes);
    return qk_swizzle_128x4(p->scales, l->rows, l->scale_cols, scales, scales_len, err);
}

qs_status qk_lt_fold_alpha(float alpha, float s_a, int exp2_a, float s_b, int exp2_b, float *out,
                           qs_error *err) {
    if (!out) return qs_error_set(err, QS_EINVAL, "kernels: fold alpha: out is NULL");
    if (!(fabsf(alpha) <= FLT_MAX))
        return qs_error_set(err, QS_EINVAL, "kernels: fold alpha: alpha %g is not finite",
                            (double)alpha);
    if (!(s_a >= 0.0f && s_a <= FLT_MAX) || !(s_b >= 0.0f && s_b <= FLT_MAX))
        return qs_error_set(err, QS_EINVAL,
                            "kernels: fold alpha: tensor scales %g and %g must be finite and >= 0",
                            (double)s_a, (double)s_b);
    if (exp2_a > 0 || exp2_a < -252 || exp2_b > 0 || exp2_b < -252)
        return qs_error_set(err, QS_EINVAL,
                            "kernels: fold alpha: tensor_scale_exp2 %d, %d outside -252..0", exp2_a,
                            exp2_b);
    /* s_a * s_b is exact in double (48 significant bits, exponents within double's range);
     * the alpha product and the power of two then round once, to double, and once to FP32.
     * Double rounding cannot bite for alpha = 1 (the double is exact). */
    double v = (double)alpha * ((double)s_a * (double)s_b);
    v = ldexp(v, exp2_a + exp2_b);
    float f = (float)v;
    if (v != 0.0 && !(fabs(v) >= (double)FLT_MIN && fabsf(f) <= FLT_MAX))
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "kernels: fold alpha: alpha %g x scales %g * 2^%d, %g * 2^%d = %g is "
                            "not an FP32 normal number",
                            (double)alpha, (double)s_a, exp2_a, (double)s_b, exp2_b, v);
    *out = f;
    return QS_OK;
}

float qk_lt_element(const qk_lt_layout *l, const uint8_t *codes, const uint8_t *scales, size_t r,
                    size_t c) {
    uint8_t byte = codes[r * l->ld_bytes + c / 2];
    uint32_t code = (c & 1) ? (uint32_t)(byte >> 4) : byte & 0xFu;
    return qk_lt_value(l->mode, code, scales[qk_lt_scale_offset(r, c / l->vec, l->scale_cols)]);
}

uint16_t qk_lt_element_bf16(const qk_lt_layout *l, const uint8_t *codes, const uint8_t *scales,
                            size_t r, size_t c) {
    return (uint16_t)(qk_bits_of(qk_lt_element(l, codes, scales, r, c)) >> 16);
}

qs_status qk_lt_linear_ref(const qk_lt_layout *lx, const uint8_t *x_codes, const uint8_t *x_scales,
                           const qk_lt_layout *lw, const uint8_t *w_codes, const uint8_t *w_scales,
                           float alpha, float *y, size_t ldy, qs_error *err) {
    if (!lx || !lw || !x_codes || !x_scales || !w_codes || !w_scales || !y)
        return qs_error_set(err, QS_EINVAL, "kernels: lt linear ref: NULL argument");
    if (lx->k != lw->k || lx->mode != lw->mode || lx->k_pad != lw->k_pad)
        return qs_error_set(err, QS_EINVAL,
                            "kernels: lt linear ref: x has k %zu mode %d, W has k %zu mode %d",
                            lx->k, (int)lx->mode, lw->k, (int)lw->mode);
    if (ldy < lw->rows)
        return qs_error_set(err, QS_EINVAL, "kernels: lt linear ref: ldy %zu < out %zu", ldy,
                            lw->rows);
    for (size_t t = 0; t < lx->rows; t++)
        for (size_t o = 0; o < lw->rows; o++) {
            double acc = 0.0;
            for (size_t c = 0; c < lx->k_pad; c++)
                acc += (double)qk_lt_element(lx, x_codes, x_scales, t, c) *
                       (double)qk_lt_element(lw, w_codes, w_scales, o, c);
            y[t * ldy + o] = (float)((double)alpha * acc);
        }
    return QS_OK;
}
