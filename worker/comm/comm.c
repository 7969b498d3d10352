/* The ranks interface (comm.h): CPU ranks in rank order, NCCL ranks through the registered
 * implementation. */
#include "comm.h"

#include <stdatomic.h>
#include <string.h>

static const qw_group_nccl_impl *_Atomic nccl_impl;

void qw_group_set_nccl(const qw_group_nccl_impl *impl) {
    atomic_store(&nccl_impl, impl);
}

qs_status qw_group_cpu(qw_group *g, int n, int threads, qs_error *err) {
    memset(g, 0, sizeof *g);
    if (n < 1 || n > QW_GROUP_MAX_RANKS)
        return qs_error_set(err, QS_EINVAL, "ranks: %d CPU ranks (expected 1..%d)", n,
                            QW_GROUP_MAX_RANKS);
    g->kind = QW_GROUP_CPU;
    g->n = n;
    g->threads = threads > 0 ? threads : 1;
    return QS_OK;
}

qs_status qw_group_nccl(qw_group *g, int n, const int *devices, qs_error *err) {
    memset(g, 0, sizeof *g);
    const qw_group_nccl_impl *impl = atomic_load(&nccl_impl);
    if (!impl)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "ranks: no NCCL ranks in this process (they come with the CUDA "
                            "backend module built with NCCL, loaded when the worker's backend "
                            "choice puts models on a GPU)");
    void *c = NULL;
    qs_status st = impl->init(n, devices, &c, err);
    if (st != QS_OK) return st;
    g->kind = QW_GROUP_NCCL;
    g->n = n;
    g->threads = 1;
    g->nccl = c;
    return QS_OK;
}

void qw_group_destroy(qw_group *g) {
    if (!g) return;
    const qw_group_nccl_impl *impl = atomic_load(&nccl_impl);
    if (g->kind == QW_GROUP_NCCL && impl) impl->destroy(g->nccl);
    memset(g, 0, sizeof *g);
}

qs_status qw_group_allreduce(qw_group *g, float *const *bufs, size_t count, qw_group_op op,
                             qs_error *err) {
    for (int r = 0; r < g->n; r++)
        if (!bufs[r]) return qs_error_set(err, QS_EINVAL, "all-reduce: rank %d has no buffer", r);
    if (g->kind == QW_GROUP_NCCL) {
        const qw_group_nccl_impl *impl = atomic_load(&nccl_impl);
        if (!impl) return qs_error_set(err, QS_EUNSUPPORTED, "all-reduce: no NCCL ranks");
        return impl->allreduce(g->nccl, bufs, count, op, err);
    }
    int n = g->n, nt = g->threads;
    float *d = bufs[0];
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t i = 0; i < count; i++) {
        float s = d[i];
        for (int r = 1; r < n; r++) {
            float v = bufs[r][i];
            s = op == QW_GROUP_SUM ? s + v : (v > s ? v : s);
        }
        d[i] = s;
    }
    for (int r = 1; r < n; r++)
        memcpy(bufs[r], d, count * sizeof *d);
    return QS_OK;
}
