/* The job table (job_table.h): lookup by id, appending loaded jobs, and the pending list the
 * scheduler sorts and picks from. */
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "job_table.h"

job *qc_srv_find_job(const qc_job_table *t, int64_t id) {
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (t->all[mid]->id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < t->n && t->all[lo]->id == id ? t->all[lo] : NULL;
}

void qc_srv_jobs_append(qc_job_table *t, job *j) {
    t->all = qc_srv_grow(t->all, &t->cap, t->n + 1, sizeof *t->all);
    t->all[t->n++] = j;
    t->active++;
}

void qc_srv_pending_push(qc_job_table *t, job *j) {
    t->pending = qc_srv_grow(t->pending, &t->cap_pending, t->n_pending + 1, sizeof *t->pending);
    t->pending[t->n_pending++] = &j->q;
    t->pending_sorted = false;
    if (j->q.not_before_ms < t->next_wake) t->next_wake = j->q.not_before_ms;
}

static void compact_pending(qc_job_table *t) {
    size_t o = 0;
    for (size_t i = 0; i < t->n_pending; i++) {
        qc_sched_job *q = t->pending[i];
        if (!q->pending) continue;
        /* a job requeued twice appears twice; keep one (neighbours after the sort) */
        if (o > 0 && t->pending[o - 1] == q) continue;
        t->pending[o++] = q;
    }
    t->n_pending = o;
}

void qc_srv_pending_sort(qc_job_table *t) {
    if (t->pending_sorted) return;
    compact_pending(t);
    if (t->n_pending) qsort(t->pending, t->n_pending, sizeof *t->pending, qc_sched_compare);
    compact_pending(t);
    t->pending_sorted = true;
}

const char *qc_srv_trained_digest(const qc_job_table *t, const job *j) {
    if (!j->trained_by) return NULL;
    /* its training job ran in this process: a dependency, with the digest of its RESULT */
    for (int d = 0; d < j->n_deps; d++) {
        const job *dep = qc_srv_find_job(t, j->deps[d]);
        if (dep && dep->state == J_SUCCEEDED && dep->model_digest && dep->job_key &&
            !strcmp(dep->job_key, j->trained_by))
            return dep->model_digest;
    }
    return j->model_digest; /* the store's record at load (a training job ended before) */
}

void qc_srv_jobs_free(qc_job_table *t) {
    for (size_t i = 0; i < t->n; i++)
        qc_srv_job_free(t->all[i]);
    free(t->all);
    free(t->pending);
    *t = (qc_job_table){0};
}
