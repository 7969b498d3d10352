/* One training run as a job runs it: from a spec and a token stream to loss curves, final
 * metrics and a Hugging Face checkpoint, with checkpoints every K steps and on a stop request,
 * and resumption from the last checkpoint. The job kind `train` (worker side) decodes its
 * spec into qw_train_spec and calls qw_train_job_run with hooks that heartbeat and send
 * results; this file knows nothing of sockets or SQL.
 *
 * Files, under spec->checkpoint_dir (created with its parents when missing): <job_key>.ckpt
 * (ckpt.h, replaced atomically) and <job_key>/ (the final config.json + model.safetensors,
 * hfsave.h). Metrics (hooks->metric): every log_every steps train_loss, lr, grad_norm, tokens_per_s
 * at step s >= 1; val_loss every eval_every steps; at the end (step -1) final_train_loss,
 * final_val_loss, val_ppl = exp(final_val_loss) (both only with validation windows),
 * tokens_seen, resumed_from_step (0: a fresh run), wall_s, time_<phase>_s (this attempt's
 * seconds per phase of tprofile.h, rank 0's, steps and validations), gemm_path.<path> = 1 (on the
 * CPU backend gemm_path.cpu, backend.h qw_backend_gemm_path_name, and cpu_path.<path> = 1, the BLAS
 * and kernel family: ops.h qw_backend_cpu_path; on a GPU the path of the linears' GEMMs,
 * gemm_path.bf16 when every one runs with BF16 operands and gemm_path.fp32 when some run FP32,
 * with gemm_bf16_count and gemm_fp32_count, the linear GEMMs of one micro-step on each path:
 * tmodel.h qw_tmodel_gemm_paths), and ckpt_damaged = 1 when the
 * checkpoint could not be read back (QS_EFORMAT: a checksum mismatch, a truncated file): it is
 * moved to <job_key>.ckpt.damaged with a warning on stderr naming the file and offset, and the
 * run starts again from step 0. Once the final weights are written the checkpoint is deleted.
 * A resumed run first reports again
 * every curve point up to its checkpoint (ckpt.h keeps them), so whatever an earlier attempt's
 * reports lost, the stored curve has every step once. wall_s is the sum over attempts: each
 * earlier attempt's seconds up to the checkpoint it left (all of a preempted attempt's; those
 * of a killed attempt after its last checkpoint are not counted, the attempt that redoes that
 * work counts it) plus this attempt's. */
#ifndef QW_TRAIN_TRAIN_JOB_H
#define QW_TRAIN_TRAIN_JOB_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "checkpoint.h"
#include "bytes_tokenizer.h"
#include "error.h"
#include "recipe.h"
#include "trainer.h"

typedef struct qw_train_spec {
    qw_config shape;      /* the model (from scratch), or the init checkpoint's config */
    char init_path[1024]; /* "" = from scratch: N(0, init_std^2) matrices, norms 1 */
    float init_std;       /* 0 = 0.02 */
    qw_recipe recipe;
    qw_train_config train; /* steps, accum, schedule, AdamW, clip, eval, divergence */
    int batch, ctx;        /* sequences per micro-batch, tokens per sequence */
    uint64_t seed;         /* init, data order, SR streams and RHT signs */
    double val_fraction;
    int log_every;             /* curve points every this many steps (0 = 1) */
    int checkpoint_every;      /* 0 = only on stop requests */
    int threads;               /* 0 = all cores */
    /* The backend the run trains on (backend.h): kind QW_BACKEND_CUDA with device and gemm, or
     * the CPU (QW_BACKEND_CPU, or QW_BACKEND_AUTO as a zeroed spec has it: the job kind resolves
     * the worker's --backend choice first, worker/jobs/jobs_backend.h). threads and max_in are
     * ignored: the CPU team is `threads` above. */
    qw_backend_choice backend;
    /* Data-parallel ranks (0 or 1: one): one model replica per rank (trainer.h), each on its
     * backend (CUDA: the devices of qw_train_rank_devices, an NCCL group; CPU: CPU ranks),
     * gradients all-reduced every step (worker/comm/comm.h). */
    int data_parallel;
    /* The CUDA ordinals of the GPUs the worker offers, in its --gpus order (the job kind
     * copies them from worker/jobs/jobs_backend.h): CUDA rank r runs on devices[r]. 0: no
     * list (a direct caller): rank r on backend.device + r. */
    int n_devices;
    int devices[QW_TRAIN_MAX_RANKS];
    char checkpoint_dir[1024]; /* "" = no checkpoints, no final HF checkpoint */
    char job_key[65];          /* names the files, and identifies the checkpoint */
} qw_train_spec;

