/* qsweep's fixed-order FP32 GEMM, C = alpha (beta C + op(A) op(B)) row-major, the same bits on
 * every x86-64 CPU, ISA path (AVX-512F, AVX2+FMA, scalar), blocking and thread count. Each
 * element is ONE FP32 fused multiply-add chain, rounded to nearest even (no FTZ/DAZ):
 *     c = (beta == 0 ? 0 : beta * C[i][j])
 *     for k = 0 .. K-1:  c = fmaf(op(A)[i][k], op(B)[k][j], c)
 *     C[i][j] = (alpha == 1 ? c : alpha * c)
 * Vector paths run across output columns, never across k. Layout after BLIS (Van Zee and van de
 * Geijn, ACM TOMS 41(3), 2015): op(B) packed in 16-column panels, register tiles of MR rows x
 * panels (qw_gemm_tile), chosen per ISA and 512-bit FMA port count (qw_gemm_fixed_tile_for).
 * The ISA is chosen once from __builtin_cpu_supports, the port count measured once
 * (fma_ports.h); neither changes a bit. */
#ifndef QW_GEMM_FIXED_H
#define QW_GEMM_FIXED_H

#include "error.h"

/* The largest K block and the N block of the packed op(B): at most 128 KiB of stack per call;
 * speed only, never bits. */
#define QW_GEMM_FIXED_KC 256
#define QW_GEMM_FIXED_NC 128

/* The code paths of qw_gemm_fixed; all give the same bits. */
typedef enum qw_gemm_isa {
    QW_GEMM_ISA_AUTO = 0, /* the best the CPU has (qw_gemm_fixed_force_isa: back to it) */
    QW_GEMM_ISA_SCALAR,   /* fmaf per element, no blocking: the portable reference */
    QW_GEMM_ISA_AVX2,     /* AVX2 + FMA, 6 x 16 microkernel */
    QW_GEMM_ISA_AVX512,   /* AVX-512F, 6 x 64 microkernel */
} qw_gemm_isa;

/* C[M x N] (C[i*ldc + j]) in the order above; cblas_sgemm(CblasRowMajor, ...)'s arguments with
 * 0/1 for NoTrans/Trans (transb 1: B stored N x K, "TN"). Single-threaded; callers split C.
 * M, N or K may be 0 (K 0: C = alpha * beta * C). */
void qw_gemm_fixed(int transa, int transb, int M, int N, int K, float alpha, const float *A,
                   int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* Floats of op(B) [K x N] packed whole by qw_gemm_fixed_pack_b: ceil(N/16) panels of K x 16
 * (0 when N or K is 0). */
size_t qw_gemm_fixed_packed_floats(int N, int K);

/* dst [qw_gemm_fixed_packed_floats(N, K)] = op(B) [K x N] (transb as qw_gemm_fixed) in 16-column
 * panels, panel p at dst + p*K*16 holding op(B)[k][16p + l] at k*16 + l, columns past N zero: a
 * data move, made once for an operand that many GEMMs multiply (a weight piece across chunks),
 * so that qw_gemm_fixed_packed skips the packing qw_gemm_fixed does per call. */
void qw_gemm_fixed_pack_b(int transb, int N, int K, const float *B, int ldb, float *dst);

/* qw_gemm_fixed(transa, ., M, N, K, alpha, A, lda, op(B), ., beta, C, ldc) with op(B) given
 * packed by qw_gemm_fixed_pack_b: the same bits on every path and tile. Single-threaded. */
void qw_gemm_fixed_packed(int transa, int M, int N, int K, float alpha, const float *A, int lda,
                          const float *Bp, float beta, float *C, int ldc);

/* qw_gemm_fixed_packed over rows k0 .. k0+K-1 of an op(B) packed whole with bkw >= k0+K rows
 * (qw_gemm_fixed_pack_b(., N', bkw, ...), N <= N'), Bp pointing at row k0 of its first panel
 * (packing + k0*16): a K range of an operand packed once, as attention's query tiles multiply
 * the keys up to their last. The same bits as qw_gemm_fixed on that range. Single-threaded. */
void qw_gemm_fixed_packed_rows(int transa, int M, int N, int K, float alpha, const float *A,
                               int lda, const float *Bp, int bkw, float beta, float *C, int ldc);

/* The path qw_gemm_fixed takes now (never AUTO). */
qw_gemm_isa qw_gemm_fixed_isa(void);

/* Whether this CPU and build (vector paths x86-64 only) run isa; AUTO and SCALAR always. */
int qw_gemm_fixed_isa_supported(qw_gemm_isa isa);

/* Forces isa (AUTO: the CPU's best) for tests and benchmarks; not while another thread is in
 * qw_gemm_fixed. Errors: QS_EINVAL when the CPU lacks isa. */
qs_status qw_gemm_fixed_force_isa(qw_gemm_isa isa, qs_error *err);

/* "scalar", "avx2", "avx512" ("auto" for AUTO). */
const char *qw_gemm_isa_name(qw_gemm_isa isa);

/* A vector path's blocking: speed only, never bits (each element stays one chain over k in
 * order; a K block ends by storing the chain to C and the next reloads it, exactly). */
typedef struct qw_gemm_tile {
    int mr;     /* rows of C per microkernel */
    int panels; /* 16-column panels per microkernel (AVX-512: one zmm each; AVX2: 1, two ymm) */
    int kc;     /* K block, <= QW_GEMM_FIXED_KC */
} qw_gemm_tile;

/* The tile for isa (AVX2 or AVX512) on a core issuing fma_ports (1 or 2) 512-bit FMAs a cycle:
 * a pure function of its arguments; {0, 0, 0} for SCALAR or AUTO. */
qw_gemm_tile qw_gemm_fixed_tile_for(qw_gemm_isa isa, int fma_ports);

/* The 512-bit FMA ports the tile choice assumes now: measured (fma_ports.h) unless forced. */
int qw_gemm_fixed_fma_ports(void);

/* The tile qw_gemm_fixed uses now: the forced one while the path has it, else qw_gemm_fixed_tile_for(the path, the
 * ports). */
qw_gemm_tile qw_gemm_fixed_tile(void);

/* Forces the tile (tests, benchmarks; NULL: back to the choice above); not while another thread
 * is in qw_gemm_fixed. Errors: QS_EINVAL naming the tile when no microkernel of the path has
 * it (qw_gemm_fixed_tile_supported). */
qs_status qw_gemm_fixed_force_tile(const qw_gemm_tile *tile, qs_error *err);

/* Whether the path isa has a microkernel for tile (mr x panels, kc in 1 .. QW_GEMM_FIXED_KC). */
int qw_gemm_fixed_tile_supported(qw_gemm_isa isa, const qw_gemm_tile *tile);

#endif
