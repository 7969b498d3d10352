/* Which engine backend the worker's eval and baseline jobs run on: chosen once per
 * process (`qsweep worker --backend`, else $QSWEEP_BACKEND, else "auto") and applied once per
 * loaded model, which the worker's model cache keeps on that backend across jobs.
 *
 * Rules (qw_jobs_backend_pick):
 *   - "auto": CUDA on the first GPU the worker offers (qsweep worker --gpus) when this build has
 *     the CUDA backend (backend.h qw_backend_cuda_built) and the worker offers a GPU; else CPU.
 *   - "cpu": always the CPU backend.
 *   - "cuda": CUDA on the first offered GPU; refused when the process is configured
 *     (qw_jobs_backend_set) if the build has no CUDA or the worker offers no GPU: a worker
 *     started with `--gpus none` never uses CUDA.
 *   - A job that asks for the SQNR probe runs where any other job runs: the probe's reference
 *     GEMMs and sums run on the model's backend (worker/engine/model_cuda.h).
 *   - A tensor-parallel job (tensor_parallel N = resources.gpu_count > 1) runs its N ranks
 *     where a one-GPU job would run its model (qw_jobs_backend_pick_ranks): on the CPU (CPU
 *     ranks) when that is the CPU, else rank r on the worker's r-th offered GPU in its --gpus
 *     order (the scheduler fits a job of N GPUs on a worker's first N), all-reducing over
 *     NCCL; a worker offering fewer than N GPUs, or whose CUDA module has no NCCL, refuses the
 *     job (QS_EUNSUPPORTED, a worker error: another worker may run it) rather than run ranks
 *     the grid did not ask for, as data-parallel training does (worker/train/train_job.h
 *     qw_train_rank_devices).
 * Every eval and baseline result records the GEMM path it ran with as one final metric named
 * "gemm_path.<path>" with value 1 (path: cpu, fp32, bf16, native_fp4, emulated_bf16: backend.h
 * qw_backend_gemm_path_name), so SQL groups by substr(name, 11) (schema/080_gemm_path.sql).
 * The CUDA GEMM paths follow from the device and the job: each linear takes the answer of the
 * GEMM path table (kernels/cuda/qk_gemm_path.h qk_gemm_decide: native FP4 on 10.x, the exact
 * BF16 emulation elsewhere, BF16 for weights exact in BF16, FP32 for the others) under the
 * request $QSWEEP_CUDA_GEMM: "auto" (default), "emulated" (FP4 never native), or "fp32" /
 * "bf16" for every GEMM ("lt" is read as "auto"). FP32 runs only for weights BF16 would
 * change, or when asked for. */
#ifndef QW_JOBS_BACKEND_H
#define QW_JOBS_BACKEND_H

#include <stdbool.h>
#include <stddef.h>

#include "backend.h"
#include "error.h"
#include "loop.h"
#include "model.h"

/* The CUDA backend's GEMM setting for the request "auto" (ops_cuda.h QW_CUDA_GEMM_LT). */
#define QW_JOBS_GEMM_AUTO 2

/* Offered GPUs a choice keeps the CUDA ordinals of. */
#define QW_JOBS_MAX_DEVICES 16

/* The process-wide choice: kind as given, the CUDA ordinal of the first offered GPU (-1: the
 * worker offers none), the CUDA GEMM setting (ops_cuda.h qw_cuda_gemm values: 0 fp32, 1 bf16,
 * 2 auto, 3 emulated), and the ordinals of every offered GPU in the worker's --gpus order
 * (devices[0] == device): a job asking for k GPUs runs on the first k of them, the ones the
 * scheduler fitted it on (coordinator/server/scheduler.h qc_sched_fits). */
typedef struct qw_jobs_backend {
    qw_backend_kind kind;
    int device;
    int gemm;
    int cc; /* compute capability (10 * major + minor) of device, 0 without one */
    int n_devices;
    int devices[QW_JOBS_MAX_DEVICES];
    bool no_nccl; /* the loaded CUDA module has no NCCL ranks (qw_jobs_backend_set) */
    /* "auto" that runs on the CPU: why ("this build has no CUDA backend", "the worker offers
       no GPU", "CUDA backend not available: ..."); "" else */
    char fallback[320];
    /* the same as a metric name's tail: "no_cuda_build", "no_gpu", "cuda_unavailable"; "" */
    char fallback_code[24];
} qw_jobs_backend;

