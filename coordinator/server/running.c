/* The running attempts by worker name (server_internal.h): s->running holds every job whose
 * current attempt names a worker (j->worker_name: assigned by this process, or loaded running
 * after a restart), sorted by (worker_name, id), so a HELLO finds the attempts of its worker
 * id by binary search instead of walking every job the coordinator holds. */
#include <stdlib.h>
#include <string.h>

#include "server_internal.h"

/* Order of the index: worker name, then job id. */
static int cmp(const char *name, int64_t id, const job *j) {
    int c = strcmp(name, j->worker_name);
    return c ? c : (id > j->id) - (id < j->id);
}

/* The first position whose entry is not before (name, id). */
static size_t lower_bound(const server *s, const char *name, int64_t id) {
    size_t lo = 0, hi = s->n_running;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cmp(name, id, s->running[mid]) > 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

void qc_srv_running_add(server *s, job *j) {
    if (!j->worker_name) return;
    size_t at = lower_bound(s, j->worker_name, j->id);
    if (at < s->n_running && s->running[at] == j) return;
    s->running = qc_srv_grow(s->running, &s->cap_running, s->n_running + 1, sizeof *s->running);
    memmove(s->running + at + 1, s->running + at, (s->n_running - at) * sizeof *s->running);
    s->running[at] = j;
    s->n_running++;
}

void qc_srv_running_remove(server *s, job *j) {
    if (!j->worker_name) return;
    size_t at = lower_bound(s, j->worker_name, j->id);
    if (at == s->n_running || s->running[at] != j) return;
    memmove(s->running + at, s->running + at + 1, (s->n_running - at - 1) * sizeof *s->running);
    s->n_running--;
}

size_t qc_srv_running_of(const server *s, const char *name, job *const **first) {
    if (!s->n_running) { /* s->running may still be NULL */
        *first = NULL;
        return 0;
    }
    size_t lo = lower_bound(s, name, INT64_MIN), hi = lo;
    while (hi < s->n_running && strcmp(s->running[hi]->worker_name, name) == 0)
        hi++;
    *first = s->running + lo;
    return hi - lo;
}
