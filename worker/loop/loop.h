/* qw_loop: the worker process of qsweep.
 *
 * One worker = one DEALER socket to the coordinator and two threads:
 *   - the messaging thread (the caller of qw_run) owns the socket: it says HELLO, asks for
 *     work with READY, heartbeats every heartbeat_ms whatever the job does, forwards
 *     metrics, resends an attempt's end (final RESULT or FAILED) until it is ACKed (a final
 *     RESULT over QS_PROTO_CHUNK_BYTES in chunks, one at a time as the coordinator ACKs
 *     them; a split ASSIGN is put together before the job starts; proto/qsweep.proto), and
 *     re-registers (HELLO naming its current job) when the coordinator is silent for
 *     coordinator_timeout_ms or asks with REREGISTER;
 *   - a compute thread per job runs the job kind's function from the registry below.
 * Protocol: proto/qsweep.proto. SIGTERM or SIGINT (or qw_request_stop): stop taking work,
 * cancel the current job and wait for it to return (jobs poll qw_job_cancelled), report it
 * FAILED with class PREEMPTED (does not count against the job's max attempts), wait for its
 * ACK (at most coordinator_timeout_ms), say BYE, return.
 *
 * Job kinds: a function `qs_status fn(qw_job_ctx *ctx, qs_error *err)` run on the compute
 * thread. QS_OK = success, its metrics are the result. QS_ECANCELLED after qw_job_cancelled
 * returned true = cancelled/preempted. Any other status = failed; err->msg is the message
 * stored in the database. QS_EIO, QS_ENOMEM and QS_EUNSUPPORTED are reported as worker
 * errors, every other status as job errors. A production worker registers its sweep's
 * kinds (worker/jobs/jobs.h); the test kinds sleep, fail and echo are registered only by
 * test binaries (test_kinds.h). */
#ifndef QW_LOOP_H
#define QW_LOOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "error.h"

/* The running job as its function sees it. Valid only during the call. */
typedef struct qw_job_ctx qw_job_ctx;

/* A job kind's function; see the header comment for the meaning of the status. */
typedef qs_status (*qw_job_fn)(qw_job_ctx *ctx, qs_error *err);

/* Registers (or replaces) the job kind `name` (at most 63 bytes) in the process-wide
 * registry; call before qw_run (the job kinds "baseline", "eval", ...). Thread-safe.
 * Errors: QS_EINVAL for an empty or too long name or a NULL fn; QS_ENOMEM when the
 * registry's 64 slots are full. */
qs_status qw_register_kind(const char *name, qw_job_fn fn, qs_error *err);

/* Whether a function is registered under the job kind name (qw_register_kind). Thread-safe. */
bool qw_kind_registered(const char *name);

/* The job's id (jobs.id in the database) and attempt number (1-based). */
int64_t qw_job_id(const qw_job_ctx *ctx);
uint32_t qw_job_attempt(const qw_job_ctx *ctx);

/* The job's spec, a JSON object owned by the context (borrowed reference). */
const json_t *qw_job_spec(const qw_job_ctx *ctx);

/* The model digest its ASSIGN carried (proto: Assign.model_digest): for a job whose model a
 * pipeline's training job makes, the 64 hex digits the store recorded when that job ended;
 * "" when the coordinator sent none (owned by the context). */
const char *qw_job_model_digest(const qw_job_ctx *ctx);

/* Worker threads the job may use (qw_options.threads). */
int qw_job_threads(const qw_job_ctx *ctx);

/* Progress: step of total in the job's own units, and a phase name (<= 31 bytes kept, e.g.
 * "load", "eval"). Cheap (a mutex); the next heartbeat carries the latest values. */
void qw_job_progress(qw_job_ctx *ctx, uint64_t step, uint64_t total, const char *phase);

/* True once the coordinator sent CANCEL for this attempt or the worker is stopping
 * (SIGTERM). A job polls this between steps and then returns QS_ECANCELLED. */
bool qw_job_cancelled(const qw_job_ctx *ctx);

/* The metric sink: records (name, value, step, final). Final metrics travel in the final
 * RESULT; non-final ones (curves) are sent in partial RESULT batches at each heartbeat.
 * The store keeps one value per (job, name, step). Errors: QS_EINVAL for an empty name
 * or one over 127 bytes, QS_ENOMEM. */
qs_status qw_job_metric(qw_job_ctx *ctx, const char *name, double value, int64_t step, bool final,
                        qs_error *err);

/* The worker's cache, which survives across jobs (a loaded model is kept): returns the
 * value stored under key, or NULL. Keys are advertised to the coordinator in HELLO and
 * READY, which sends jobs whose model_key matches to this worker (model affinity). */
void *qw_job_cache_get(qw_job_ctx *ctx, const char *key);

