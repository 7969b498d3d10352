/* The fixed-sequence FP32 exponential (expf_fixed.h): one scalar definition and AVX2 and
 * AVX-512 paths that run the same operations lane by lane. */
#include "expf_fixed.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "numerics.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define LOG2E 1.44269504088896341f
#define MAGIC 12582912.0f /* 1.5 * 2^23: adding it rounds to an integer, kept in the low bits */
#define LN2_HI 0.693359375f
#define LN2_LO (-2.12194440e-4f)
#define P0 1.9875691500e-4f
#define P1 1.3981999507e-3f
#define P2 8.3334519073e-3f
#define P3 4.1665795894e-2f
#define P4 1.6666665459e-1f
#define P5 5.0000001201e-1f
#define MAGIC_BITS 0x4b400000u /* the bits of MAGIC */

/* ---------------------------------------------------------------- scalar definition */

float qw_expf(float x) {
    if (x < QW_EXPF_MIN) return 0.0f;
    if (x > QW_EXPF_MAX) return INFINITY;
    float t = fmaf(x, LOG2E, MAGIC), n = t - MAGIC;
    float r = fmaf(-n, LN2_HI, x);
    r = fmaf(-n, LN2_LO, r);
    float p = P0;
    p = fmaf(p, r, P1);
    p = fmaf(p, r, P2);
    p = fmaf(p, r, P3);
    p = fmaf(p, r, P4);
    p = fmaf(p, r, P5);
    float y = fmaf(p, r * r, r) + 1.0f;
    /* 2^n from t's low bits; n in [-126, 127] here (NaN: any bits) */
    return y * qk_float_of((qk_bits_of(t) - MAGIC_BITS + 127u) << 23);
}

/* ---------------------------------------------------------------- ISA choice */

static qw_gemm_isa best_isa = QW_GEMM_ISA_SCALAR;
static qw_gemm_isa forced_isa = QW_GEMM_ISA_AUTO;
static pthread_once_t detect_once = PTHREAD_ONCE_INIT;

static void detect(void) {
    /* the same CPU test as the fixed-order GEMM's (the AVX2 path needs FMA too) */
    best_isa = qw_gemm_fixed_isa_supported(QW_GEMM_ISA_AVX512) ? QW_GEMM_ISA_AVX512
               : qw_gemm_fixed_isa_supported(QW_GEMM_ISA_AVX2) ? QW_GEMM_ISA_AVX2
                                                                : QW_GEMM_ISA_SCALAR;
}

qw_gemm_isa qw_expf_isa(void) {
    pthread_once(&detect_once, detect);
    return forced_isa != QW_GEMM_ISA_AUTO ? forced_isa : best_isa;
}

qs_status qw_expf_force_isa(qw_gemm_isa isa, qs_error *err) {
    if (!qw_gemm_fixed_isa_supported(isa))
        return qs_error_set(err, QS_EINVAL, "expf_fixed: this CPU has no %s path",
                            qw_gemm_isa_name(isa));
    forced_isa = isa;
    return QS_OK;
}

/* ---------------------------------------------------------------- vector paths */

#if defined(__x86_64__)

/* e^x of 16 lanes, the scalar sequence lane by lane (a NaN lane fails both range tests, as in
 * qw_expf, and stays NaN). */
__attribute__((target("avx512f"), always_inline)) static inline __m512 exp512(__m512 x) {
    __mmask16 lo = _mm512_cmp_ps_mask(x, _mm512_set1_ps(QW_EXPF_MIN), _CMP_LT_OQ);
    __mmask16 hi = _mm512_cmp_ps_mask(x, _mm512_set1_ps(QW_EXPF_MAX), _CMP_GT_OQ);
    __m512 t = _mm512_fmadd_ps(x, _mm512_set1_ps(LOG2E), _mm512_set1_ps(MAGIC));
    __m512 n = _mm512_sub_ps(t, _mm512_set1_ps(MAGIC));
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), r);
    __m512 p = _mm512_set1_ps(P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(P5));
    __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    __m512i sb = _mm512_slli_epi32(
        _mm512_add_epi32(_mm512_sub_epi32(_mm512_castps_si512(t), _mm512_set1_epi32((int)MAGIC_BITS)),
                         _mm512_set1_epi32(127)),
        23);
    __m512 e = _mm512_mul_ps(y, _mm512_castsi512_ps(sb));
    e = _mm512_mask_mov_ps(e, lo, _mm512_setzero_ps());
    return _mm512_mask_mov_ps(e, hi, _mm512_set1_ps(INFINITY));
}

/* The same for 8 lanes. */
__attribute__((target("avx2,fma"), always_inline)) static inline __m256 exp256(__m256 x) {
    __m256 lo = _mm256_cmp_ps(x, _mm256_set1_ps(QW_EXPF_MIN), _CMP_LT_OQ);
    __m256 hi = _mm256_cmp_ps(x, _mm256_set1_ps(QW_EXPF_MAX), _CMP_GT_OQ);
    __m256 t = _mm256_fmadd_ps(x, _mm256_set1_ps(LOG2E), _mm256_set1_ps(MAGIC));
    __m256 n = _mm256_sub_ps(t, _mm256_set1_ps(MAGIC));
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
    __m256 p = _mm256_set1_ps(P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P5));
    __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
    __m256i sb = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32((int)MAGIC_BITS)),
                         _mm256_set1_epi32(127)),
        23);
    __m256 e = _mm256_mul_ps(y, _mm256_castsi256_ps(sb));
    e = _mm256_blendv_ps(e, _mm256_setzero_ps(), lo);
    return _mm256_blendv_ps(e, _mm256_set1_ps(INFINITY), hi);
}

