/* qsweep's FP32 exponential for the CPU engine (softmax, SiLU): e^x by one fixed sequence of FP32
 * operations, so its bits are the same on every x86-64 CPU, for each of its code paths
 * (AVX-512F, AVX2+FMA, scalar), where the C library's expf picks an implementation per CPU.
 *
 * The sequence (Cephes's expf, S. L. Moshier, "Methods and Programs for Mathematical Functions",
 * 1989, with its range reduction and polynomial evaluated by fused multiply-adds), every step
 * an FP32 operation rounded to nearest even:
 *     t = fma(x, log2(e), 1.5 * 2^23)      n = t - 1.5 * 2^23 (x log2(e) rounded to an integer)
 *     r = fma(-n, 0.693359375, x)          r = fma(-n, -2.12194440e-4, r)   (x - n ln 2)
 *     p = 1.9875691500e-4, then p = fma(p, r, c) for c = 1.3981999507e-3, 8.3334519073e-3,
 *         4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1
 *     y = fma(p, r * r, r) + 1             e^x = y * 2^n (2^n built from n's bits)
 * x below QW_EXPF_MIN gives +0 (the true value is below FLT_MIN, 2^-126); x above QW_EXPF_MAX
 * gives +inf (the true value is above 2.3e38, within a factor 1.5 of FLT_MAX); NaN gives NaN.
 * Elsewhere the error is at most 2 ulp against e^x in double precision
 * (tests/engine/test_expf_fixed.c measures it on 2^22 floats spread over the range).
 *
 * The path is chosen once per process from __builtin_cpu_supports, as gemm_fixed.h does;
 * qw_expf_force_isa overrides it for tests. */
#ifndef QW_EXPF_FIXED_H
#define QW_EXPF_FIXED_H

#include <stddef.h>

#include "gemm_fixed.h"

/* ln(2^-126) rounded up, and a bound below which n stays at most 127 (88.37 log2(e) =
 * 127.49). */
#define QW_EXPF_MIN (-87.33654f)
#define QW_EXPF_MAX 88.37f

/* e^x by the sequence above, one element (the scalar path; fmaf). */
float qw_expf(float x);

/* y[i] = qw_expf(x[i] - shift) for i < n (y may be x), by the CPU's widest path: the same bits
 * as qw_expf(x[i] - shift), the subtraction an FP32 one. */
void qw_expf_shift_n(float *y, const float *x, size_t n, float shift);

/* x[i] = qw_expf(x[i] - shift) in place for i < n, and their sum in a fixed order: 16 running
 * sums, element i added to sum i mod 16 in increasing i (from +0), then combined pairwise,
 * s[l] + s[l+8], then + 4, + 2, + 1 apart. The order is that of the AVX-512 path's one
 * register and the AVX2 path's two; the scalar path keeps the 16 sums in an array. */
float qw_expf_shift_sum(float *x, size_t n, float shift);

/* out[i] = g[i] / (1 + qw_expf(-g[i])) * u[i] for i < n (SwiGLU's silu(g) * u; out may be g
 * or u). */
void qw_silu_mul_n(float *out, const float *g, const float *u, size_t n);

/* The path in use (never AUTO) and, for tests, forcing one (AUTO: the CPU's best again).
 * Errors: QS_EINVAL when the CPU lacks isa. Not to be called while another thread is inside
 * these functions. */
qw_gemm_isa qw_expf_isa(void);
qs_status qw_expf_force_isa(qw_gemm_isa isa, qs_error *err);

#endif
