/* Choosing the engine's backend at run time: the CPU reference, or the CUDA backend
 * (ops_cuda.h) when this build has it and a device is visible. A worker without CUDA (or a
 * build without nvcc) keeps running everything on the CPU backend.
 *
 * Kinds: "auto" (CUDA device 0 when available, else CPU), "cpu", "cuda" (device `device`,
 * an error when there is none), with the GEMM path of the CUDA backend ("fp32", the
 * reference-matching path, or "bf16", ops_cuda.h). */
#ifndef QW_BACKEND_H
#define QW_BACKEND_H

#include "error.h"
#include "ops.h"

typedef enum qw_backend_kind {
    QW_BACKEND_AUTO = 0,
    QW_BACKEND_CPU = 1,
    QW_BACKEND_CUDA = 2,
} qw_backend_kind;

/* What to open. threads and max_in as qw_backend_cpu_init (the CPU backend's team and the
 * weight-piece scratch); device and gemm for CUDA. */
typedef struct qw_backend_choice {
    qw_backend_kind kind;
    int threads, max_in;
    int device; /* CUDA device index (auto: 0) */
    int gemm;   /* the CUDA backend's GEMM path (qw_cuda_gemm values): 0 "fp32" (default),
                   1 "bf16", 2 "lt" (kernels/cuda's cuBLASLt GEMM, FP4 native or emulated) */
} qw_backend_choice;

/* Parses "auto", "cpu" or "cuda" (case-sensitive). Errors: QS_EINVAL quoting s and the names. */
qs_status qw_backend_kind_parse(const char *s, qw_backend_kind *out, qs_error *err);

/* Parses a CUDA GEMM path name, "fp32", "bf16" or "lt", into *gemm. Errors: QS_EINVAL quoting s
 * and the names. */
qs_status qw_backend_gemm_parse(const char *s, int *gemm, qs_error *err);

/* 1 when this build has the CUDA backend (QSWEEP_HAVE_CUDA), whatever the machine: linked in
 * (qw_engine_backend_cuda, tests and benchmarks) or as the module the worker loads
 * (qw_engine_backend in the qsweep binaries, worker/gpu/cuda_module.h; there qw_backend_open
 * opens CUDA through the table qw_backend_set_cuda registered). */
int qw_backend_cuda_built(void);

/* The CUDA backend as a table of ops_cuda.h's functions (backend_cuda.h gives it): available
 * qw_cuda_available, init qw_backend_cuda_init (gemm a qw_cuda_gemm value), release
 * qw_backend_cuda_release, gemm_path qw_backend_gemm_path, ops qw_ops_cuda. */
typedef struct qw_backend_cuda_impl {
    int (*available)(void);
    qs_status (*init)(qw_backend *b, int device, int gemm, qs_error *err);
    void (*release)(qw_backend *b);
    const char *(*gemm_path)(const qw_backend *b);
    const qw_ops *(*ops)(void);
} qw_backend_cuda_impl;

/* Registers the CUDA backend qw_backend_open opens from now on in a build whose CUDA backend
 * is the module (qw_engine_backend; NULL: none): the layer that loads the module registers its
 * table (worker/jobs/jobs_backend.h), so this library calls up into no loader. impl must
 * outlive every backend opened with it. Where the CUDA backend is linked in
 * (qw_engine_backend_cuda) qw_backend_open uses its own and ignores this. Thread-safe. */
void qw_backend_set_cuda(const qw_backend_cuda_impl *impl);

/* Opens b as chosen. auto: CUDA when built (linked in, or the module's table registered) and a
 * device is visible, else CPU (never an error for lack of a GPU). Errors: those of
 * qw_backend_cpu_init; for "cuda": QS_EUNSUPPORTED (build without CUDA, the module's table not
 * registered, or no device: says which), and those of qw_backend_cuda_init. On error b is
 * zeroed. */
qs_status qw_backend_open(qw_backend *b, const qw_backend_choice *c, qs_error *err);

/* Releases b whatever its kind; a zeroed struct is a no-op. */
void qw_backend_close(qw_backend *b);

/* The GEMM path recorded in results (one string in the job's metrics): "cpu" for the CPU
 * backend, "fp32" / "bf16" for CUDA's; "none" for a zeroed struct. */
const char *qw_backend_gemm_path_name(const qw_backend *b);

#endif