/* The backend one model runs on: use_cuda, and the device when it does. */
typedef struct qw_jobs_backend_use {
    bool use_cuda;
    int device;
    int gemm;
} qw_jobs_backend_use;

/* Fills *out from kind_name ("auto", "cpu", "cuda"; NULL or "": $QSWEEP_BACKEND, else
 * "auto"), the GPUs the worker offers (gpus[0..n_gpus), n_gpus 0 = none) and cuda_built (pass
 * qw_backend_cuda_built()). $QSWEEP_CUDA_GEMM is the GEMM request (default "auto").
 * Errors: QS_EINVAL for an unknown kind or GEMM name (quoting it and where it came from:
 * "--backend" or "$QSWEEP_BACKEND"); QS_EUNSUPPORTED for "cuda" without CUDA in the build or
 * without an offered GPU (the message says which). On error *out is the CPU choice. */
qs_status qw_jobs_backend_config(const char *kind_name, const qw_gpu *gpus, size_t n_gpus,
                                 bool cuda_built, qw_jobs_backend *out, qs_error *err);

/* Where a model goes under choice c (see the rules above); cpu_only: the job needs the model
 * on the CPU backend (a tensor-parallel job, whose ranks run the forward). Pure: the same inputs
 * give the same answer. */
qw_jobs_backend_use qw_jobs_backend_pick(const qw_jobs_backend *c, bool cuda_built, bool cpu_only);

/* Where the n ranks of a tensor-parallel job go: use_cuda false, CPU ranks; use_cuda true,
 * rank r on CUDA device devices[r] with GEMM setting gemm. */
typedef struct qw_jobs_ranks_use {
    bool use_cuda;
    int gemm;
    int n;
    int devices[QW_JOBS_MAX_DEVICES];
} qw_jobs_ranks_use;

/* The ranks of a tensor_parallel n job (n >= 2) under choice c (the rules above): where
 * qw_jobs_backend_pick(c, cuda_built, false) puts a model, on the CPU, CPU ranks; on CUDA, the
 * first n offered GPUs (c->devices, in --gpus order). Pure. Errors: QS_EUNSUPPORTED when the
 * choice is CUDA and the worker offers fewer than n GPUs (naming n, the count and the GPUs),
 * n is above QW_JOBS_MAX_DEVICES, or the CUDA module has no NCCL (c->no_nccl); QS_EINVAL
 * for n < 2. On error *out is CPU ranks. */
qs_status qw_jobs_backend_pick_ranks(const qw_jobs_backend *c, bool cuda_built, int n,
                                     qw_jobs_ranks_use *out, qs_error *err);

/* A rank backend callback for tensor-parallel ranks on GPUs (worker/engine/shard.h
 * qw_rank_backend_fn; model.h qw_model_set_tp_backends), ctx a qw_jobs_ranks_use with use_cuda:
 * rank r opens the CUDA backend on devices[r] with its gemm through backend.h
 * qw_backend_open, the way training opens its ranks (the module's table, which
 * qw_jobs_backend_set registered), and reports that device. Errors: QS_EINVAL (r outside
 * 0..n-1), those of qw_backend_open. Its release is backend.h qw_backend_close. */
qs_status qw_jobs_rank_backend(qw_backend *b, int rank, int threads, int max_in, void *ctx,
                               int *device, qs_error *err);

/* Sets the process-wide choice the job kinds read (qw_jobs_backend_get); call before qw_run.
 * When the choice would put models on a GPU, the CUDA backend module is loaded now
 * (cuda_module.h) and its CUDA backend and NCCL ranks are registered with the engine (backend.h
 * qw_backend_set_cuda, comm.h qw_group_set_nccl: the training job kind and tensor-parallel
 * ranks open their backends and groups through them; no_nccl says the module has none). If it
 * cannot be loaded (the module missing or of another ABI, the CUDA runtime refusing the driver):
 * kind "cuda" is refused, QS_EUNSUPPORTED naming why, and nothing is set, so `--backend cuda`
 * never runs a job on the CPU; kind "auto" becomes the CPU (device -1), with why in `fallback`
 * and on stderr. Kind "auto" in a build without CUDA, or offered no GPU, runs on the CPU too,
 * and says which in `fallback` and `fallback_code` (the worker's HELLO and every result carry
 * it: worker/jobs/jobs.c). Without a call the choice is "auto" with no GPU offered: the CPU (a
 * worker that never said which GPUs it offers never uses one). */
