/* qc_server: the coordinator's ROUTER loop and scheduler.
 *
 * The coordinator is the only writer of job state. It binds a ROUTER socket
 * (ZMQ_ROUTER_MANDATORY, ZMQ_ROUTER_HANDOVER, ZMQ_MAXMSGSIZE = 2 * QS_PROTO_MAX_BYTES so a
 * body just over the protocol limit is still received, logged with its peer and dropped,
 * while libzmq disconnects a peer sending more; ZMQ_LINGER 1 s), takes the coordinator lock
 * (a table lock, coordinator/store/lock.c: a second coordinator on the same database refuses
 * to start: QS_ESTATE), rebuilds its queue from the database, and then loops: decode what
 * workers sent, change the in-memory state, write every transition through batched
 * transactions (qc_store_flush, coordinator/store/store.h), and only after the commit send
 * what depends on it (an ASSIGN after its attempt row is durable, an ACK
 * after the result or failure is stored). The commits run in a writer thread on a second
 * connection (writer.h), one batch at a time and in order, while the loop goes on filling the
 * next batch: a batch is handed over as soon as the writer is idle, so under load the workers
 * fall into groups whose round trips overlap the other groups' commits. It uses four
 * PostgreSQL connections whatever the number of workers: the loop's (reads, polls), the
 * writer's, the writer's lock session (the coordinator lock), and a second write connection
 * that COPYs half of the results of a batch carrying many of them (writer.h).
 *
 * Rules (protocol: proto/qsweep.proto):
 *  - Leases run on the coordinator's monotonic clock from the moment the ASSIGN is sent and
 *    are renewed only by a HEARTBEAT naming the worker's current (job, attempt). An expired
 *    lease marks the attempt lost; the job is requeued after a backoff of
 *    backoff_ms * 2^(attempts used - 1) (at most 60 s) until max_attempts count, then it
 *    fails keeping the last error. PREEMPTED attempts (SIGTERM, a busy worker, an
 *    undeliverable ASSIGN) do not count and are requeued at once.
 *  - A stall of the coordinator itself (its loop did not turn for more than a quarter lease,
 *    at most 1 s: SIGSTOP, a paused VM, swapping) is noticed on the monotonic clock; every
 *    running attempt then gets the longer of a full lease and the restart's re-attach grace
 *    from the resume to report before any lease is checked (the workers' heartbeats of that
 *    time are still on their way in, and workers that timed the coordinator out re-attach as
 *    after a restart), and it is logged.
 *  - A RESULT or FAILED for an attempt that is not the job's current running one (late,
 *    duplicate, from a worker whose lease expired) is logged and ignored, and ACKed so the
 *    worker forgets it. Results are stored with ON CONFLICT DO NOTHING on (job, name, step).
 *  - Bulk data moves in chunks of at most QS_PROTO_CHUNK_BYTES (proto/qsweep.proto, Result
 *    and Assign): a final RESULT over it arrives chunk by chunk, each ACKed at once with the
 *    chunk wanted next and kept in memory, and is stored as one when the last is in; an
 *    ASSIGN whose spec is over it is sent in parts. Heartbeats name the attempt while its
 *    result or ASSIGN is on the way, so no lease expires while data demonstrably moves,
 *    and none waits behind more than one chunk on a slow link.
 *  - A HELLO naming (job, attempt) re-attaches the worker to it but does not renew the
 *    lease: the heartbeats that follow do (a worker that re-registers again and again with
 *    nothing getting through must not hold its job for ever). One that says it has only
 *    part of the ASSIGN gets it again.
 *  - After a restart, attempts still marked running wait grace_ms for their worker's HELLO
 *    naming (job, attempt): the worker re-attaches and its job is not re-run. Unclaimed
 *    attempts are then lost as above.
 *  - Dependencies (job_deps, stored with the jobs, so they hold across restarts): a job is
 *    dispatched only when every job it depends on has succeeded; a dependency that succeeded
 *    before, in this or another experiment (the job is shared by job_key), is met. When a
 *    dependency fails for good, its pending dependents fail at once with the error
 *    "dependency <id> failed: <its error>", and theirs in turn; when it is cancelled, they are
 *    cancelled with "dependency <id> cancelled: <its error>". They could never run: ending
 *    them ends the sweep instead of leaving it waiting forever. The dependency's end and its
 *    dependents' go into the same batch, one transaction. A job submitted after its
 *    dependency ended that way ends the same way when it is loaded.
 *  - Cancellation: cancel_requests rows are polled every second; a pending job becomes
 *    cancelled, a running one gets CANCEL and is cancelled when its worker confirms (or its
 *    lease expires).
 *  - Scheduling (scheduler.h, a pure function of queue, worker and resources), for a worker
 *    that says READY: among pending jobs whose dependencies are met
 *    and whose backoff is over, only those that fit its resources (jobs.resources: its first
 *    max(gpus, 1) GPUs each with gpu_mem_mb and native_fp4 when asked, scheduler.h
 *    qc_sched_fits; a job asking none fits any worker); among them a job whose model_key
 *    the worker holds, then higher priority, then older (smaller id).
 *  - Times stored in PostgreSQL (jobs.not_before, written with its now()) are compared only
 *    with PostgreSQL's own clock: the store returns what is left until them (store.h), so
 *    a coordinator whose wall clock is off waits exactly the backoff. Everything else runs
 *    on the coordinator's monotonic clock.
 *  - PostgreSQL down: dispatch pauses, heartbeats are still answered from memory, pending
 *    writes stay queued with their ACKs; the connection is retried every 500 ms and the
 *    queued batch is committed when it is back. Nothing is lost. The same for an error that
 *    is a condition of the server rather than of the statement (disk full 53100, out of
 *    memory 53200, too many connections 53300, read-only 25006, shutdown 57P0x:
 *    qc_store_condition), retried with a backoff doubling from 500 ms to 8 s, each failure
 *    logged with what is wrong.
 *  - New jobs are picked up by polling jobs with a larger id every poll_ms. */
