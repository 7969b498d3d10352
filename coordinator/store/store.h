/* The coordinator's PostgreSQL store: everything the coordinator and the qsweep command write
 * or read. Tables and views: the numbered migrations in schema/ (applied by qc_store_open).
 *
 * One qc_store is ONE libpq connection. The coordinator uses one store for its reads and
 * control (and the coordinator lock), plus at most one more for a batch writer thread; a
 * store is not thread-safe, a qc_store_batch belongs to one thread at a time.
 *
 * Writes of job state go through a qc_store_batch: the coordinator appends transitions (attempt
 * started, lease renewed, attempt ended, job state changed, worker seen, results, cancel
 * requests handled) and qc_store_flush writes the whole batch in ONE transaction with a fixed
 * number of statements (set-based: unnest() of arrays for transitions, COPY for results).
 * flush returns after COMMIT, i.e. once the batch is durable (synchronous_commit as
 * configured on the server, on by default), so the coordinator acknowledges after it.
 * A failed flush leaves the batch as it was, and every statement is idempotent, so the
 * caller may flush the same batch again (also after a reconnect, when it is unknown whether
 * the COMMIT reached the server).
 *
 * Errors: QS_EDB carries the server's message (and the statement's purpose). When the
 * connection itself is lost the call returns QS_EDB and qc_store_connection_lost() is true:
 * the coordinator must pause dispatch and call qc_store_reconnect() until it succeeds, then
 * flush the failed batch again. QS_EINVAL names the bad field (job_key, JSON position). */
#ifndef QC_STORE_STORE_H
#define QC_STORE_STORE_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* ---- states ---------------------------------------------------------------------------- */

/* jobs.state. Terminal: succeeded, failed, cancelled. */
typedef enum qc_job_state {
    QC_JOB_PENDING = 0,
    QC_JOB_RUNNING,
    QC_JOB_SUCCEEDED,
    QC_JOB_FAILED,
    QC_JOB_CANCELLED,
} qc_job_state;

/* attempts.outcome. 'running' until the attempt ends. */
typedef enum qc_attempt_outcome {
    QC_ATTEMPT_RUNNING = 0,
    QC_ATTEMPT_SUCCEEDED,
    QC_ATTEMPT_FAILED,
    QC_ATTEMPT_LOST,      /* lease expired */
    QC_ATTEMPT_PREEMPTED, /* worker got SIGTERM; does not count against max_attempts */
    QC_ATTEMPT_CANCELLED,
} qc_attempt_outcome;

/* The SQL spelling ("pending", ...); NULL for an out-of-range value. */
const char *qc_job_state_name(qc_job_state s);
const char *qc_attempt_outcome_name(qc_attempt_outcome o);
/* True when cause is one of attempts.cause's names (the class of an attempt's end:
 * docs/failures.md). */
bool qc_attempt_cause_known(const char *cause);
/* Parses the SQL spelling; QS_EINVAL naming the text when unknown. */
qs_status qc_job_state_parse(const char *text, qc_job_state *out, qs_error *err);

/* ---- connection ------------------------------------------------------------------------ */

typedef struct qc_store qc_store;

/* Server settings every session asks for (libpq "options", before the caller's connection
 * string, which may override them): the server ends a session whose client went silent
 * (TCP keepalives after 5 s idle, every second, 3 lost probes; 5 s of unacknowledged data).
 * The coordinator's sessions also bound waits: a statement 5 min, a lock 30 s, an open
 * transaction left idle 5 min (each ends in an SQLSTATE the coordinator retries like a lost
 * connection, qc_store_condition). */
#define QC_STORE_CLIENT_OPTIONS                                                                    \
    "-c tcp_keepalives_idle=5 -c tcp_keepalives_interval=1 -c tcp_keepalives_count=3 "             \
    "-c tcp_user_timeout=5000"
#define QC_STORE_COORDINATOR_OPTIONS                                                               \
    QC_STORE_CLIENT_OPTIONS " -c statement_timeout=300000 -c lock_timeout=30000 "                  \
                            "-c idle_in_transaction_session_timeout=300000"

/* Connects with the libpq conninfo string (connect_timeout 10 s, 2 s for a "coordinator..."
 * role, unless it sets one; it bounds each qc_store_reconnect attempt too; TCP keepalives after 5 s
 * idle, every second, 3 probes, and tcp_user_timeout 5 s unless it sets them; the server
 * options QC_STORE_CLIENT_OPTIONS or, for a coordinator role, QC_STORE_COORDINATOR_OPTIONS), sets
 * application_name to "qsweep <role> <host>:<pid>" (role: a short word such as "coordinator" or
 * "submit", shown in pg_stat_activity and in the "another coordinator" message), and applies the
 * schema migrations (migrate.h). Errors: QS_EDB (connect or migration failure, with the server's
 * message), QS_ESTATE (edited or unknown migration), QS_ENOMEM. */
