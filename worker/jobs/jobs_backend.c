/* The job kinds' backend choice (jobs_backend.h). */
#include "jobs_backend.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "cuda_module.h"
#include "qk_gemm_path.h"
#include "qk_gemm_probe.h"

/* The loaded module's CUDA backend and NCCL ranks, registered with the engine (backend.h,
 * comm.h) so that what opens backends or ranks itself (training) reaches them; returns mod. */
static const qw_cuda_module *adopt(const qw_cuda_module *mod) {
    if (mod) {
        qw_backend_set_cuda(mod->backend_cuda);
        qw_group_set_nccl(mod->group_nccl);
    }
    return mod;
}

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
    *out = (qw_jobs_backend){.kind = kind,
                             .device = device,
                             .gemm = gemm,
                             .cc = n_gpus ? (int)(10 * gpus[0].cc_major + gpus[0].cc_minor) : 0};
    for (size_t i = 0; i < n_gpus && i < QW_JOBS_MAX_DEVICES; i++)
        out->devices[out->n_devices++] = gpus[i].device;
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

qs_status qw_jobs_backend_pick_ranks(const qw_jobs_backend *c, bool cuda_built, int n,
                                     qw_jobs_ranks_use *out, qs_error *err) {
    *out = (qw_jobs_ranks_use){.use_cuda = false, .gemm = c->gemm, .n = n};
    for (int r = 0; r < QW_JOBS_MAX_DEVICES; r++)
        out->devices[r] = -1;
    if (n < 2) return qs_error_set(err, QS_EINVAL, "tensor_parallel %d: ranks need n >= 2", n);
    if (!qw_jobs_backend_pick(c, cuda_built, false).use_cuda) return QS_OK; /* CPU ranks */
    if (n > c->n_devices) {
        char list[8 * QW_JOBS_MAX_DEVICES] = "";
        size_t at = 0;
        for (int i = 0; i < c->n_devices && at < sizeof list; i++)
            at +=
                (size_t)snprintf(list + at, sizeof list - at, "%s%d", i ? "," : "", c->devices[i]);
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "tensor_parallel %d needs %d GPUs: the worker offers %d (--gpus %s); "
                            "a worker offering %d runs it",
                            n, n, c->n_devices, list, n);
    }
    if (c->no_nccl)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "tensor_parallel %d on GPUs: the CUDA backend module was built "
                            "without NCCL, which the ranks all-reduce over (comm.h)",
                            n);
    out->use_cuda = true;
    for (int r = 0; r < n; r++)
        out->devices[r] = c->devices[r];
    return QS_OK;
}

qs_status qw_jobs_rank_backend(qw_backend *b, int rank, int threads, int max_in, void *ctx,
                               int *device, qs_error *err) {
    const qw_jobs_ranks_use *u = ctx;
    if (rank < 0 || rank >= u->n || rank >= QW_JOBS_MAX_DEVICES)
        return qs_error_set(err, QS_EINVAL, "tensor-parallel rank %d of %d", rank, u->n);
    qw_backend_choice bc = {.kind = QW_BACKEND_CUDA,
                            .threads = threads,
                            .max_in = max_in,
                            .device = u->devices[rank],
                            .gemm = u->gemm};
    *device = u->devices[rank];
    qs_status st = qw_backend_open(b, &bc, err);
    if (st) return qs_error_wrap(err, "tensor-parallel rank %d on CUDA device %d", rank, *device);
    return QS_OK;
}

/* The choice the job kinds read; `set` says whether qw_jobs_backend_set was called. */
static qw_jobs_backend chosen;
static atomic_bool set;

