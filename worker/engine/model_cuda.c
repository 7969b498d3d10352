/* Moving a model between the CPU and CUDA backends (model_cuda.h). */
#include "model_cuda.h"

#include <stdlib.h>
#include <string.h>

#include "model_internal.h"
#include "runstate.h"

static int on_cuda(const qw_model *m) {
    return m->rank.be.ops == qw_ops_cuda();
}

/* Entries computed by the other backend are not reused (model_cuda.h). */
static void drop_prefix_entries(qw_model *m) {
    for (int i = 0; i < m->prefix.n; i++)
        m->prefix.entries[i].n = 0;
}

qs_status qw_model_use_cuda(qw_model *m, int device, qw_cuda_gemm gemm, qs_error *err) {
    qw_backend b;
    qs_status st = qw_backend_cuda_init(&b, device, gemm, err);
    if (st != QS_OK) return st;
    qw_runstate rs;
    st = qw_runstate_init(&rs, &b, &m->cfg, m->max_ctx, 1, err);
    if (st != QS_OK) {
        qw_backend_cuda_release(&b);
        return st;
    }
    int probe = m->rank.probe;
    qw_model_probe_release(m); /* freed with the backend that allocated it */
    qw_runstate_release(&m->rank.rs, &m->rank.be);
    /* the backend's own release, not backend.h's qw_backend_close: in the CUDA module that name
       is the binary's, built without the CUDA backend (worker/gpu/cuda_module.h) */
    if (on_cuda(m))
        qw_backend_cuda_release(&m->rank.be);
    else
        qw_backend_release(&m->rank.be);
    m->rank.be = b;
    m->rank.rs = rs;
    drop_prefix_entries(m);
    return probe ? qw_model_probe_remake(m, err) : QS_OK;
}

qs_status qw_model_use_cpu(qw_model *m, qs_error *err) {
    if (!on_cuda(m)) return QS_OK;
    int threads = m->threads, probe = m->rank.probe;
    qw_model_probe_release(m);
    qw_runstate_release(&m->rank.rs, &m->rank.be);
    qw_backend_cuda_release(&m->rank.be);
    drop_prefix_entries(m);
    /* set_threads rebuilds the CPU backend and run state when the count changes: the backend
     * and run state are zeroed now, so their release there is a no-op. */
    m->threads = 0;
    qs_status st = qw_model_set_threads(m, threads, err);
    return st == QS_OK && probe ? qw_model_probe_remake(m, err) : st;
}

/* The backend of rank r of m's forward: its tensor-parallel ranks when sharded (model.h
 * qw_model_tp_backend), else the model's own (rank 0 only); NULL past the last. */
static qw_backend *forward_backend(const qw_model *m, int r) {
    if (qw_model_tensor_parallel(m) > 1) return qw_model_tp_backend(m, r);
    return r == 0 ? (qw_backend *)&m->rank.be : NULL;
}

const char *qw_model_gemm_path(const qw_model *m) {
    const char *best = NULL;
    for (int r = 0; forward_backend(m, r); r++) {
        const qw_backend *b = forward_backend(m, r);
        const char *p = b->ops ? qw_backend_gemm_path(b) : "none";
        if (!best || qw_gemm_path_rank(p) > qw_gemm_path_rank(best)) best = p;
    }
    return best ? best : "none";
}

int qw_model_gemm_fallback(const qw_model *m, char *status, size_t status_cap, char *why,
                           size_t why_cap) {
    for (int r = 0; forward_backend(m, r); r++)
        if (qw_backend_cuda_gemm_fallback(forward_backend(m, r), status, status_cap, why, why_cap))
            return 1;
    return 0;
}

int qw_model_gemm_probe(const qw_model *m, struct qk_gemm_probe *out) {
    for (int r = 0; forward_backend(m, r); r++)
        if (qw_backend_cuda_gemm_probe(forward_backend(m, r), out)) return 1;
    return 0;
}

void qw_model_gemm_path_reset(qw_model *m) {
    for (int r = 0; forward_backend(m, r); r++)
        qw_backend_cuda_gemm_path_reset(forward_backend(m, r)); /* a no-op on a CPU backend */
}

void qw_model_cuda_cache_stats(const qw_model *m, qw_cuda_cache_stats *out) {
    qw_backend_cuda_cache_stats(&m->rank.be, out);
}