qs_status qc_store_open(const char *conninfo, const char *role, qc_store **out, qs_error *err);

/* Closes the connection (releasing the coordinator lock) and frees the store. NULL is fine. */
void qc_store_close(qc_store *s);

/* Takes the coordinator lock: an EXCLUSIVE lock on the table qsweep_coordinator_lock
 * (schema/150_lock_tables.sql), which only qsweep_writer may take, held by a second session
 * of this store in a transaction left open, so a second coordinator on the same database
 * fails. A held lock is retried for 2 s first (a coordinator killed a moment ago still holds
 * it until its server backend notices). QS_ESTATE when it stays held, naming the holder's
 * application_name, client and pid from pg_stat_activity; QS_EDB when this role may not take
 * it. The store re-takes the lock on qc_store_reconnect, and a flush commits only while the
 * lock session is still up. */
qs_status qc_store_lock_coordinator(qc_store *s, qs_error *err);

/* Whether another session holds the coordinator lock now (a coordinator is running on this
 * database), without taking it: *held, and in holder (cap bytes) who holds it, as
 * "'<application_name>' (server pid N, <client>, connected since <time>)" from pg_locks and
 * pg_stat_activity; "" when not held. Errors: QS_EDB (the query failed: see
 * qc_store_connection_lost). */
qs_status qc_store_coordinator_running(qc_store *s, bool *held, char *holder, size_t cap,
                                       qs_error *err);

/* True when the last call failed because the session is gone: the connection is bad, a
 * libpq call failed (a send, COPY data), libpq reported the error itself (no SQLSTATE), or
 * the server said connection exception (class 08) or shutting down (57P01-57P03); or
 * because of a condition of the server rather than of the statement (qc_store_condition),
 * which a new session retried later may not meet: the caller treats both alike (pause,
 * reconnect with backoff, flush the same batch again). */
bool qc_store_connection_lost(const qc_store *s);

/* What is wrong with the server when the last failure was one of its conditions, for the
 * log: "disk full (SQLSTATE 53100)", "out of memory (53200)", "too many connections
 * (53300)", "configuration limit exceeded (53400)", "read-only transaction: a hot standby
 * or default_transaction_read_only (25006)", "admin shutdown (57P01)", "crash shutdown
 * (57P02)", "cannot connect now (57P03)", "database dropped (57P04)", "idle session timeout
 * (57P05)" (PostgreSQL docs, Appendix A); NULL otherwise. Valid until the next call on s. */
const char *qc_store_condition(const qc_store *s);

/* Whether condition `what` (a string qc_store_condition returned) is one a successful
 * reconnect says nothing about (disk full, out of memory, too many connections, a limit, read
 * only, database dropped): only the next commit tells it is over. False for the conditions of
 * a server that went away or of a timeout (shutdowns, cannot connect now, timeouts), after
 * which a new connection is the server back, and for NULL. */
bool qc_store_condition_outlives_connection(const char *what);

/* The server process id of the session holding the coordinator lock when this store holds
 * it, else of the store's session (PQbackendPID); 0 when not connected. */
int qc_store_backend_pid(const qc_store *s);

/* QS_OK when the coordinator lock (qc_store_lock_coordinator) is held by the session whose
 * server pid is holder_pid, checked on s's own connection (pg_locks). QS_ESTATE naming the
 * pid when it is not (that session died and another coordinator may hold the lock now);
 * QS_EDB when the query fails. */
qs_status qc_store_check_coordinator_lock(qc_store *s, int holder_pid, qs_error *err);

/* Tries once to re-establish a lost connection, waiting for it (qc_store_reconnect_start,
 * then qc_store_reconnect_poll until it ends, at most the connection's connect_timeout), then
 * re-takes the coordinator lock when this store held it. QS_OK when connected again; QS_EDB
 * while the server is still unreachable (call again later); QS_ESTATE when another
 * coordinator took the lock in between (the caller must stop). */
qs_status qc_store_reconnect(qc_store *s, qs_error *err);

