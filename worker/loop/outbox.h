/* What the worker sends (internal to worker/loop): frames, HELLO, READY, heartbeats and
 * partial RESULT batches. */
#ifndef QW_LOOP_OUTBOX_H
#define QW_LOOP_OUTBOX_H

#include "worker_state.h"

/* Sends one frame without blocking. A failure (no connection yet, or its queue full) is
 * logged once until a send succeeds again: a worker that cannot reach the coordinator would
 * otherwise log every heartbeat. */
void qw_loop_send_packed(worker *w, const uint8_t *buf, size_t len, const char *what);

/* Encodes env and sends it (qw_loop_send_packed); an encoding failure is logged. */
void qw_loop_send_env(worker *w, Qsweep__Envelope *env);

/* HELLO: who this worker is, its GPUs and cached models, and the attempt it is on (running,
 * delivering, or receiving its ASSIGN). Clears ready_sent. */
void qw_loop_send_hello(worker *w);

/* READY with the cached model keys; sets ready_sent. */
void qw_loop_send_ready(worker *w);

/* HEARTBEAT naming the attempt on (with its progress), if any. */
void qw_loop_send_heartbeat(worker *w);

/* Sends the running job's new non-final metrics as partial RESULT batches of at most
 * QS_PROTO_CHUNK_BYTES each (codec.h), each kept until ACKed by its seq. */
void qw_loop_flush_partials(worker *w);

/* Sends again every unACKed partial RESULT batch (after re-registering). */
void qw_loop_resend_partials(worker *w);

/* Frees the partial RESULT batches of the attempt that ended. */
void qw_loop_drop_batches(worker *w);

#endif
