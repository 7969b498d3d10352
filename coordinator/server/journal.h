/* qc_journal: the coordinator's one PostgreSQL connection (internal to coordinator/server).
 *
 * Holds the session advisory lock that makes the coordinator the only writer, loads the
 * queue for a rebuild, polls new jobs and cancel requests, and writes transitions in
 * batches: every row of a batch is COPYed into a temporary table (ON COMMIT DELETE ROWS)
 * and applied with one set-based statement per kind, all in one transaction, so the cost
 * per transition does not depend on one round trip per job. Schema: schema/001_core.sql.
 *
 * A batch is applied in this order: results, attempt ends (with the job's new state),
 * job state changes, worker upserts, attempt starts (job -> running), handled cancel
 * requests. An attempt start is always the last transition of its job in one batch (the
 * ASSIGN is sent only after the commit), so the order leaves every job in its latest state.
 *
 * Errors: QS_EDB with the server's message. qc_journal_lost() tells whether the failure was
 * the connection (PostgreSQL down: retry later, nothing was applied) or a statement. */
#ifndef QC_SERVER_JOURNAL_H
#define QC_SERVER_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* Arbitrary but fixed key of the coordinator's advisory lock (pg_try_advisory_lock). */
#define QC_JOURNAL_LOCK_KEY 0x71737765657031LL /* "qsweep1" */

typedef struct qc_journal qc_journal;

/* A batch of transitions: COPY text rows per temporary table. */
typedef struct qc_batch qc_batch;

/* Connects to conninfo, applies the schema migrations (coordinator/store/migrate.h), takes
 * the advisory lock and prepares the temporary tables. QS_ESTATE when another coordinator
 * holds the lock (the message names the database and the holder's backend pid). */
qs_status qc_journal_open(const char *conninfo, qc_journal **out, qs_error *err);

/* Reconnects after a lost connection and takes the lock again (QS_ESTATE when another
 * coordinator took it meanwhile: this one must stop). */
qs_status qc_journal_reconnect(qc_journal *j, qs_error *err);

/* True when the last failure was a lost connection. */
bool qc_journal_lost(const qc_journal *j);

void qc_journal_close(qc_journal *j);

/* One active job as loaded from the database. Strings are valid during the callback.
 * running_attempt > 0 (with running_worker) when an attempt is still marked running. */
typedef struct qc_job_row {
    int64_t id;
    const char *kind, *spec_json, *model_key, *state, *running_worker;
    int priority, gpus, max_attempts, attempts_used;
    int64_t gpu_mem_mb;
    int64_t not_before_in_ms; /* backoff left, 0 when dispatchable now */
    uint32_t last_attempt, running_attempt;
} qc_job_row;

/* Calls fn for every job with id > after_id in state pending or running, by increasing id. */
qs_status qc_journal_load_jobs(qc_journal *j, int64_t after_id, void (*fn)(void *arg, const qc_job_row *row),
                               void *arg, qs_error *err);

/* Calls fn(job, depends_on, state of depends_on) for every dependency of jobs with
 * id > after_id that are pending or running. */
qs_status qc_journal_load_deps(qc_journal *j, int64_t after_id,
                               void (*fn)(void *arg, int64_t job, int64_t dep, const char *dep_state), void *arg,
                               qs_error *err);

/* Calls fn(request id, job id) for every job named by an unhandled cancel request (an
 * experiment's request names each of its jobs). */
qs_status qc_journal_poll_cancels(qc_journal *j, void (*fn)(void *arg, int64_t request, int64_t job), void *arg,
                                  qs_error *err);

/* ---- batches ---- */

qc_batch *qc_batch_new(void);
void qc_batch_free(qc_batch *b);
bool qc_batch_empty(const qc_batch *b);
size_t qc_batch_rows(const qc_batch *b);

/* Appends one row; QS_ENOMEM only. Strings must be valid UTF-8 (the caller checks). */
qs_status qc_batch_attempt_start(qc_batch *b, int64_t job, uint32_t attempt, const char *worker, int64_t lease_ms);
/* outcome: succeeded|failed|lost|preempted|cancelled; job_state: the job's new state;
 * backoff_ms > 0 sets not_before = now() + backoff; error/last_error may be NULL. */
qs_status qc_batch_attempt_end(qc_batch *b, int64_t job, uint32_t attempt, const char *outcome, const char *error,
                               const char *job_state, int attempts_used, int64_t backoff_ms);
/* final metrics are stored at step -1 (schema: results.step). */
qs_status qc_batch_result(qc_batch *b, int64_t job, uint32_t attempt, const char *name, double value, int64_t step,
                          bool final);
qs_status qc_batch_job_state(qc_batch *b, int64_t job, const char *state, const char *last_error);
qs_status qc_batch_worker(qc_batch *b, const char *id, const char *host, uint32_t pid, const char *gpus_json,
                          uint32_t threads);
qs_status qc_batch_cancel_handled(qc_batch *b, int64_t request);

/* Applies the batch in one transaction. On QS_OK the batch is emptied; on an error nothing
 * was applied and the batch is kept for a retry. */
qs_status qc_journal_commit(qc_journal *j, qc_batch *b, qs_error *err);

#endif
