/* The Llama model of qsweep's engine: what a job evaluates.
 *
 * Architecture (Hugging Face LlamaForCausalLM, modeling_llama.py): token embeddings; per
 * block x += o_proj(attn(rope(q_proj(rms(x))), rope(k_proj(rms(x))), v_proj(rms(x)))) and
 * x += down_proj(silu(gate_proj(rms(x))) * up_proj(rms(x))); final RMSNorm; lm_head (tied to
 * the embeddings or not). RoPE in HF's rotate_half layout (pairs i, i+head_dim/2), theta from
 * the config, Llama 3.1 frequency scaling when rope_factor > 0. Grouped-query causal attention.
 * FP32 activations throughout.
 *
 * The engine's parts, as llama2.c and llm.c split theirs:
 * - weights (weights.h): layer-stacked, masters in the checkpoint's dtype, read in place from
 *   the mapped checkpoint (or built by synthetic.h), never copied to FP32 as a whole;
 * - quantized weights: applying a policy packs each quantized tensor (qk_packed: codes + block
 *   scales + tensor scale) once; the forward pass dequantizes it piece by piece right before
 *   the GEMM, giving the same FP32 values fake-quantization gives, so results are bit for bit
 *   those of a fake-quantized FP32 copy;
 * - run state (runstate.h): every activation buffer carved from one allocation per
 *   (model, max_ctx, threads), made here; the forward pass allocates nothing;
 * - ops (ops.h): the forward pass (forward.c) is written once over a table of operations whose CPU
 *   backend is the reference (bit-identical for any thread count).
 * Memory: the masters (mapped) + the packed forms + the run state (qw_model_memory). */
#ifndef QW_MODEL_H
#define QW_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint.h"
#include "error.h"
#include "policy.h"
#include "profile.h"
#include "shard.h"

typedef struct qw_model qw_model;

/* Builds a model over an open checkpoint (which must stay open until qw_model_destroy) for
 * sequences of up to max_ctx tokens, with `threads` threads for GEMMs and elementwise loops
 * (0 = all cores). Looks every tensor up and checks its shape against the config.
 * The model runs its own OpenMP team and calls OpenBLAS single-threaded: creating a model or
 * setting its threads sets OpenBLAS's process-wide thread count to 1.
 * Memory: the run state ~ max_ctx*(6*dim + 2*hidden_dim + vocab + threads*64) floats, and a
 * weight-piece scratch of threads*128*max(dim, hidden_dim) floats; the weights stay mapped.
 * Errors: QS_EINVAL (max_ctx < 1, threads < 0, config values out of range), QS_ENOTFOUND /
 * QS_EFORMAT from the checkpoint (missing tensor, shape not matching the config: names the
 * tensor and the expected shape), QS_ENOMEM. */
qs_status qw_model_create(qw_checkpoint *ck, int max_ctx, int threads, qw_model **out,
                          qs_error *err);

/* Builds a model over synthetic random weights (synthetic.h): spec "NAME[:SEED]" or
 * "synthetic:NAME[:SEED]" names a shape of qw_synthetic_shapes (seed 0 when absent); the
 * model owns its BF16 masters. Errors: those of qw_synthetic_build and qw_model_create. */
qs_status qw_model_create_synthetic(const char *spec, int max_ctx, int threads, qw_model **out,
                                    qs_error *err);

/* Frees the run state, packed weights and owned masters (not the checkpoint). NULL is a no-op. */
void qw_model_destroy(qw_model *m);

const qw_config *qw_model_config(const qw_model *m);
int qw_model_max_ctx(const qw_model *m);

/* 1 when lm_head is the embeddings' matrix (tie_word_embeddings). Quantizing lm_head of a tied
 * model quantizes the head's use of it only: lm_head gets its own packed copy and the embedding
 * lookup still reads the master, unless the policy's embed names the embeddings too (and then
 * the two are quantized separately, each as its own tensor). */
int qw_model_tied_embeddings(const qw_model *m);

/* Bytes a model holds, by part. */
typedef struct qw_model_bytes {
    size_t masters;   /* the weights in their stored form (mapped or owned), lm_head once if tied */
    size_t packed;    /* packed forms of the tensors the current policy quantizes */
    size_t run_state; /* the run state's one allocation */
    size_t scratch;   /* the backend's per-thread weight-piece scratch */
} qw_model_bytes;

void qw_model_memory(const qw_model *m, qw_model_bytes *out);

/* Threads of the model's OpenMP team (the evaluation's loops use the same count). */
int qw_model_threads(const qw_model *m);

/* The model's time profile (profile.h): wall seconds per phase added up by its forwards,
 * qw_eval_baseline / qw_eval_compare on it and qw_model_apply_policy since the caller last
 * reset it (qw_profile_reset; zero at creation). Timing costs a few clock reads per op. */
qw_profile *qw_model_profile(qw_model *m);

