/* What the coordinator reads from the store while it runs : the jobs
 * submitted since the last poll (all of them at start, running attempts waiting grace_ms for
 * their worker) and the unhandled cancel requests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "intake.h"
#include "log.h"
#include "outbox.h"
#include "transitions.h"

/* Adds a job from the store's snapshot; running attempts wait grace_ms for their worker. */
static void add_stored_job(server *s, const qc_stored_job *r, const qc_stored_attempt *running) {
    job *j = calloc(1, sizeof *j);
    if (!j || !(j->kind = strdup(r->kind)) || !(j->spec = strdup(r->spec_json)) ||
        !(j->model_key = strdup(r->model_key ? r->model_key : "")) ||
        !(j->job_key = strdup(r->job_key)) ||
        (r->trained_by && !(j->trained_by = strdup(r->trained_by))) ||
        (r->trained_digest && qc_srv_is_digest(r->trained_digest) &&
         !(j->model_digest = strdup(r->trained_digest))))
        abort();
    j->id = j->q.id = r->id;
    j->q.priority = r->priority;
    j->q.gpus = r->gpus;
    j->q.gpu_mem_mb = r->gpu_mem_mb;
    j->q.native_fp4 = r->native_fp4;
    j->q.model_key = j->model_key;
    j->q.kind = j->kind;
    if (r->numerics && !(j->numerics = strdup(r->numerics))) abort();
    j->q.numerics = j->numerics;
    if (r->experiment > 0) {
        j->pin = qc_srv_pin_get(&s->pins, r->experiment, r->pinned_path);
        j->q.pinned = (const char *const *)&j->pin->path;
    }
    j->max_attempts = r->max_attempts;
    j->attempts_used = r->attempts_used;
    j->attempt = (uint32_t)r->last_attempt;
    j->lease_deadline = NEVER;
    int64_t now = qs_clock_ms();
    if (r->n_waiting_on) {
        j->deps = malloc(r->n_waiting_on * sizeof *j->deps);
        if (!j->deps) abort();
        memcpy(j->deps, r->waiting_on, r->n_waiting_on * sizeof *j->deps);
        j->n_deps = (int)r->n_waiting_on;
    }
    if (running && r->state == QC_JOB_RUNNING) {
        qc_srv_set_state(j, J_RUNNING);
        j->attempt = (uint32_t)running->attempt;
        j->worker_name = strdup(running->worker);
        qc_srv_running_add(&s->running, j);
        qc_srv_token_load(j, running->token_hash);
        j->lease_deadline = now + s->grace_ms; /* its worker may re-attach (server.h) */
        j->rebuilt = true;
    } else {
        qc_srv_set_state(j, J_PENDING);
        /* the remaining backoff on the database's clock, which wrote not_before (store.h):
           never the coordinator's wall clock, which may be off */
        j->q.not_before_ms =
            r->not_before_in_s > 0 ? now + (int64_t)(r->not_before_in_s * 1000.0) : now;
    }
    qc_srv_jobs_append(&s->jobs, j); /* snapshots come by increasing id, above every id held */
    if (j->state == J_PENDING) qc_srv_push_pending(s, j);
    if (j->state != J_PENDING) return;
    /* A dependency that can never succeed ends it now: one stored as failed or cancelled
       (a job submitted after its dependency ended), or one this process ended whose write
       is not committed yet (the snapshot still saw it pending). */
    char why[1024];
    if (r->n_deps_failed) {
        bool cancelled = r->dep_failed_state == QC_JOB_CANCELLED;
        snprintf(why, sizeof why, "dependency %lld %s%s%s", (long long)r->dep_failed_id,
                 cancelled ? "cancelled" : "failed", r->dep_failed_error ? ": " : "",
                 r->dep_failed_error ? r->dep_failed_error : "");
        qc_srv_end_pending(s, j, cancelled ? J_CANCELLED : J_FAILED, why);
        return;
    }
    for (int d = 0; d < j->n_deps; d++) {
        job *dep = qc_srv_find_job(&s->jobs, j->deps[d]);
        if (dep && (dep->state == J_FAILED || dep->state == J_CANCELLED)) {
            /* as if j had been pending when dep ended (transitions.c) */
            qc_srv_end_dependents(s, dep);
            return;
        }
    }
}

