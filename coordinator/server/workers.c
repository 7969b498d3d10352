/* The coordinator's worker table (workers.h): the workers known by routing id, sorted for
 * binary search; added on HELLO, removed on BYE, on a move to a new connection or after a
 * silence while idle (lease.c). */
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "workers.h"

static int rid_cmp(const char *a, size_t alen, const char *b, size_t blen) {
    int c = memcmp(a, b, alen < blen ? alen : blen);
    return c ? c : (alen > blen) - (alen < blen);
}

static size_t worker_pos(const qc_worker_table *t, const char *rid, size_t len) {
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (rid_cmp(t->all[mid]->rid, t->all[mid]->rid_len, rid, len) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

worker *qc_srv_find_worker(const qc_worker_table *t, const char *rid, size_t len) {
    size_t i = worker_pos(t, rid, len);
    return i < t->n && rid_cmp(t->all[i]->rid, t->all[i]->rid_len, rid, len) == 0 ? t->all[i]
                                                                                  : NULL;
}

void qc_srv_drop_worker(qc_worker_table *t, worker *w) {
    size_t i = worker_pos(t, w->rid, w->rid_len);
    memmove(&t->all[i], &t->all[i + 1], (t->n - i - 1) * sizeof *t->all);
    t->n--;
    if (w->job && w->job->worker == w) w->job->worker = NULL; /* its lease decides */
    free(w);
}

worker *qc_srv_find_worker_named(const qc_worker_table *t, const char *name, const worker *except) {
    for (size_t i = 0; i < t->n; i++)
        if (t->all[i] != except && !strcmp(t->all[i]->name, name)) return t->all[i];
    return NULL;
}

worker *qc_srv_worker_add(qc_worker_table *t, const char *rid, size_t rid_len) {
    worker *w = calloc(1, sizeof *w);
    if (!w) abort();
    memcpy(w->rid, rid, rid_len);
    w->rid_len = rid_len;
    size_t pos = worker_pos(t, rid, rid_len);
    t->all = qc_srv_grow(t->all, &t->cap, t->n + 1, sizeof *t->all);
    memmove(&t->all[pos + 1], &t->all[pos], (t->n - pos) * sizeof *t->all);
    t->all[pos] = w;
    t->n++;
    return w;
}

void qc_srv_workers_free(qc_worker_table *t) {
    for (size_t i = 0; i < t->n; i++)
        free(t->all[i]);
    free(t->all);
    *t = (qc_worker_table){0};
}