/* The conversion cache (convcache.h) of the model's CPU linears: FP32 copies of weight
 * pieces whose masters are not FP32 (BF16, F16, GGUF blocks) or that a policy packed, kept
 * within max_bytes, least recently used out first; 0 turns it off. A model starts with
 * qw_convcache_default_bytes(). Masters' pieces stay valid for the model's life (converted
 * once per worker while the model is cached), packed ones until the next policy (once per
 * job). Results are bit-identical with and without it (tested). Replacing it drops every
 * piece. Errors: QS_ENOMEM. */
qs_status qw_model_set_convert_cache(qw_model *m, size_t max_bytes, qs_error *err);

/* The conversion cache's counters and sizes now (convcache.h). */
struct qw_convcache_stats;
void qw_model_convert_cache_stats(const qw_model *m, struct qw_convcache_stats *out);

/* Sets the thread count of the GEMMs and loops (0 = all cores). Errors: QS_EINVAL. */
qs_status qw_model_set_threads(qw_model *m, int threads, qs_error *err);

/* Restores every tensor to its unquantized master, then quantizes the weights that `p` names
 * (once, here, into packed form: bit for bit qk_quantize of the master's FP32 values, done a
 * 16 MiB chunk of rows at a time with qk_quantize_rows, so no FP32 copy of a master exists;
 * apply_policy.c) and records the activation formats the forward pass applies. The "bf16"
 * (identity) format keeps the master. p == NULL or an all-none policy restores the
 * unquantized model bit for bit. Errors: QS_EINVAL (p->n_layers differs from the model),
 * errors of qk_quantize_rows wrapped with the tensor name, QS_ENOMEM (a packed form, or the
 * one FP32 chunk buffer). On error the model is left unquantized. */
qs_status qw_model_apply_policy(qw_model *m, const qw_policy *p, qs_error *err);

/* Runs tokens[0..n-1] (positions 0..n-1, a fresh causal context) and sets *logits to the
 * model's buffer of [n x vocab_size] FP32 logits, row t predicting token t+1; valid until
 * the next forward or destroy. Errors: QS_EINVAL (n < 1 or n > max_ctx, a token id >=
 * vocab_size: names its index). */
qs_status qw_model_forward(qw_model *m, const uint32_t *tokens, int n, const float **logits,
                           qs_error *err);

/* The backend whose memory holds the logits qw_model_forward and qw_model_forward_rows
 * return, for reading them through its table (ops.h score_rows, logsoftmax, fetch): the
 * model's own backend when unsharded (device memory on CUDA: model_cuda.h); with
 * tensor_parallel N > 1 the ranks' slices are gathered into host memory, and this is a CPU
 * table with the model's thread count, owning nothing. Valid until the model's backend or
 * tensor-parallel degree changes. */
qw_backend *qw_model_logits_backend(qw_model *m);

/* As qw_model_forward, but computes the final norm and lm_head only for positions row0..n-1:
 * *logits is [(n - row0) x vocab_size], row i for position row0 + i. The evaluation needs
 * only the scored half of a chunk, so this saves half of the lm_head GEMM. The blocks still
 * run over all n positions (causal attention needs them). With the SQNR probe on, lm_head's
 * sums cover the computed rows only. Errors: those of qw_model_forward, QS_EINVAL (row0
 * outside 0..n-1). */
qs_status qw_model_forward_rows(qw_model *m, const uint32_t *tokens, int n, int row0,
                                const float **logits, qs_error *err);

/* Per-linear output SQNR probe. While on, every forward also computes, for each linear that
 * has a weight or activation format, the unquantized linear (FP32 master weights, FP32
 * input) on the same input and accumulates signal = sum(y_ref^2) and noise =
 * sum((y - y_ref)^2) over all outputs (in double, in element order: the same bits for any
 * thread count, qw_sqnr_sums_forward). This doubles the GEMM work of quantized linears.
 * Switching on resets the sums and allocates the reference-output buffer once
 * ([max_ctx x largest out_features], the vocabulary for lm_head). Errors: QS_ENOMEM. */
qs_status qw_model_set_sqnr_probe(qw_model *m, int on, qs_error *err);

/* Sums of linear `index` (layer*QW_LINEAR_KINDS + kind; n_layers*7 = lm_head) since the probe
 * was switched on. Returns 0 if the linear is quantized and was probed, -1 otherwise.
 * SQNR (dB) = 10*log10(signal/noise); +inf when noise is 0. */
int qw_model_sqnr_sums(const qw_model *m, int index, double *signal, double *noise);