/* The same without waiting, for a caller with a message loop to keep (the coordinator):
 * qc_store_reconnect_start replaces the session by a new one that is connecting
 * (PQresetStart), and each qc_store_reconnect_poll advances it as far as it can without
 * blocking (PQresetPoll, only when its socket is ready: a poll() with no timeout). *done
 * becomes true once the new session is up and has re-taken the coordinator lock if this
 * store held it; that last step runs statements and, when the lock's holder is this
 * coordinator's own stale session, waits the few milliseconds the server takes to end it
 * (qc_store_lock_coordinator). The attempt fails after the connection's connect_timeout
 * (kept here: libpq ignores it in this mode). A host name is resolved by libpq's blocking
 * getaddrinfo at start: give an address (host=IP or hostaddr) where that matters.
 * Errors: QS_EDB (the attempt failed: start again later; the store is lost meanwhile),
 * QS_ESTATE (another coordinator took the lock: stop). Poll on a store not reconnecting:
 * *done says whether its session is up. */
qs_status qc_store_reconnect_start(qc_store *s, qs_error *err);
qs_status qc_store_reconnect_poll(qc_store *s, bool *done, qs_error *err);

/* The session holding the coordinator lock, NULL when none (for tests that cut it). */
PGconn *qc_store_lock_pgconn(qc_store *s);

/* The underlying connection, for read-only ad-hoc queries (qsweep results --sql). Owned by
 * the store; valid until close or reconnect. */
PGconn *qc_store_pgconn(qc_store *s);

/* ---- submit (qsweep submit) ---------------------------------------------------------- */

/* One job of a submission. Strings are borrowed for the duration of the call. */
typedef struct qc_job_submit {
    const char *job_key;   /* hash of the canonical spec, unique; non-empty */
    const char *kind;      /* "eval", "baseline", "sleep", "fail", "echo", ...; non-empty */
    const char *spec_json; /* the job spec, a JSON object (keys: see schema/002_views.sql) */
    int32_t priority;      /* higher runs first */
    int32_t gpus;          /* GPUs needed, >= 0 */
    int64_t gpu_mem_mb;    /* GPU memory needed per GPU, MiB, >= 0 */
    const char *model_key; /* model identity for affinity; NULL or "" for none */
    int32_t max_attempts;  /* >= 1 */
    const char *const *depends_on; /* job_keys this job waits for (in this submission or
                                      already stored); n_depends_on of them */
    size_t n_depends_on;
    bool native_fp4; /* needs GPUs with native FP4 GEMMs (compute capability >= 10.0) */
    const char *stage; /* the pipeline stage that made the job (experiment_jobs.stage);
                          NULL or "" outside a pipeline */
} qc_job_submit;

/* What a submission did. */
typedef struct qc_submit_counts {
    int64_t experiment_id;
    bool experiment_new;   /* false: the experiment already existed with the same grid */
    size_t jobs_new;       /* inserted now */
    size_t reused_done;    /* job_key already stored and succeeded: linked, not re-run */
    size_t reused_pending; /* already stored, pending or running: linked */
    size_t reused_failed;  /* already stored, failed or cancelled: linked, left as is */
} qc_submit_counts;

/* Writes an experiment and its jobs in ONE transaction (serialised with other submissions by
 * the submit lock, an EXCLUSIVE lock on qsweep_submit_lock, so job ids become visible in increasing order; see
 * qc_store_load):
 *   - experiments: a new row, or the existing row of that name when its grid text is the
 *     same and this submission's set of job_keys is exactly the set already linked to it
 *     (QS_ESTATE naming the experiment when the grid text or the job set differs, e.g. a
 *     changed model or token file gives other job_keys for the same grid text; the message
 *     tells the user to choose a new experiment name, and nothing is written);
 *   - jobs: rows for job_keys not yet stored (state pending, resources
 *     {"gpus":..,"gpu_mem_mb":..}, plus "native_fp4": true when asked); existing job_keys
 *     are left untouched and counted;
 *   - experiment_jobs: every job linked to the experiment with its stage (a link that exists
 *     keeps its stage, or takes this one when it had none);
 *   - job_deps: each depends_on resolved by job_key (QS_EINVAL naming the job and the
 *     missing key when a dependency is neither in the submission nor stored);
 *   - NOTIFY qsweep_jobs, so a listening coordinator looks for new work.
 * Submitting the same grid twice adds nothing (jobs_new = 0 the second time). Each spec_json
 * is parsed (jansson) first: QS_EINVAL naming the job_key, line and column when it is not a
 * JSON object; likewise empty job_key/kind, negative resources, max_attempts < 1, or a
 * job_key repeated within the submission with a different spec. Nothing is written when any
 * check fails. grid_json may be NULL. */