/* Stores value under key (at most 127 bytes), replacing (and freeing with its free_fn) an
 * old value; free_fn (may be NULL) is called when the entry is dropped or the worker exits.
 * The cache holds at most 8 entries: the least recently stored one is evicted.
 * Errors: QS_EINVAL for a bad key, QS_ENOMEM. */
qs_status qw_job_cache_put(qw_job_ctx *ctx, const char *key, void *value, void (*free_fn)(void *),
                           qs_error *err);

/* One GPU as advertised in HELLO (the scheduler fits jobs on these). */
typedef struct qw_gpu {
    char name[64];
    uint64_t memory_bytes;
    uint32_t cc_major, cc_minor;
    bool native_fp4;
    int device; /* CUDA device ordinal among the visible ones (not sent: the worker's own) */
} qw_gpu;

/* How to run a worker. Zero/NULL fields take the defaults given. */
typedef struct qw_options {
    const char *endpoint;       /* coordinator, e.g. "tcp://host:5555" (required); several
                                   separated by commas ("tcp://a:5555,tcp://b:5555"): an active
                                   coordinator and its standbys, tried in turn (link.c) */
    const char *worker_id;      /* unique name, also the ZeroMQ routing id (1..200 bytes);
                                   default "<host>-<pid>" */
    int threads;                /* CPU threads for jobs; default: qs_default_threads()
                                   (threads.h: OMP_NUM_THREADS, else the affinity mask) */
    int heartbeat_ms;           /* heartbeat period; default 2000; while an attempt runs (or
                                   its result or ASSIGN is on the way) at most a quarter of
                                   the lease its ASSIGN gave */
    int coordinator_timeout_ms; /* silence before re-registering; default 4 * heartbeat_ms */
    const qw_gpu *gpus;         /* GPUs to advertise (n_gpus of them); none by default */
    size_t n_gpus;
    /* CURVE (ZeroMQ's encryption/authentication); all three Z85 keys (40 characters) or
       none: the coordinator's public key and this worker's key pair. */
    const char *curve_server_key, *curve_public_key, *curve_secret_key;
    bool no_signal_handlers; /* do not install SIGTERM/SIGINT handlers (the caller
                                calls qw_request_stop itself) */
    bool quiet;              /* no log lines on stderr */
    /* > 0: leave once no job has run for this long, ms (counted from the start, or from the
       ACK of the last attempt's end): BYE, then qw_run returns QS_OK (SLURM array tasks end
       when the sweep has no more work for them). A worker that never heard from the
       coordinator in that time is not idle but alone: qw_run returns QS_ENET saying so.
       0: run until stopped. */
    int exit_when_idle_ms;
    /* Largest final result this worker delivers, encoded bytes; a larger one fails the
       attempt with a job error giving its size and this limit. 0: QS_PROTO_MAX_RESULT_BYTES
       (proto/envelope.h), also the most it may be. */
    size_t max_result_bytes;
    /* A supervisor restarting this worker says how the previous process, worker id
       previous_worker_id (NULL: this one's), ended (e.g. "killed by signal 9 (SIGKILL); out
       of memory: ..."); sent in every HELLO until this process is assigned a job (proto:
       Hello.previous_exit). NULL: nothing. supervise.h restarts a worker this way itself. */
    const char *previous_worker_id, *previous_exit;
    /* Announced in HELLO: the numerics path this worker's jobs run on (NULL: none), and why
       `--backend auto` runs them on the CPU (NULL or "": no fallback). */
    const char *numerics_path, *backend_note;
} qw_options;

/* A worker the coordinator keeps refusing at the handshake (its CURVE key not in the
 * allow-list, no keys against a CURVE coordinator, or keys against a plain one) gives up
 * after this many refusals spread over at least this long (it tries again on a fresh socket
 * every QW_REFUSAL_SPAN_MS / QW_REFUSALS_MAX, worker/loop/link.c), having said once what is
 * wrong. */
#define QW_REFUSALS_MAX 10
#define QW_REFUSAL_SPAN_MS 10000

/* Runs a worker until it is stopped (SIGTERM/SIGINT/qw_request_stop) or, with
 * exit_when_idle_ms, has been idle that long; returns QS_OK after a clean BYE.
 * Errors: QS_EINVAL for bad options (names the field), QS_ENET when the socket cannot be
 * created or connected (names the endpoint), when the coordinator refused the handshake
 * QW_REFUSALS_MAX times (the message says why), or when exit_when_idle_ms passed without a
 * word from the coordinator (it was never reached: names the endpoint). Jobs' failures are not errors of qw_run:
 * they are reported to the coordinator. Logs one line per event on stderr, among them
 * "connected to the coordinator at ENDPOINT" once per connection. */
qs_status qw_run(const qw_options *opts, qs_error *err);

/* Asks a running qw_run to stop as on SIGTERM. Async-signal-safe. */
void qw_request_stop(void);

#endif
