/* Which numerics paths a request names: the rule the coordinator's scheduler
 * (coordinator/server/scheduler.h qc_sched_on_path) and the worker's ASSIGN check
 * (worker/loop/attempt.c) share. A path is where a job's arithmetic runs
 * (worker/jobs/jobs.h qw_jobs_numerics_path: "cpu-qsweep-fixed2", "cuda-cc90-auto", ...); a
 * request is a grid's `numerics` key (docs/gpu.md "Numerics paths and baselines"). */
#ifndef QS_NUMERICS_PATH_H
#define QS_NUMERICS_PATH_H

#include <stdbool.h>

/* Whether path is one that request want names: "cpu" any path "cpu" or "cpu-..." (the CPU
 * kernel families), "cuda" any "cuda-...", "any" every path, another text that path exactly. */
bool qs_numerics_path_matches(const char *want, const char *path);

/* The CPU's fixed-order kernel family, the path a default CPU worker announces. */
#define QS_NUMERICS_CPU_FIXED "cpu-qsweep-fixed2"

/* The GEMM request a CUDA path ends with, by the worker's request number (worker/jobs
 * jobs_backend.h: 0 fp32, 1 bf16, 2 auto, 3 emulated). */
extern const char *const qs_numerics_cuda_gemm[4];

/* Whether want is a request some worker's path can meet: "any", "cpu", "cuda", or a path in
 * a shape a worker announces: QS_NUMERICS_CPU_FIXED, "cpu-openblas-<version>-<core>" (lower
 * case), "cuda-cc<digits>-<qs_numerics_cuda_gemm>". */
bool qs_numerics_request_valid(const char *want);

/* Whether path is one path a worker may announce (qs_numerics_request_valid less "any" and the
 * families "cpu" and "cuda"): what an experiment can be pinned to. */
bool qs_numerics_path_valid(const char *path);

/* The forms qs_numerics_path_valid accepts, for messages that refuse another. */
#define QS_NUMERICS_PATH_FORMS                                                                     \
    QS_NUMERICS_CPU_FIXED ", cpu-openblas-<version>-<core> or "                                    \
                          "cuda-cc<NN>-<fp32|bf16|auto|emulated>"

#endif