/* The CUDA device of each of the R data-parallel ranks of spec (its backend CUDA) into
 * out[0..R): the first R of spec->devices, the GPUs the job was given, in their order; without
 * a list, spec->backend.device + r. On the CPU backend every rank gets -1 (CPU ranks have no
 * device). Pure: no device is touched. Errors: QS_EINVAL (R outside 1..QW_TRAIN_MAX_RANKS;
 * fewer offered GPUs than R, naming both counts; an ordinal given twice or negative). */
qs_status qw_train_rank_devices(const qw_train_spec *spec, int R, int *out, qs_error *err);

typedef struct qw_train_hooks {
    void (*heartbeat)(void *user, int step, int total); /* after every step */
    void (*metric)(void *user, const char *name, int64_t step, double value);
    int (*stop_requested)(void *user); /* polled after every step: 1 = checkpoint and stop */
    void *user;
} qw_train_hooks;

typedef struct qw_train_outcome {
    int resumed_from; /* the checkpoint's step, 0 when the run started fresh */
    int steps_done;
    int preempted;       /* 1: stopped on request after checkpointing */
    int diverged_step;   /* 0, or the step that diverged */
    int damaged_restart; /* 1: the checkpoint was damaged, moved to <job_key>.ckpt.damaged, and
                            the run started again from step 0 (final metric ckpt_damaged = 1) */
    double final_train_loss, final_val_loss;
} qw_train_outcome;

/* Runs (or resumes) the training of spec over tokens[n] (ids < shape.vocab_size).
 * Returns QS_OK when done; QS_ECANCELLED "preempted at step S" after a stop request (the
 * checkpoint is written first); QS_ESTATE "diverged at step S: ..." (no final metrics, no
 * checkpoint of the diverged state); QS_EINVAL for a bad spec or data (naming the field);
 * errors of the model, checkpoints and files otherwise. */
qs_status qw_train_job_run(const qw_train_spec *spec, const uint32_t *tokens, size_t n,
                           const qw_train_hooks *hooks, qw_train_outcome *out, qs_error *err);

/* A named model shape for training from scratch: any shape of the engine's table
 * (worker/engine/synthetic.h, one list for every job kind): "tiny" (d 128, 4 blocks, 4 heads,
 * 2 KV heads, FFN 384, ctx 128, vocabulary 258 = bytes + BOS + EOS, about 0.9M parameters),
 * "micro" (d 64, 2 blocks, 4/2 heads, FFN 192, the unit tests' shape), "mini" (d 256, 4 blocks,
 * 8/4 heads, FFN 768, ctx 256, about 3.3M parameters), "small" (d 512, 8 blocks, 8/4 heads, FFN
 * 1536, ctx 512, about 25M), "smollm2-135m" (SmolLM2-135M's own shape and 49152-token
 * vocabulary), the test shapes, and the published Llama configs
 * up to llama2-7b, llama3-8b and beyond (their full vocabulary; the bytes tokenizer's ids are
 * within it). Errors: QS_EINVAL listing the names. */
qs_status qw_train_shape_by_name(const char *name, qw_config *out, qs_error *err);


#endif
