/* Shared between the files of worker/loop only (loop.h is the public face): the worker's
 * state (struct worker, qw_state), the job context of one attempt (struct qw_job_ctx) and
 * the functions each part of the loop offers the others (one section per file). Everything
 * runs on the messaging thread except the job context's API and qw_loop_compute_main. */
#ifndef QW_LOOP_INTERNAL_H
#define QW_LOOP_INTERNAL_H

#include "loop.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "envelope.h"

enum { CACHE_SLOTS = 8, KEY_MAX = 127, PHASE_MAX = 31, ID_MAX = 200 };

typedef struct metric_rec {
    char name[KEY_MAX + 1];
    double value;
    int64_t step;
    bool final;
} metric_rec;

typedef struct metric_vec {
    metric_rec *v;
    size_t n, cap;
} metric_vec;

typedef struct cache_entry {
    char key[KEY_MAX + 1];
    void *value;
    void (*free_fn)(void *);
    uint64_t stamp; /* insertion order, for eviction */
} cache_entry;

/* A partial RESULT batch sent and not yet ACKed. */
typedef struct partial_batch {
    uint64_t seq;
    metric_vec metrics;
} partial_batch;

typedef struct worker worker;

/* The worker's state, in the manner of the ZeroMQ guide's Paranoid Pirate worker (one value at
 * a time, changed only by transition(), named in the log):
 *   CONNECTING   no work, and nothing heard from the coordinator since qw_run started;
 *   REGISTERING  no work, HELLO sent again (the coordinator was silent, or asked) and nothing
 *                heard since;
 *   IDLE         no work, the coordinator answers: READY is out, an ASSIGN may come;
 *   RECEIVING    the parts of a split ASSIGN are arriving (Assign.chunks);
 *   RUNNING      an attempt runs on the compute thread;
 *   DELIVERING   its end (final RESULT, maybe in chunks, or FAILED) waits for its ACK;
 *   LEAVING      stopping (SIGTERM, qw_request_stop): no new work, the running attempt is
 *                cancelled (preempted) and its end delivered, then BYE.
 * Work (RECEIVING, RUNNING, DELIVERING) goes on through a reconnect; the connection's own
 * states show only when there is no work. */
typedef enum qw_state {
    QW_CONNECTING,
    QW_REGISTERING,
    QW_IDLE,
    QW_RECEIVING,
    QW_RUNNING,
    QW_DELIVERING,
    QW_LEAVING,
} qw_state;

/* The job context: what one attempt owns from its ASSIGN until its compute thread is joined
 * (its end then lives in struct worker until ACKed). The compute thread reads the fields
 * above the mutex line and writes those under it through the loop.h API. */
struct qw_job_ctx {
    worker *w;
    int64_t job_id;
    uint32_t attempt;
    char kind[64];
    json_t *spec;
    char model_digest[65]; /* Assign.model_digest: the store's record of a trained model's
                              digest ("" when not sent, or not 64 hex digits) */
    atomic_bool cancel;
    bool preempted; /* messaging thread only: cancel came from SIGTERM */
    pthread_t thread;
    /* Under w->mu: */
    uint64_t step, total;
    char phase[PHASE_MAX + 1];
    metric_vec finals, partials;
    bool done;
    qs_status status;
    qs_error err;
};

