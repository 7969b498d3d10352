/* The index of running attempts by worker name (running.h). */
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "running.h"

/* Order of the index: worker name, then job id. */
static int cmp(const char *name, int64_t id, const job *j) {
    int c = strcmp(name, j->worker_name);
    return c ? c : (id > j->id) - (id < j->id);
}

/* The first position whose entry is not before (name, id). */
static size_t lower_bound(const qc_running *r, const char *name, int64_t id) {
    size_t lo = 0, hi = r->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cmp(name, id, r->all[mid]) > 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

void qc_srv_running_add(qc_running *r, job *j) {
    if (!j->worker_name) return;
    size_t at = lower_bound(r, j->worker_name, j->id);
    if (at < r->n && r->all[at] == j) return;
    r->all = qc_srv_grow(r->all, &r->cap, r->n + 1, sizeof *r->all);
    memmove(r->all + at + 1, r->all + at, (r->n - at) * sizeof *r->all);
    r->all[at] = j;
    r->n++;
}

void qc_srv_running_remove(qc_running *r, job *j) {
    if (!j->worker_name) return;
    size_t at = lower_bound(r, j->worker_name, j->id);
    if (at == r->n || r->all[at] != j) return;
    memmove(r->all + at, r->all + at + 1, (r->n - at - 1) * sizeof *r->all);
    r->n--;
}

size_t qc_srv_running_of(const qc_running *r, const char *name, job *const **first) {
    if (!r->n) { /* r->all may still be NULL */
        *first = NULL;
        return 0;
    }
    size_t lo = lower_bound(r, name, INT64_MIN), hi = lo;
    while (hi < r->n && strcmp(r->all[hi]->worker_name, name) == 0)
        hi++;
    *first = r->all + lo;
    return hi - lo;
}

void qc_srv_running_free(qc_running *r) {
    free(r->all);
    *r = (qc_running){0};
}
