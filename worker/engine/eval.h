/* Evaluation of a model on a token file: perplexity, and KL divergence against a stored
 * unquantized baseline.
 *
 * Chunking (llama.cpp tools/perplexity/perplexity.cpp, function perplexity(), whose
 * definitions this module follows):
 *   n_chunks = n_tokens / ctx (integer division; the tail is dropped), capped by max_chunks;
 *   chunk c is tokens[c*ctx .. c*ctx+ctx-1], run as a fresh context (positions 0..ctx-1);
 *   first = ctx/2; the scored positions of a chunk are j = first .. ctx-2, where the logits at
 *   position j predict token j+1 ("only the last half is scored; the last token has no
 *   target"), so n_scored = n_chunks * (ctx - 1 - ctx/2) (255 per chunk at ctx 512).
 *   With bos_id >= 0 the first token of each chunk is replaced by bos_id before the run, as
 *   llama.cpp does for vocabularies with add_bos; the default (-1) leaves the tokens alone.
 *   NLL = -(1/n_scored) * sum over scored positions of log softmax(logits_j)[token_{j+1}];
 *   perplexity = exp(NLL). log-softmax in double: log p_i = l_i - max - log(sum exp(l - max)).
 * KL (llama.cpp's --kl-divergence mode, on the same scored positions):
 *   KL_j(P || Q) = sum_i p_i (log p_i - log q_i), P the baseline's, Q the evaluated model's
 *   next-token distribution; mean, median and percentiles over positions, the percentile at
 *   fraction f interpolated linearly between sorted values at f*(n-1) (as llama.cpp does);
 *   top-1 agreement = fraction of positions where argmax Q == argmax P.
 *
 * Baseline file (written by qw_eval_baseline, read by qw_eval_compare), little-endian:
 *   offset 0    8 bytes magic "QSWBLP1\0"
 *   offset 8    u32 version = 1
 *   offset 12   u32 vocab_size
 *   offset 16   u32 ctx
 *   offset 20   u32 n_chunks
 *   offset 24   u32 first (= ctx/2)
 *   offset 28   i32 bos_id (-1 = none)
 *   offset 32   u64 n_scored
 *   offset 40   char model_digest[72]   (NUL-padded text, e.g. BLAKE2b hex)
 *   offset 112  char dataset_digest[72] (NUL-padded text)
 *   offset 184  u32 reserved[2] = 0
 *   offset 192  u32 tokens[n_chunks*ctx] (the evaluated tokens, before any BOS replacement)
 *   then        f32 logprobs[n_scored][vocab_size], chunk-major, scored positions in order:
 *               the baseline's log-softmax at every scored position, FP32 (never 16-bit).
 *   File size must be exactly 192 + 4*n_chunks*ctx + 4*n_scored*vocab_size.
 */
#ifndef QW_EVAL_H
#define QW_EVAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "model.h"
#include "tokens.h"

#define QW_BASELINE_MAGIC "QSWBLP1"
#define QW_BASELINE_VERSION 1
#define QW_BASELINE_HEADER_BYTES 192
#define QW_BASELINE_DIGEST_CHARS 72

/* Called after each chunk with (chunks done, chunks total); return nonzero to cancel the
 * remaining chunks (after the last one the run is complete and the value is ignored). */
typedef int (*qw_progress_fn)(void *ctx, size_t step, size_t total);

typedef struct qw_eval_options {
    int ctx;                 /* tokens per chunk; 3 <= ctx <= the model's max_ctx */
    size_t max_chunks;       /* 0 = every whole chunk of the file */
    int bos_id;              /* -1 = none; else replaces each chunk's first token */
    int sqnr;                /* compare: measure per-linear output SQNR (costs GEMMs) */
    int sqnr_rows;           /* compare with sqnr: > 0 measures the last sqnr_rows rows of each
                                linear call only (model.h qw_model_set_sqnr_rows); 0 every row */
    int skip_kl;             /* compare: 1 = no KL divergence (its exponentials skipped) */
    int skip_top1;           /* compare: 1 = no top-1 agreement; with skip_kl too the baseline's
                                log-probabilities are not read */
    qw_progress_fn progress; /* may be NULL */
    void *progress_ctx;
    const atomic_int *cancel;   /* may be NULL; polled between chunks, nonzero = stop */
    const char *model_digest;   /* written into / checked against the baseline; may be NULL */
    const char *dataset_digest; /* idem (e.g. qw_tokens.digest) */
    int tensor_parallel;        /* ranks the forward is sharded over for this run (model.h
                                   qw_model_set_tensor_parallel; on the CPU backend the n ranks
                                   run in this process), restored afterwards; 0 = the model's
                                   setting as it is (1 unless changed), the default. The job
                                   sets it from resources.gpu_count (tensor_parallel). Not with
                                   sqnr (the probe is the unsharded model's): QS_EUNSUPPORTED */
} qw_eval_options;

