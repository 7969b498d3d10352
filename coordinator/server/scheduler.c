/* The scheduling rule (scheduler.h). */
#include "scheduler.h"

#include <string.h>

int qc_sched_compare(const void *a, const void *b) {
    const qc_sched_job *x = *(qc_sched_job *const *)a, *y = *(qc_sched_job *const *)b;
    if (x->priority != y->priority) return x->priority > y->priority ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

bool qc_sched_fits(const qc_sched_worker *w, const qc_sched_job *j) {
    if (j->gpus > w->n_gpus) return false;
    if (j->gpu_mem_mb > 0 && (w->n_gpus == 0 || j->gpu_mem_mb > w->min_gpu_mem_mb)) return false;
    return true;
}

bool qc_sched_holds_model(const qc_sched_worker *w, const qc_sched_job *j) {
    if (!j->model_key || !j->model_key[0]) return false;
    for (int i = 0; i < w->n_models; i++)
        if (strcmp(w->models[i], j->model_key) == 0) return true;
    return false;
}

ptrdiff_t qc_sched_pick(const qc_sched_worker *w, qc_sched_job *const *queue, size_t n,
                        int64_t now_ms, qc_sched_deps_fn deps_met, void *ctx,
                        int64_t *next_wake_ms) {
    ptrdiff_t first = -1;
    for (size_t i = 0; i < n; i++) {
        const qc_sched_job *j = queue[i];
        if (!j->pending) continue;
        if (j->not_before_ms > now_ms) {
            if (next_wake_ms && j->not_before_ms < *next_wake_ms) *next_wake_ms = j->not_before_ms;
            continue;
        }
        if (!qc_sched_fits(w, j) || (deps_met && !deps_met(j, ctx))) continue;
        if (qc_sched_holds_model(w, j)) return (ptrdiff_t)i;
        if (first < 0) first = (ptrdiff_t)i;
        if (w->n_models == 0) break; /* nothing can beat the first */
    }
    return first;
}