qs_status qc_store_submit(qc_store *s, const char *name, const char *description,
                          const char *grid_text, const char *grid_json, const qc_job_submit *jobs,
                          size_t n_jobs, qc_submit_counts *out, qs_error *err);

/* qc_store_submit, and in the same transaction the experiment pinned to numerics path pin
 * (experiment_numerics, schema/180; NULL: no pin) unless it is pinned already, so a coordinator
 * that loads its jobs holds the pin before it dispatches the first (coordinator/server/pins.h).
 * QS_EINVAL when pin is not one path a worker announces (common/numerics_path.h
 * qs_numerics_path_valid: "any" and the families "cpu" and "cuda" are refused too); nothing is
 * written then. */
qs_status qc_store_submit_pinned(qc_store *s, const char *name, const char *description,
                                 const char *grid_text, const char *grid_json,
                                 const qc_job_submit *jobs, size_t n_jobs, const char *pin,
                                 qc_submit_counts *out, qs_error *err);

/* Re-queues the failed and cancelled jobs of an experiment (qsweep's answer to "cancelled
 * jobs can never be run again"): in one transaction, each such job linked to the experiment
 * (also one shared with another experiment) gets state pending, attempts_used 0, no
 * not_before and no last_error; its attempts and results stay as history, and the next
 * attempt is numbered after the last. The experiment's open cancel requests are marked
 * handled so they do not cancel the jobs again. *n_requeued: the jobs reset (0 when none
 * had failed or been cancelled). A coordinator reads jobs when it starts, so a running one
 * would not see the reset rows: QS_ESTATE naming the lock holder when another session holds
 * the coordinator lock (stop it, re-queue, start it). QS_ENOTFOUND naming the experiment,
 * QS_EINVAL for an empty name, QS_EDB; nothing is written on error. */
qs_status qc_store_requeue(qc_store *s, const char *experiment, size_t *n_requeued, qs_error *err);

/* Removes experiment's numerics pin (experiment_numerics), so the next job it dispatches pins
 * it again (`qsweep unpin`). Without a running coordinator (its lock free) the row is deleted
 * here, unless an attempt of the experiment is still marked running on the pinned path. With
 * one, which holds the pins in memory, a numerics_unpin_requests row is queued and its answer
 * waited for up to wait_ms (the coordinator polls every second: qc_store_poll_pin_requests). *msg
 * (cap bytes): "unpinned from PATH", "not pinned". Errors: QS_ENOTFOUND naming the experiment;
 * QS_ESTATE when refused (a job of the experiment runs on the pinned path: the message names
 * it) or when the coordinator did not answer in time (the request stays queued). Without a
 * coordinator it answers the experiment's queued requests superseded (pin_request.h). QS_EINVAL
 * for an empty name; QS_EDB. */
qs_status qc_store_unpin(qc_store *s, const char *experiment, int wait_ms, char *msg, size_t cap,
                         qs_error *err);

/* Pins experiment to numerics path `path` by hand (`qsweep pin`), before or between its jobs'
 * dispatches: from then on its jobs go only to workers announcing that path. Without a running
 * coordinator (its lock free) the experiment_numerics row is written here, under the lock;
 * with one, which holds the pins in memory, a numerics_unpin_requests row carrying the path is
 * queued and its answer waited for up to wait_ms (qc_store_poll_pin_requests). *msg (cap
 * bytes): "pinned to PATH", "pinned to PATH, replacing its pin to OLD (...)", "already pinned
 * to PATH". Refused (QS_ESTATE, the message naming the jobs, paths and workers; nothing
 * changes) by qc_store_pin_conflict, by a running coordinator whose jobs of the experiment run
 * on another path, or when the coordinator did not answer in time (the request stays
 * queued; a pin or unpin without a coordinator answers it superseded). QS_EINVAL when path is not
 * one path a worker announces (common/numerics_path.h qs_numerics_path_valid: "any", "cpu", "cuda"
 * and misspellings), or for an empty name; QS_ENOTFOUND naming an unknown experiment; QS_EDB. */
qs_status qc_store_pin(qc_store *s, const char *experiment, const char *path, int wait_ms,
                       char *msg, size_t cap, qs_error *err);

