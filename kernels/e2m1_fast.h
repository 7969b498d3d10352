/* Branch-free FP32 -> E2M1 -> FP32 rounding (RNE, saturating), the inner step of the fast
 * NVFP4/MXFP4 fake-quant path. It evaluates the exact RNE decision table of fp4-spec.md 1.2
 * as a sum of comparisons so that the compiler can vectorise it; the scalar reference is
 * qk_codec_decode(&qk_codec_e2m1, qk_codec_encode(&qk_codec_e2m1, s, QK_ROUND_RNE, 0)), and
 * tests/kernels checks the two agree bit for bit on all 2^32 inputs (label "exhaustive") and
 * on the edge values in every CI run. */
#ifndef QK_E2M1_FAST_H
#define QK_E2M1_FAST_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* The E2M1 value nearest to s (ties to even), saturated to +-6; NaN gives +6, the sign of
 * zero and of underflowing values is kept. */
static inline float qk_e2m1_rne_value(float s) {
    float a = fabsf(s);
    /* grid 0, .5, 1, 1.5, 2, 3, 4, 6: each threshold passed adds the step to the next value */
    float v = 0.5f * (float)(a > 0.25f) + 0.5f * (float)(a >= 0.75f) + 0.5f * (float)(a > 1.25f) +
              0.5f * (float)(a >= 1.75f) + 1.0f * (float)(a > 2.5f) + 1.0f * (float)(a >= 3.5f) +
              2.0f * (float)(a > 5.0f);
    return (s != s) ? 6.0f : copysignf(v, s);
}

/* E4M3 code (RNE, saturating to 448) of v with the sign bit clear and not NaN: the NVFP4
 * block-scale cast of the fast path. Below 2^-6 (E4M3 subnormals, step 2^-9) it rounds
 * v * 2^9 to an integer with the 2^23 magic constant; above, it rounds the FP32 mantissa to
 * 3 bits on the bit pattern and rebiases the exponent (127 -> 7). Equals
 * qk_codec_encode(&qk_codec_e4m3, v, QK_ROUND_RNE, 0) for all such v (tests/kernels: every
 * one of them under the "exhaustive" label, edges and samples in every run). */
static inline uint32_t qk_e4m3_rne_nonneg(float v) {
    if (v > 448.0f) return 0x7E; /* (448, 464] rounds to 448, beyond saturates; +Inf too */
    if (v < 0x1p-6f) {
        float q = (v * 512.0f + 0x1p23f) - 0x1p23f; /* exact scaling, then RNE to integer */
        return (uint32_t)q;                          /* 0..8; 8 is code 0x08 = 2^-6 */
    }
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    u += 0x7FFFFu + ((u >> 20) & 1u); /* RNE into bit 20 */
    uint32_t code = (u >> 20) - (120u << 3);
    return code > 0x7E ? 0x7E : code;
}

#endif
