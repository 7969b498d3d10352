/* The Llama model a job evaluates (HF LlamaForCausalLM, modeling_llama.py), FP32 activations,
 * grouped-query causal attention, RoPE in rotate_half layout with Llama 3.1 scaling when
 * rope_factor > 0, lm_head tied or not. Parts as llama2.c splits them: weights (weights.h, read
 * in place from the mapped checkpoint), packed quantized forms (dequantized piece by piece
 * before each GEMM: the bits of a fake-quantized FP32 copy), one run-state allocation
 * (runstate.h), the ops table (ops.h) whose CPU backend is the reference. */
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

/* A model over ck (open until destroy) for up to max_ctx tokens on `threads` threads (0 = all
 * cores; sets OpenBLAS to 1 thread, the model runs its own OpenMP team). Memory: run state ~
 * max_ctx*(6*dim + 2*hidden_dim + vocab + threads*64) floats + threads*128*max(dim, hidden_dim)
 * scratch. Errors: QS_EINVAL (max_ctx < 1, threads < 0, config), QS_ENOTFOUND / QS_EFORMAT (a
 * tensor missing or misshapen: named with the expected shape), QS_ENOMEM. */
qs_status qw_model_create(qw_checkpoint *ck, int max_ctx, int threads, qw_model **out,
                          qs_error *err);

/* A model over synthetic weights: spec "[synthetic:]NAME[:SEED]" of qw_synthetic_shapes (seed 0).
 * Errors: those of qw_synthetic_build and qw_model_create. */
qs_status qw_model_create_synthetic(const char *spec, int max_ctx, int threads, qw_model **out,
                                    qs_error *err);

/* Frees everything but the checkpoint. NULL is a no-op. */
void qw_model_destroy(qw_model *m);

const qw_config *qw_model_config(const qw_model *m);
int qw_model_max_ctx(const qw_model *m);

/* 1 when lm_head is the embeddings' matrix. Quantizing lm_head then quantizes its own copy; the
 * lookup reads the master unless the policy's embed names the embeddings too. */
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

/* Wall seconds per phase (profile.h) of forwards, evaluations and policies since the caller's
 * last qw_profile_reset. */
qw_profile *qw_model_profile(qw_model *m);

/* Replaces the CPU linears' cache of FP32 weight pieces (convcache.h) by one of max_bytes (0 =
 * off; default qw_convcache_default_bytes()), LRU; results bit-identical either way (tested).
 * Errors: QS_ENOMEM. */
qs_status qw_model_set_convert_cache(qw_model *m, size_t max_bytes, qs_error *err);

/* The conversion cache's counters and sizes now (convcache.h). */
struct qw_convcache_stats;
void qw_model_convert_cache_stats(const qw_model *m, struct qw_convcache_stats *out);

/* Sets the thread count of the GEMMs and loops (0 = all cores). Errors: QS_EINVAL. */
qs_status qw_model_set_threads(qw_model *m, int threads, qs_error *err);

/* Restores the masters, then packs the weights p names (bit for bit qk_quantize of the master's
 * FP32 values, 16 MiB chunks at a time: apply_policy.c) and records the activation formats.
 * "bf16" keeps the master; NULL or all-none restores the unquantized model bit for bit.
 * Errors: QS_EINVAL (p->n_layers differs), qk_quantize_rows' (naming the tensor), QS_ENOMEM;
 * on error the model is left unquantized. */
qs_status qw_model_apply_policy(qw_model *m, const qw_policy *p, qs_error *err);

/* *logits [n x vocab] (row t predicts token t+1, valid until the next forward) of tokens[n] at
 * positions 0..n-1. Errors: QS_EINVAL (n outside 1..max_ctx, a token >= vocab: names it). */
qs_status qw_model_forward(qw_model *m, const uint32_t *tokens, int n, const float **logits,
                           qs_error *err);

/* Blocks first..end-1 of the unsharded model over tokens[n], without lm_head (forward.h
 * qw_forward_blocks): from the embeddings (first == 0, the prefix cache serving the unquantized
 * leading blocks) or from `in` [n x dim] (first > 0), block end's input written to `out` [n x
 * dim] (NULL: not read back; may be `in`). Host memory. A caller that runs a model block by
 * block, carrying the residual, gets the bits of one whole forward. Errors: those of
 * qw_model_forward, QS_EINVAL (the range), QS_EUNSUPPORTED (tensor parallelism). */
qs_status qw_model_forward_blocks(qw_model *m, const uint32_t *tokens, int n, int first, int end,
                                  const float *in, float *out, qs_error *err);

/* The backend whose memory holds the logits (for score_rows, logsoftmax, fetch): the model's
 * own, or with tensor_parallel > 1 a CPU table over the gathered host logits. */
qw_backend *qw_model_logits_backend(qw_model *m);

