/* Dispatch : the pending list sorted for the scheduler (scheduler.h, a
 * pure function), one pick per ready idle worker, and the ASSIGN that starts an attempt
 * (sent after its attempt row is durable). */
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "dispatch.h"
#include "identity.h"
#include "outbox.h"

/* qc_sched_deps_fn over the server's jobs. */
static bool deps_met(const qc_sched_job *q, void *ctx) {
    server *s = ctx;
    const job *j = (const job *)q;
    for (int d = 0; d < j->n_deps; d++) {
        const job *dep = qc_srv_find_job(&s->jobs, j->deps[d]);
        if (dep && dep->state != J_SUCCEEDED) return false;
    }
    return true;
}

/* The job for worker w (scheduler.h), from index head of the sorted pending list. */
static job *pick(server *s, const worker *w, int64_t now, size_t head) {
    const char *models[MODELS_MAX];
    for (int i = 0; i < w->n_models; i++)
        models[i] = w->models[i];
    const char *kinds[KINDS_MAX];
    for (int i = 0; i < w->n_kinds; i++)
        kinds[i] = w->kinds[i];
    qc_sched_worker sw = {.n_gpus = w->n_gpus,
                          .gpus = w->gpus,
                          .models = models,
                          .n_models = w->n_models,
                          .name = w->name,
                          .kinds = kinds,
                          .n_kinds = w->n_kinds,
                          .numerics_path = w->numerics_path};
    ptrdiff_t k = qc_sched_pick(&sw, s->jobs.pending + head, s->jobs.n_pending - head, now,
                                deps_met, s, &s->jobs.next_wake);
    return k < 0 ? NULL : (job *)s->jobs.pending[head + (size_t)k];
}

/* The first job of an experiment handed to a worker on a path pins the experiment to it
 * (scheduler.h), durable with the attempt that starts. */
static void pin(server *s, const worker *w, job *j) {
    if (!j->pin || !w->numerics_path[0] || (j->numerics && !strcmp(j->numerics, "any"))) return;
    if (!qc_srv_pin_set(j->pin, w->numerics_path)) return;
    qc_srv_must(s, qc_store_batch_experiment_pin(s->batch, j->pin->experiment, w->numerics_path,
                                                 &s->batch_err));
    if (!s->quiet)
        qc_log("experiment %lld pinned to numerics path %s (job %lld, worker %s)",
               (long long)j->pin->experiment, w->numerics_path, (long long)j->id, w->name);
}

static void assign(server *s, worker *w, job *j) {
    pin(s, w, j);
    qc_srv_set_state(j, J_RUNNING);
    j->attempt++;
    j->worker = w;
    j->rebuilt = false;
    qc_srv_running_remove(&s->running, j);
    free(j->worker_name);
    j->worker_name = strdup(w->name);
    qc_srv_running_add(&s->running, j);
    j->lease_deadline = NEVER;
    w->job = j;
    w->ready = false;
    qc_srv_token_new(j);
    char hash[2 * TOKEN_HASH_BYTES + 1];
    qc_srv_token_hash_hex(j, hash);
    qc_srv_must(s,
                qc_store_batch_attempt_started_token(s->batch, j->id, (int32_t)j->attempt, w->name,
                                                     s->lease_ms / 1000.0, hash, &s->batch_err));
    qc_srv_must(s, qc_store_batch_job_state(s->batch, j->id, J_RUNNING, j->attempts_used, 0, NULL,
                                            &s->batch_err));
    qc_srv_send_assign(s, w, j, true);
    if (!s->quiet)
        qc_log("job %lld attempt %u -> worker %s", (long long)j->id, j->attempt, w->name);
}

void qc_srv_dispatch(server *s, int64_t now) {
    if (s->db_down) return;
    if (!s->dirty && now < s->jobs.next_wake) return;
    s->dirty = false;
    s->jobs.next_wake = NEVER;
    qc_srv_pending_sort(&s->jobs);
    size_t head = 0;
    for (size_t i = 0; i < s->workers.n; i++) {
        worker *w = s->workers.all[i];
        if (!w->ready || w->job) continue;
        while (head < s->jobs.n_pending && !s->jobs.pending[head]->pending)
            head++;
        if (head == s->jobs.n_pending) break;
        job *j = pick(s, w, now, head);
        if (j) assign(s, w, j);
    }
}

void qc_srv_worker_idle(server *s, worker *w) {
    if (w->job) return;
    w->ready = true;
    s->dirty = true;
}
