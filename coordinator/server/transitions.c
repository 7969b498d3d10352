/* A job's transitions (transitions.h): queued for dispatch, the end of a pending job or of an
 * attempt, each queueing its write in the open batch (commit.c) and ending the dependents of
 * a job that failed or was cancelled with it (server.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "log.h"
#include "transitions.h"

void qc_srv_push_pending(server *s, job *j) {
    qc_srv_pending_push(&s->jobs, j);
    s->dirty = true;
}

static void set_terminal(server *s, job *j, jstate st) {
    if (j->state != J_SUCCEEDED && j->state != J_FAILED && j->state != J_CANCELLED)
        s->jobs.active--;
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
    if (!s->quiet) qc_log("job %lld %s: %s", (long long)j->id, qc_job_state_name(st), why);
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
    for (size_t i = 0; i < s->jobs.n_pending; i++) {
        job *j = (job *)s->jobs.pending[i];
        if (j->state != J_PENDING) continue;
        for (int d = 0; d < j->n_deps; d++)
            if (j->deps[d] == dep->id) {
                qc_srv_end_pending(s, j, cancelled ? J_CANCELLED : J_FAILED, why);
                break;
            }
    }
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
    qc_srv_running_remove(&s->running, j);
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
    qc_srv_must(s, qc_store_batch_attempt_ended_cause(s->batch, j->id, (int32_t)j->attempt, outcome,
                                                      error, cause, &s->batch_err));
    qc_srv_must(s, qc_store_batch_job_state(s->batch, j->id, j->state, j->attempts_used,
                                            backoff / 1000.0, error, &s->batch_err));
    if (!s->quiet || j->state == J_FAILED)
        qc_log("job %lld attempt %u %s -> %s%s%s", (long long)j->id, j->attempt,
               qc_attempt_outcome_name(outcome), qc_job_state_name(j->state), error ? ": " : "",
               error ? error : "");
    if (j->state == J_FAILED || j->state == J_CANCELLED) {
        keep_error(j, error);
        qc_srv_end_dependents(s, j);
    }
}
