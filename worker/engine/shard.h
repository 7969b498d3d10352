/* Tensor-parallel sharding of a Llama model over N ranks (Megatron-LM, arXiv 1909.08053, sec. 3)
 * on any backend; N CPU ranks in one process test it against the unsharded forward. The plan:
 * - q, k, v, gate, up: column-parallel (a row range of [out x in], a view; a GGUF q/k weight,
 *   permuted per head in the file, is converted to FP32). H/N query heads per rank; kv heads
 *   split when N divides G, else replicated (G divides N), as Megatron-LM does for GQA;
 * - o_proj, down_proj: row-parallel (a column range, copied in the checkpoint's own dtype:
 *   BF16 and F16 stay 2 bytes an element, a GGUF block type its blocks when the range falls
 *   on block edges; an FP32 copy only for an FP32 master or a range that cuts a block),
 *   partial outputs summed by the ranks' group (worker/comm/comm.h);
 * - lm_head: vocabulary-parallel (a row range), logits slices gathered, no all-reduce;
 * - embeddings and norms replicated.
 * Hidden units split at multiples of 128/64/32/16, the vocabulary at 16, so shard edges fall
 * on format block edges. Per-tensor-scaled formats (NVFP4, FP8) use the MAX-all-reduced amax
 * (tensor_amax_given), so packed codes are the unsharded tensor's, weights and activations.
 * Refused when a policy is synced (QS_EINVAL naming linear and format): a block straddling
 * ranks along K (16 NVFP4, 32 MX, the INT4 group) or, for 2D formats, along rows; per-channel
 * formats along K (int8_channel); stochastic rounding (its stream is keyed by the element's
 * index in the whole tensor). */
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

/* out[n] = the plan of c over n ranks. Errors: QS_EINVAL naming the values (n outside
 * 1..QW_TP_MAX, n not dividing heads, kv heads not splittable, hidden_dim or vocab too small). */
qs_status qw_shard_plan(const qw_config *c, int n, qw_shard *out, qs_error *err);

/* Rank share s's cut of linear `kind` (QW_LINEAR_KINDS = lm_head): rows (*axis 0) or columns
 * (1) [*start, *start + *len). */
void qw_shard_range(const qw_shard *s, const qw_config *c, int kind, int *axis, int64_t *start,
                    int64_t *len);

/* N ranks of a model over its masters (borrowed, must outlive the group). */
typedef struct qw_tp qw_tp;

/* Sets up rank `rank`'s backend b (zeroed) for linears of up to max_in inputs; *device = its
 * CUDA ordinal, -1 for a CPU backend. */
typedef qs_status (*qw_rank_backend_fn)(qw_backend *b, int rank, int threads, int max_in, void *ctx,
                                        int *device, qs_error *err);

/* n ranks over weights wt (borrowed) for up to max_ctx tokens, each with init(ctx)'s backend
 * (NULL: CPU) given its share of `threads` (threads/n, the first threads%n ranks one more: the
 * ranks run concurrently) freed by release (NULL: qw_backend_release), all-reducing over
 * CPU ranks (qw_group_cpu) or NCCL (qw_group_nccl) as the devices say. Errors: those of
 * qw_shard_plan, init and the groups, QS_EINVAL (CPU and GPU ranks mixed), QS_ENOMEM. */
qs_status qw_tp_create(const qw_weights *wt, int max_ctx, int threads, int n,
                       qw_rank_backend_fn init, void (*release)(qw_backend *b), void *ctx,
                       qw_tp **out, qs_error *err);

/* Frees the ranks, their slices and packed forms. NULL is a no-op. */
void qw_tp_destroy(qw_tp *tp);

/* Ranks of the group. */
int qw_tp_ranks(const qw_tp *tp);

/* Times every rank's forward into p (their phases add up as wall time); NULL: untimed. */
void qw_tp_set_profile(qw_tp *tp, qw_profile *p);

/* Brings the ranks to the formats of the unsharded linears lin [n_layers*7 + 2]: a changed
 * linear is re-quantized from its master slices with the MAX-all-reduced amax; cheap when
 * nothing changed. Errors: QS_EINVAL (the constraints above), qk_quantize's, QS_ENOMEM; on
 * error the ranks are unquantized. */
qs_status qw_tp_sync(qw_tp *tp, const qw_linear *lin, qs_error *err);

/* qw_model_forward_rows over the ranks (tokens checked by the caller): *logits [(n - row0) x
 * vocab] in the group's gather buffer; name_of names linears in errors. */
qs_status qw_tp_forward(qw_tp *tp, const uint32_t *tokens, int n, int row0,
                        const char *(*name_of)(const void *ctx, int index, char *buf, size_t cap),
                        const void *name_ctx, const float **logits, qs_error *err);

/* Rank r's packed linear `index` (NULL when not quantized there) and share; for tests. */
const qk_packed *qw_tp_packed(const qw_tp *tp, int r, int index);
const qw_shard *qw_tp_shard(const qw_tp *tp, int r);

/* Rank r's backend (NULL for r outside 0..n-1), mutable for its counters. */
qw_backend *qw_tp_backend(const qw_tp *tp, int r);

/* Bytes of the ranks' owned slices, packed forms and run states. */
size_t qw_tp_bytes(const qw_tp *tp);

/* Bytes of the slices the ranks own in host memory (the row-parallel column ranges; views of
 * the checkpoint count nothing): common/device_memory.h's `host` part. */
size_t qw_tp_slice_bytes(const qw_tp *tp);

#endif
