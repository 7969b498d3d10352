/* The coordinator's worker registry (server_internal.h): the workers known by routing id,
 * sorted for binary search; added on HELLO, forgotten on BYE or after worker_timeout_ms of
 * silence while idle. */
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "server_internal.h"

static int rid_cmp(const char *a, size_t alen, const char *b, size_t blen) {
    int c = memcmp(a, b, alen < blen ? alen : blen);
    return c ? c : (alen > blen) - (alen < blen);
}

static size_t worker_pos(server *s, const char *rid, size_t len) {
    size_t lo = 0, hi = s->n_workers;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (rid_cmp(s->workers[mid]->rid, s->workers[mid]->rid_len, rid, len) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

worker *qc_srv_find_worker(server *s, const char *rid, size_t len) {
    size_t i = worker_pos(s, rid, len);
    return i < s->n_workers && rid_cmp(s->workers[i]->rid, s->workers[i]->rid_len, rid, len) == 0
               ? s->workers[i]
               : NULL;
}

void qc_srv_forget_worker(server *s, worker *w) {
    qc_srv_must(s, qc_store_batch_worker_alive(s->batch, w->name, true, &s->batch_err));
    qc_srv_drop_worker(s, w);
}

void qc_srv_drop_worker(server *s, worker *w) {
    size_t i = worker_pos(s, w->rid, w->rid_len);
    memmove(&s->workers[i], &s->workers[i + 1], (s->n_workers - i - 1) * sizeof *s->workers);
    s->n_workers--;
    if (w->job && w->job->worker == w) w->job->worker = NULL; /* its lease decides */
    free(w);
}

worker *qc_srv_find_worker_named(server *s, const char *name, const worker *except) {
    for (size_t i = 0; i < s->n_workers; i++)
        if (s->workers[i] != except && !strcmp(s->workers[i]->name, name)) return s->workers[i];
    return NULL;
}

/* Adds a worker with routing id rid (rid_len <= RID_MAX bytes, not yet registered) to the
 * registry, keeping it sorted; its other fields are zero. Aborts without memory. */
worker *qc_srv_worker_add(server *s, const char *rid, size_t rid_len) {
    worker *w = calloc(1, sizeof *w);
    if (!w) abort();
    memcpy(w->rid, rid, rid_len);
    w->rid_len = rid_len;
    size_t pos = worker_pos(s, rid, rid_len);
    s->workers = qc_srv_grow(s->workers, &s->cap_workers, s->n_workers + 1, sizeof *s->workers);
    memmove(&s->workers[pos + 1], &s->workers[pos], (s->n_workers - pos) * sizeof *s->workers);
    s->workers[pos] = w;
    s->n_workers++;
    return w;
}

/* Forgets every idle worker silent for more than worker_timeout_ms. */
void qc_srv_forget_silent_workers(server *s, int64_t now) {
    for (size_t i = 0; i < s->n_workers;) {
        worker *w = s->workers[i];
        if (!w->job && now - w->last_seen > s->worker_timeout_ms) {
            qc_log("worker %s silent for %lld ms: forgotten", w->name,
                   (long long)(now - w->last_seen));
            qc_srv_forget_worker(s, w);
        } else {
            i++;
        }
    }
}

/* A worker that reported its attempt's end (other than preempted: it may be stopping) is
 * idle: it may get its next ASSIGN right behind the ACK, in the same commit, without a READY
 * round trip (proto/qsweep.proto, Result). */
void qc_srv_worker_idle(server *s, worker *w) {
    if (w->job) return;
    w->ready = true;
    s->dirty = true;
}
