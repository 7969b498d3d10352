/* The worker's state, shared by the files of worker/loop only (loop.h is the public face):
 * struct worker and its qw_state, the job context of one attempt (struct qw_job_ctx), and the
 * metric vectors they carry. Each file's functions are in its own header. Everything runs on
 * the messaging thread except the job context's API and qw_loop_compute_main. */
#ifndef QW_LOOP_WORKER_STATE_H
#define QW_LOOP_WORKER_STATE_H

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

#endif
