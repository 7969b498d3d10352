/* The scale rules of scale_rules.h / quant_plan.h as __host__ __device__ functions over a
 * qk_format passed by value, operation for operation, for the GPU quantizers; plain C, so
 * tests/kernels/test_cuda_codec_core.c checks them on the host against the CPU's. */
#ifndef QK_CUDA_CODEC_CORE_H
#define QK_CUDA_CODEC_CORE_H

#include <float.h>
#include <math.h>
#include <stdint.h>

#include "element_core.h"
#include "format.h"
#include "numerics.h"

/* scale_rules.c qk_plan_tensor_scales under QK_TINY_TE; elem is f's codec, passed apart so
 * that device code never follows f->elem, a host pointer. */
QK_HD void qk_tensor_scales_hd(const qk_format *f, const qk_codec *elem, float amax_t, float *s_enc,
                               float *s_dec) {
    if (f->rule == QK_RULE_NVFP4) {
        qk_nvfp4_global_scales_core(amax_t, s_enc, s_dec);
        return;
    }
    float e = fminf(elem->max_value / amax_t, FLT_MAX);
    if (amax_t == 0.0f || e == 0.0f) e = 1.0f;
    *s_enc = e;
    *s_dec = 1.0f / e;
}

/* quant_plan.h block_scale. */
typedef struct qk_block_scale_hd {
    uint32_t code; /* stored E4M3 / E8M0 byte */
    float enc;     /* element encode multiplier (NVFP4 E_b, MX 2^-s, per-tensor S_enc) */
    float dec;     /* block decode multiplier (NVFP4 float(sb), MX 2^s, ABSMAX scale) */
    float f32;     /* ABSMAX: the FP32 decode scale elements are divided by */
    int divide;    /* 1: elements are x / f32 (ABSMAX) */
} qk_block_scale_hd;

/* scale_rules.h scale_for of a block of amax (NaN: an MX block holding Inf/NaN). */
QK_HD qk_block_scale_hd qk_scale_for_hd(const qk_format *f, const qk_codec *elem,
                                        qk_mx_scale_rule mx_rule, qk_nvfp4_clamp clamp, float s_enc,
                                        float s_dec, float amax) {
    qk_block_scale_hd bs = {0, 1.0f, 1.0f, 0.0f, 0};
    if (f->rule == QK_RULE_NVFP4) {
        float v = amax * (s_enc * (1.0f / 6.0f));
        if (clamp == QK_NVFP4_CLAMP_TORCHAO && v < 0x1p-6f) v = 0x1p-6f;
        if (clamp == QK_NVFP4_CLAMP_ZERO_TO_ONE && v == 0.0f) v = 1.0f;
        bs.code = qk_e4m3_rne_nonneg(v);
        float sb = qk_e4m3_value_nonneg(bs.code);
        bs.dec = sb;
        bs.enc = fminf(1.0f / (sb * s_dec), FLT_MAX);
    } else if (f->rule == QK_RULE_MX) {
        bs.code = qk_mx_scale_code_core(amax, mx_rule, elem->emax, elem->man_bits, elem->max_value);
        bs.dec = qk_e8m0_value_core(bs.code);
        bs.enc = bs.code == 0xFF ? bs.dec : qk_pow2f(127 - (int)bs.code);
    } else if (f->rule == QK_RULE_TENSOR) {
        bs.enc = s_enc;
    } else if (f->rule == QK_RULE_ABSMAX) {
        float s = fminf(amax / (float)elem->int_max, FLT_MAX);
        if (s == 0.0f) s = 1.0f;
        bs.f32 = s;
        bs.dec = s;
        bs.divide = 1;
    }
    return bs;
}

/* One element as qk_quant_group_ref fake-quantizes it (QK_TINY_TE). */
QK_HD float qk_fake_quant_element_hd(const qk_format *f, const qk_codec *elem,
                                     const qk_block_scale_hd *bs, float s_dec, float x,
                                     qk_rounding rounding, uint32_t rbits) {
    float s = bs->divide ? x / bs->f32 : x * bs->enc;
    uint32_t code = qk_codec_encode_hd(elem, s, rounding, rbits);
    float y = qk_codec_decode_hd(elem, code) * bs->dec;
    if (f->tensor_scale) y = y * s_dec;
    return y;
}

#endif
