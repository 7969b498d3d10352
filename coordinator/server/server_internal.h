/* Shared between the files of coordinator/server only (server.h is the public face): the
 * coordinator's in-memory state (jobs, workers, the actions waiting for a commit) and the
 * functions each part of the loop offers the others. Single-threaded: everything here runs on
 * the loop's thread (the writer thread only sees batches, writer.h). */
#ifndef QC_SERVER_INTERNAL_H
#define QC_SERVER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "envelope.h"
#include "scheduler.h"
#include "server.h"
#include "store.h"
#include "writer.h"
#include "zap.h"

enum { RID_MAX = 255, NAME_MAX_ = 200, MODELS_MAX = 8, KEY_MAX = 127, DRAIN_MAX = 8192 };
/* An attempt token's bytes (proto: Assign.attempt_token), its hash's (BLAKE2b-256), and a
 * CURVE key in Z85 (40 characters). */
enum { TOKEN_BYTES = 16, TOKEN_HASH_BYTES = 32, CURVE_Z85 = 40 };
/* Job kinds a worker's HELLO may advertise, and the longest name kept. */
enum { KINDS_MAX = 64, KIND_MAX = 63 };
#define STALL_LOG_MS 10000
#define NEVER INT64_MAX

/* The store's job states (coordinator/store/store.h). */
typedef qc_job_state jstate;
#define J_PENDING QC_JOB_PENDING
#define J_RUNNING QC_JOB_RUNNING
#define J_SUCCEEDED QC_JOB_SUCCEEDED
#define J_FAILED QC_JOB_FAILED
#define J_CANCELLED QC_JOB_CANCELLED

typedef struct worker worker;

/* One metric of a split final RESULT, kept until its last chunk (proto: Result.chunks). */
typedef struct chunk_metric {
    char *name;
    double value;
    int64_t step;
    bool final;
} chunk_metric;

/* The most chunks one final RESULT may have: QS_PROTO_MAX_RESULT_BYTES in chunks at least
 * half full (codec.h). */
#define CHUNKS_MAX ((uint32_t)(QS_PROTO_MAX_RESULT_BYTES / (QS_PROTO_CHUNK_BYTES / 2)))

typedef struct job {
    qc_sched_job q; /* first: what the scheduler sees (q.model_key points to model_key) */
    int64_t id;     /* = q.id */
    char *kind, *spec, *model_key;
    int max_attempts, attempts_used;
    uint32_t attempt; /* current (running) or last attempt number */
    jstate state;     /* changed only through set_state (keeps q.pending in step) */
    int64_t *deps;    /* ids of jobs this one waits for (unresolved at load) */
    int n_deps;
    char *error;            /* the error it failed or was cancelled with (owned; NULL: none
                               yet), quoted in its dependents' errors */
    worker *worker;         /* the worker running it; NULL when its attempt was rebuilt from the
                               store at this coordinator's start (rebuilt) and not re-attached
                               yet, or when its worker's id moved to a new connection */
    bool rebuilt;           /* the running attempt was loaded from the store at start, not
                               assigned by this process; cleared when its worker re-attaches */
    char *worker_name;      /* the attempt's worker (attempts.worker) */
    int64_t lease_deadline; /* monotonic ms; NEVER until the ASSIGN is sent */
    int64_t db_lease_until; /* monotonic ms up to which attempts.lease_expires_at is written */
    bool cancel_requested;
    /* a split final RESULT arriving for the current attempt: its chunks 0..chunk_next-1 of
       chunks, as metrics (freed when the attempt ends) */
    chunk_metric *chunk_rows;
    size_t n_chunk_rows, cap_chunk_rows;
    uint32_t chunks, chunk_next;
    /* the current attempt's token (identity.c): the raw bytes while this process made it
       (token_known; re-sent in a repeated ASSIGN), its hash always once an attempt has one
       (has_token_hash; from attempts.token_hash after a restart) */
    uint8_t token[TOKEN_BYTES], token_hash[TOKEN_HASH_BYTES];
    bool token_known, has_token_hash;
    bool fail_now;   /* the attempt ending failed permanently: no further attempt (jobs.c) */
    char *avoid;     /* q.avoid: the worker the last transient failure happened on (owned) */
    char *exit_note; /* how its worker's process ended, from a supervisor (Hello.previous_exit):
                        added to the error when the attempt is lost (owned; NULL: none) */
    /* the note's class for attempts.cause when the attempt is lost: "oom", "signal", "exit"
       (qc_srv_exit_cause; NULL: none) */
    const char *exit_cause;
    char *job_key;   /* jobs.job_key (owned) */
    /* A job whose model a pipeline's training job makes: that job's key (spec model.trained_by;
       owned, NULL: none). */
    char *trained_by;
    /* The model digest, 64 hex digits (owned, NULL: not known): for a train job, the one its
       final RESULT recorded ("model_digest.<hex>") in this process; for a job with trained_by,
       its training job's as the store held it at load. Sent in Assign.model_digest. */
    char *model_digest;
} job;