__attribute__((target("avx512f"))) static void shift_n512(float *y, const float *x, size_t n,
                                                          float shift) {
    __m512 s = _mm512_set1_ps(shift);
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, exp512(_mm512_sub_ps(_mm512_loadu_ps(x + i), s)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(y + i, m, exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), s)));
    }
}

__attribute__((target("avx2,fma"))) static void shift_n256(float *y, const float *x, size_t n,
                                                           float shift) {
    __m256 s = _mm256_set1_ps(shift);
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), s)));
    for (; i < n; i++)
        y[i] = qw_expf(x[i] - shift);
}

/* One zmm of 16 running sums; the tail's missing lanes add +0 (exact: every sum is >= +0). */
__attribute__((target("avx512f"))) static float shift_sum512(float *x, size_t n, float shift) {
    __m512 s = _mm512_set1_ps(shift), acc = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(x + i), s));
        _mm512_storeu_ps(x + i, e);
        acc = _mm512_add_ps(acc, e);
    }
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), s));
        _mm512_mask_storeu_ps(x + i, m, e);
        acc = _mm512_mask_add_ps(acc, m, acc, e);
    }
    _Alignas(64) float l[16];
    _mm512_store_ps(l, acc);
    for (int w = 8; w >= 1; w /= 2)
        for (int j = 0; j < w; j++)
            l[j] = l[j] + l[j + w];
    return l[0];
}

/* Two ymm: lanes 0-7 and 8-15 of the 16 sums. */
__attribute__((target("avx2,fma"))) static float shift_sum256(float *x, size_t n, float shift) {
    __m256 s = _mm256_set1_ps(shift), a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 e0 = exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), s));
        __m256 e1 = exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), s));
        _mm256_storeu_ps(x + i, e0);
        _mm256_storeu_ps(x + i + 8, e1);
        a0 = _mm256_add_ps(a0, e0);
        a1 = _mm256_add_ps(a1, e1);
    }
    _Alignas(32) float l[16];
    _mm256_store_ps(l, a0);
    _mm256_store_ps(l + 8, a1);
    for (size_t j = 0; i + j < n; j++) {
        x[i + j] = qw_expf(x[i + j] - shift);
        l[j] = l[j] + x[i + j];
    }
    for (int w = 8; w >= 1; w /= 2)
        for (int j = 0; j < w; j++)
            l[j] = l[j] + l[j + w];
    return l[0];
}

__attribute__((target("avx512f"))) static void silu512(float *out, const float *g, const float *u,
                                                       size_t n) {
    __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 gv = _mm512_loadu_ps(g + i);
        __m512 d = _mm512_add_ps(one, exp512(_mm512_sub_ps(zero, gv)));
        _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_div_ps(gv, d), _mm512_loadu_ps(u + i)));
    }
    for (; i < n; i++)
        out[i] = g[i] / (1.0f + qw_expf(-g[i])) * u[i];
}

__attribute__((target("avx2,fma"))) static void silu256(float *out, const float *g, const float *u,
                                                        size_t n) {
    __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 gv = _mm256_loadu_ps(g + i);
        __m256 d = _mm256_add_ps(one, exp256(_mm256_sub_ps(zero, gv)));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_div_ps(gv, d), _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++)
        out[i] = g[i] / (1.0f + qw_expf(-g[i])) * u[i];
}

#endif

/* ---------------------------------------------------------------- entries */

void qw_expf_shift_n(float *y, const float *x, size_t n, float shift) {
#if defined(__x86_64__)
    qw_gemm_isa isa = qw_expf_isa();
    if (isa == QW_GEMM_ISA_AVX512) {
        shift_n512(y, x, n, shift);
        return;
    }
    if (isa == QW_GEMM_ISA_AVX2) {
        shift_n256(y, x, n, shift);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++)
        y[i] = qw_expf(x[i] - shift);
}

float qw_expf_shift_sum(float *x, size_t n, float shift) {
#if defined(__x86_64__)
    qw_gemm_isa isa = qw_expf_isa();
    if (isa == QW_GEMM_ISA_AVX512) return shift_sum512(x, n, shift);
    if (isa == QW_GEMM_ISA_AVX2) return shift_sum256(x, n, shift);
#endif
    float l[16] = {0};
    for (size_t i = 0; i < n; i++) {
        x[i] = qw_expf(x[i] - shift);
        l[i % 16] = l[i % 16] + x[i];
    }
    for (int w = 8; w >= 1; w /= 2)
        for (int j = 0; j < w; j++)
            l[j] = l[j] + l[j + w];
    return l[0];
}

void qw_silu_mul_n(float *out, const float *g, const float *u, size_t n) {
#if defined(__x86_64__)
    qw_gemm_isa isa = qw_expf_isa();
    if (isa == QW_GEMM_ISA_AVX512) {
        silu512(out, g, u, n);
        return;
    }
    if (isa == QW_GEMM_ISA_AVX2) {
        silu256(out, g, u, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++)
        out[i] = g[i] / (1.0f + qw_expf(-g[i])) * u[i];
}
