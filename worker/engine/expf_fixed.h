/* qsweep's FP32 e^x for the CPU engine (softmax, SiLU): one fixed sequence of FP32 operations,
 * the same bits on every x86-64 CPU and path (AVX-512F, AVX2+FMA, scalar). Cephes's expf
 * (S. L. Moshier, 1989) with fused multiply-adds, each step rounded to nearest even:
 *     t = fma(x, log2(e), 1.5 * 2^23)      n = t - 1.5 * 2^23
 *     r = fma(-n, 0.693359375, x)          r = fma(-n, -2.12194440e-4, r)
 *     p = 1.9875691500e-4, then p = fma(p, r, c) for c = 1.3981999507e-3, 8.3334519073e-3,
 *         4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1
 *     y = fma(p, r * r, r) + 1             e^x = y * 2^n
 * Below QW_EXPF_MIN +0, above QW_EXPF_MAX +inf, NaN NaN; elsewhere within 2 ulp of e^x
 * (tests/engine/test_expf_fixed.c over 2^22 floats). Path chosen as gemm_fixed.h's. */
#ifndef QW_EXPF_FIXED_H
#define QW_EXPF_FIXED_H

#include <stddef.h>

#include "gemm_fixed.h"

/* ln(2^-126) rounded up; a bound keeping n <= 127. */
#define QW_EXPF_MIN (-87.33654f)
#define QW_EXPF_MAX 88.37f

/* e^x by the sequence above, one element (the scalar path; fmaf). */
float qw_expf(float x);

/* y[i] = qw_expf(x[i] - shift) (y may be x) by the widest path, the same bits. */
void qw_expf_shift_n(float *y, const float *x, size_t n, float shift);

/* x[i] = qw_expf(x[i] - shift) in place; returns their sum: 16 running sums (element i into
 * i mod 16), then combined 8, 4, 2, 1 apart (one AVX-512 register's order). */
float qw_expf_shift_sum(float *x, size_t n, float shift);

/* out[i] = g[i] / (1 + qw_expf(-g[i])) * u[i] (SwiGLU; out may be g or u). */
void qw_silu_mul_n(float *out, const float *g, const float *u, size_t n);

/* The path in use (never AUTO) and, for tests, forcing one (AUTO: the CPU's best again).
 * Errors: QS_EINVAL when the CPU lacks isa. Not to be called while another thread is inside
 * these functions. */
qw_gemm_isa qw_expf_isa(void);
qs_status qw_expf_force_isa(qw_gemm_isa isa, qs_error *err);

#endif