/* qw_model_forward with the final norm and lm_head only for positions row0..n-1 (the scored half
 * of a chunk): *logits [(n - row0) x vocab]. Errors: those of qw_model_forward, QS_EINVAL (row0
 * outside 0..n-1). */
qs_status qw_model_forward_rows(qw_model *m, const uint32_t *tokens, int n, int row0,
                                const float **logits, qs_error *err);

/* Per-linear output SQNR probe: each quantized linear also runs unquantized on the same input
 * and adds signal = sum(y_ref^2), noise = sum((y - y_ref)^2) in double in element order (twice
 * the GEMM work). On resets the sums and allocates [max_ctx x largest out]. Errors: QS_ENOMEM. */
qs_status qw_model_set_sqnr_probe(qw_model *m, int on, qs_error *err);

/* The probe's sample: rows > 0 measures only the last `rows` rows of each linear call (each
 * chunk's last positions; every row of a call of fewer), the reference GEMM on those rows alone
 * (rows/T of its work); 0 (the default) every row. The sampled rows' terms are the full probe's
 * terms for those rows where the GEMM computes each row on its own (the fixed-order GEMM). */
void qw_model_set_sqnr_rows(qw_model *m, int rows);

/* Sums of linear `index` (layer*7 + kind; n_layers*7 = lm_head) since the probe went on: 0, or -1
 * when not quantized or not probed. SQNR (dB) = 10*log10(signal/noise). */
int qw_model_sqnr_sums(const qw_model *m, int index, double *signal, double *noise);

/* Prefix cache (prefix_cache.h): a forward whose blocks 0..b-1 are unquantized starts from the
 * stored residual at block b of the same tokens. max_bytes (0 = off) fixes the entries, each
 * n_layers x max_ctx x dim floats, never evicted; setting clears them. Logits bit-identical
 * (tested). Errors: QS_EINVAL (max_bytes below one entry), QS_ENOMEM. */
qs_status qw_model_set_prefix_cache(qw_model *m, size_t max_bytes, qs_error *err);

/* Forwards that started from a stored residual, and blocks they skipped, since the cache was set.
 */
void qw_model_prefix_cache_stats(const qw_model *m, size_t *hits, size_t *blocks_skipped);

/* HF name of linear `index` without ".weight" ("model.layers.3.self_attn.q_proj", "lm_head",
 * n_layers*7+1 "model.embed_tokens"); "?" out of range. */
const char *qw_model_linear_name(const qw_model *m, int index, char *buf, size_t cap);

/* Splits the model over n ranks (shard.h, Megatron-LM arXiv 1909.08053); n == 1 frees them. The
 * policy is carried onto the ranks at the next forward (FP4 amax MAX-all-reduced: the packed
 * codes of the unsharded tensor); logits agree to float rounding. No prefix cache; the probe
 * is refused. Errors: QS_EINVAL (n outside 1..64, shape not splittable: qw_shard_plan),
 * QS_EUNSUPPORTED (probe on), QS_ENOMEM; unshardable formats fail at the forward (qw_tp_sync). */
qs_status qw_model_set_tensor_parallel(qw_model *m, int n, qs_error *err);

/* How ranks get their backends (qw_tp_create's init, release, ctx; init NULL: CPU ranks; the
 * worker's GPU callback: jobs_backend.h). Existing ranks are made again. Errors: qw_tp_create's;
 * the model is then unsharded and keeps the new backends. */
qs_status qw_model_set_tp_backends(qw_model *m, qw_rank_backend_fn init,
                                   void (*release)(qw_backend *b), void *ctx, qs_error *err);

/* Rank r's backend (gemm_path, path counters), NULL when unsharded or r out of range. */
qw_backend *qw_model_tp_backend(const qw_model *m, int r);

/* Ranks of the model's tensor-parallel group: 1 when unsharded. */
int qw_model_tensor_parallel(const qw_model *m);

/* Packed tensor `index` (layer*7 + kind, n_layers*7 lm_head, +1 embeddings) of the unsharded
 * model (rank < 0) or rank's slice (synced at the next forward), NULL when not quantized; the
 * slice starts at row (*axis 0) or column (1) *start. For tests and diagnostics. */
const qk_packed *qw_model_packed(const qw_model *m, int rank, int index, int64_t *axis,
                                 int64_t *start);

/* Number of probe-able linears: n_layers*QW_LINEAR_KINDS + 1 (lm_head). */
int qw_model_n_linears(const qw_model *m);

/* The unsharded model's tensor `index` (layer*7 + kind, n_layers*7 lm_head, +1 embeddings),
 * NULL out of range: for the quantization methods (worker/method), which after a policy
 * replace a linear's weight and hook its input (forward.h in_hook); apply_policy.c. */
struct qw_linear *qw_model_linear(qw_model *m, int index);

#endif
