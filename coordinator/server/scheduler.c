/* The scheduling rule (scheduler.h). */
#include "scheduler.h"

#include <jansson.h>
#include <string.h>

#include "numerics_path.h"

int qc_sched_compare(const void *a, const void *b) {
    const qc_sched_job *x = *(qc_sched_job *const *)a, *y = *(qc_sched_job *const *)b;
    if (x->priority != y->priority) return x->priority > y->priority ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

bool qc_sched_fits(const qc_sched_worker *w, const qc_sched_job *j) {
    int k = j->gpus > 0 ? j->gpus : (j->gpu_mem_mb > 0 || j->native_fp4) ? 1 : 0;
    if (k == 0) return true;
    if (k > w->n_gpus || !w->gpus) return false;
    for (int i = 0; i < k; i++) {
        if (w->gpus[i].mem_mb < j->gpu_mem_mb) return false;
        if (j->native_fp4 && !w->gpus[i].native_fp4) return false;
    }
    return true;
}

bool qc_sched_fits_any(const qc_sched_worker *const *workers, size_t n, const qc_sched_job *j) {
    for (size_t i = 0; i < n; i++)
        if (qc_sched_fits(workers[i], j)) return true;
    return false;
}

bool qc_sched_gpus_from_json(const char *text, qc_sched_gpu *gpus, int cap, int *n) {
    *n = 0;
    json_t *a = text ? json_loads(text, 0, NULL) : NULL;
    bool ok = json_is_array(a);
    for (size_t i = 0; ok && i < json_array_size(a); i++) {
        const json_t *g = json_array_get(a, i), *mem = json_object_get(g, "memory_mb");
        if (!json_is_integer(mem)) {
            ok = false;
            break;
        }
        if (*n < cap)
            gpus[(*n)++] =
                (qc_sched_gpu){.mem_mb = (int64_t)json_integer_value(mem),
                               .native_fp4 = json_is_true(json_object_get(g, "native_fp4"))};
    }
    json_decref(a);
    if (!ok) *n = 0;
    return ok;
}

bool qc_sched_runs_kind(const qc_sched_worker *w, const qc_sched_job *j) {
    if (!w->n_kinds || !j->kind) return true;
    for (int i = 0; i < w->n_kinds; i++)
        if (strcmp(w->kinds[i], j->kind) == 0) return true;
    return false;
}

bool qc_sched_on_path(const qc_sched_worker *w, const qc_sched_job *j) {
    if (j->numerics && !strcmp(j->numerics, "any")) return true;
    const char *pin = j->pinned ? *j->pinned : NULL;
    if (!j->numerics && !pin) return true;
    const char *p = w->numerics_path;
    if (!p || !*p) return false;
    if (j->numerics && !qs_numerics_path_matches(j->numerics, p)) return false;
    return !pin || !strcmp(pin, p);
}

bool qc_sched_on_path_any(const qc_sched_worker *const *workers, size_t n, const qc_sched_job *j) {
    for (size_t i = 0; i < n; i++)
        if (qc_sched_on_path(workers[i], j)) return true;
    return false;
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
        if (j->avoid && w->name && j->avoid_until_ms > now_ms && strcmp(j->avoid, w->name) == 0) {
            if (next_wake_ms && j->avoid_until_ms < *next_wake_ms)
                *next_wake_ms = j->avoid_until_ms;
            continue;
        }
        if (!qc_sched_runs_kind(w, j) || !qc_sched_fits(w, j) || !qc_sched_on_path(w, j) ||
            (deps_met && !deps_met(j, ctx)))
            continue;
        if (qc_sched_holds_model(w, j)) return (ptrdiff_t)i;
        if (first < 0) first = (ptrdiff_t)i;
        if (w->n_models == 0) break; /* nothing can beat the first */
    }
    return first;
}
