/* The ranks interface (comm.h): CPU ranks in rank order, NCCL through comm_nccl.h. */
#include "comm.h"

#include <string.h>

#ifdef QW_HAVE_NCCL
#include "comm_nccl.h"
#endif

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
#ifdef QW_HAVE_NCCL
    qw_comm *c = NULL;
    qs_status st = qw_comm_init_all(n, devices, &c, err);
    if (st != QS_OK) return st;
    g->kind = QW_GROUP_NCCL;
    g->n = n;
    g->threads = 1;
    g->nccl = c;
    return QS_OK;
#else
    (void)n, (void)devices;
    return qs_error_set(err, QS_EUNSUPPORTED,
                        "ranks: this build has no NCCL (needs CUDA and NCCL)");
#endif
}

void qw_group_destroy(qw_group *g) {
    if (!g) return;
#ifdef QW_HAVE_NCCL
    if (g->kind == QW_GROUP_NCCL) qw_comm_destroy(g->nccl);
#endif
    memset(g, 0, sizeof *g);
}

qs_status qw_group_allreduce(qw_group *g, float *const *bufs, size_t count, qw_group_op op,
                             qs_error *err) {
    for (int r = 0; r < g->n; r++)
        if (!bufs[r]) return qs_error_set(err, QS_EINVAL, "all-reduce: rank %d has no buffer", r);
#ifdef QW_HAVE_NCCL
    if (g->kind == QW_GROUP_NCCL) {
        qs_status st = qw_comm_allreduce(g->nccl, bufs, count,
                                         op == QW_GROUP_MAX ? QW_COMM_MAX : QW_COMM_SUM, NULL, err);
        return st != QS_OK ? st : qw_comm_sync(g->nccl, err);
    }
#endif
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
