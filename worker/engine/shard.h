/* Tensor-parallel sharding of a Llama model over N ranks (Megatron-LM, arXiv 1909.08053,
 * section 3), on any backend of the ops table; on the CPU the N ranks run in
 * one process, which is how the sharded forward is tested against the unsharded one.
 *
 * The plan (qw_shard_plan):
 * - q_proj, k_proj, v_proj, gate_proj, up_proj: column-parallel, split by output features,
 *   i.e. by rows of the row-major [out x in] weight: a contiguous row range, a view of the
 *   master with no copy (a GGUF q/k weight, whose rows are permuted per head in the file, is
 *   converted to FP32 for its slice instead). Each rank holds H/N whole query heads; kv heads
 *   are split when N divides G, and replicated when G divides N (each rank keeps the one kv
 *   head its query heads read, as Megatron-LM does for GQA with fewer kv heads than ranks).
 * - o_proj, down_proj: row-parallel, split by input features, i.e. a column range of the
 *   weight, which is strided in the row-major layout: the rank keeps an FP32 copy of its
 *   [out x in/N] slice (exact: the masters' dtypes convert to FP32 exactly). Each rank's
 *   partial output is summed over the ranks by the ranks' group (worker/comm/comm.h,
 *   forward.c).
 * - lm_head: vocabulary-parallel (Megatron-LM's parallel output embedding): rank r its rows
 *   [v0, v0+nv), a view; its logits slice is gathered into the full row. Every logit is then
 *   one whole dot product on one rank, with no all-reduce, and lm_head's weight memory (the
 *   largest single tensor of small Llamas) is split N ways.
 * - embeddings and the norms: replicated (views of the same masters).
 * The hidden units and the vocabulary are split at multiples of a unit (the largest of 128,
 * 64, 32, 16 that still gives every rank some; the vocabulary at 16), so that shard boundaries
 * fall on block boundaries of the block formats.
 *
 * FP4 and other per-tensor-scaled formats (NVFP4, FP8 per tensor): a sharded tensor's scale
 * must be the unsharded one. Weights: each rank's amax of its slice is MAX-all-reduced and
 * every rank quantizes with it (qk_quant_options.tensor_amax_given), so every rank's packed
 * codes and block scales are, bit for bit, the rows or columns of the unsharded tensor's.
 * Activations of o_proj and down_proj (sharded along K): the same, at run time (forward.c).
 * Constraints, checked when a policy is synced (QS_EINVAL naming the linear and the format):
 * - along K (o_proj, down_proj), every rank's first column is a multiple of the format's block
 *   (16 NVFP4, 32 MX, the INT4 group) so no block straddles two ranks; a per-channel format
 *   (one scale per row over the whole K, int8_channel) cannot be split along K and is refused;
 * - along rows (column-parallel weights), a 2D format's 16-row blocks must not straddle ranks;
 * - stochastic rounding is refused on sharded tensors: its random stream is keyed by the
 *   element's index in the whole tensor. */
#ifndef QW_SHARD_H
#define QW_SHARD_H

#include <stdint.h>

#include "checkpoint.h"
#include "error.h"
#include "forward.h"
#include "profile.h"
#include "weights.h"

/* Most ranks of one tensor-parallel group. */
#define QW_TP_MAX 64

/* One rank's share: query heads [h0, h0+nh), kv heads [g0, g0+ng), hidden units [f0, f0+nf),
 * vocabulary rows [v0, v0+nv). */
typedef struct qw_shard {
    int h0, nh, g0, ng, f0, nf, v0, nv;
} qw_shard;

/* The plan of c over n ranks into out[n]. Errors: QS_EINVAL (n outside 1..QW_TP_MAX; n not
 * dividing n_heads; neither n dividing n_kv_heads nor n_kv_heads dividing n; hidden_dim or
 * vocab too small to give every rank a unit), naming the values. */
qs_status qw_shard_plan(const qw_config *c, int n, qw_shard *out, qs_error *err);

/* Where rank share s cuts linear `kind` (QW_LINEAR_KINDS = lm_head) of config c: *axis 0 =
 * rows (output features) [*start, *start + *len), 1 = columns (input features). */
