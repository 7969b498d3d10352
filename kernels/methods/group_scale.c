/* Frozen block scales (group_scale.h). */
#include "group_scale.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "element.h"

size_t qk_group_cols(const qk_format *fmt, const qk_quant_options *opt, size_t k) {
    size_t b = (size_t)fmt->block;
    if (fmt->group_option && opt && opt->group_size > 0) b = (size_t)opt->group_size;
    if (b == 0 || b > k) b = k;
    return b;
}

qs_status qk_group_scales(const qk_format *fmt, const qk_quant_options *opt, const float *x,
                          size_t rows, size_t cols, size_t ld, float tensor_amax,
                          qk_group_scale *out, float *s_dec, qs_error *err) {
    if (opt->rounding == QK_ROUND_SR)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "methods: %s: stochastic rounding has no frozen scale (use rne or rz)",
                            qk_format_name(fmt));
    qk_quant_options o = *opt;
    o.threads = 1;
    if (fmt->tensor_scale) {
        o.tensor_amax_given = 1;
        o.tensor_amax = tensor_amax;
    }
    float *g = malloc(rows * cols * sizeof *g);
    if (!g) return qs_error_set(err, QS_ENOMEM, "methods: group of %zu x %zu", rows, cols);
    for (size_t r = 0; r < rows; r++)
        memcpy(g + r * cols, x + r * ld, cols * sizeof *g);
    qk_packed p;
    qs_status st = qk_packed_init(&p, fmt, &o, rows, cols, err);
    if (!st) st = qk_quantize(fmt, &o, g, rows, cols, &p, err);
    free(g);
    if (st) return st;
    if (p.tensor_scale_exp2) {
        qk_packed_release(&p);
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "methods: %s: a tiny tensor under tiny_amax exact has no frozen scale",
                            qk_format_name(fmt));
    }
    *s_dec = fmt->tensor_scale ? p.tensor_scale : 1.0f;
    /* the per-tensor FP8 encode scale, as the core plans it (quantize.c) */
    float tenc = fminf(fmt->elem->max_value / tensor_amax, FLT_MAX);
    if (tensor_amax == 0.0f || tenc == 0.0f) tenc = 1.0f;
    for (size_t r = 0; r < rows; r++) {
        qk_group_scale s = {1.0f, 1.0f, 0};
        switch (fmt->rule) {
        case QK_RULE_NVFP4: {
            float sb = qk_codec_decode(&qk_codec_e4m3, p.scales[r * p.blocks_per_row]);
            s.dec = sb;
            s.enc = fminf(1.0f / (sb * p.tensor_scale), FLT_MAX);
            break;
        }
        case QK_RULE_MX: {
            uint8_t c = p.scales[r * p.blocks_per_row];
            s.enc = c == 0xFF ? NAN : ldexpf(1.0f, 127 - (int)c);
            s.dec = c == 0xFF ? NAN : ldexpf(1.0f, (int)c - 127);
            break;
        }
        case QK_RULE_TENSOR:
            s.enc = tenc;
            break;
        case QK_RULE_ABSMAX:
            s.dec = p.scales_f32[r * p.blocks_per_row];
            s.divide = 1;
            break;
        default:
            break;
        }
        out[r] = s;
    }
    qk_packed_release(&p);
    return QS_OK;
}

float qk_group_scale_apply(const qk_format *fmt, const qk_quant_options *opt,
                           const qk_group_scale *g, float s_dec, float x) {
    if (fmt->rule == QK_RULE_IDENTITY) return x;
    float in = g->divide ? x / g->dec : x * g->enc;
    float v = qk_codec_decode(fmt->elem, qk_codec_encode(fmt->elem, in, opt->rounding, 0));
    float y = v * g->dec;
    if (fmt->tensor_scale) y = y * s_dec;
    return y;
}
