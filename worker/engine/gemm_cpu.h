/* The CPU engine's numerics path: one entry, qw_cpu_sgemm, that every CPU GEMM of the engine
 * calls (evaluation linears and lm_head, attention, training), the exponentials of its softmax
 * and SiLU (qw_cpu_exp_shift_sum, qw_cpu_exp_shift_n, qw_cpu_silu_mul), and the choice of what
 * runs behind them, made once per process:
 * - the fixed path (the default): qsweep's fixed-order GEMM (gemm_fixed.h) and FP32
 *   exponential (expf_fixed.h), the same bits on every x86-64 CPU, whatever its ISA or
 *   OPENBLAS_CORETYPE, recorded as "cpu-qsweep-fixed2";
 * - OpenBLAS cblas_sgemm with the C library's expf: OpenBLAS's kernel family, and so its
 *   summation order and the last bits of every result, is its choice for the CPU
 *   (OPENBLAS_CORETYPE overrides it), so results record "cpu-openblas-<version>-<core>"
 *   (ops.h qw_backend_cpu_path). These are the numerics of qsweep's results before the fixed
 *   path, kept so that they can be reproduced.
 * The environment variable QSWEEP_CPU_GEMM picks it: unset, "" or "fixed" for the fixed-order
 * GEMM, "openblas" for OpenBLAS; any other value keeps the fixed-order GEMM and makes
 * qw_cpu_gemm_check (called by qw_backend_cpu_init) refuse, so a typo never runs silently on
 * the other numerics. */
#ifndef QW_GEMM_CPU_H
#define QW_GEMM_CPU_H

#include <stddef.h>

#include "error.h"

/* The GEMM behind qw_cpu_sgemm. */
typedef enum qw_cpu_gemm {
    QW_CPU_GEMM_FIXED = 0,    /* qw_gemm_fixed (the default) */
    QW_CPU_GEMM_OPENBLAS = 1, /* cblas_sgemm, single-threaded per call */
} qw_cpu_gemm;

/* C[M x N] = alpha op(A) op(B) + beta C, row-major, the arguments of
 * cblas_sgemm(CblasRowMajor, ...) with 0/1 for CblasNoTrans/CblasTrans: qw_gemm_fixed (whose
 * result is alpha * (beta C + op(A) op(B)) in its fixed order; the engine calls it with alpha 1
 * or beta 0, where the two read the same), or cblas_sgemm. Single-threaded either way (the
 * model switches OpenBLAS's own threads off). */
void qw_cpu_sgemm(int transa, int transb, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc);

/* The GEMM in use: QSWEEP_CPU_GEMM as read at the first call, unless qw_cpu_gemm_force. */
qw_cpu_gemm qw_cpu_gemm_kind(void);

/* QS_OK when QSWEEP_CPU_GEMM is unset or names a GEMM; QS_EINVAL naming the value otherwise. */
qs_status qw_cpu_gemm_check(qs_error *err);

/* Overrides the choice for the rest of the process (tests and benchmarks that compare the two
 * in one run). Not to be called while a GEMM runs. */
void qw_cpu_gemm_force(qw_cpu_gemm kind);

/* "fixed" or "openblas". */
const char *qw_cpu_gemm_name(qw_cpu_gemm kind);

/* x[i] = e^(x[i] - shift) in place for i < n, returning their sum: qw_expf_shift_sum (its
 * 16-lane order) on the fixed path; under openblas expf of the C library and one running sum
 * in index order. */
float qw_cpu_exp_shift_sum(float *x, size_t n, float shift);

/* y[i] = e^(x[i] - shift) for i < n (y may be x): qw_expf_shift_n, or the C library's expf. */
void qw_cpu_exp_shift_n(float *y, const float *x, size_t n, float shift);

/* out[i] = g[i] / (1 + e^-g[i]) * u[i] for i < n (SwiGLU; out may be g or u): qw_silu_mul_n,
 * or the same formula with the C library's expf. */
void qw_cpu_silu_mul(float *out, const float *g, const float *u, size_t n);

#endif