qs_status qw_jobs_backend_set(const qw_jobs_backend *c, qs_error *err);

/* What a worker offers in its HELLO: the GPUs its jobs may use, and why it withholds the others
 * its --gpus named. */
typedef struct qw_jobs_offer {
    size_t n_gpus; /* the first n_gpus of the --gpus list; 0 withholds them all */
    char why[160]; /* "" when nothing is withheld */
} qw_jobs_offer;

/* The GPUs to announce, from the backend asked for (`--backend`), the n_gpus --gpus offers and
 * the fallback code of the choice qw_jobs_backend_set made (qw_jobs_backend.fallback_code, ""
 * when none). A worker whose backend falls back to the CPU, for any reason, offers no GPU (its
 * jobs would run on the CPU, so the scheduler must not fit GPU jobs on it): "--backend auto
 * runs on the CPU (<code>): 2 GPUs not offered". "cuda" and "auto" on CUDA offer them all, and
 * so does "cpu", asked for by name (its tensor-parallel ranks are CPU ranks of a job fitted on
 * its GPUs). Pure. */
qw_jobs_offer qw_jobs_backend_offer(qw_backend_kind requested, size_t n_gpus,
                                    const char *fallback_code);

/* The process-wide choice (as set, or the default above). */
qw_jobs_backend qw_jobs_backend_get(void);

/* The result metric name for a GEMM path: "gemm_path.<path>" into buf (cap bytes). */
void qw_jobs_gemm_path_metric(const char *path, char *buf, size_t cap);

/* The result metric that says why a native FP4 GEMM ran emulated: "gemm_fallback.<status>" with
 * status the CUBLAS_STATUS_* name in lower case ("gemm_fallback.cublas_status_invalid_value"),
 * into buf (cap bytes); results carry it beside "gemm_path.emulated_bf16". */
void qw_jobs_gemm_fallback_metric(const char *status, char *buf, size_t cap);

/* The result metrics of what m's GPU proved at its backend's start: one
 * "gemm_probe.<format>.<outcome>" per probed format (kernels/cuda/qk_gemm_probe.h
 * qk_gemm_probe_metric, "gemm_probe.nvfp4.ok") into names[0..cap); returns how many, 0 on the
 * CPU, under a fixed fp32 / bf16 request, or without the module (model_cuda.h
 * qw_model_gemm_probe). Never loads the module. */
int qw_jobs_gemm_probe_metrics(const qw_model *m, char (*names)[64], int cap);

/* A model on the CUDA backend through the module (worker/gpu/cuda_module.h), for the job kinds:
 * qw_jobs_use_cuda moves m onto CUDA device `device` with GEMM setting gemm (QS_EUNSUPPORTED
 * naming why when the module cannot be loaded; else model_cuda.h qw_model_use_cuda's errors),
 * qw_jobs_use_cpu back onto the CPU, qw_jobs_gemm_path the path results record ("cpu" on the
 * CPU), qw_jobs_gemm_path_reset a new count (a no-op on the CPU), qw_jobs_gemm_fallback
 * model_cuda.h qw_model_gemm_fallback (0 on the CPU). Only qw_jobs_use_cuda loads the module. */
qs_status qw_jobs_use_cuda(qw_model *m, int device, int gemm, qs_error *err);
qs_status qw_jobs_use_cpu(qw_model *m, qs_error *err);
const char *qw_jobs_gemm_path(const qw_model *m);
void qw_jobs_gemm_path_reset(qw_model *m);
int qw_jobs_gemm_fallback(const qw_model *m, char *status, size_t status_cap, char *why,
                          size_t why_cap);

#endif
