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
 *   - A job that asks for the SQNR probe runs on the CPU whatever the choice (the CUDA backend
 *     refuses the probe: worker/engine/model_cuda.h), and its result says so (metric
 *     "probe_on_cpu" = 1 when the worker would have used CUDA). So does a tensor-parallel job
 *     (resources.gpu_count > 1): its ranks are CPU backends for now (qw_jobs_backend_pick).
 * Every eval and baseline result records the GEMM path it ran with as one final metric named
 * "gemm_path.<path>" with value 1 (path: cpu, fp32, bf16, native_fp4, emulated_bf16: backend.h
 * qw_backend_gemm_path_name), so SQL groups by substr(name, 11) (schema/080_gemm_path.sql).
 * The CUDA GEMM path is $QSWEEP_CUDA_GEMM ("fp32" default, "bf16", "lt": backend.h). */
#ifndef QW_JOBS_BACKEND_H
#define QW_JOBS_BACKEND_H

#include <stdbool.h>
#include <stddef.h>

#include "backend.h"
#include "error.h"
#include "loop.h"

/* The process-wide choice: kind as given, the CUDA ordinal of the first offered GPU (-1: the
 * worker offers none), the CUDA GEMM path (backend.h qw_backend_choice.gemm values). */
typedef struct qw_jobs_backend {
    qw_backend_kind kind;
    int device;
    int gemm;
} qw_jobs_backend;

/* The backend one model runs on: use_cuda, and the device when it does. */
typedef struct qw_jobs_backend_use {
    bool use_cuda;
    int device;
    int gemm;
} qw_jobs_backend_use;

/* Fills *out from kind_name ("auto", "cpu", "cuda"; NULL or "": $QSWEEP_BACKEND, else
 * "auto"), the GPUs the worker offers (gpus[0..n_gpus), n_gpus 0 = none) and cuda_built (pass
 * qw_backend_cuda_built()). $QSWEEP_CUDA_GEMM picks the CUDA GEMM path (default "fp32").
 * Errors: QS_EINVAL for an unknown kind or GEMM name (quoting it and where it came from:
 * "--backend" or "$QSWEEP_BACKEND"); QS_EUNSUPPORTED for "cuda" without CUDA in the build or
 * without an offered GPU (the message says which). On error *out is the CPU choice. */
qs_status qw_jobs_backend_config(const char *kind_name, const qw_gpu *gpus, size_t n_gpus,
                                 bool cuda_built, qw_jobs_backend *out, qs_error *err);

/* Where a model goes under choice c (see the rules above); cpu_only: the job needs the CPU
 * backend (the SQNR probe; tensor parallelism, whose ranks are CPU backends until the engine
 * opens one CUDA backend per rank: worker/engine/shard.h qw_tp_create's init). Pure: the same
 * inputs give the same answer. */
qw_jobs_backend_use qw_jobs_backend_pick(const qw_jobs_backend *c, bool cuda_built,
                                         bool cpu_only);

/* Sets the process-wide choice the job kinds read (qw_jobs_backend_get); call before qw_run.
 * Without a call the choice is "auto" with no GPU offered: the CPU (a worker that never said
 * which GPUs it offers never uses one). */
void qw_jobs_backend_set(const qw_jobs_backend *c);

/* The process-wide choice (as set, or the default above). */
qw_jobs_backend qw_jobs_backend_get(void);

/* The result metric name for a GEMM path: "gemm_path.<path>" into buf (cap bytes). */
void qw_jobs_gemm_path_metric(const char *path, char *buf, size_t cap);

#endif
