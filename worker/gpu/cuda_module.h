/* The CUDA backend as a module the worker loads (libqsweep_cuda.so): the qsweep binaries link
 * no CUDA library, so `qsweep --help`, `qsweep status` and every CPU job start without loading
 * cuBLAS. The worker lists its GPUs through the driver alone (gpu_info.h, libcuda.so.1 opened
 * with dlopen) and loads this module only when a job kind is to put a model on a GPU
 * (worker/jobs/jobs_backend.h). The module holds the engine's CUDA backend (ops_cuda.h,
 * model_cuda.h), NCCL ranks (worker/comm/comm_group_nccl.h) and kernels/cuda, linked with
 * the CUDA runtime (static), cuBLAS, cuBLASLt and NCCL;
 * the engine and numeric-core functions it calls are the binary's own (the binaries export
 * their symbols: CMake ENABLE_EXPORTS), so both sides share one copy of every table.
 *
 * Where it is looked for, first hit wins: $QSWEEP_CUDA_MODULE (a path), the directory of the
 * running binary, ../lib/qsweep/ beside it (an installed tree), then the build tree's path
 * compiled in (QW_CUDA_MODULE_BUILD_PATH). A module of another ABI version is refused. */
#ifndef QW_CUDA_MODULE_H
#define QW_CUDA_MODULE_H

#include <stddef.h>

#include "error.h"

/* Bumped when the table below or a struct it passes (qw_model, qw_backend, the backend and
 * ranks tables) changes. */
#define QW_CUDA_MODULE_ABI 5

/* The module's file name. */
#define QW_CUDA_MODULE_FILE "libqsweep_cuda.so"

/* The symbol the module exports: const qw_cuda_module *qw_cuda_module_entry(void). */
#define QW_CUDA_MODULE_SYMBOL "qw_cuda_module_entry"

typedef struct qw_model qw_model;
typedef struct qw_backend_cuda_impl qw_backend_cuda_impl; /* worker/engine/backend.h */
typedef struct qw_group_nccl_impl qw_group_nccl_impl;     /* worker/comm/comm.h */
typedef struct qk_gemm_probe qk_gemm_probe;               /* kernels/cuda/qk_gemm_probe.h */

/* What the module offers; gemm is an ops_cuda.h qw_cuda_gemm value. Each model_ function is the
 * one of worker/engine/model_cuda.h of the same name. backend_cuda: the CUDA backend of the
 * engine's ops table (worker/engine/backend_cuda.h), which the loader registers with
 * backend.h qw_backend_set_cuda (training opens its backends through qw_backend_open).
 * group_nccl: NCCL ranks (worker/comm/comm_group_nccl.h), registered with comm.h
 * qw_group_set_nccl; NULL when the module was built without NCCL. */
typedef struct qw_cuda_module {
    unsigned abi; /* QW_CUDA_MODULE_ABI */
    qs_status (*model_use_cuda)(qw_model *m, int device, int gemm, qs_error *err);
    qs_status (*model_use_cpu)(qw_model *m, qs_error *err);
    const char *(*model_gemm_path)(const qw_model *m);
    void (*model_gemm_path_reset)(qw_model *m);
    /* model_cuda.h qw_model_gemm_fallback */
    int (*model_gemm_fallback)(const qw_model *m, char *status, size_t status_cap, char *why,
                               size_t why_cap);
    const qw_backend_cuda_impl *backend_cuda;
    const qw_group_nccl_impl *group_nccl;
    /* model_cuda.h qw_model_gemm_probe: what the device of m's first rank proved */
    int (*model_gemm_probe)(const qw_model *m, qk_gemm_probe *out);
    /* CUDA device `device`'s GEMM probe (qk_gemm_probe.h qk_gemm_probe_run: run once per device
       and process, then the cached answer) */
    qs_status (*gemm_probe)(int device, qk_gemm_probe *out, qs_error *err);
} qw_cuda_module;

/* The module, loaded on the first call (thread-safe, once per process); NULL when it cannot be
 * loaded, with why (why_cap bytes: "this build has no CUDA backend", "libqsweep_cuda.so: cannot
 * open shared object file ...", "another ABI version"). Later calls give the same answer. */
const qw_cuda_module *qw_cuda_module_get(char *why, size_t why_cap);

/* The module if a call of qw_cuda_module_get loaded it already, else NULL; never loads it (what
 * asks about a model that may be on the CPU: a CPU-only process keeps CUDA out). */
const qw_cuda_module *qw_cuda_module_loaded(void);

#endif