/* Whether the store says pinning experiment (experiments.id) to path would mix numerics paths
 * or strand its jobs; *refused, and why (cap bytes) names the jobs, paths and workers: its
 * grid's `numerics` is `any` (follows no pin) or a request path does not meet; a job of it has
 * final results from an attempt on another path (attempts.numerics_path, NULL counting as
 * another); an attempt of it is marked running on another path. QS_EDB. */
qs_status qc_store_pin_conflict(qc_store *s, int64_t experiment, const char *path, char *why,
                                size_t cap, bool *refused, qs_error *err);

/* An unanswered numerics_unpin_requests row: path is the path a `qsweep pin` asks for ("" for
 * an unpin). With it, the path its experiment is pinned to in the store ("" when none) and the
 * attempts of the experiment's jobs the store holds running on that stored path (a shared job
 * follows the pin of its oldest experiment, so it may be this one's and run under another's
 * pin): how many, and the worker of one. */
typedef struct qc_pin_request {
    int64_t id, experiment;
    char path[160];
    char stored_path[160];
    int64_t running;
    char running_worker[208];
} qc_pin_request;

/* The unanswered pin and unpin requests, oldest first, into *out (malloc'd; NULL when *n = 0);
 * the coordinator answers each with qc_store_batch_unpin_answer. Errors: QS_EDB, QS_ENOMEM. */
qs_status qc_store_poll_pin_requests(qc_store *s, qc_pin_request **out, size_t *n, qs_error *err);

/* Asks the coordinator to cancel one job (by job_key) or every unfinished job of an
 * experiment (by name): inserts a cancel_requests row and NOTIFY qsweep_cancel, in one
 * transaction. Exactly one of job_key / experiment is non-NULL. QS_ENOTFOUND naming it when
 * it does not exist. The coordinator applies it (qc_store_poll_cancels). When nothing is left
 * to cancel (the job, or every job of the experiment, is already succeeded, failed or
 * cancelled) the row is written with handled_at set, so no request stays open. */
qs_status qc_store_request_cancel(qc_store *s, const char *job_key, const char *experiment,
                                  const char *reason, qs_error *err);

/* ---- rebuild after a restart --------------------------------------------------------- */

/* A non-terminal job as stored. Strings and arrays are owned by the snapshot. */
typedef struct qc_stored_job {
    int64_t id;
    char *job_key, *kind, *spec_json, *model_key, *last_error; /* last_error may be NULL */
    qc_job_state state;                                        /* pending or running */
    int32_t priority;
    int32_t gpus;
    int64_t gpu_mem_mb;
    bool native_fp4; /* jobs.resources native_fp4 (false when absent) */
    int32_t max_attempts;
    int32_t attempts_used; /* counted against max_attempts */
    int32_t last_attempt;  /* highest attempt number started, 0 when none */
    double not_before;     /* Unix time (s) before which not to dispatch; 0 = none */
    /* Seconds from the database's now() (at the load) until not_before, <= 0 when due or
       none: both ends on PostgreSQL's clock, which wrote not_before, so a coordinator whose
       own clock is off still waits exactly the backoff. */
    double not_before_in_s;
    double created_at;     /* Unix time (s), for age ordering */
    int64_t *waiting_on;   /* ids of dependencies not yet succeeded (pending/running) */
    size_t n_waiting_on;
    size_t n_deps_failed; /* dependencies failed or cancelled: this job cannot run */
    /* When n_deps_failed > 0, the first of them (smallest id): its id, state (failed or
       cancelled) and last_error (NULL when it has none). */
    int64_t dep_failed_id;
    qc_job_state dep_failed_state;
    char *dep_failed_error;
    /* A job whose model a pipeline's training job makes: that job's job_key (the spec's
       model.trained_by), and the model digest it recorded when it ended (64 hex digits, its
       final metric "model_digest.<hex>", as in v_trained_models); each NULL when none (no
       trained_by; no record yet). */
    char *trained_by, *trained_digest;
    /* The experiment whose numerics pin the job follows (the smallest id among its
       experiments; 0: none), that experiment's pinned path (experiment_numerics, NULL: not
       pinned) and the path its spec asks for (spec "numerics", NULL: none). */
    int64_t experiment;
    char *pinned_path, *numerics;
} qc_stored_job;

/* An attempt still marked running, with the worker and lease the coordinator gave it. */
typedef struct qc_stored_attempt {
    int64_t job;
    int32_t attempt;
    char *worker;
    double started_at;       /* Unix time (s) */
    double lease_expires_at; /* Unix time (s); 0 when none */
    char token_hash[65];     /* attempts.token_hash in lowercase hex; "" when none */
} qc_stored_attempt;