struct worker {
    const qw_options *o;
    char id[ID_MAX + 1];
    char host[256];
    int hb_ms, timeout_ms, threads;
    void *zctx, *sock;
    void *mon;                /* PAIR reading the socket's handshake failures (CURVE only) */
    unsigned mon_seq;         /* makes each monitor endpoint unique */
    int refusals;             /* handshakes the coordinator refused since the last success */
    int64_t first_refusal_ms; /* when the first of them happened */
    char refusal[400];        /* what was wrong, for the final error */
    bool refusal_specific;    /* refusal names its cause (a ZAP refusal, a mechanism
                                 mismatch), not only a closed handshake */
    int64_t reopen_ms;        /* after a refusal: when to open a fresh socket and try again
                                 (libzmq does not retry a handshake the peer refused), 0: none */
    bool connected_told;      /* "connected" logged for the current socket */
    int endpoint_index;       /* which of options.endpoint's comma-separated endpoints the
                                 current socket connects to */
    char endpoint_now[512];   /* that endpoint */
    bool send_failing;        /* a send failed and was logged; quiet until one succeeds */
    pthread_mutex_t mu;       /* guards the cache and the job's shared fields */
    cache_entry cache[CACHE_SLOTS];
    uint64_t cache_clock;
    qw_job_ctx *job;        /* running (or finished, not yet joined) job */
    partial_batch *batches; /* unacked partial batches of the running job */
    size_t n_batches;
    uint64_t next_seq;
    /* The attempt's end (final RESULT, in end_n chunks when split, or FAILED), kept until
       ACKed; end_buf/end_len is the part being delivered (end_parts[end_next]). */
    uint8_t **end_parts;
    size_t *end_lens;
    uint32_t end_n, end_next;
    uint8_t *end_buf;
    size_t end_len;
    /* A split ASSIGN being received (qsweep.proto: Assign), rx_spec NULL when none. */
    char *rx_spec;
    size_t rx_len;
    int64_t rx_job;
    bool assigned; /* an ASSIGN reached this process: its HELLOs no longer carry the
                      previous process's end (qw_options.previous_exit), which is not theirs */
    uint32_t rx_attempt, rx_lease_ms, rx_chunks, rx_next;
    char rx_kind[64];
    int64_t end_job;
    uint32_t end_attempt;
    /* The attempt token of the attempt on (running, delivering or receiving), from its
       ASSIGN; carried by every HELLO, HEARTBEAT, RESULT and FAILED about it. Never logged. */
    uint8_t token[32];
    size_t token_len;
    int64_t end_sent_ms;
    bool ready_sent;
    int64_t last_heard_ms, next_hb_ms;
    bool heard;            /* something from the coordinator arrived since qw_run started */
    bool registering;      /* HELLO re-sent (reregister) and nothing heard since */
    bool stopping;         /* LEAVING: a stop was requested */
    qw_state state;        /* changed only by transition() */
    int64_t idle_since_ms; /* when the worker last had neither a job nor an unacked end */
    int lease_hb_ms;       /* heartbeat period while an attempt is on: a quarter of the lease
                              its ASSIGN gave (at most hb_ms), so the lease never lapses
                              between two heartbeats however short it is */
};

/* ---- registry.c ---- */

/* The registered job kinds' names (at most cap, into names; they stay valid for the process's
 * life), for HELLO. Returns the count. */
size_t qw_registry_kinds(const char **names, size_t cap);

/* ---- loop.c ---- */

