/* Branch-free FP32 -> E2M1 -> FP32 rounding (RNE, saturating), the inner step of the fast
 * NVFP4/MXFP4 fake-quant path. It evaluates the exact RNE decision table of fp4-spec.md 1.2
 * as a sum of comparisons so that the compiler can vectorise it; the scalar reference is
 * qk_codec_decode(&qk_codec_e2m1, qk_codec_encode(&qk_codec_e2m1, s, QK_ROUND_RNE, 0)), and
 * tests/kernels checks the two agree bit for bit on all 2^32 inputs (label "exhaustive") and
 * on the edge values in every CI run. */
#ifndef QK_E2M1_FAST_H
#define QK_E2M1_FAST_H

#include <math.h>

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

#endif
