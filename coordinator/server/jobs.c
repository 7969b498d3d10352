/* The coordinator's job table and its transitions (server_internal.h): lookup by id, the
 * pending list, and the end of an attempt or of a pending job, each queueing its write in
 * the open batch (commit.c) and ending the dependents of a job that failed or was cancelled
 * with it (server.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "log.h"
#include "server_internal.h"

job *qc_srv_find_job(server *s, int64_t id) {
    size_t lo = 0, hi = s->n_jobs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (s->jobs[mid]->id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < s->n_jobs && s->jobs[lo]->id == id ? s->jobs[lo] : NULL;
}

void qc_srv_set_state(job *j, jstate st) {
    j->state = st;
    j->q.pending = st == J_PENDING;
}

void qc_srv_push_pending(server *s, job *j) {
    s->pending = qc_srv_grow(s->pending, &s->cap_pending, s->n_pending + 1, sizeof *s->pending);
    s->pending[s->n_pending++] = &j->q;
    s->pending_sorted = false;
    s->dirty = true;
    if (j->q.not_before_ms < s->next_wake) s->next_wake = j->q.not_before_ms;
}

static void set_terminal(server *s, job *j, jstate st) {
    if (j->state != J_SUCCEEDED && j->state != J_FAILED && j->state != J_CANCELLED) s->active--;
    qc_srv_set_state(j, st);
}

/* Keeps the error j ended with, for its dependents' messages. */
static void keep_error(job *j, const char *error) {
    free(j->error);
    j->error = error ? strdup(error) : NULL;
}

void qc_srv_end_pending(server *s, job *j, jstate st, const char *why) {
    set_terminal(s, j, st);
    keep_error(j, why);
    qc_srv_must(
        s, qc_store_batch_job_state(s->batch, j->id, st, j->attempts_used, 0, why, &s->batch_err));
    if (!s->o->quiet) qc_log("job %lld %s: %s", (long long)j->id, qc_job_state_name(st), why);
    qc_srv_end_dependents(s, j);
}

void qc_srv_end_dependents(server *s, job *dep) {
    /* a chain of dependencies quotes each link's error: cut where it would grow without
       bound (the first links say which job failed) */
    char why[1024];
    bool cancelled = dep->state == J_CANCELLED;
    snprintf(why, sizeof why, "dependency %lld %s%s%s", (long long)dep->id,
             cancelled ? "cancelled" : "failed", dep->error ? ": " : "",
             dep->error ? dep->error : "");
    for (size_t i = 0; i < s->n_pending; i++) {
        job *j = (job *)s->pending[i];
        if (j->state != J_PENDING) continue;
        for (int d = 0; d < j->n_deps; d++)
            if (j->deps[d] == dep->id) {
                qc_srv_end_pending(s, j, cancelled ? J_CANCELLED : J_FAILED, why);
                break;
            }
    }
}

void qc_srv_chunks_drop(job *j) {
    for (size_t i = 0; i < j->n_chunk_rows; i++)
        free(j->chunk_rows[i].name);
    free(j->chunk_rows);
    j->chunk_rows = NULL;
    j->n_chunk_rows = j->cap_chunk_rows = 0;
    j->chunks = j->chunk_next = 0;
}

const char *qc_srv_exit_cause(const char *note) {
    if (strncmp(note, "killed by signal ", 17) == 0)
        return strstr(note, "; out of memory") ? "oom" : "signal";
    if (strncmp(note, "exit status ", 12) == 0) return "exit";
    return NULL;
}

/* Ends the job's current attempt with outcome (attempts.outcome) and cause (attempts.cause);
 * counts: whether it counts against max_attempts. Decides the job's next state and queues the
 * write. */