/* Loads jobs submitted since the last load (all of them at start). */
qs_status qc_srv_load_new_jobs(server *s, qs_error *err) {
    qc_store_snapshot snap;
    qs_status st = qc_store_load(s->store, s->jobs.last_id, &snap, err);
    if (st != QS_OK) return st;
    size_t r = 0;
    for (size_t i = 0; i < snap.n_jobs; i++) {
        const qc_stored_job *sj = &snap.jobs[i];
        if (qc_srv_find_job(&s->jobs, sj->id)) continue;
        while (r < snap.n_running && snap.running[r].job < sj->id)
            r++;
        const qc_stored_attempt *run = NULL;
        for (size_t k = r; k < snap.n_running && snap.running[k].job == sj->id; k++)
            run = &snap.running[k];
        add_stored_job(s, sj, run);
    }
    if (snap.max_job_id > s->jobs.last_id) s->jobs.last_id = snap.max_job_id;
    qc_store_snapshot_free(&snap);
    return QS_OK;
}

/* Applies the store's unhandled cancel requests (server.h). */
qs_status qc_srv_poll_cancels(server *s, qs_error *err) {
    int64_t *ids = NULL, upto = 0;
    size_t n = 0;
    qs_status st = qc_store_poll_cancels(s->store, &ids, &n, &upto, err);
    if (st != QS_OK) return st;
    for (size_t i = 0; i < n; i++) {
        job *j = qc_srv_find_job(&s->jobs, ids[i]);
        if (!j) continue;
        if (j->state == J_PENDING) {
            qc_srv_end_pending(s, j, J_CANCELLED, "cancelled on request");
        } else if (j->state == J_RUNNING && !j->cancel_requested) {
            j->cancel_requested = true;
            /* A worker drops a CANCEL for a job it has not been sent yet: while the ASSIGN
               waits for its commit, run_actions sends the CANCEL right after it. */
            if (j->worker && j->lease_deadline != NEVER)
                qc_srv_send_cancel(s, j->worker->rid, j->worker->rid_len, j->id, j->attempt,
                                   "cancelled on request");
        }
    }
    free(ids);
    if (upto > 0) qc_srv_must(s, qc_store_batch_cancels_handled(s->batch, upto, &s->batch_err));
    return QS_OK;
}

/* A job of pin p running on path (its worker's announced path; a job whose worker has not
 * re-attached since a restart counts as on it), NULL when none. */
static const job *running_on(const server *s, const qc_pin *p, const char *path) {
    for (size_t i = 0; i < s->running.n; i++) {
        const job *j = s->running.all[i];
        if (j->state != J_RUNNING || j->pin != p) continue;
        if (!j->worker || !j->worker->numerics_path[0] || !strcmp(j->worker->numerics_path, path))
            return j;
    }
    return NULL;
}

/* A job of pin p running on a path other than path (its worker's announced path; a job whose
 * worker has not re-attached since a restart is left to the store's attempts), NULL when none. */
static const job *running_off(const server *s, const qc_pin *p, const char *path) {
    for (size_t i = 0; i < s->running.n; i++) {
        const job *j = s->running.all[i];
        if (j->state != J_RUNNING || j->pin != p || !j->worker) continue;
        if (strcmp(j->worker->numerics_path, path)) return j;
    }
    return NULL;
}

/* A job of pin p that succeeded in this process on a worker, still registered, of a path other
 * than path, NULL when none: its result may not be committed yet, so the store does not show it. */
static const job *succeeded_off(const server *s, const qc_pin *p, const char *path) {
    for (size_t i = 0; i < s->jobs.n; i++) {
        const job *j = s->jobs.all[i];
        if (j->state != J_SUCCEEDED || j->pin != p || !j->worker_name) continue;
        const worker *w = qc_srv_find_worker_named(&s->workers, j->worker_name, NULL);
        if (w && w->numerics_path[0] && strcmp(w->numerics_path, path)) return j;
    }
    return NULL;
}

/* Answers an unpin request (intake.h). */
static void answer_unpin(server *s, const qc_pin_request *rq) {
    qc_pin *p = qc_srv_pin_find(&s->pins, rq->experiment);
    char path[sizeof rq->stored_path]; /* a copy: the unpin frees the pin's own */
    snprintf(path, sizeof path, "%s", p && p->path ? p->path : rq->stored_path);
    const job *j = p && *path ? running_on(s, p, path) : NULL;
    char msg[640];
    const char *outcome = "unpinned";
    if (!*path) {
        outcome = "not_pinned";
        snprintf(msg, sizeof msg, "not pinned");
    } else if (j) {
        outcome = "refused";
        snprintf(msg, sizeof msg,
                 "job %lld runs on the pinned path %s (worker %s); unpin once the "
                 "experiment's running jobs have ended (qsweep status)",
                 (long long)j->id, path, j->worker_name ? j->worker_name : "?");
    } else if (rq->running > 0 && !strcmp(path, rq->stored_path)) {
        outcome = "refused";
        snprintf(msg, sizeof msg,
                 "%lld attempt(s) of its jobs run on the pinned path %s (worker %s); unpin "
                 "once the experiment's running jobs have ended (qsweep status)",
                 (long long)rq->running, path, rq->running_worker);
    } else {
        snprintf(msg, sizeof msg, "unpinned from %s", path);
        if (p) qc_srv_pin_clear(p);
        s->dirty = true; /* an idle worker of any path may take its jobs now */
        qc_srv_must(s, qc_store_batch_experiment_unpin(s->batch, rq->experiment, &s->batch_err));
        qc_log("experiment %lld unpinned from numerics path %s (request %lld)",
               (long long)rq->experiment, path, (long long)rq->id);
    }
    qc_srv_must(s, qc_store_batch_unpin_answer(s->batch, rq->id, outcome, msg, &s->batch_err));
}

