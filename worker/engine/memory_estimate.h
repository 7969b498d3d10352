/* Device memory a Llama model takes on one CUDA device (one tensor-parallel rank) on the auto
 * GEMM path, as a pure function of its shape: what fits where, before anything is allocated.
 *
 * Shapes (D hidden, F intermediate, L layers, H heads, G kv heads, E = head_dim, V vocab,
 * N tensor-parallel ranks, T = ctx tokens, B sequences at once, b = the master's device bytes
 * per element, master_gemm.h: 2 for BF16 and F16, 4 for FP32-valued masters):
 *
 *   linears  = L (D H E / N + 2 D E G_r + H E D / N + 3 D F / N) b
 *              G_r = G / N kv heads per rank when N divides G, else 1 (replicated, shard.h)
 *   fp4      = the same elements at 4.5 bits (NVFP4: E2M1 + one E4M3 per 16) or 4.25 bits
 *              (MXFP4: one E8M0 per 32) when the block linears are quantized; the masters
 *              stay resident as well (a baseline's and the SQNR reference's linears read them)
 *   embed    = V D 4   (FP32 device copy the embedding gather reads; replicated)
 *   lm_head  = V / N D b, 0 when tied at N = 1 (the GEMM reads the embedding's FP32 copy)
 *   norms    = (2 L + 1) D 4 + T E 4 (RoPE tables)
 *   run      = B (T (3 D + (2 H/N + 2 G_r) E + 2 F/N + max(D, H E, F) + V) 4 + H/N T T 4)
 *              the run state's buffers (runstate.h) and the backend's attention scores
 *   scratch  = B T max(D, H E, F) (2 + 4 + 1)  the linear's BF16/FP16, rounded-FP32 and FP4
 *              activation operands (ops_cuda_lt.cu)
 *              + 64 MiB weight staging + b' V D  (an FP32-valued master's 16-bit copy made
 *              while its FP32 one exists, for the largest weight; 0 for 16-bit masters)
 *   reserve  = 1 GiB: CUDA context, cuBLAS and cuBLASLt handles and their 32 MiB workspaces
 *   total    = the sum; fits a device of M bytes when total <= M.
 *
 * An upper-bound estimate, not an allocator's trace: the cuBLASLt 128x4 scale-tile padding and
 * allocator rounding are below a percent of these sizes for Llama shapes. */
#ifndef QW_MEMORY_ESTIMATE_H
#define QW_MEMORY_ESTIMATE_H

#include <stdint.h>

#include "checkpoint.h"
#include "error.h"

typedef enum qw_mem_fp4 {
    QW_MEM_FP4_NONE = 0, /* unquantized block linears */
    QW_MEM_FP4_NVFP4 = 1,
    QW_MEM_FP4_MXFP4 = 2,
} qw_mem_fp4;

typedef struct qw_mem_plan {
    qw_dtype master; /* the checkpoint dtype of the linears and embeddings */
    qw_mem_fp4 fp4;  /* the block linears' packed form, if quantized */
    int ctx, batch;  /* tokens per sequence, sequences at once */
    int tp;          /* tensor-parallel ranks (1: one device) */
} qw_mem_plan;

/* Bytes on each rank, by part (the formula above). */
typedef struct qw_mem_estimate {
    uint64_t linears, fp4, embed, lm_head, norms, run, scratch, reserve, total;
} qw_mem_estimate;

/* Reserve of the CUDA context and libraries, bytes. */
#define QW_MEM_RESERVE (1ull << 30)

/* The estimate of config c under plan p into *out. Errors: QS_EINVAL naming the field (a
 * dimension < 1, ctx or batch < 1, heads not dividing the hidden size, tp that does not split
 * the heads the way shard.h splits them). */
qs_status qw_mem_estimate_of(const qw_config *c, const qw_mem_plan *p, qw_mem_estimate *out,
                             qs_error *err);

/* 1 when e fits a device of device_bytes. */
int qw_mem_fits(const qw_mem_estimate *e, uint64_t device_bytes);

#endif
