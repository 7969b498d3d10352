/* The ranks interface (comm.h): CPU ranks in rank order, NCCL ranks through the registered
 * implementation, and the rank threads that meet at their collectives. */
#include "comm.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static const qw_group_nccl_impl *_Atomic nccl_impl;

void qw_group_set_nccl(const qw_group_nccl_impl *impl) {
    atomic_store(&nccl_impl, impl);
}

/* The rank threads' meeting point, made with the group. */
static void meet_init(qw_group *g) {
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->meet_init = 1;
}

qs_status qw_group_cpu(qw_group *g, int n, int threads, qs_error *err) {
    memset(g, 0, sizeof *g);
    if (n < 1 || n > QW_GROUP_MAX_RANKS)
        return qs_error_set(err, QS_EINVAL, "ranks: %d CPU ranks (expected 1..%d)", n,
                            QW_GROUP_MAX_RANKS);
    g->kind = QW_GROUP_CPU;
    g->n = n;
    g->threads = threads > 0 ? threads : 1;
    meet_init(g);
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
    meet_init(g);
    return QS_OK;
}

void qw_group_destroy(qw_group *g) {
    if (!g) return;
    const qw_group_nccl_impl *impl = atomic_load(&nccl_impl);
    if (g->kind == QW_GROUP_NCCL && impl) impl->destroy(g->nccl);
    if (g->meet_init) {
        pthread_mutex_destroy(&g->mu);
        pthread_cond_destroy(&g->cv);
    }
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

/* Waits until all n ranks have arrived; 1 when the group is (or gets) broken instead. */
static int meet(qw_group *g) {
    pthread_mutex_lock(&g->mu);
    int broken = g->aborted != 0;
    if (!broken) {
        unsigned gen = g->gen;
        if (++g->arrived == g->n) {
            g->arrived = 0;
            g->gen++;
            pthread_cond_broadcast(&g->cv);
        } else {
            while (g->gen == gen && !g->aborted)
                pthread_cond_wait(&g->cv, &g->mu);
            broken = g->gen == gen;
        }
    }
    pthread_mutex_unlock(&g->mu);
    return broken;
}

/* Breaks the group for `who` (a rank, or -1), keeping the first breaker. */
static void group_break(qw_group *g, int who) {
    if (!g || !g->meet_init) return;
    pthread_mutex_lock(&g->mu);
    if (!g->aborted) g->aborted = who >= 0 ? who + 1 : -1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

void qw_group_abort(qw_group *g) {
    group_break(g, -1);
}

qs_status qw_group_allreduce_rank(qw_group *g, int rank, float *buf, size_t count, qw_group_op op,
                                  qs_error *err) {
    if (rank < 0 || rank >= g->n)
        return qs_error_set(err, QS_EINVAL, "all-reduce: rank %d of %d", rank, g->n);
    if (!buf) return qs_error_set(err, QS_EINVAL, "all-reduce: rank %d has no buffer", rank);
    if (g->n == 1) return QS_OK;
    if (g->kind == QW_GROUP_NCCL) {
        const qw_group_nccl_impl *impl = atomic_load(&nccl_impl);
        if (!impl) return qs_error_set(err, QS_EUNSUPPORTED, "all-reduce: no NCCL ranks");
        return impl->allreduce_rank(g->nccl, rank, buf, count, op, err);
    }
    if (!g->meet_init) return qs_error_set(err, QS_ESTATE, "all-reduce: group not made");
    /* publish the buffer; after the meeting every rank's is visible (the mutex orders them) */
    g->slot[rank] = buf;
    if (meet(g)) return qs_error_set(err, QS_ESTATE, "all-reduce: another rank failed");
    /* this rank's share of the elements, each reduced in rank order as qw_group_allreduce does */
    int n = g->n;
    size_t lo = count * (size_t)rank / (size_t)n, hi = count * (size_t)(rank + 1) / (size_t)n;
    float *const *b = g->slot;
    for (size_t i = lo; i < hi; i++) {
        float s = b[0][i];
        for (int r = 1; r < n; r++) {
            float v = b[r][i];
            s = op == QW_GROUP_SUM ? s + v : (v > s ? v : s);
        }
        for (int r = 0; r < n; r++)
            b[r][i] = s;
    }
    /* no rank reads its buffer before every share is written */
    if (meet(g)) return qs_error_set(err, QS_ESTATE, "all-reduce: another rank failed");
    return QS_OK;
}

typedef struct rank_run {
    qs_status (*fn)(void *ctx, int rank, qs_error *err);
    void *ctx;
    qw_group *g;
    int rank;
    qs_status st;
    qs_error err;
} rank_run;

static void *rank_main(void *arg) {
    rank_run *rr = arg;
    qs_error_clear(&rr->err);
    rr->st = rr->fn(rr->ctx, rr->rank, &rr->err);
    if (rr->st != QS_OK) group_break(rr->g, rr->rank);
    return NULL;
}

qs_status qw_ranks_run(qw_group *g, int n, qs_status (*fn)(void *ctx, int rank, qs_error *err),
                       void *ctx, qs_error *err) {
    if (n < 1 || n > QW_GROUP_MAX_RANKS)
        return qs_error_set(err, QS_EINVAL, "ranks: %d (expected 1..%d)", n, QW_GROUP_MAX_RANKS);
    if (n == 1) return fn(ctx, 0, err);
    if (!g || g->n != n || !g->meet_init)
        return qs_error_set(err, QS_EINVAL, "ranks: %d ranks without a group of %d", n, n);
    rank_run *rr = calloc((size_t)n, sizeof *rr);
    pthread_t *th = calloc((size_t)n, sizeof *th);
    if (!rr || !th) {
        free(rr);
        free(th);
        return qs_error_set(err, QS_ENOMEM, "ranks: %d", n);
    }
    pthread_mutex_lock(&g->mu);
    g->arrived = 0;
    g->aborted = 0;
    pthread_mutex_unlock(&g->mu);
    int started = 1, spawned = 1;
    for (int r = 0; r < n; r++)
        rr[r] = (rank_run){.fn = fn, .ctx = ctx, .g = g, .rank = r};
    for (int r = 1; r < n && spawned; r++) {
        spawned = pthread_create(&th[r], NULL, rank_main, &rr[r]) == 0;
        if (spawned) {
            started++;
        } else {
            rr[r].st = qs_error_set(&rr[r].err, QS_ENOMEM, "no thread for rank %d", r);
            group_break(g, r);
        }
    }
    if (spawned) rank_main(&rr[0]);
    for (int r = 1; r < started; r++)
        pthread_join(th[r], NULL);
    int first = g->aborted > 0 ? g->aborted - 1 : -1;
    for (int r = 0; r < n && first < 0; r++)
        if (rr[r].st != QS_OK) first = r;
    qs_status st = QS_OK;
    if (first >= 0) {
        if (err) *err = rr[first].err;
        st = qs_error_wrap(err, "rank %d", first);
        if (!err) st = rr[first].st;
    }
    free(rr);
    free(th);
    return st;
}
