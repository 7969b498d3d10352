/* The CPU engine's numerics path: qw_cpu_sgemm (every CPU GEMM of the engine but the tiled
 * training attention's, which runs only on the fixed path and calls its packed entry) and the
 * softmax and SiLU exponentials, behind one per-process choice, QSWEEP_CPU_GEMM: unset/""/"fixed"
 * the fixed-order GEMM and exponential (gemm_fixed.h, expf_fixed.h: the same bits on every x86-64
 * CPU, "cpu-qsweep-fixed2"), "openblas" cblas_sgemm and libc's expf (the numerics of results
 * before the fixed path; last bits depend on OpenBLAS's kernel family). Any other value is
 * refused by qw_cpu_gemm_check, so a typo never runs the other numerics. */
#ifndef QW_GEMM_CPU_H
#define QW_GEMM_CPU_H

#include <stddef.h>

#include "error.h"

/* The GEMM behind qw_cpu_sgemm. */
typedef enum qw_cpu_gemm {
    QW_CPU_GEMM_FIXED = 0,    /* qw_gemm_fixed (the default) */
    QW_CPU_GEMM_OPENBLAS = 1, /* cblas_sgemm, single-threaded per call */
} qw_cpu_gemm;

/* C[M x N] = alpha op(A) op(B) + beta C, row-major, cblas_sgemm's arguments with 0/1 for
 * NoTrans/Trans; single-threaded. The fixed GEMM computes alpha (beta C + op(A) op(B)): the same
 * for the engine's alpha 1 or beta 0. */
void qw_cpu_sgemm(int transa, int transb, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc);

/* The GEMM in use: QSWEEP_CPU_GEMM as read at the first call, unless qw_cpu_gemm_force. */
qw_cpu_gemm qw_cpu_gemm_kind(void);

/* QS_OK when QSWEEP_CPU_GEMM is unset or names a GEMM; QS_EINVAL naming the value otherwise. */
qs_status qw_cpu_gemm_check(qs_error *err);

/* Overrides the choice for the process (tests, benchmarks); not while a GEMM runs. */
void qw_cpu_gemm_force(qw_cpu_gemm kind);

/* "fixed" or "openblas". */
const char *qw_cpu_gemm_name(qw_cpu_gemm kind);

/* x[i] = e^(x[i] - shift) in place, returning the sum (qw_expf_shift_sum's 16-lane order, or
 * libc expf summed in index order). */
float qw_cpu_exp_shift_sum(float *x, size_t n, float shift);

/* y[i] = e^(x[i] - shift) for i < n (y may be x): qw_expf_shift_n, or the C library's expf. */
void qw_cpu_exp_shift_n(float *y, const float *x, size_t n, float shift);

/* out[i] = g[i] / (1 + e^-g[i]) * u[i] (out may be g or u): qw_silu_mul_n, or libc's expf. */
void qw_cpu_silu_mul(float *out, const float *g, const float *u, size_t n);

/* The maximum of x[0..n-1] (n >= 1) exactly as the scan m = x[0]; m = x[j] > m ? x[j] : m
 * finds it: a NaN counts only as x[0], and a zero maximum has the sign of the first zero. 16
 * lanes at a time on AVX-512F CPUs, the same value. Serial. */
float qw_cpu_row_max(const float *x, size_t n);

/* Causal softmax in place of S [rows x ncols], row r = query position t0 + r keeping columns
 * 0..t0+r (zeros after): e^(s - max) by qw_cpu_exp_shift_sum, times 1 / their sum; each row's
 * max and 1/sum into stats [rows x 2] unless NULL. Serial. The one softmax of evaluation's tiles
 * and training's (whole T x T rows, t0 0, and the tiled forward's query tiles). */
void qw_cpu_causal_softmax(float *S, int rows, int ncols, int t0, float *stats);

#endif
