/* One job as the coordinator holds it in memory (coordinator/server only): its stored fields,
 * its current attempt and what that attempt has reported so far. The functions here touch one
 * job and nothing else; the table of jobs is job_table.h. */
#ifndef QC_SERVER_JOB_H
#define QC_SERVER_JOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "envelope.h"
#include "scheduler.h"
#include "store.h"

/* An attempt token's bytes (proto: Assign.attempt_token) and its hash's (BLAKE2b-256). */
enum { TOKEN_BYTES = 16, TOKEN_HASH_BYTES = 32 };
/* A monotonic ms time that never comes (a lease not started, no backoff pending). */
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
 * half full (proto/envelope.h). */
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
    bool fail_now;   /* the attempt ending failed permanently: no further attempt (transitions.c) */
    char *avoid;     /* q.avoid: the worker the last transient failure happened on (owned) */
    char *exit_note; /* how its worker's process ended, from a supervisor (Hello.previous_exit):
                        added to the error when the attempt is lost (owned; NULL: none) */
    /* the note's class for attempts.cause when the attempt is lost: "oom", "signal", "exit"
       (qc_srv_exit_cause; NULL: none) */
    const char *exit_cause;
    char *job_key; /* jobs.job_key (owned) */
    /* A job whose model a pipeline's training job makes: that job's key (spec model.trained_by;
       owned, NULL: none). */
    char *trained_by;
    /* The model digest, 64 hex digits (owned, NULL: not known): for a train job, the one its
       final RESULT recorded ("model_digest.<hex>") in this process; for a job with trained_by,
       its training job's as the store held it at load. Sent in Assign.model_digest. */
    char *model_digest;
    char *numerics;     /* q.numerics: the path its spec asks for (owned; NULL: none) */
    struct qc_pin *pin; /* its experiment's pin (pins.h; q.pinned points into it) */
} job;

/* Sets j->state, keeping j->q.pending in step (the only way a state changes). */
void qc_srv_set_state(job *j, jstate st);

/* Frees the chunks of a split final RESULT kept for j's current attempt. */
void qc_srv_chunks_drop(job *j);

/* Frees job j and everything it owns (NULL: nothing). */
void qc_srv_job_free(job *j);

/* The class of a supervisor's words how a process ended (common/exit_status.c's): "oom" for
 * an OOM kill, "signal" for another signal, "exit" for an exit status, NULL for other words. */
const char *qc_srv_exit_cause(const char *note);

/* Whether text is a model digest as the store records it: 64 lowercase hex digits. */
bool qc_srv_is_digest(const char *text);

/* A train job's final RESULT of n metrics: keeps the model digest it records
 * ("model_digest.<hex>", worker/train/train_job.c) as j->model_digest, for the ASSIGNs of the
 * jobs of its model (qc_srv_trained_digest). Other kinds and other names: nothing. */
void qc_srv_keep_model_digest(job *j, const chunk_metric *m, size_t n);

#endif