/* Prefix cache (the sweep lever of docs/architecture.md: reuse the BF16 activations up to the
 * first quantized block). When on, a forward whose policy leaves blocks 0..b-1 unquantized
 * (no weight or activation format there, embeddings unquantized) and whose tokens were run
 * before starts from the stored residual stream at the input of block b instead of
 * recomputing blocks 0..b-1. Entries are filled by any forward, for the boundaries its own
 * unquantized prefix reaches; an entry holds n_layers x max_ctx x dim floats plus the tokens,
 * and is keyed by the exact token sequence. max_bytes (0 = off, frees the pool) sets how many
 * entries are allocated, once, here; entries are never evicted (a sweep over more chunks than
 * fit reuses the first ones), and qw_model_set_prefix_cache clears them. The forward is
 * deterministic, so logits are bit-identical with and without the cache (tested).
 * Errors: QS_EINVAL (max_bytes smaller than one entry), QS_ENOMEM. */
qs_status qw_model_set_prefix_cache(qw_model *m, size_t max_bytes, qs_error *err);

/* Counters since the cache was set: forwards that started from a stored residual, and the
 * blocks they skipped in all. */
void qw_model_prefix_cache_stats(const qw_model *m, size_t *hits, size_t *blocks_skipped);

/* Name of linear `index` as in the Hugging Face checkpoint without ".weight"
 * ("model.layers.3.self_attn.q_proj", "lm_head"; n_layers*7+1: "model.embed_tokens");
 * "?" when out of range. */
const char *qw_model_linear_name(const qw_model *m, int index, char *buf, size_t cap);

/* Tensor parallelism (shard.h; Megatron-LM, arXiv 1909.08053): n > 1 splits the model over n
 * ranks (on the CPU backend, n rank backends run in this process, one after the other, op by
 * op) and every later forward runs sharded, the partial outputs of o_proj and down_proj
 * all-reduced; the policy in force (qw_model_apply_policy) is carried onto the ranks at the
 * next forward, each sharded FP4 tensor quantized with the MAX-all-reduced amax, so the
 * packed codes are those of the unsharded tensor. n == 1 (the default) frees the ranks: the
 * unsharded path, unchanged. Logits agree with the unsharded forward to float rounding (the
 * row-parallel sums are added in another order). Sharded forwards do not use the prefix cache;
 * the SQNR probe is refused while n > 1.
 * Memory per rank: its run state, FP32 copies of its o_proj/down_proj slices, packed forms.
 * Errors: QS_EINVAL (n outside 1..64; the model's heads, kv heads, hidden_dim or vocabulary
 * cannot be split n ways: qw_shard_plan), QS_EUNSUPPORTED (probe on), QS_ENOMEM; a policy
 * whose formats cannot be sharded fails at the forward (qw_tp_sync). */
qs_status qw_model_set_tensor_parallel(qw_model *m, int n, qs_error *err);

/* How the model's tensor-parallel ranks get their backends from now on (shard.h qw_tp_create's
 * init, release and ctx): init NULL (the default) makes CPU backends of the model's thread
 * count, all-reducing over CPU ranks; a callback that opens rank r on a GPU (the worker's:
 * worker/jobs/jobs_backend.h qw_jobs_rank_backend) makes GPU ranks over NCCL. ctx is borrowed
 * and must outlive the ranks. Ranks already made are made again on the new backends (also
 * when only ctx's contents changed: the caller passes the same triple again to keep them).
 * Errors: those of qw_tp_create; on error the model keeps no ranks (tensor_parallel 1) and
 * the new backends for the next qw_model_set_tensor_parallel. */
qs_status qw_model_set_tp_backends(qw_model *m, qw_rank_backend_fn init,
                                   void (*release)(qw_backend *b), void *ctx, qs_error *err);

/* Rank r's backend of the tensor-parallel group (0 <= r < qw_model_tensor_parallel(m)), NULL
 * when unsharded or r is out of range: what results say the ranks ran on (gemm_path), and
 * whose path counters a job resets (model_cuda.h). */
qw_backend *qw_model_tp_backend(const qw_model *m, int r);

/* Ranks of the model's tensor-parallel group: 1 when unsharded. */
int qw_model_tensor_parallel(const qw_model *m);

/* The packed form of tensor `index` (layer*7 + kind, n_layers*7 lm_head, +1 embeddings): the
 * unsharded model's (rank < 0) or rank `rank`'s slice, NULL when not quantized there; *axis
 * and *start say where the slice sits in the whole tensor (axis 0: its rows start at row
 * *start; 1: its columns at column *start). A rank's slice is synced at the next forward.
 * For tests and diagnostics. */
const qk_packed *qw_model_packed(const qw_model *m, int rank, int index, int64_t *axis,
                                 int64_t *start);

/* Number of probe-able linears: n_layers*QW_LINEAR_KINDS + 1 (lm_head). */
int qw_model_n_linears(const qw_model *m);

/* The unsharded model's tensor `index` (layer*7 + kind, n_layers*7 lm_head, +1 embeddings),
 * NULL out of range: for the quantization methods (worker/method), which after a policy
 * replace a linear's weight and hook its input (forward.h in_hook); apply_policy.c. */
struct qw_linear *qw_model_linear(qw_model *m, int index);

#endif