struct worker {
    char rid[RID_MAX]; /* ZeroMQ routing id (the DEALER's ZMQ_ROUTING_ID) */
    size_t rid_len;
    char name[NAME_MAX_ + 1]; /* HELLO worker_id */
    char key[CURVE_Z85 + 1];  /* the connection's CURVE key (User-Id), "" without CURVE */
    int n_gpus;
    qc_sched_gpu gpus[QC_SCHED_GPUS_MAX]; /* HELLO's GPUs, the first n_gpus */
    char models[MODELS_MAX][KEY_MAX + 1];
    int n_models;
    char kinds[KINDS_MAX][KIND_MAX + 1]; /* HELLO kinds; n_kinds 0: not advertised (any) */
    int n_kinds;
    bool ready;
    job *job;
    int64_t last_seen;
    int64_t next_alive; /* monotonic ms: when workers.last_seen is refreshed next */
};

/* Something to send once the current batch is durable. */
typedef struct action {
    char rid[RID_MAX];
    size_t rid_len;
    uint8_t *buf;
    size_t len;
    job *assign; /* an ASSIGN: start the lease when it goes out */
    uint32_t attempt;
} action;

typedef struct server {
    const qc_server_options *o;
    int lease_ms, grace_ms, backoff_ms, poll_ms, worker_timeout_ms;
    qc_store *store;        /* reads and polls */
    qc_writer *writer;      /* the second connection: commits batches in its own thread */
    qc_store_batch *batch;  /* the open batch, filled by the loop */
    qc_store_batch *flying; /* the batch handed to the writer (or failed and kept for a retry) */
    qc_store_batch *spare;  /* an empty batch to open next */
    int64_t flush_since;    /* monotonic ms: when the flying batch was handed to the writer */
    int64_t next_stall_log; /* monotonic ms: when to say again that it has not committed */
    size_t flying_items;    /* its size when handed over (the writer owns it meanwhile) */
    qs_error batch_err;
    bool db_down;
    int64_t next_reconnect;
    bool reconnecting;          /* the connections are being re-opened (qc_srv_reconnect) */
    int retry_ms;               /* the current reconnect delay (db_lost); 0 after a commit */
    const char *down_condition; /* the server condition behind the pause, NULL: lost */
    void *zctx, *sock;
    qc_zap_keys *allowed; /* the CURVE allow-list, until handed to the ZAP handler */
    qc_zap *zap;          /* the ZAP handler (zap.h); NULL without an allow-list */
    job **jobs;           /* sorted by id */
    size_t n_jobs, cap_jobs;
    size_t active; /* jobs not terminal */
    int64_t last_job_id;
    qc_sched_job **pending; /* dispatch candidates (each the q of a job); entries may have left
                               PENDING (compacted lazily) */
    size_t n_pending, cap_pending;
    bool pending_sorted, dirty;
    int64_t next_wake; /* earliest backoff end among pending jobs */
    qc_worker_key *owners; /* worker id -> the CURVE key that first registered it */
    size_t n_owners, cap_owners;
    worker **workers;  /* sorted by routing id */
    size_t n_workers, cap_workers;
    /* the jobs whose attempt names a worker, by (worker_name, id) (running.c) */
    job **running;
    size_t n_running, cap_running;
    action *actions; /* waiting for the open batch */
    size_t n_actions, cap_actions;
    action *flight; /* waiting for the flying batch */
    size_t n_flight, cap_flight;
    bool polled_since_commit;
    /* totals for the exit line: flushes, the items they wrote, and their wall time */
    uint64_t n_flushes, n_flushed_items;
    double flush_s;
} server;

/* ---- server.c: shared helpers of the loop ---- */

