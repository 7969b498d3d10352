/* qw_jobs: the "baseline" and "eval" job kinds of a sensitivity sweep, run by the
 * worker loop (worker/loop/loop.h) over the model engine (worker/engine/).
 *
 * Both decode the typed spec of kinds/sensitivity.h (the same module the coordinator's grid
 * expansion encodes it with), so field names, modes and parts are read exactly as written.
 *
 * "baseline": the unquantized model on the dataset. Writes the reference log-probabilities
 *   (worker/engine/eval.h's baseline file) into the baseline directory (qw_jobs_baseline_path)
 *   and reports ppl, nll, their standard errors and n_tokens, n_chunks, n_scored, ctx.
 * Both read the dataset the spec names: a token file, or a text ("text:" path, kinds/spec.h)
 * tokenized by the model's own tokenizer (worker/tokenizer qw_text_dataset, cached); with
 * "dataset.bos_id" each chunk starts with that id (worker/engine/eval.h bos_id).
 * "eval": applies the policy the spec names (format, options, quantize, mode, part:
 *   qw_jobs_policy), compares
 *   against the baseline file (recomputing it first when this machine has none) and reports
 *   ppl, nll, kl_mean, kl_median, kl_p90, kl_p99, kl_max, top1 (the metrics requested:
 *   "kl" gives the kl_* rows and "top1" the top1 row), "sqnr_db.<block>.<kind>" per quantized
 *   linear (with "sqnr"; "sqnr_db.lm_head" for the head), n_tokens, n_chunks, n_scored, ctx.
 *
 * A worker keeps the loaded model in its cache (qw_job_cache_*) under its affinity key
 * (kinds/spec.h qs_affinity_key: "model:<digest>"), so
 * the coordinator's model affinity sends the next job of that model to it. The model is built
 * with the engine's prefix cache (room for every chunk of the job, at most
 * $QSWEEP_PREFIX_CACHE_MB MiB, default 1024), so block-wise and cumulative jobs skip the
 * unquantized blocks in front of the quantized one. The model file's
 * digest is checked against the spec when it is loaded: a file changed since submission fails
 * the job instead of producing results filed under the old digest. */
#ifndef QW_JOBS_H
#define QW_JOBS_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"
#include "policy.h"

/* Registers "baseline" and "eval" in the worker's registry (qw_register_kind). Call before
 * qw_run. Errors: those of qw_register_kind. */
qs_status qw_jobs_register(qs_error *err);

/* The engine policy an eval spec names, for a model of n_layers blocks:
 *   component: the part in every block (lm_head: the head's own copy, also when tied;
 *     embeddings: the embedding rows, weight format only);
 *   leave_one_out: every part of the spec's leave_one_out_of (default the seven block
 *     linears) but the part, in every block;
 *   block / layer / cumulative / leave_one_out_block / leave_one_out_layer: the engine's
 *     isolation helpers (QW_ISO_BLOCK, _LAYER, _CUMULATIVE, _LOO_BLOCK, _LOO_LAYER);
 *   policy: each linear of the spec's map in its format with its options from
 *     format_options[format]; every other linear as it is.
 * "weights+activations" sets the activation format of every quantized GEMM input.
 * *out is initialised here (free with qw_policy_free). Errors: QS_EFORMAT (not JSON),
 * QS_EINVAL naming the field (the spec's decoder, a block beyond n_layers, an unknown format
 * or option), QS_ENOMEM. */
qs_status qw_jobs_policy(const char *spec_json, int n_layers, qw_policy *out, qs_error *err);

/* The baseline file for (model digest, dataset digest, ctx, max_chunks, BOS id, numerics
 * version):
 *   $QSWEEP_BASELINE_DIR, else ${XDG_CACHE_HOME:-$HOME/.cache}/qsweep/baselines, then
 *   "/<model_digest>-<dataset_digest>-ctx<ctx>-chunks<max_chunks>[-bos<id>]-v<numerics>.qswblp"
 *   ("-bos<id>" only when bos_id >= 0: chunks that start with BOS are another baseline).
 * Every local worker computes the same name, so a baseline made by one is reused by all workers
 * of its numerics path (qw_jobs_baseline_path_for).
 * Writes at most cap bytes (NUL included) to buf. With mkdirs the directory is created.
 * Errors: QS_EINVAL (buf too small, a digest that is not hex), QS_EIO (mkdir). */
qs_status qw_jobs_baseline_path(const char *model_digest, const char *dataset_digest, int ctx,
                                long max_chunks, int bos_id, const char *numerics_version,
                                int mkdirs, char *buf, size_t cap, qs_error *err);

/* The numerics path of a result: the CPU's (ops.h qw_backend_cpu_path, e.g.
 * "cpu-qsweep-fixed2"), or on CUDA "cuda-cc<cc>-<request>" ("cuda-cc90-auto": the device's
 * compute capability and the GEMM request, jobs_backend.h gemm 0 fp32, 1 bf16, 2 auto,
 * 3 emulated), which together decide every GEMM path its linears take. Into buf (cap bytes).
 * Pure. */
void qw_jobs_numerics_path(bool on_cuda, int cc, int gemm, const char *cpu_path, char *buf,
                           size_t cap);

/* The CPU paths whose baselines keep the name above (the fixed-order GEMM, the default). */
#define QW_JOBS_DEFAULT_PATH_PREFIX "cpu-qsweep-fixed"

/* The curve point a job reports while it computes a baseline, one per chunk: step = chunks
 * done, value = chunks in all (not final; `qsweep status` reads the newest). */
#define QW_JOBS_BASELINE_CHUNKS "baseline_chunks"

/* The baseline file of a numerics path: qw_jobs_baseline_path's name with "-p<path>" before
 * ".qswblp" (numerics_path NULL, "" or a CPU fixed-order path: no suffix, the name above), so
 * that an eval job compares with a baseline made on its own path (made first when absent) and
 * a KL never mixes CPU and GPU numerics. Errors as above, and QS_EINVAL for a path of more
 * than 128 characters or one outside [0-9A-Za-z._-]. */
qs_status qw_jobs_baseline_path_for(const char *model_digest, const char *dataset_digest, int ctx,
                                    long max_chunks, int bos_id, const char *numerics_version,
                                    const char *numerics_path, int mkdirs, char *buf, size_t cap,
                                    qs_error *err);

#endif
