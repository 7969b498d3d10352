/* A job's transitions (coordinator/server only): queued for dispatch, ended while pending,
 * its attempt ended; each queues its write in the open batch and ends the dependents of a job
 * that failed or was cancelled (server.h). */
#ifndef QC_SERVER_TRANSITIONS_H
#define QC_SERVER_TRANSITIONS_H

#include "state.h"

/* Adds j to the dispatch candidates (lazily deduplicated) and marks dispatch dirty. */
void qc_srv_push_pending(server *s, job *j);

/* A pending job that can never run: failed (or cancelled) without an attempt, with error
 * why; its dependents end with it (qc_srv_end_dependents). */
void qc_srv_end_pending(server *s, job *j, jstate st, const char *why);

/* Ends every pending job that depends on dep, a job that just failed or was cancelled, and
 * theirs in turn: failed with "dependency <id> failed: <dep's error>", or cancelled with
 * "dependency <id> cancelled: <dep's error>" when dep was cancelled (server.h). Every write
 * goes into the open batch, so they commit in one transaction with dep's own end. */
void qc_srv_end_dependents(server *s, job *dep);

/* Ends the job's current attempt with outcome (attempts.outcome) and cause, the class of the
 * end (attempts.cause: schema/170_attempt_cause.sql; a lost attempt's supervisor note
 * overrides it with its own); counts: whether it counts against max_attempts. Decides the
 * job's next state and queues the write. */
void qc_srv_end_attempt(server *s, job *j, qc_attempt_outcome outcome, const char *cause,
                        const char *error, bool counts);

#endif
