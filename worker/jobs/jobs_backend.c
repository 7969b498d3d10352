/* The job kinds' backend choice (jobs_backend.h). */
#include "jobs_backend.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qk_gemm_path.h"

/* The backend's GEMM setting (ops_cuda.h qw_cuda_gemm values) for a request of the GEMM path
 * table: auto 2 (QW_CUDA_GEMM_LT), fp32 0, bf16 1, emulated 3. */
static int gemm_of_request(qk_gemm_request r) {
    switch (r) {
    case QK_GEMM_REQ_FP32:
        return 0;
    case QK_GEMM_REQ_BF16:
        return 1;
    case QK_GEMM_REQ_EMULATED:
        return 3;
    default:
        return 2;
    }
}

qs_status qw_jobs_backend_config(const char *kind_name, const qw_gpu *gpus, size_t n_gpus,
                                 bool cuda_built, qw_jobs_backend *out, qs_error *err) {
    *out = (qw_jobs_backend){.kind = QW_BACKEND_CPU, .device = -1, .gemm = QW_JOBS_GEMM_AUTO};
    const char *from = "--backend";
    if (!kind_name || !*kind_name) {
        kind_name = getenv("QSWEEP_BACKEND");
        from = "$QSWEEP_BACKEND";
        if (!kind_name || !*kind_name) kind_name = "auto";
    }
    qw_backend_kind kind;
    if (qw_backend_kind_parse(kind_name, &kind, err))
        return qs_error_set(err, QS_EINVAL, "%s \"%s\": expected auto, cpu or cuda", from,
                            kind_name);
    qk_gemm_request req = QK_GEMM_REQ_AUTO;
    const char *g = getenv("QSWEEP_CUDA_GEMM");
    if (g && *g && qk_gemm_request_parse(g, &req, err))
        return qs_error_set(err, QS_EINVAL,
                            "$QSWEEP_CUDA_GEMM \"%s\": expected auto, fp32, bf16 or emulated", g);
    int gemm = gemm_of_request(req);
    int device = n_gpus ? gpus[0].device : -1;
    if (kind == QW_BACKEND_CUDA && !cuda_built)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "%s cuda: this build has no CUDA backend (built without nvcc)", from);
    if (kind == QW_BACKEND_CUDA && device < 0)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "%s cuda: the worker offers no GPU (--gpus none, or none visible)",
                            from);
    *out = (qw_jobs_backend){.kind = kind, .device = device, .gemm = gemm};
    return QS_OK;
}

qw_jobs_backend_use qw_jobs_backend_pick(const qw_jobs_backend *c, bool cuda_built, bool cpu_only) {
    qw_jobs_backend_use u = {.use_cuda = false, .device = -1, .gemm = c->gemm};
    bool cuda = c->kind != QW_BACKEND_CPU && cuda_built && c->device >= 0;
    if (cuda && !cpu_only) {
        u.use_cuda = true;
        u.device = c->device;
    }
    return u;
}

/* The choice the job kinds read; `set` says whether qw_jobs_backend_set was called. */
static qw_jobs_backend chosen;
static atomic_bool set;

void qw_jobs_backend_set(const qw_jobs_backend *c) {
    chosen = *c;
    atomic_store(&set, true);
}

qw_jobs_backend qw_jobs_backend_get(void) {
    if (atomic_load(&set)) return chosen;
    /* no GPU offered: whatever $QSWEEP_BACKEND says, nothing but the CPU can be picked */
    return (qw_jobs_backend){.kind = QW_BACKEND_AUTO, .device = -1, .gemm = QW_JOBS_GEMM_AUTO};
}

void qw_jobs_gemm_path_metric(const char *path, char *buf, size_t cap) {
    snprintf(buf, cap, "gemm_path.%s", path && *path ? path : "none");
}