qs_status qw_jobs_backend_set(const qw_jobs_backend *c, qs_error *err) {
    qw_jobs_backend next = *c;
    next.fallback[0] = next.fallback_code[0] = 0;
    if (c->kind == QW_BACKEND_AUTO && !qw_backend_cuda_built()) {
        snprintf(next.fallback, sizeof next.fallback,
                 "this build has no CUDA backend (built without nvcc)");
        snprintf(next.fallback_code, sizeof next.fallback_code, "no_cuda_build");
    } else if (c->kind == QW_BACKEND_AUTO && c->device < 0) {
        snprintf(next.fallback, sizeof next.fallback, "the worker offers no GPU");
        snprintf(next.fallback_code, sizeof next.fallback_code, "no_gpu");
    }
    char why[sizeof next.fallback - 64];
    const qw_cuda_module *mod = NULL;
    if (c->kind != QW_BACKEND_CPU && c->device >= 0 && qw_backend_cuda_built() &&
        !(mod = adopt(qw_cuda_module_get(why, sizeof why)))) {
        if (c->kind == QW_BACKEND_CUDA) /* asked for CUDA: never the CPU in its place */
            return qs_error_set(err, QS_EUNSUPPORTED,
                                "--backend cuda: the CUDA backend cannot be used (%s); "
                                "--backend auto runs on the CPU instead",
                                why);
        snprintf(next.fallback, sizeof next.fallback, "CUDA backend not available: %s", why);
        snprintf(next.fallback_code, sizeof next.fallback_code, "cuda_unavailable");
        fprintf(stderr, "qsweep worker: --backend auto: %s: jobs run on the CPU backend\n",
                next.fallback);
        next.device = -1;
    }
    if (mod) next.no_nccl = !mod->group_nccl;
    chosen = next;
    atomic_store(&set, true);
    return QS_OK;
}

qs_status qw_jobs_use_cuda(qw_model *m, int device, int gemm, qs_error *err) {
    char why[512];
    const qw_cuda_module *mod = adopt(qw_cuda_module_get(why, sizeof why));
    if (!mod) return qs_error_set(err, QS_EUNSUPPORTED, "CUDA backend module: %s", why);
    return mod->model_use_cuda(m, device, gemm, err);
}

qs_status qw_jobs_use_cpu(qw_model *m, qs_error *err) {
    const qw_cuda_module *mod = qw_cuda_module_loaded();
    return mod ? mod->model_use_cpu(m, err) : QS_OK; /* never moved without the module */
}

const char *qw_jobs_gemm_path(const qw_model *m) {
    const qw_cuda_module *mod = qw_cuda_module_loaded();
    return mod ? mod->model_gemm_path(m) : "cpu";
}

void qw_jobs_gemm_path_reset(qw_model *m) {
    const qw_cuda_module *mod = qw_cuda_module_loaded();
    if (mod) mod->model_gemm_path_reset(m);
}

int qw_jobs_gemm_fallback(const qw_model *m, char *status, size_t status_cap, char *why,
                          size_t why_cap) {
    const qw_cuda_module *mod = qw_cuda_module_loaded();
    if (status_cap) status[0] = 0;
    if (why_cap) why[0] = 0;
    return mod ? mod->model_gemm_fallback(m, status, status_cap, why, why_cap) : 0;
}

void qw_jobs_gemm_fallback_metric(const char *status, char *buf, size_t cap) {
    size_t at = (size_t)snprintf(buf, cap, "gemm_fallback.");
    for (const char *p = status && *status ? status : "unknown"; *p && at + 1 < cap; p++)
        buf[at++] = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
    if (at < cap) buf[at] = 0;
}

qw_jobs_offer qw_jobs_backend_offer(qw_backend_kind requested, size_t n_gpus,
                                    const char *fallback_code) {
    qw_jobs_offer o = {.n_gpus = n_gpus, .why = ""};
    if (requested == QW_BACKEND_CPU || !fallback_code || !*fallback_code) return o;
    o.n_gpus = 0;
    if (n_gpus)
        snprintf(o.why, sizeof o.why,
                 "--backend auto runs on the CPU (%.24s): %zu GPU%s not offered", fallback_code,
                 n_gpus, n_gpus == 1 ? "" : "s");
    return o;
}

qw_jobs_backend qw_jobs_backend_get(void) {
    if (atomic_load(&set)) return chosen;
    /* no GPU offered: whatever $QSWEEP_BACKEND says, nothing but the CPU can be picked */
    return (qw_jobs_backend){.kind = QW_BACKEND_AUTO, .device = -1, .gemm = QW_JOBS_GEMM_AUTO};
}

int qw_jobs_gemm_probe_metrics(const qw_model *m, char (*names)[64], int cap) {
    const qw_cuda_module *mod = qw_cuda_module_loaded();
    qk_gemm_probe p;
    if (!mod || !mod->model_gemm_probe || !mod->model_gemm_probe(m, &p)) return 0;
    int n = 0;
    for (int f = 0; f < QK_PROBE_FORMATS && n < cap; f++)
        qk_gemm_probe_metric(&p, (qk_probe_format)f, names[n++], 64);
    return n;
}

void qw_jobs_gemm_path_metric(const char *path, char *buf, size_t cap) {
    snprintf(buf, cap, "gemm_path.%s", path && *path ? path : "none");
}