/* Grows the array p of *cap elements of elem bytes to hold need (doubling from 64); aborts
 * without memory (the queue cannot be kept consistent without it). */
void *qc_srv_grow(void *p, size_t *cap, size_t need, size_t elem);

/* Queueing a write fails only without memory or on a bad argument, which the message
 * checks exclude: the in-memory state would no longer match what becomes durable. */
void qc_srv_must(server *s, qs_status st);

/* A printable peer name for logs: the routing id when printable, else its hex. */
void qc_srv_peer_name(const char *rid, size_t len, char *out, size_t cap);

/* ---- registry.c: the workers ---- */

/* The worker with this routing id, or NULL (binary search of s->workers). */
worker *qc_srv_find_worker(server *s, const char *rid, size_t len);

/* Removes w from the registry and frees it; its job, if any, keeps its lease (which decides);
 * workers.last_seen is written as gone. */
void qc_srv_forget_worker(server *s, worker *w);

/* Removes w from the registry and frees it, writing nothing (its id lives on in another
 * connection); its job, if any, keeps its lease. */
void qc_srv_drop_worker(server *s, worker *w);

/* Adds a worker with routing id rid (rid_len <= RID_MAX bytes, not yet registered) to the
 * registry, keeping it sorted; its other fields are zero. Aborts without memory. */
worker *qc_srv_worker_add(server *s, const char *rid, size_t rid_len);

/* Forgets every idle worker silent for more than worker_timeout_ms. */
void qc_srv_forget_silent_workers(server *s, int64_t now);

/* A worker that reported its attempt's end (other than preempted: it may be stopping) is
 * idle: it may get its next ASSIGN right behind the ACK, in the same commit, without a READY
 * round trip (proto/qsweep.proto, Result). */
void qc_srv_worker_idle(server *s, worker *w);

/* The registered worker named name on a connection other than except (NULL: any), or NULL. */
worker *qc_srv_find_worker_named(server *s, const char *name, const worker *except);

/* ---- running.c: the running attempts by worker name ---- */

/* Adds j, whose attempt has just been given j->worker_name (NULL: nothing to add), to
 * s->running; an entry already there stays one. Aborts without memory. */
void qc_srv_running_add(server *s, job *j);

/* Removes j from s->running while j->worker_name still names its worker (before it is
 * cleared or replaced); a job not there is left alone. */
void qc_srv_running_remove(server *s, job *j);

/* The jobs of s->running whose attempt names worker `name`, by increasing id: their count,
 * and *first pointing at the first of them in s->running (valid until the next add or
 * remove, so a caller that ends attempts copies them first; NULL when the count is 0). */
size_t qc_srv_running_of(const server *s, const char *name, job *const **first);

/* ---- identity.c: who may speak for a worker, and for an attempt ---- */

/* Gives job j's new attempt a fresh random token (libsodium randombytes) and its hash. */
void qc_srv_token_new(job *j);

/* The hash of j's token as 64 lowercase hex digits into out (for attempts.token_hash). */
void qc_srv_token_hash_hex(const job *j, char out[2 * TOKEN_HASH_BYTES + 1]);

/* Takes j's token hash from attempts.token_hash (hex; "" or malformed: none). */
void qc_srv_token_load(job *j, const char *hex);

/* Whether the len bytes t are j's current attempt token (constant-time compare of hashes);
 * false when j has none. */
bool qc_srv_token_ok(const job *j, const uint8_t *t, size_t len);

/* Reads the stored worker id -> CURVE key bindings (workers.curve_key) at start. QS_EDB. */
qs_status qc_srv_owners_load(server *s, qs_error *err);

/* The CURVE key worker id name belongs to, or NULL when none registered it yet. */
const char *qc_srv_owner(const server *s, const char *name);

/* Binds name to key (the first HELLO of that id with CURVE); aborts without memory. */
void qc_srv_own(server *s, const char *name, const char *key);

/* Frees the bindings. */
void qc_srv_owners_free(server *s);

/* ---- handlers.c: messages from workers ---- */

/* Decodes one message body from peer rid and applies it (one handler per message kind);
 * undecodable or unexpected messages are logged and dropped. user_id: the connection's
 * ZeroMQ "User-Id" property (its CURVE key in Z85, set by the ZAP handler), NULL without
 * CURVE. */
void qc_srv_on_message(server *s, const char *rid, size_t rid_len, const char *user_id,
                       const uint8_t *body, size_t len, int64_t now);