#ifndef QC_SERVER_H
#define QC_SERVER_H

#include <stdbool.h>
#include <stdint.h>

#include "error.h"

typedef struct qc_server_options {
    const char *bind_endpoint;    /* e.g. "tcp://0.0.0.0:5555" (required) */
    const char *conninfo;         /* libpq conninfo of the qsweep database (required) */
    int lease_ms;                 /* lease length; default 30000 */
    int grace_ms;                 /* re-attach window after a restart; default lease_ms */
    int backoff_ms;               /* first retry delay; default 1000 */
    int poll_ms;                  /* new-job poll period; default 500 */
    int worker_timeout_ms;        /* forget an idle worker silent this long; default 3 * lease */
    bool exit_when_done;          /* return QS_OK once every job of the database is terminal */
    const char *curve_secret_key; /* Z85 (40 characters): enables CURVE on the socket */
    /* Path of the CURVE allow-list: one worker public key (Z85) per line (zap.h). With it only
       workers whose key is listed complete the handshake (a ZAP handler, RFC 27); requires
       curve_secret_key. Re-read on SIGHUP or qc_server_request_reload. NULL: any client
       that knows the coordinator's public key connects (a warning is logged at start). */
    const char *curve_allowed_keys;
    bool no_signal_handlers;      /* do not install SIGTERM/SIGINT/SIGHUP handlers */
    bool quiet;                   /* fewer log lines (no per-job lines) */
    /* A standby: while another coordinator holds the lock, wait for it (trying every 200 ms
       past the store's own 2 s of retries) instead of refusing; bind and rebuild from the
       database once it is taken. A stop request while waiting ends with QS_ECANCELLED. */
    bool standby;
} qc_server_options;

/* Runs the coordinator until SIGTERM/SIGINT/qc_server_request_stop (QS_OK), or until every
 * job is terminal with exit_when_done. Errors: QS_EINVAL (bad options, naming the field),
 * qc_zap_keys_load's for the allow-list file (e.g. QS_EFORMAT naming file:line; checked
 * before any connection is made), QS_ESTATE (another coordinator holds the lock, or took it
 * during an outage), QS_EDB
 * (first connection failed, or a statement failed for a reason other than a lost
 * connection), QS_ENET (bind failed, naming the endpoint). */
qs_status qc_server_run(const qc_server_options *opts, qs_error *err);

/* Asks a running qc_server_run to return. Async-signal-safe. */
void qc_server_request_stop(void);

/* Asks a running qc_server_run to re-read its CURVE allow-list (options.curve_allowed_keys),
 * as SIGHUP does; a file that does not load leaves the list in use (the error is logged).
 * No effect without an allow-list. Async-signal-safe. */
void qc_server_request_reload(void);

#endif