void qc_srv_end_attempt(server *s, job *j, qc_attempt_outcome outcome, const char *cause,
                        const char *error, bool counts) {
    if (j->worker && j->worker->job == j) j->worker->job = NULL;
    j->worker = NULL;
    bool permanent = j->fail_now;
    j->fail_now = false;
    char noted[1400];
    if (j->exit_note && outcome == QC_ATTEMPT_LOST) {
        /* the OOM killer ended it (exit_status.h's words): the job needs more memory than the
           worker's limit, which the note gives; another try under the same limit ends the
           same way, so the job fails now with the figure */
        bool oom = strstr(j->exit_note, "out of memory") != NULL;
        snprintf(noted, sizeof noted, "%s; its process ended: %s%s", error ? error : "lost",
                 j->exit_note, oom ? "; not retried: the job needs more memory than that" : "");
        error = noted;
        permanent = permanent || oom;
        if (j->exit_cause) cause = j->exit_cause; /* the process end, not how it was noticed */
    }
    free(j->exit_note);
    j->exit_note = NULL;
    j->exit_cause = NULL;
    /* a transient failure (lost, worker error) is retried elsewhere first */
    free(j->avoid);
    j->avoid = counts && !permanent && outcome != QC_ATTEMPT_SUCCEEDED ? j->worker_name : NULL;
    j->q.avoid = j->avoid;
    qc_srv_running_remove(s, j);
    if (j->worker_name != j->avoid) free(j->worker_name);
    j->worker_name = NULL;
    j->lease_deadline = NEVER;
    qc_srv_chunks_drop(j);
    int64_t backoff = 0;
    if (outcome == QC_ATTEMPT_SUCCEEDED) {
        set_terminal(s, j, J_SUCCEEDED);
        s->dirty = true; /* dependents may be ready */
    } else if (j->cancel_requested || outcome == QC_ATTEMPT_CANCELLED) {
        set_terminal(s, j, J_CANCELLED);
    } else {
        if (counts) j->attempts_used++;
        if (permanent || j->attempts_used >= j->max_attempts) {
            set_terminal(s, j, J_FAILED);
        } else {
            qc_srv_set_state(j, J_PENDING);
            if (counts) {
                int shift = j->attempts_used - 1 < 16 ? j->attempts_used - 1 : 16;
                backoff = (int64_t)s->backoff_ms << shift;
                if (backoff > 60000) backoff = 60000;
            }
            j->q.not_before_ms = qs_clock_ms() + backoff;
            /* its last worker gets it only after a lease more, when no other took it */
            j->q.avoid_until_ms = j->q.not_before_ms + s->lease_ms;
            qc_srv_push_pending(s, j);
        }
    }
    qc_srv_must(s, qc_store_batch_attempt_ended_cause(s->batch, j->id, (int32_t)j->attempt,
                                                      outcome, error, cause, &s->batch_err));
    qc_srv_must(s, qc_store_batch_job_state(s->batch, j->id, j->state, j->attempts_used,
                                            backoff / 1000.0, error, &s->batch_err));
    if (!s->o->quiet || j->state == J_FAILED)
        qc_log("job %lld attempt %u %s -> %s%s%s", (long long)j->id, j->attempt,
               qc_attempt_outcome_name(outcome), qc_job_state_name(j->state), error ? ": " : "",
               error ? error : "");
    if (j->state == J_FAILED || j->state == J_CANCELLED) {
        keep_error(j, error);
        qc_srv_end_dependents(s, j);
    }
}

/* Frees job j and everything it owns (NULL: nothing). */
void qc_srv_job_free(job *j) {
    if (!j) return;
    free(j->kind);
    free(j->spec);
    free(j->model_key);
    free(j->deps);
    free(j->error);
    free(j->worker_name);
    free(j->avoid);
    free(j->exit_note);
    free(j->job_key);
    free(j->trained_by);
    free(j->model_digest);
    qc_srv_chunks_drop(j);
    free(j);
}

bool qc_srv_is_digest(const char *text) {
    size_t n = 0;
    for (; text[n]; n++)
        if (!((text[n] >= '0' && text[n] <= '9') || (text[n] >= 'a' && text[n] <= 'f')))
            return false;
    return n == 64;
}

void qc_srv_keep_model_digest(job *j, const chunk_metric *m, size_t n) {
    static const char prefix[] = "model_digest.";
    if (strcmp(j->kind, "train") != 0) return;
    for (size_t i = 0; i < n; i++) {
        if (!m[i].final || strncmp(m[i].name, prefix, sizeof prefix - 1) != 0) continue;
        const char *hex = m[i].name + sizeof prefix - 1;
        if (!qc_srv_is_digest(hex)) continue;
        free(j->model_digest);
        if (!(j->model_digest = strdup(hex))) abort();
    }
}

const char *qc_srv_trained_digest(server *s, const job *j) {
    if (!j->trained_by) return NULL;
    /* its training job ran in this process: a dependency, with the digest of its RESULT */
    for (int d = 0; d < j->n_deps; d++) {
        const job *dep = qc_srv_find_job(s, j->deps[d]);
        if (dep && dep->state == J_SUCCEEDED && dep->model_digest && dep->job_key &&
            !strcmp(dep->job_key, j->trained_by))
            return dep->model_digest;
    }
    return j->model_digest; /* the store's record at load (a training job ended before) */
}