/* Answers a pin request (intake.h). The entry is made when the coordinator holds no job of the
 * experiment yet, so jobs it loads later follow the new pin before the store shows it. */
static qs_status answer_pin(server *s, const qc_pin_request *rq, qs_error *err) {
    qc_pin *p = qc_srv_pin_find(&s->pins, rq->experiment);
    char was[sizeof rq->stored_path];
    snprintf(was, sizeof was, "%s",
             p && p->path      ? p->path
             : p && p->cleared ? ""
                               : rq->stored_path);
    char msg[1024];
    const char *outcome = "pinned";
    bool refused = false;
    const job *j = NULL;
    if (!strcmp(was, rq->path)) {
        outcome = "unchanged";
        snprintf(msg, sizeof msg, "already pinned to %s", rq->path);
        if (p && !p->path) qc_srv_pin_set(p, rq->path);
    } else {
        qs_status st = qc_store_pin_conflict(s->store, rq->experiment, rq->path, msg, sizeof msg,
                                             &refused, err);
        if (st) return st;
        if (!refused && p && (j = succeeded_off(s, p, rq->path))) {
            refused = true;
            snprintf(msg, sizeof msg,
                     "job %lld of it has a result computed on another path, %s (worker %s), and "
                     "pinning it to %s would mix two paths in one experiment; submit the grid as "
                     "a new experiment with numerics: %s to measure it there",
                     (long long)j->id,
                     qc_srv_find_worker_named(&s->workers, j->worker_name, NULL)->numerics_path,
                     j->worker_name, rq->path, rq->path);
        }
        if (!refused && p && (j = running_off(s, p, rq->path))) {
            refused = true;
            snprintf(msg, sizeof msg,
                     "job %lld runs on another path, %s (worker %s); pin once the experiment's "
                     "running jobs have ended (qsweep status) or cancel them",
                     (long long)j->id, j->worker->numerics_path,
                     j->worker_name ? j->worker_name : "?");
        }
    }
    if (refused) {
        outcome = "refused";
    } else if (strcmp(outcome, "unchanged")) {
        if (*was)
            snprintf(msg, sizeof msg,
                     "pinned to %s, replacing its pin to %s (no result of it was computed there)",
                     rq->path, was);
        else
            snprintf(msg, sizeof msg, "pinned to %s", rq->path);
        p = qc_srv_pin_get(&s->pins, rq->experiment, NULL);
        if (p->path) qc_srv_pin_clear(p);
        qc_srv_pin_set(p, rq->path);
        s->dirty = true; /* an idle worker of the new path may take its jobs now */
        /* an unpin first: the store keeps the first pin queued after an experiment's last unpin */
        qc_srv_must(s, qc_store_batch_experiment_unpin(s->batch, rq->experiment, &s->batch_err));
        qc_srv_must(
            s, qc_store_batch_experiment_pin(s->batch, rq->experiment, rq->path, &s->batch_err));
        qc_log("experiment %lld pinned to numerics path %s by request %lld%s%s",
               (long long)rq->experiment, rq->path, (long long)rq->id, *was ? ", was " : "", was);
    }
    qc_srv_must(s, qc_store_batch_unpin_answer(s->batch, rq->id, outcome, msg, &s->batch_err));
    return QS_OK;
}

qs_status qc_srv_poll_pin_requests(server *s, qs_error *err) {
    qc_pin_request *rq = NULL;
    size_t n = 0;
    qs_status st = qc_store_poll_pin_requests(s->store, &rq, &n, err);
    if (st != QS_OK) return st;
    for (size_t i = 0; i < n && !st; i++) {
        if (rq[i].id <= s->unpins_answered) continue; /* its answer is not committed yet */
        if (rq[i].path[0])
            st = answer_pin(s, &rq[i], err);
        else
            answer_unpin(s, &rq[i]);
        if (!st) s->unpins_answered = rq[i].id;
    }
    free(rq);
    return st;
}