typedef struct qc_store_snapshot {
    qc_stored_job *jobs; /* ordered by id */
    size_t n_jobs;
    qc_stored_attempt *running; /* ordered by job, attempt */
    size_t n_running;
    int64_t max_job_id; /* highest job id in the table, terminal jobs included (pass it as
                           after_id next time); never below after_id */
} qc_store_snapshot;

/* Reads every pending or running job with id > after_id (0: all, for a rebuild after a
 * restart; the last max_job_id: only jobs submitted since), with its unsatisfied
 * dependencies and attempt counts, and every running attempt of those jobs. One
 * REPEATABLE READ read-only transaction, so the picture is consistent. Free with
 * qc_store_snapshot_free. Errors: QS_EDB, QS_ENOMEM. */
qs_status qc_store_load(qc_store *s, int64_t after_id, qc_store_snapshot *out, qs_error *err);
void qc_store_snapshot_free(qc_store_snapshot *snap);

/* One worker id and the CURVE key it belongs to (workers.curve_key). */
typedef struct qc_worker_key {
    char *worker, *key;
} qc_worker_key;

/* Every worker id with a CURVE key, into *out (malloc'd, *n entries; free each string and
 * the array). Errors: QS_EDB, QS_ENOMEM. */
qs_status qc_store_worker_keys(qc_store *s, qc_worker_key **out, size_t *n, qs_error *err);

/* Unhandled cancel requests, expanded to the ids of unfinished jobs (pending/running) they
 * name, in request order. *upto_request is the highest request id read; the coordinator
 * cancels the jobs and then queues qc_store_batch_cancels_handled(b, upto_request), so a crash in
 * between re-reads the requests. *job_ids is malloc'ed (free it); may be NULL when
 * *n_jobs = 0. Errors: QS_EDB, QS_ENOMEM. */
qs_status qc_store_poll_cancels(qc_store *s, int64_t **job_ids, size_t *n_jobs,
                                int64_t *upto_request, qs_error *err);

/* ---- batched transitions (the coordinator's write queue) ----------------------------- */

typedef struct qc_store_batch qc_store_batch;

/* One metric value. name: "ppl", "kl_mean", "sqnr_db.<layer>.<kind>", ...; step -1 for a
 * final value, >= 0 for a point on a curve. */
typedef struct qc_metric {
    const char *name;
    double value;
    int64_t step;
} qc_metric;

qc_store_batch *qc_store_batch_new(void); /* NULL when out of memory */
void qc_store_batch_free(qc_store_batch *b);
/* Forgets every queued item (after a successful flush, or to drop the batch). */
void qc_store_batch_clear(qc_store_batch *b);
/* Number of queued items (transitions + metric rows). */
size_t qc_store_batch_size(const qc_store_batch *b);

/* The appenders copy their strings. They fail only with QS_ENOMEM or QS_EINVAL (a bad
 * argument, named), and then queue nothing. */

/* attempts: insert (job, attempt, worker, started now, lease now + lease_s, 'running').
 * Re-flushing is harmless (ON CONFLICT (job, attempt) DO NOTHING). */
qs_status qc_store_batch_attempt_started(qc_store_batch *b, int64_t job, int32_t attempt,
                                         const char *worker, double lease_s, qs_error *err);
/* Same, with token_hash_hex (64 lowercase hex digits: the BLAKE2b-256 hash of the attempt
 * token sent in its ASSIGN, proto/qsweep.proto) stored in attempts.token_hash; NULL stores
 * none. QS_EINVAL names a malformed hash. */
qs_status qc_store_batch_attempt_started_token(qc_store_batch *b, int64_t job, int32_t attempt,
                                               const char *worker, double lease_s,
                                               const char *token_hash_hex, qs_error *err);
/* attempts.lease_expires_at = now + lease_s for a running attempt. Several renewals of one
 * attempt in a batch are coalesced (the last wins). */
qs_status qc_store_batch_lease_renewed(qc_store_batch *b, int64_t job, int32_t attempt,
                                       double lease_s, qs_error *err);
/* attempts: outcome, ended_at = now, error (NULL for none), for an attempt still running
 * (an attempt that already ended keeps its first outcome). */
qs_status qc_store_batch_attempt_ended(qc_store_batch *b, int64_t job, int32_t attempt,
                                       qc_attempt_outcome outcome, const char *error,
                                       qs_error *err);
/* The same with attempts.cause, the class of the end (schema/170_attempt_cause.sql,
 * docs/failures.md; NULL for none): a name qc_attempt_cause_known accepts, else QS_EINVAL and
 * nothing queued. */
