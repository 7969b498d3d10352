/* qsweep's element codecs against NVIDIA's own conversion functions (cuda_fp4.h,
 * cuda_fp6.h, cuda_fp8.h of the CUDA toolkit), which are header-only and run on the CPU from
 * plain C with no CUDA runtime (docs/numerics.md 4.4). They are an independent oracle: element.c
 * shares no code with them.
 *
 * Built twice from this file:
 * - kernels_cuda_oracle (QK_EXHAUSTIVE 0): 2^22 pseudo-random FP32 bit patterns plus edges,
 *   for E2M1 (RN, RZ), E4M3, E5M2, E2M3, E3M2 (RN, satfinite), E8M0 (RZ, RP), decoders.
 * - kernels_exhaustive_cuda (QK_EXHAUSTIVE 1, label "exhaustive"): all 2^32 FP32 inputs for
 *   E2M1 RN and RZ, the E2M1 fast path, E4M3, and the fast non-negative E4M3 cast of the
 *   NVFP4 block scale against CUDA; and the fast minifloat values of E4M3, E5M2, E2M3, E3M2
 *   and FP16, and the E2M1 stochastic-rounding fast value, against qsweep's reference codec.
 *   OpenMP over the input space.
 * Without the headers (QK_HAVE_CUDA_HOST undefined) every test is skipped with a message. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "element.h"
#include "numerics.h"
#include "philox.h"

#ifdef QK_HAVE_CUDA_HOST
#include <cuda_fp4.h>
#include <cuda_fp6.h>
#include <cuda_fp8.h>

static float f32(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static uint32_t u32(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* half bits -> float through the compiler's binary16 type (independent of element.c), or the
 * IEEE binary16 definition written out where the compiler has no _Float16 */
static float half_to_float(__half_raw h) {
#ifdef __FLT16_MAX__
    _Float16 v;
    memcpy(&v, &h.x, sizeof v);
    return (float)v;
#else
    unsigned e = (h.x >> 10) & 0x1F, m = h.x & 0x3FF;
    float v = e == 31 ? (m ? NAN : INFINITY)
                      : (e ? ldexpf((float)(m | 0x400), (int)e - 25) : ldexpf((float)m, -24));
    return (h.x & 0x8000) ? -v : v;
#endif
}

/* Mismatches of every checked conversion for one input x; prints the first few. */
static size_t check_one(uint32_t u, int full) {
    float x = f32(u);
    size_t bad = 0;
    unsigned rn = __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest);
    unsigned rz = __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundZero);
    bad += qk_codec_encode(&qk_codec_e2m1, x, QK_ROUND_RNE, 0) != rn;
    bad += qk_codec_encode(&qk_codec_e2m1, x, QK_ROUND_RZ, 0) != rz;
    bad += u32(qk_e2m1_rne_value(x)) != u32(half_to_float(__nv_cvt_fp4_to_halfraw(rn, __NV_E2M1)));
    unsigned e4 = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
    bad += qk_codec_encode(&qk_codec_e4m3, x, QK_ROUND_RNE, 0) != e4;
    if (!(u >> 31) && !isnan(x)) bad += qk_e4m3_rne_nonneg(x) != e4;
    if (full) {
        bad += qk_codec_encode(&qk_codec_e5m2, x, QK_ROUND_RNE, 0) !=
               __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2);
        bad += qk_codec_encode(&qk_codec_e2m3, x, QK_ROUND_RNE, 0) !=
               __nv_cvt_float_to_fp6(x, __NV_E2M3, cudaRoundNearest);
        bad += qk_codec_encode(&qk_codec_e3m2, x, QK_ROUND_RNE, 0) !=
               __nv_cvt_float_to_fp6(x, __NV_E3M2, cudaRoundNearest);
        bad += qk_e8m0_encode(x, QK_E8M0_RZ) !=
               __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundZero);
        bad += qk_e8m0_encode(x, QK_E8M0_RP) !=
               __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundPosInf);
    }
    return bad;
}
#endif

#if !QK_EXHAUSTIVE
/* Decoders: every code of E2M1, E4M3, E5M2, E2M3, E3M2 decodes to what CUDA decodes. */
static void decoders_match_cuda(void **state) {
    (void)state;
#ifndef QK_HAVE_CUDA_HOST
    skip();
#else
    for (unsigned c = 0; c < 16; c++)
        assert_true(u32(qk_codec_decode(&qk_codec_e2m1, c)) ==
                    u32(half_to_float(__nv_cvt_fp4_to_halfraw(c, __NV_E2M1))));
    for (unsigned c = 0; c < 64; c++) {
        assert_true(u32(qk_codec_decode(&qk_codec_e2m3, c)) ==
                    u32(half_to_float(__nv_cvt_fp6_to_halfraw(c, __NV_E2M3))));
        assert_true(u32(qk_codec_decode(&qk_codec_e3m2, c)) ==
                    u32(half_to_float(__nv_cvt_fp6_to_halfraw(c, __NV_E3M2))));
    }
    for (unsigned c = 0; c < 256; c++) {
        float a = qk_codec_decode(&qk_codec_e4m3, c);
        float b = half_to_float(__nv_cvt_fp8_to_halfraw(c, __NV_E4M3));
        assert_true(u32(a) == u32(b) || (isnan(a) && isnan(b)));
        a = qk_codec_decode(&qk_codec_e5m2, c);
        b = half_to_float(__nv_cvt_fp8_to_halfraw(c, __NV_E5M2));
        assert_true(u32(a) == u32(b) || (isnan(a) && isnan(b)));
    }
#endif
}

