/* The CPU engine's GEMM: one entry, qw_cpu_sgemm, that every CPU GEMM of the engine calls
 * (evaluation linears and lm_head, attention, training), and the choice of what runs behind it,
 * made once per process:
 * - OpenBLAS cblas_sgemm (the default): its kernel family, and so its summation order and the
 *   last bits of every result, is OpenBLAS's choice for the CPU (OPENBLAS_CORETYPE overrides
 *   it), so results record "cpu-openblas-<version>-<core>" (ops.h qw_backend_cpu_path);
 * - qsweep's fixed-order GEMM (gemm_fixed.h): the same bits on every x86-64 CPU, whatever its
 *   ISA or OPENBLAS_CORETYPE, recorded as "cpu-qsweep-fixed1".
 * The environment variable QSWEEP_CPU_GEMM picks it: unset, "" or "openblas" for OpenBLAS,
 * "fixed" for the fixed-order GEMM; any other value keeps OpenBLAS and makes
 * qw_cpu_gemm_check (called by qw_backend_cpu_init) refuse, so a typo never runs silently on
 * the other numerics. */
#ifndef QW_GEMM_CPU_H
#define QW_GEMM_CPU_H

#include "error.h"

/* The GEMM behind qw_cpu_sgemm. */
typedef enum qw_cpu_gemm {
    QW_CPU_GEMM_OPENBLAS = 0, /* cblas_sgemm, single-threaded per call */
    QW_CPU_GEMM_FIXED = 1,    /* qw_gemm_fixed */
} qw_cpu_gemm;

/* C[M x N] = alpha op(A) op(B) + beta C, row-major, the arguments of
 * cblas_sgemm(CblasRowMajor, ...) with 0/1 for CblasNoTrans/CblasTrans: cblas_sgemm, or
 * qw_gemm_fixed (whose result is alpha * (beta C + op(A) op(B)) in its fixed order; the engine
 * calls it with alpha 1 or beta 0, where the two read the same). Single-threaded either way
 * (the model switches OpenBLAS's own threads off). */
void qw_cpu_sgemm(int transa, int transb, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc);

/* The GEMM in use: QSWEEP_CPU_GEMM as read at the first call, unless qw_cpu_gemm_force. */
qw_cpu_gemm qw_cpu_gemm_kind(void);

/* QS_OK when QSWEEP_CPU_GEMM is unset or names a GEMM; QS_EINVAL naming the value otherwise. */
qs_status qw_cpu_gemm_check(qs_error *err);

/* Overrides the choice for the rest of the process (tests and benchmarks that compare the two
 * in one run). Not to be called while a GEMM runs. */
void qw_cpu_gemm_force(qw_cpu_gemm kind);

/* "openblas" or "fixed". */
const char *qw_cpu_gemm_name(qw_cpu_gemm kind);

#endif