/* Output SQNR of one linear over the whole evaluation. */
typedef struct qw_linear_sqnr {
    char name[96];  /* "model.layers.3.self_attn.q_proj", "lm_head" */
    double sqnr_db; /* 10*log10(sum y_ref^2 / sum (y - y_ref)^2); +inf if no error */
} qw_linear_sqnr;

/* Metrics of one run. nll in nats per scored token. KL fields and top1 are set by compare
 * only (has_kl = 1; NaN where skip_kl or skip_top1 left them out); sqnr has n_sqnr entries
 * (heap; compare with opt.sqnr only). */
typedef struct qw_eval_metrics {
    size_t n_tokens, n_chunks, ctx, n_scored;
    double nll, ppl;
    double nll_stderr, ppl_stderr; /* llama.cpp's "+/-": stddev(NLL)/sqrt(n-1), times ppl */
    int has_kl;
    double kl_mean, kl_median, kl_p90, kl_p99, kl_max;
    double top1; /* fraction in [0, 1] */
    size_t n_sqnr;
    qw_linear_sqnr *sqnr;
} qw_eval_metrics;

/* Unquantized run: perplexity, and (baseline_path != NULL) the baseline file described above.
 * The file is written to baseline_path + ".tmp" and renamed into place when complete.
 * Errors: QS_EINVAL (options; fewer than one whole chunk; vocab of the tokens larger than the
 * model's), QS_EIO (path, errno), QS_ECANCELLED, model errors. */
qs_status qw_eval_baseline(qw_model *m, const qw_tokens *toks, const qw_eval_options *opt,
                           const char *baseline_path, qw_eval_metrics *out, qs_error *err);

/* Run of the model as it stands (policy applied): perplexity, KL against the baseline file,
 * top-1 agreement and, with opt->sqnr, per-linear SQNR. The baseline must have been made with
 * the same tokens, ctx, n_chunks, bos_id, vocab and (when both sides give them) digests;
 * any mismatch is QS_EINVAL naming the field and both values. Errors: QS_EIO, QS_EFORMAT
 * (bad magic/version/size: names the file and the field), QS_ECANCELLED, model errors. */
qs_status qw_eval_compare(qw_model *m, const qw_tokens *toks, const qw_eval_options *opt,
                          const char *baseline_path, qw_eval_metrics *out, qs_error *err);

/* The header of a baseline file, as qw_baseline_info_read found it. */
typedef struct qw_baseline_info {
    uint32_t vocab, ctx, n_chunks, first;
    int32_t bos_id;
    uint64_t n_scored;
    char model_digest[QW_BASELINE_DIGEST_CHARS];   /* NUL-terminated, "" when none */
    char dataset_digest[QW_BASELINE_DIGEST_CHARS]; /* NUL-terminated, "" when none */
    uint64_t file_bytes;
} qw_baseline_info;

/* Reads and validates the header of a baseline file without loading the log-probabilities:
 * magic, version, reserved zeros, NUL-terminated digests, ctx >= 2, vocab >= 1,
 * n_chunks >= 1, first == ctx/2, n_scored == n_chunks*(ctx-1-ctx/2), bos_id in -1..vocab-1,
 * and the file size equal to the size the header implies (no arithmetic overflow).
 * Errors: QS_EIO (open/read: path, errno), QS_EFORMAT (names the file, offset and field). */
qs_status qw_baseline_info_read(const char *path, qw_baseline_info *out, qs_error *err);

/* Frees out->sqnr and zeroes *out. */
void qw_eval_metrics_free(qw_eval_metrics *m);

/* Calls fn(ctx, name, value) for every metric: "n_tokens", "n_chunks", "ctx", "n_scored",
 * "nll", "ppl", "nll_stderr", "ppl_stderr", and with KL "kl_mean", "kl_median", "kl_p90",
 * "kl_p99", "kl_max", "top1", then per linear "sqnr_db.<block>.<kind>" (kind as
 * qw_linear_kind_name: "sqnr_db.3.q") or "sqnr_db.lm_head", the names schema 006's v_sqnr splits.
 * Stops and returns fn's value at the first nonzero; 0 when all were visited. */
typedef int (*qw_metric_fn)(void *ctx, const char *name, double value);
int qw_eval_metrics_foreach(const qw_eval_metrics *m, qw_metric_fn fn, void *ctx);

/* The chunk plan: n_chunks and n_scored for n_tokens at ctx with max_chunks (0 = all).
 * Errors: QS_EINVAL (ctx < 3, which scores no position: ctx - 1 - ctx/2 is 0 at ctx 2; or
 * fewer than ctx tokens). */
qs_status qw_eval_plan(size_t n_tokens, int ctx, size_t max_chunks, size_t *n_chunks,
                       size_t *n_scored, qs_error *err);

/* Scores one chunk's logits [ctx x vocab] against its tokens [ctx]: adds the NLL of each
 * scored position (first..ctx-2, see above) to *nll_sum and its square to *nll2_sum, and
 * the count to *n. Exposed so the definitions can be tested on synthetic logits. */
void qw_eval_score_chunk(const float *logits, const uint32_t *tokens, int ctx, int vocab,
                         double *nll_sum, double *nll2_sum, size_t *n);

#endif