/* One log line "qsweep-worker ID: ..." on stderr, unless options.quiet. */
void qw_loop_wlog(const worker *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Whether a stop was requested (SIGTERM, SIGINT, qw_request_stop). Async-signal-safe flag. */
bool qw_loop_stop_requested(void);

/* ---- job_ctx.c ---- */

/* Appends m to mv, growing it. Errors: QS_ENOMEM (mv unchanged). */
qs_status qw_loop_metric_push(metric_vec *mv, const metric_rec *m);

/* The compute thread of one attempt (arg: its qw_job_ctx): runs the kind's function from the
 * registry and records status, error and done under the worker's mutex. */
void *qw_loop_compute_main(void *arg);

/* Frees a job context and what it owns (spec, metrics); NULL is fine. */
void qw_loop_job_free(qw_job_ctx *ctx);

/* ---- cache.c ---- */

/* Model keys held, for HELLO/READY: pointers into the cache (keys change only on the compute
 * thread, under the mutex, which the caller holds while packing). Returns the count. */
size_t qw_loop_cache_keys(worker *w, char **keys);

/* Drops every cache entry (calling its free_fn). */
void qw_loop_cache_clear(worker *w);

/* ---- outbox.c ---- */

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

/* ---- delivery.c ---- */

/* Packs n metrics v into a RESULT envelope in *buf (malloc'd); chunk/chunks as in
 * qsweep.proto (0, 0: not split). */
qs_status qw_loop_pack_result(const worker *w, int64_t job, uint32_t attempt, const metric_rec *v,
                              size_t n, bool final, uint64_t seq, uint32_t chunk, uint32_t chunks,
                              uint8_t **buf, size_t *len);

/* Splits v[0..n) into consecutive slices of at most QS_PROTO_CHUNK_BYTES on the wire (less
 * room for the RESULT's own fields): starts[k] is where slice k begins, *n_slices their
 * count (at least 1); *total the metrics' wire bytes. starts is malloc'd. */
qs_status qw_loop_slice_metrics(const metric_rec *v, size_t n, size_t **starts, uint32_t *n_slices,
                                size_t *total);

/* Forgets the attempt's end (ACKed, or given up by the coordinator). */
void qw_loop_end_clear(worker *w);

/* Makes FAILED of (job, attempt) with class cls and message msg the attempt's end and sends
 * it (kept until ACKed). */
void qw_loop_send_failed(worker *w, int64_t job, uint32_t attempt, Qsweep__FailureClass cls,
                         const char *msg);

/* Makes the final RESULT of metrics all the attempt's end: one frame when it fits in
 * QS_PROTO_CHUNK_BYTES, else chunks (qsweep.proto: Result) sent one at a time as the
 * coordinator ACKs them; over QS_PROTO_MAX_RESULT_BYTES the worker refuses it with a job
 * error giving its size and the limit (codec.h). */
void qw_loop_deliver_result(worker *w, int64_t job, uint32_t attempt, const metric_vec *all);

/* ---- attempt.c ---- */

/* Starts the attempt of a whole ASSIGN a on a compute thread; a busy or stopping worker
 * answers FAILED PREEMPTED (once, not kept), a spec that is not a JSON object fails the
 * attempt as a job error; a duplicate ASSIGN is ignored. */
void qw_loop_start_job(worker *w, const Qsweep__Assign *a);

/* Keeps a's attempt token as the token of the attempt on (w->token; none when a has one
 * longer than the buffer). */
void qw_loop_take_token(worker *w, const Qsweep__Assign *a);

/* Joins a finished job and turns its outcome into the attempt's end message. */
void qw_loop_finish_job(worker *w);

/* Forgets a split ASSIGN being received. */
void qw_loop_rx_clear(worker *w);

/* One part of a split ASSIGN (qsweep.proto: Assign): chunk 0 starts a new one, the next
 * expected chunk is appended, anything else is dropped (the coordinator sends the whole
 * ASSIGN again when this worker's HELLO says it is receiving). The last part starts the job. */
void qw_loop_receive_assign(worker *w, const Qsweep__Assign *a);

/* ---- link.c ---- */

/* Reads the monitor's events. Returns true when the worker should give up: the coordinator
 * refused it at least QW_REFUSALS_MAX times over at least QW_REFUSAL_SPAN_MS with no
 * successful handshake in between (loop.h). */
bool qw_loop_read_handshakes(worker *w, int64_t now);

/* Closes the socket and its monitor (if open). */
void qw_loop_close_socket(worker *w);

/* Opens a fresh DEALER socket (closing the old one) with the worker's routing id and CURVE
 * keys, watches its handshakes and connects. Errors: QS_ENET naming the endpoint or id,
 * QS_EINVAL (CURVE keys libzmq refuses). */
qs_status qw_loop_open_socket(worker *w, qs_error *err);
/* Sets endpoint_now to the endpoint_index-th (modulo their number) of options.endpoint's
 * comma-separated endpoints. */
void qw_loop_pick_endpoint(worker *w);

/* Re-registers: HELLO (naming the running or finished job), then whatever is unacked. */
void qw_loop_reregister(worker *w);

/* ---- handlers.c ---- */

/* Applies one decoded message from the coordinator (handlers.c). */
void qw_loop_handle(worker *w, Qsweep__Envelope *env);

/* The function registered under name, or NULL. */
qw_job_fn qw_registry_find(const char *name);

#endif
