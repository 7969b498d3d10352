/* Block-scale rules of the block quantizer (docs/numerics.md 2.3 MX, 3.3 NVFP4, format.h
 * qk_scale_rule): the reference's scale_for, its inverse from packed storage, and the
 * branch-free NVFP4 cast the batched paths use. Inline: every path calls them once a block. */
#ifndef QK_SCALE_RULES_H
#define QK_SCALE_RULES_H

#include "quant_plan.h"

/* Scale of a block whose absolute maximum is amax (NaN-free except for MX, where a
 * non-finite amax stands for "the block holds Inf or NaN"). */
static inline block_scale scale_for(const qk_plan *p, float amax) {
    block_scale bs = {0, 0.0f, 1.0f, 1.0f, 0};
    switch (p->fmt->rule) {
    case QK_RULE_NVFP4: {
        float v = amax * p->s_enc_6;
        if (p->clamp == QK_NVFP4_CLAMP_TORCHAO && v < 0x1p-6f) v = 0x1p-6f;
        if (p->clamp == QK_NVFP4_CLAMP_ZERO_TO_ONE && v == 0.0f) v = 1.0f;
        bs.code = (uint8_t)qk_codec_encode(&qk_codec_e4m3, v, QK_ROUND_RNE, 0);
        float sb = qk_e4m3_value[bs.code];
        bs.dec = sb;
        bs.enc = fminf(1.0f / (sb * p->s_dec), FLT_MAX); /* step 5; 1/0 -> FLT_MAX */
        break;
    }
    case QK_RULE_MX:
        bs.code = qk_mx_scale_code(amax, p->mx_rule, p->elem);
        if (bs.code == 0xFF) {
            bs.enc = NAN;
            bs.dec = NAN;
        } else {
            bs.enc = qk_pow2f(127 - (int)bs.code);
            bs.dec = qk_pow2f((int)bs.code - 127);
        }
        break;
    case QK_RULE_TENSOR:
        bs.enc = p->s_enc;
        break;
    case QK_RULE_ABSMAX: {
        float s = fminf(amax / (float)p->elem->int_max, FLT_MAX);
        if (s == 0.0f) s = 1.0f; /* all-zero block: any scale decodes to 0; 1 is harmless */
        bs.f32 = s;
        bs.dec = s;
        bs.divide = 1;
        break;
    }
    case QK_RULE_IDENTITY:
    default:
        break;
    }
    return bs;
}

/* Block scale as dequantize rebuilds it from packed storage. */
static inline block_scale scale_from_packed(const qk_plan *p, const qk_packed *pk, size_t r,
                                            size_t b) {
    block_scale bs = {0, 0.0f, 1.0f, 1.0f, 0};
    size_t i = r * pk->blocks_per_row + b;
    switch (p->fmt->storage) {
    case QK_STORE_E4M3:
        bs.dec = qk_e4m3_value[pk->scales[i]];
        break;
    case QK_STORE_E8M0:
        bs.dec = pk->scales[i] == 0xFF ? NAN : qk_pow2f((int)pk->scales[i] - 127);
        break;
    case QK_STORE_F32:
        bs.dec = pk->scales_f32[i];
        break;
    case QK_STORE_NONE:
    default:
        break;
    }
    return bs;
}

/* The NVFP4 block-scale code sb = E4M3_RNE(amax_b * (S_enc * (1/6))) after the clamp, without
 * branches (vectorises across blocks): qk_e4m3_rne_nonneg with subnormal codes from the bits
 * of v * 512 + 2^23 (exact scaling, RNE to an integer, no float-to-int conversion) and normal
 * codes by rounding the mantissa to 3 bits on the pattern. Equals scale_for's code. */
__attribute__((always_inline)) static inline uint32_t nvfp4_scale_code_bf(float amax, float s_enc_6,
                                                                          qk_nvfp4_clamp clamp) {
    float sv = amax * s_enc_6;
    sv = (clamp == QK_NVFP4_CLAMP_TORCHAO && sv < 0x1p-6f) ? 0x1p-6f : sv;
    sv = (clamp == QK_NVFP4_CLAMP_ZERO_TO_ONE && sv == 0.0f) ? 1.0f : sv;
    uint32_t sub = qk_bits_of(sv * 512.0f + 0x1p23f) - qk_bits_of(0x1p23f);
    uint32_t u = qk_bits_of(sv);
    u += 0x7FFFFu + ((u >> 20) & 1u);
    uint32_t nrm = (u >> 20) - (120u << 3);
    nrm = nrm > 0x7Eu ? 0x7Eu : nrm;
    uint32_t code = sv < 0x1p-6f ? sub : nrm;
    return sv > 448.0f ? 0x7Eu : code;
}

/* The value of an E4M3 code with the sign bit clear (not 0x7F), without branches. */
__attribute__((always_inline)) static inline float e4m3_value_nonneg_bf(uint32_t code) {
    uint32_t ef = code >> 3, mn = code & 7u;
    float vs = (float)mn * 0x1p-9f;
    float vn = (float)(8u | mn) * qk_float_of((ef + 117u) << 23);
    return ef == 0 ? vs : vn;
}

#endif
