/* qsweep's fixed-order FP32 GEMM: C = alpha * (beta * C + op(A) op(B)), row-major, with the
 * summation order fixed by K alone, so the result is the same bits on every x86-64 CPU, for
 * every ISA path (AVX-512F, AVX2+FMA, scalar), cache blocking, piece width and thread count.
 *
 * The order: every output element is ONE FP32 fused multiply-add chain,
 *     c = (beta == 0 ? 0 : beta * C[i][j])      (one FP32 multiply; beta 1 is exact)
 *     for k = 0 .. K-1:  c = fmaf(op(A)[i][k], op(B)[k][j], c)
 *     C[i][j] = (alpha == 1 ? c : alpha * c)    (one FP32 multiply)
 * with every operation rounded to nearest even (no FTZ/DAZ). The vector paths vectorise ACROSS
 * output columns j (16 per AVX-512 register, 8 per AVX2 register), never across k, so each lane
 * runs exactly that chain; a K block that ends stores the running c to C and the next block
 * loads it back, which is exact. beta 0 never reads C (NaN there does not propagate), as BLAS.
 *
 * Layout (BLIS's, Van Zee and van de Geijn, "BLIS: A Framework for Rapidly Instantiating BLAS
 * Functionality", ACM TOMS 41(3), 2015): op(B) is packed block by block into panels of 16
 * columns, k-major inside a panel ([kc][16], zero-padded past N), in a stack buffer of
 * QW_GEMM_FIXED_KC x QW_GEMM_FIXED_NC floats; A is read in place, one broadcast per element. The
 * microkernel holds a 6 x 64 tile of C in 24 zmm registers (AVX-512) or 6 x 16 in 12 ymm
 * (AVX2), the register blocking of BLIS's Zen 4 and Haswell SGEMM kernels.
 *
 * ISA: chosen once per process at the first call from __builtin_cpu_supports (AVX-512F, else
 * AVX2 and FMA, else scalar fmaf); the vector functions carry target attributes, so the build
 * needs no -march flag. qw_gemm_fixed_force_isa overrides it (tests and benchmarks). */
#ifndef QW_GEMM_FIXED_H
#define QW_GEMM_FIXED_H

#include "error.h"

/* K block and N block of the packed op(B) (floats): 256 x 128 x 4 bytes = 128 KiB of stack per
 * call, the B block L2 keeps while every 6-row block of A passes over it. They change speed
 * only, never bits. */
#define QW_GEMM_FIXED_KC 256
#define QW_GEMM_FIXED_NC 128

/* The code paths of qw_gemm_fixed; all give the same bits. */
typedef enum qw_gemm_isa {
    QW_GEMM_ISA_AUTO = 0, /* the best the CPU has (qw_gemm_fixed_force_isa: back to it) */
    QW_GEMM_ISA_SCALAR,   /* fmaf per element, no blocking: the portable reference */
    QW_GEMM_ISA_AVX2,     /* AVX2 + FMA, 6 x 16 microkernel */
    QW_GEMM_ISA_AVX512,   /* AVX-512F, 6 x 64 microkernel */
} qw_gemm_isa;

/* C[M x N] = alpha * (beta * C + op(A) op(B)) in the fixed order above. op(A) [M x K] is
 * A[i*lda + k] (transa 0) or A[k*lda + i] (transa 1); op(B) [K x N] is B[k*ldb + j] (transb 0)
 * or B[j*ldb + k] (transb 1: B stored N x K, the engine's W^T, "TN"). C[i*ldc + j]. The
 * arguments of cblas_sgemm(CblasRowMajor, ...) with 0/1 for CblasNoTrans/CblasTrans.
 * Single-threaded; callers split C between threads (each element's bits do not depend on the
 * split). M, N or K of 0 is allowed (K 0: C = alpha * beta * C). */
void qw_gemm_fixed(int transa, int transb, int M, int N, int K, float alpha, const float *A,
                   int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* The path qw_gemm_fixed takes now (never AUTO). */
qw_gemm_isa qw_gemm_fixed_isa(void);

/* Whether this CPU (and this build: x86-64 only for the vector paths) can run isa; AUTO and
 * SCALAR always can. */
int qw_gemm_fixed_isa_supported(qw_gemm_isa isa);

/* Forces qw_gemm_fixed onto isa (AUTO: the CPU's best again), for tests and benchmarks that
 * compare the paths. Not to be called while another thread is inside qw_gemm_fixed.
 * Errors: QS_EINVAL when the CPU lacks isa. */
qs_status qw_gemm_fixed_force_isa(qw_gemm_isa isa, qs_error *err);

/* "scalar", "avx2", "avx512" ("auto" for AUTO). */
const char *qw_gemm_isa_name(qw_gemm_isa isa);

#endif
