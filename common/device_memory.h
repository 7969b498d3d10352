/* Memory a Llama model takes on one CUDA device (one tensor-parallel rank) and on the host
 * that feeds it, as a pure function of its shape: what fits where, before anything is
 * allocated. The one estimate of the project: the scheduler sizes a job's GPU memory with it
 * (kinds/resources.h) and the engine's tests check it against what the engine allocates.
 *
 * Shapes (D hidden, F intermediate, L layers, H heads, G kv heads, E = head_dim, V vocab,
 * N tensor-parallel ranks, T = ctx tokens, B sequences at once, b = the masters' device bytes
 * per element, worker/engine/master_gemm.h: 2 for BF16 and F16, 4 for FP32-valued masters):
 *
 *   linears  = L (D H E / N + 2 D E G_r + H E D / N + 3 D F / N) b
 *              G_r = G / N kv heads per rank when N divides G, else 1 (replicated, shard.h)
 *   packed   = the rank's share of the packed block linears (their bytes times the rank's
 *              share of the block elements, rounded up) + the packed lm_head or embeddings
 *              (whole on every rank); the masters stay resident as well (a baseline's and the
 *              SQNR reference's linears read them)
 *   embed    = V D 4   (FP32 device copy the embedding gather reads; replicated)
 *   lm_head  = ceil(V / N) D b, 0 when tied at N = 1 (the GEMM reads the embedding's copy)
 *   norms    = (2 L + 1) D 4 + T E 4 (RoPE tables)
 *   run      = B (T (3 D + (2 H/N + 2 G_r) E + 2 F/N + max(D, H E, F) + V + 64) 4 + att)
 *              the run state's buffers (worker/engine/runstate.h, with its one thread's
 *              QS_MEM_ATT_TILE x T tile of scores); att = 0 when the blocked
 *              (FlashAttention-2 style) kernel takes the heads (E <= QS_MEM_FLASH_MAX_HEAD_DIM:
 *              it writes no T x T), else H/N T T 4 for the scores of the cuBLAS fallback
 *   scratch  = B T max(D, H E, F) (2 + 4 + 1)  the linear's BF16/FP16, rounded-FP32 and FP4
 *              activation operands (ops_cuda_lt.cu)
 *              + 64 MiB weight staging + 2 V D when b = 4 (an FP32-valued master's 16-bit
 *              copy made while its FP32 one exists, for the largest weight)
 *   reserve  = 1 GiB: CUDA context, cuBLAS and cuBLASLt handles and their 32 MiB workspaces
 *   total    = the sum; fits a device of M bytes when total <= M.
 *
 *   host     = under tensor parallelism (N > 1), what the process holds besides the mmapped
 *              checkpoint: every rank's row-parallel slices (o and down), copied in the
 *              checkpoint's own dtype (worker/engine/shard.h), L (H E D + F D) b in all: exact
 *              for BF16, F16 (2) and F32 (4) masters, an upper bound for a GGUF block type
 *              (its blocks, or FP32 where a slice edge cuts one); 0 at N = 1 (the device copies
 *              are made from the mapped file).
 *
 * An upper-bound estimate, not an allocator's trace: the cuBLASLt 128x4 scale-tile padding and
 * allocator rounding are below a percent of these sizes for Llama shapes. Pure: no CUDA, tested
 * on the CPU. */
#ifndef QS_DEVICE_MEMORY_H
#define QS_DEVICE_MEMORY_H

#include <stdbool.h>
#include <stdint.h>

#include "error.h"

/* Head dims the blocked attention kernel takes (worker/engine/ops_cuda_attention.cu asserts
 * its tile width equals this). */
#define QS_MEM_FLASH_MAX_HEAD_DIM 128

/* Query rows of the run state's attention tile (worker/engine/ops.h QW_ATT_TILE; the estimate's
 * test checks the two agree). */
#define QS_MEM_ATT_TILE 64

/* Reserve of the CUDA context and libraries, bytes. */
#define QS_MEM_RESERVE (1ll << 30)

/* A Llama model's shape (worker/checkpoint qw_config's fields that size its tensors). */
typedef struct qs_model_shape {
    int dim;        /* hidden_size D */
    int hidden_dim; /* intermediate_size F */
    int n_layers, n_heads, n_kv_heads, head_dim, vocab_size;
    bool tied_embeddings; /* lm_head is the embedding matrix (held once) */
} qs_model_shape;

typedef struct qs_mem_plan {
    int master_bytes;           /* b: device bytes per master element (2 or 4; 0 counts 2) */
    int64_t packed_block_bytes; /* packed forms of the quantized block linears, all L blocks,
                                   whole model (split across the ranks) */
    int64_t packed_other_bytes; /* packed lm_head / embeddings (whole on every rank) */
    int ctx, batch;             /* T tokens per sequence, B sequences at once */
    int tp;                     /* N tensor-parallel ranks (1: one device) */
} qs_mem_plan;

/* Bytes on each rank, by part (the formula above), and on the host. */
typedef struct qs_mem_estimate {
    int64_t linears, packed, embed, lm_head, norms, run, scratch, reserve, total;
    int64_t host;
} qs_mem_estimate;

/* The estimate of shape s under plan p into *out. Errors: QS_EINVAL naming the field (a
 * dimension < 1, ctx or batch < 1, heads not dividing the hidden size without a head_dim, tp
 * that does not split the heads the way shard.h splits them, negative packed bytes). */
qs_status qs_mem_estimate_of(const qs_model_shape *s, const qs_mem_plan *p, qs_mem_estimate *out,
                             qs_error *err);

/* Whether e fits a device of device_bytes. */
bool qs_mem_fits(const qs_mem_estimate *e, int64_t device_bytes);

#endif