/* ---- jobs.c: the job table and its transitions ---- */

/* The job with this id, or NULL (binary search of s->jobs). */
job *qc_srv_find_job(server *s, int64_t id);

/* Sets j->state, keeping j->q.pending in step (the only way a state changes). */
void qc_srv_set_state(job *j, jstate st);

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

/* Frees the chunks of a split final RESULT kept for j's current attempt. */
void qc_srv_chunks_drop(job *j);

/* Ends the job's current attempt with outcome (attempts.outcome) and cause, the class of the
 * end (attempts.cause: schema/170_attempt_cause.sql; a lost attempt's supervisor note
 * overrides it with its own); counts: whether it counts against max_attempts. Decides the
 * job's next state and queues the write. */
void qc_srv_end_attempt(server *s, job *j, qc_attempt_outcome outcome, const char *cause,
                        const char *error, bool counts);
/* The class of a supervisor's words how a process ended (common/exit_status.c's): "oom" for
 * an OOM kill, "signal" for another signal, "exit" for an exit status, NULL for other words. */
const char *qc_srv_exit_cause(const char *note);

/* Frees job j and everything it owns (NULL: nothing). */
void qc_srv_job_free(job *j);

/* Whether text is a model digest as the store records it: 64 lowercase hex digits. */
bool qc_srv_is_digest(const char *text);

/* A train job's final RESULT of n metrics: keeps the model digest it records
 * ("model_digest.<hex>", worker/train/train_job.c) as j->model_digest, for the ASSIGNs of the
 * jobs of its model (qc_srv_trained_digest). Other kinds and other names: nothing. */
void qc_srv_keep_model_digest(job *j, const chunk_metric *m, size_t n);

/* ---- intake.c: reading the store while running ---- */

/* Loads jobs submitted since the last load (all of them at start). */
qs_status qc_srv_load_new_jobs(server *s, qs_error *err);

/* Applies the store's unhandled cancel requests (server.h). */
qs_status qc_srv_poll_cancels(server *s, qs_error *err);

/* ---- dispatch.c: scheduling ---- */

/* Assigns pending jobs to ready idle workers (scheduler.h) when something changed or a
 * backoff ended; nothing while PostgreSQL is down. */
void qc_srv_dispatch(server *s, int64_t now);

/* ---- lease.c: leases ---- */

/* How often, at most, a worker's messages refresh workers.last_seen (ms): every
 * QC_SRV_ALIVE_MS (5 s), or every half lease when the lease is shorter. The write is one row
 * of the open batch, committed with the others (no round trip of its own). `qsweep workers`
 * reads last_seen against QC_WORKER_SILENT_S (coordinator/store/queries.h). */
#define QC_SRV_ALIVE_MS 5000
static inline int64_t qc_srv_alive_ms(const server *s) {
    return s->lease_ms / 2 < QC_SRV_ALIVE_MS ? s->lease_ms / 2 : QC_SRV_ALIVE_MS;
}

/* Renews the lease to now + lease_ms in memory, and in attempts.lease_expires_at when the
 * stored one has less than half a lease left: one write per job every lease/2 at most, so
 * observers see live leases without a write per heartbeat. */
void qc_srv_renew_lease(server *s, job *j, int64_t now);

/* Ends every running attempt whose lease is past (lost, counts), and forgets idle workers
 * silent for worker_timeout_ms. */
void qc_srv_check_leases(server *s, int64_t now);

/* The loop itself did not run for stalled_ms (SIGSTOP, a VM pause, swapping): the workers'
 * heartbeats of that time are still on their way in, so a lease checked now would expire
 * for the coordinator's silence, not the worker's. Every running attempt (and every known
 * worker) gets a full lease from now to report before any lease is checked (server.h). */
void qc_srv_on_stall(server *s, int64_t stalled_ms, int64_t now);

/* ---- outbox.c: messages to workers ---- */

/* Encodes env into a malloc'd *buf of *len bytes; false (logged) on failure. */
bool qc_srv_encode(Qsweep__Envelope *env, uint8_t **buf, size_t *len);

/* Sends [rid][body]; false when the peer is gone (ROUTER_MANDATORY) or its queue is full. */
bool qc_srv_send_raw(server *s, const char *rid, size_t rid_len, const uint8_t *buf, size_t len);