qs_status qc_store_batch_attempt_ended_cause(qc_store_batch *b, int64_t job, int32_t attempt,
                                             qc_attempt_outcome outcome, const char *error,
                                             const char *cause, qs_error *err);
/* jobs: state, attempts_used, not_before = now + backoff_s (backoff_s <= 0: NULL),
 * last_error (NULL keeps the stored one), updated_at = now. Absolute values, so replaying is
 * harmless; several changes of one job in a batch: the last wins. */
qs_status qc_store_batch_job_state(qc_store_batch *b, int64_t job, qc_job_state state,
                                   int32_t attempts_used, double backoff_s, const char *last_error,
                                   qs_error *err);
/* workers: upsert (id, host, pid, gpus JSON array text, threads), last_seen = now,
 * left_at = NULL; first_seen is kept. gpus_json NULL means "[]". */
qs_status qc_store_batch_worker_seen(qc_store_batch *b, const char *worker, const char *host,
                                     int32_t pid, const char *gpus_json, int32_t threads,
                                     qs_error *err);
/* Same, with the CURVE public key (40 Z85 characters) of the connection that said HELLO, or
 * NULL without CURVE: the first key stored for a worker id stays (workers.curve_key is never
 * overwritten), the coordinator refuses that id from any other key. */
qs_status qc_store_batch_worker_seen_key(qc_store_batch *b, const char *worker, const char *host,
                                         int32_t pid, const char *gpus_json, int32_t threads,
                                         const char *curve_key, qs_error *err);
/* Same, with what its HELLO announced (schema/180_numerics_pin.sql): the numerics path its jobs
 * run on and why `--backend auto` runs them on the CPU (NULL or "": none). */
qs_status qc_store_batch_worker_seen_path(qc_store_batch *b, const char *worker, const char *host,
                                          int32_t pid, const char *gpus_json, int32_t threads,
                                          const char *curve_key, const char *numerics_path,
                                          const char *backend_note, qs_error *err);
/* experiment_numerics: pins experiment to numerics path `path` (non-empty); the first pin of an
 * experiment stays (a later one, in this batch or stored, is ignored, unless an unpin comes
 * between: qc_store_batch_experiment_unpin); an experiment deleted
 * meanwhile is skipped. QS_EINVAL for an id <= 0 or an empty or non-UTF-8 path. */
qs_status qc_store_batch_experiment_pin(qc_store_batch *b, int64_t experiment, const char *path,
                                        qs_error *err);
/* workers: last_seen = now for a worker the table holds, and left_at = now when left (it
 * said BYE or timed out), else NULL. Several of one worker in a batch: the last wins.
 * QS_EINVAL for an empty or non-UTF-8 id. */
qs_status qc_store_batch_worker_alive(qc_store_batch *b, const char *worker, bool left,
                                      qs_error *err);
/* results: n metric rows of (job, attempt); final says whether they are the final set
 * (each metric's step must then be -1; partial rows have step >= 0). Stored idempotently:
 *   - a row whose (job, name, step) is stored already is ignored, except that a partial
 *     (curve) point from a newer attempt replaces one from an older attempt;
 *   - a final set is stored once per job: final rows of an attempt are ignored when the job
 *     already has final rows from another attempt.
 * QS_EINVAL naming the metric for an empty name or a step that contradicts final. */
qs_status qc_store_batch_results(qc_store_batch *b, int64_t job, int32_t attempt, bool final,
                                 const qc_metric *rows, size_t n, qs_error *err);
/* experiment_numerics: removes experiment's pin. In one batch the pins and unpins of an
 * experiment apply in queue order: its row is deleted, then the first pin queued after its
 * last unpin (if any) is written. QS_EINVAL for an id <= 0. */
qs_status qc_store_batch_experiment_unpin(qc_store_batch *b, int64_t experiment, qs_error *err);
/* numerics_unpin_requests: answers request `request` with outcome (an unpin's "unpinned",
 * "not_pinned"; a pin's "pinned", "unchanged"; "refused") and message. QS_EINVAL for an id <= 0,
 * another outcome or non-UTF-8 text. */
qs_status qc_store_batch_unpin_answer(qc_store_batch *b, int64_t request, const char *outcome,
                                      const char *message, qs_error *err);
/* cancel_requests.handled_at = now for every request with id <= upto_request. */
qs_status qc_store_batch_cancels_handled(qc_store_batch *b, int64_t upto_request, qs_error *err);