void qw_shard_range(const qw_shard *s, const qw_config *c, int kind, int *axis, int64_t *start,
                    int64_t *len);

/* N ranks of a model over its masters (borrowed, must outlive the group). */
typedef struct qw_tp qw_tp;

/* Sets up rank `rank`'s backend b (a zeroed struct) for linears of up to max_in inputs and sets
 * *device to the CUDA ordinal it runs on (-1: a CPU backend): how a GPU build puts rank r on
 * its device. The group's all-reduce follows from the devices (qw_tp_create). */
typedef qs_status (*qw_rank_backend_fn)(qw_backend *b, int rank, int threads, int max_in, void *ctx,
                                        int *device, qs_error *err);

/* Builds the n ranks of the model over weights wt for sequences of up to max_ctx tokens, each
 * with the run state of its shard shape on the backend init(ctx) sets up; init NULL: a CPU
 * backend of `threads` threads per rank (qw_backend_cpu_init), all in this process; release
 * frees a backend init made (NULL: qw_backend_release, the CPU's). The ranks
 * all-reduce through one group of the ranks interface (worker/comm/comm.h), the same calls for
 * either kind: CPU ranks (qw_group_cpu, `threads` threads) when every backend is a CPU one,
 * NCCL ranks over the backends' devices (qw_group_nccl) when every one is a GPU.
 * Errors: those of qw_shard_plan, init, qw_group_cpu and qw_group_nccl, QS_EINVAL (CPU and GPU
 * ranks mixed), QS_ENOMEM. */
qs_status qw_tp_create(const qw_weights *wt, int max_ctx, int threads, int n,
                       qw_rank_backend_fn init, void (*release)(qw_backend *b), void *ctx,
                       qw_tp **out, qs_error *err);

/* Frees the ranks, their slices and packed forms. NULL is a no-op. */
void qw_tp_destroy(qw_tp *tp);

/* Ranks of the group. */
int qw_tp_ranks(const qw_tp *tp);

/* Times every rank's forward into p (profile.h; the ranks run one after another from one host
 * thread, so their phases add up as wall time); NULL: untimed, as created. */
void qw_tp_set_profile(qw_tp *tp, qw_profile *p);

/* Brings every rank's tensors to the formats of the unsharded model's linears lin
 * [n_layers*7 + 2] (their spec and quantized flag, as the policy set them): a linear whose
 * spec changed is re-quantized on every rank from its master slice, with the MAX-all-reduced
 * amax. Cheap when nothing changed (one comparison per linear). Errors: QS_EINVAL (the
 * constraints above), those of qk_quantize, QS_ENOMEM; on error the ranks are unquantized. */
qs_status qw_tp_sync(qw_tp *tp, const qw_linear *lin, qs_error *err);

/* The sharded forward: as qw_model_forward_rows (tokens checked by the caller), *logits
 * [(n - row0) x vocab] in the group's gather buffer. name_of/name_ctx name linears in errors. */
qs_status qw_tp_forward(qw_tp *tp, const uint32_t *tokens, int n, int row0,
                        const char *(*name_of)(const void *ctx, int index, char *buf, size_t cap),
                        const void *name_ctx, const float **logits, qs_error *err);

/* Rank r's packed form of linear `index` (layer*7 + kind, n_layers*7 lm_head, +1 embeddings),
 * NULL when that tensor is not quantized there; and its share. For tests and diagnostics. */
const qk_packed *qw_tp_packed(const qw_tp *tp, int r, int index);
const qw_shard *qw_tp_shard(const qw_tp *tp, int r);

/* Rank r's backend (as init set it up), NULL for r outside 0..n-1: what results read the
 * ranks' GEMM paths from. Mutable for the backend's own counters (a CUDA rank's path count). */
qw_backend *qw_tp_backend(const qw_tp *tp, int r);

/* Bytes of the group's slices (FP32 copies of row-parallel and permuted slices), packed forms
 * and run states, over all ranks. */
size_t qw_tp_bytes(const qw_tp *tp);

#endif