/* Encodes and sends env to rid at once (not waiting for any commit). */
void qc_srv_send_now(server *s, const char *rid, size_t rid_len, Qsweep__Envelope *env);

/* Queues an ACK of (job_id, attempt, seq, final) until the open batch is durable. */
void qc_srv_send_ack(server *s, const char *rid, size_t rid_len, int64_t job_id, uint32_t attempt,
                     uint64_t seq, bool final);

/* Sends CANCEL of (job_id, attempt) with reason at once. */
void qc_srv_send_cancel(server *s, const char *rid, size_t rid_len, int64_t job_id,
                        uint32_t attempt, const char *reason);

/* Sends REREGISTER with reason at once (an unknown peer must send HELLO). */
void qc_srv_send_reregister(server *s, const char *rid, size_t rid_len, const char *reason);

/* Sends job j's ASSIGN to w: after the batch's commit (the attempt row must be durable
 * first; the lease starts when the first part goes out), or at once (a re-send to a worker
 * that got only part of it). A spec over QS_PROTO_CHUNK_BYTES goes in parts cut at UTF-8
 * character boundaries (proto: Assign.chunks), so no frame holds the link for long. */
void qc_srv_send_assign(server *s, worker *w, job *j, bool after_commit);

/* The recorded model digest to send with the ASSIGN of j (proto: Assign.model_digest): for a
 * job with trained_by, its training job's, from that job's final RESULT in this process (a
 * dependency of j) or else from the store at load; NULL for any other job or while none is
 * known. */
const char *qc_srv_trained_digest(server *s, const job *j);

/* ---- commit.c: the commit pipeline ---- */

/* Queues env for rid until the open batch is durable; assign: the job whose ASSIGN this is
 * (its lease starts when it goes out), else NULL. */
void qc_srv_send_after_commit(server *s, const char *rid, size_t rid_len, Qsweep__Envelope *env,
                              job *assign);

/* Sends the actions of the flight list (whose batch is durable). */
void qc_srv_run_actions(server *s);

/* Moves the open batch's actions to the (empty) flight list. */
void qc_srv_actions_to_flight(server *s);

/* PostgreSQL went away, or reported a condition of its own (condition: disk full, out of
 * memory, ... from qc_store_condition; NULL for a lost connection): pause dispatch, keep
 * every write and its ACKs in memory, and reconnect and retry, every 500 ms after a lost
 * connection, with a backoff doubling from 500 ms to 8 s under a condition (each retry of
 * a full disk would otherwise fail twice a second). */
void qc_srv_db_lost(server *s, const char *why, const char *condition);

/* While PostgreSQL is down and its retry time has come (and the writer is idle), re-opens
 * every connection; the writer's takes the coordinator lock again before anything is written.
 * Back: dispatch resumes and the queued batches are committed. Still down: the next retry is
 * scheduled. Errors: QS_ESTATE (another coordinator holds the lock now). */
qs_status qc_srv_reconnect(server *s, int64_t now, qs_error *err);

/* The last batches at exit, in order: the flying one, one that failed and waits for a retry,
 * then the open one. Each one's ACKs and ASSIGNs go out after its commit, as in the loop: an
 * attempt committed without its ASSIGN would wait out the next start's grace period and
 * count as lost. (Sent before the socket closes; its linger lets them leave.) A failure is
 * logged. */
void qc_srv_final_commit(server *s);

/* Group commit, overlapped with the loop: when the writer is idle, hands it the batch that
 * failed last time (it goes first), else the open batch with its actions, and opens a new
 * one. An open batch with no writes but with actions (ACKs of ignored messages) needs no
 * commit: everything before it is durable once the writer is idle, so they go at once. */
qs_status qc_srv_start_flush(server *s, qs_error *err);

/* Says so, every STALL_LOG_MS, while a batch waits for its commit: a lock held by another
 * session or a stopped server otherwise stalls the sweep without a word (heartbeats are still
 * answered). */
void qc_srv_log_stall(server *s, int64_t now);

/* Collects the writer's outcome (waiting for it when wait is true): on success sends what
 * waited for the batch; on a lost connection keeps the batch and its actions for a retry
 * and pauses dispatch; any other failure is returned. */
qs_status qc_srv_finish_flush(server *s, bool wait, qs_error *err);

/* Whether nothing waits to be written or sent. */
bool qc_srv_all_durable(server *s);

#endif