/* Totals of one flush (rows the server actually changed). */
typedef struct qc_flush_stats {
    size_t attempts_started, leases_renewed, attempts_ended, jobs_changed, workers_seen;
    size_t results_inserted; /* new or replaced result rows */
    size_t results_ignored;  /* duplicate or late rows */
} qc_flush_stats;

/* Writes the whole batch in one transaction, in this order: workers, attempts started,
 * leases renewed, attempts ended, job states, cancels handled, results; then COMMIT. The
 * statements before the results go to the server in one pipeline (one round trip).
 * Results: when none of the batch's jobs has a stored result yet (the common case), COPY
 * straight into results under a savepoint; otherwise, or when that COPY meets a duplicate
 * (unique_violation), COPY into a session staging table and apply the idempotent rules above
 * with INSERT ... ON CONFLICT. Returns after the COMMIT
 * (durable). On success the batch is cleared; on failure it is kept intact. An empty batch
 * costs nothing. stats may be NULL. Errors: QS_EDB (see connection_lost), QS_ENOMEM. */
qs_status qc_store_flush(qc_store *s, qc_store_batch *b, qc_flush_stats *stats, qs_error *err);

/* Result sets (qc_store_batch_results calls) queued in b, and the bytes of their rows. */
size_t qc_store_batch_result_sets(const qc_store_batch *b);
size_t qc_store_batch_result_bytes(const qc_store_batch *b);

/* A share of a batch, for writing it through two connections at once (the coordinator's
 * writer, coordinator/server/writer.h): QC_FLUSH_MAIN is every transition and about half of
 * the result sets' bytes, QC_FLUSH_RESULTS the other result sets; all sets of one job go to
 * one share (two sessions inserting rows of one job could wait on each other), always the
 * same for the same batch. QC_FLUSH_ALL is the whole batch. */
typedef enum qc_flush_share { QC_FLUSH_ALL, QC_FLUSH_MAIN, QC_FLUSH_RESULTS } qc_flush_share;

/* Called by a flush after everything is written and before COMMIT; an error makes the flush
 * roll back and return it. */
typedef qs_status (*qc_flush_hook)(void *ctx, qs_error *err);

/* Writes one share of b in one transaction, as qc_store_flush does, calling before_commit
 * (may be NULL) just before the COMMIT, also when the share is empty (then no transaction is
 * opened). b is only read: two connections may flush the two shares of one batch at the
 * same time, and the caller clears b (qc_store_batch_clear) once both are committed. A share
 * committed while the other failed is harmless on a retry of the whole batch: its rows are
 * found stored and ignored (the rules above). Errors: as qc_store_flush, and QS_EINVAL for
 * an unknown share. */
qs_status qc_store_flush_share(qc_store *s, const qc_store_batch *b, qc_flush_share share,
                               qc_flush_hook before_commit, void *ctx, qc_flush_stats *stats,
                               qs_error *err);

/* ---- read helpers (qsweep status / results) ------------------------------------------ */

/* One row of v_experiment_progress. waiting: the pending jobs (counted in pending too) that
 * wait on a dependency not yet succeeded (schema/100_dependency_waiting.sql). */
typedef struct qc_progress {
    int64_t experiment_id;
    char name[256];
    int64_t total, pending, running, succeeded, failed, cancelled;
    int64_t waiting;
} qc_progress;

/* Progress of one experiment (name) or of all (name NULL), ordered by experiment id.
 * *rows is malloc'ed (free it). QS_ENOTFOUND naming the experiment when it does not exist. */
qs_status qc_store_progress(qc_store *s, const char *name, qc_progress **rows, size_t *n,
                            qs_error *err);

/* One row of v_job_results (strings valid only during the callback; NULL when the spec has
 * no such field). */
typedef struct qc_result_row {
    const char *experiment, *job_key, *kind, *model, *format, *quantize, *mode, *part;
    const char *metric;
    double value;
    int64_t step;
    bool final;
} qc_result_row;

/* Calls fn for every stored result of experiment `name` (every experiment when NULL),
 * ordered by experiment, job id, metric, step. fn returns 0 to go on, non-zero to stop (then
 * this returns QS_ECANCELLED). Rows arrive one at a time (libpq single-row mode), so any
 * number fits in memory.
 * QS_ENOTFOUND when the experiment does not exist. */
qs_status qc_store_results(qc_store *s, const char *name,
                           int (*fn)(void *ctx, const qc_result_row *row), void *ctx,
                           qs_error *err);

#endif