/* Encoders on 2^22 pseudo-random bit patterns (every exponent, both signs, NaN, Inf,
 * subnormals) plus the neighbourhood of every power of two. */
static void encoders_match_cuda_on_sampled_inputs(void **state) {
    (void)state;
#ifndef QK_HAVE_CUDA_HOST
    skip();
#else
    size_t bad = 0, n = 0;
    for (uint32_t i = 0; i < (1u << 22); i++, n++)
        bad += check_one(qk_sr_bits(31337, 0, 0, i), 1);
    for (uint32_t e = 0; e < 256; e++)
        for (int d = -4; d <= 4; d++)
            for (uint32_t s = 0; s < 2; s++, n++)
                bad += check_one((s << 31) | (uint32_t)((int64_t)(e << 23) + d), 1);
    fprintf(stderr, "%zu inputs, %zu mismatches\n", n, bad);
    assert_int_equal(bad, 0);
#endif
}
#else
/* All 2^32 FP32 bit patterns: E2M1 RN, E2M1 RZ, the E2M1 fast path and E4M3 satfinite
 * against CUDA: all 2^32 FP32 inputs for E2M1 (RNE and RZ) and E4M3. */
static void all_2_32_inputs_match_cuda(void **state) {
    (void)state;
#ifndef QK_HAVE_CUDA_HOST
    skip();
#else
    size_t bad = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(+ : bad)
    for (uint32_t hi = 0; hi < 65536u; hi++)
        for (uint32_t lo = 0; lo < 65536u; lo++)
            bad += check_one((hi << 16) | lo, 0);
    fprintf(stderr, "2^32 inputs x 5 conversions, %zu mismatches\n", bad);
    assert_int_equal(bad, 0);
#endif
}

/* The fast minifloat value of the MX and per-tensor formats, and of E2M1 (the batched NVFP4
 * path uses it), against the reference codec on all 2^32 inputs (the reference itself is
 * checked against CUDA above and in kernels_cuda_oracle). Needs no CUDA header. */
static void minifloat_fast_values_match_reference_on_all_inputs(void **state) {
    (void)state;
    const qk_codec *codecs[] = {&qk_codec_e4m3, &qk_codec_e5m2, &qk_codec_e2m3,
                                &qk_codec_e3m2, &qk_codec_fp16, &qk_codec_e2m1};
    size_t bad = 0;
    for (size_t ci = 0; ci < sizeof codecs / sizeof codecs[0]; ci++) {
        const qk_codec *c = codecs[ci];
        const float nanv = qk_codec_decode(c, c->nan_code);
#pragma omp parallel for schedule(dynamic, 1) reduction(+ : bad)
        for (uint32_t hi = 0; hi < 65536u; hi++) {
            for (uint32_t lo = 0; lo < 65536u; lo++) {
                uint32_t u = (hi << 16) | lo, a, b;
                float x;
                memcpy(&x, &u, sizeof x);
                float ref = qk_codec_decode(c, qk_codec_encode(c, x, QK_ROUND_RNE, 0));
                float fast = qk_minifloat_rne_value(x, c->man_bits, 1 - c->bias, c->emax + 1,
                                                    c->max_value, nanv);
                memcpy(&a, &ref, sizeof a);
                memcpy(&b, &fast, sizeof b);
                bad += a != b && !(isnan(ref) && isnan(fast));
            }
        }
    }
    fprintf(stderr, "2^32 inputs x 6 minifloat codecs, %zu mismatches\n", bad);
    assert_int_equal(bad, 0);
}

/* The E2M1 stochastic-rounding fast value against the reference codec on all 2^32 inputs,
 * each with pseudo-random bits and with the boundary value 2^31. */
static void e2m1_sr_fast_value_matches_reference_on_all_inputs(void **state) {
    (void)state;
    size_t bad = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(+ : bad)
    for (uint32_t hi = 0; hi < 65536u; hi++) {
        for (uint32_t lo = 0; lo < 65536u; lo++) {
            uint32_t u = (hi << 16) | lo, a, b;
            float x;
            memcpy(&x, &u, sizeof x);
            const uint32_t rbs[2] = {u * 2654435761u ^ (u >> 13), 0x80000000u};
            for (int j = 0; j < 2; j++) {
                float ref = qk_codec_decode(
                    &qk_codec_e2m1, qk_codec_encode(&qk_codec_e2m1, x, QK_ROUND_SR, rbs[j]));
                float fast = qk_e2m1_sr_value(x, rbs[j]);
                memcpy(&a, &ref, sizeof a);
                memcpy(&b, &fast, sizeof b);
                bad += a != b;
            }
        }
    }
    fprintf(stderr, "2^32 inputs x 2 rbits, E2M1 SR fast value: %zu mismatches\n", bad);
    assert_int_equal(bad, 0);
}
#endif

int main(void) {
#ifndef QK_HAVE_CUDA_HOST
    fprintf(stderr, "cuda_fp4.h/cuda_fp8.h not found at configure time "
                    "(QSWEEP_CUDA_HOST_INCLUDE): skipping the CUDA oracle tests\n");
#endif
    const struct CMUnitTest tests[] = {
#if !QK_EXHAUSTIVE
        cmocka_unit_test(decoders_match_cuda),
        cmocka_unit_test(encoders_match_cuda_on_sampled_inputs),
#else
        cmocka_unit_test(all_2_32_inputs_match_cuda),
        cmocka_unit_test(minifloat_fast_values_match_reference_on_all_inputs),
        cmocka_unit_test(e2m1_sr_fast_value_matches_reference_on_all_inputs),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
