/* The worker's messaging thread and job runner (loop.h). A small state machine in the
 * manner of the ZeroMQ guide's Paranoid Pirate worker: heartbeat both ways, and on silence
 * close the socket, open a fresh one and say HELLO again. */
#include <errno.h>
#include <stdarg.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <zmq.h>

#include "envelope.h"
#include "loop.h"
#include "loop_internal.h"
#include "clock.h"

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

struct qw_job_ctx {
    worker *w;
    int64_t job_id;
    uint32_t attempt;
    char kind[64];
    json_t *spec;
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
    bool connected_told;      /* "connected" logged for the current socket */
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
    uint32_t rx_attempt, rx_lease_ms, rx_chunks, rx_next;
    char rx_kind[64];
    int64_t end_job;
    uint32_t end_attempt;
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

static volatile sig_atomic_t stop_requested;

void qw_request_stop(void) {
    stop_requested = 1;
}

static void on_stop_signal(int sig) {
    (void)sig;
    stop_requested = 1;
}

static void wlog(const worker *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void wlog(const worker *w, const char *fmt, ...) {
    if (w->o->quiet) return;
    char line[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "qsweep-worker %s: %s\n", w->id, line);
}

static qs_status metric_push(metric_vec *mv, const metric_rec *m) {
    if (mv->n == mv->cap) {
        size_t cap = mv->cap ? 2 * mv->cap : 16;
        metric_rec *v = realloc(mv->v, cap * sizeof *v);
        if (!v) return QS_ENOMEM;
        mv->v = v;
        mv->cap = cap;
    }
    mv->v[mv->n++] = *m;
    return QS_OK;
}

static const char *state_name(qw_state st) {
    static const char *const names[] = {"CONNECTING", "REGISTERING", "IDLE",   "RECEIVING",
                                        "RUNNING",    "DELIVERING",  "LEAVING"};
    return names[st];
}

/* Whether an attempt is on: running, its split ASSIGN arriving, or its end not yet ACKed. */
static bool has_work(const worker *w) {
    return w->job || w->end_buf || w->rx_spec;
}

/* The state the worker's facts say it is in (see qw_state). */
static qw_state state_of(const worker *w) {
    if (w->stopping) return QW_LEAVING;
    if (w->job) return QW_RUNNING;
    if (w->end_buf) return QW_DELIVERING;
    if (w->rx_spec) return QW_RECEIVING;
    if (!w->heard) return QW_CONNECTING;
    return w->registering ? QW_REGISTERING : QW_IDLE;
}

/* The one transition function: moves w to the state its facts say, logging the change. */
static void transition(worker *w) {
    qw_state next = state_of(w);
    if (next == w->state) return;
    wlog(w, "state %s -> %s", state_name(w->state), state_name(next));
    w->state = next;
}

/* ---- the job context API (compute thread) ---- */

int64_t qw_job_id(const qw_job_ctx *ctx) {
    return ctx->job_id;
}
uint32_t qw_job_attempt(const qw_job_ctx *ctx) {
    return ctx->attempt;
}
const json_t *qw_job_spec(const qw_job_ctx *ctx) {
    return ctx->spec;
}
int qw_job_threads(const qw_job_ctx *ctx) {
    return ctx->w->threads;
}
bool qw_job_cancelled(const qw_job_ctx *ctx) {
    return atomic_load(&ctx->cancel);
}

void qw_job_progress(qw_job_ctx *ctx, uint64_t step, uint64_t total, const char *phase) {
    pthread_mutex_lock(&ctx->w->mu);
    ctx->step = step;
    ctx->total = total;
    if (phase) snprintf(ctx->phase, sizeof ctx->phase, "%s", phase);
    pthread_mutex_unlock(&ctx->w->mu);
}

qs_status qw_job_metric(qw_job_ctx *ctx, const char *name, double value, int64_t step, bool final,
                        qs_error *err) {
    if (!name || !name[0] || strlen(name) > KEY_MAX)
        return qs_error_set(err, QS_EINVAL, "metric name must be 1..%d bytes", KEY_MAX);
    metric_rec m = {.value = value, .step = step, .final = final};
    strcpy(m.name, name);
    pthread_mutex_lock(&ctx->w->mu);
    qs_status st = metric_push(final ? &ctx->finals : &ctx->partials, &m);
    pthread_mutex_unlock(&ctx->w->mu);
    return st == QS_OK ? QS_OK : qs_error_set(err, st, "metric %s: out of memory", name);
}

void *qw_job_cache_get(qw_job_ctx *ctx, const char *key) {
    void *v = NULL;
    pthread_mutex_lock(&ctx->w->mu);
    for (int i = 0; i < CACHE_SLOTS && !v; i++)
        if (ctx->w->cache[i].key[0] && strcmp(ctx->w->cache[i].key, key) == 0)
            v = ctx->w->cache[i].value;
    pthread_mutex_unlock(&ctx->w->mu);
    return v;
}

static void cache_entry_drop(cache_entry *e) {
    if (e->key[0] && e->free_fn) e->free_fn(e->value);
    memset(e, 0, sizeof *e);
}

qs_status qw_job_cache_put(qw_job_ctx *ctx, const char *key, void *value, void (*free_fn)(void *),
                           qs_error *err) {
    if (!key || !key[0] || strlen(key) > KEY_MAX)
        return qs_error_set(err, QS_EINVAL, "cache key must be 1..%d bytes", KEY_MAX);
    worker *w = ctx->w;
    pthread_mutex_lock(&w->mu);
    cache_entry *slot = NULL;
    for (int i = 0; i < CACHE_SLOTS && !slot; i++)
        if (w->cache[i].key[0] && strcmp(w->cache[i].key, key) == 0) slot = &w->cache[i];
    for (int i = 0; i < CACHE_SLOTS && !slot; i++)
        if (!w->cache[i].key[0]) slot = &w->cache[i];
    if (!slot) { /* evict the oldest entry */
        slot = &w->cache[0];
        for (int i = 1; i < CACHE_SLOTS; i++)
            if (w->cache[i].stamp < slot->stamp) slot = &w->cache[i];
    }
    cache_entry_drop(slot);
    strcpy(slot->key, key);
    slot->value = value;
    slot->free_fn = free_fn;
    slot->stamp = ++w->cache_clock;
    pthread_mutex_unlock(&w->mu);
    return QS_OK;
}

/* Model keys held, for HELLO/READY: pointers into the cache (keys change only on the compute
 * thread, under the mutex, which the caller holds while packing). Returns the count. */
static size_t cache_keys(worker *w, char **keys) {
    size_t n = 0;
    for (int i = 0; i < CACHE_SLOTS; i++)
        if (w->cache[i].key[0]) keys[n++] = w->cache[i].key;
    return n;
}

/* ---- sending ---- */

/* Sends one frame without blocking. A failure (no connection yet, or its queue full) is
 * logged once until a send succeeds again: a worker that cannot reach the coordinator would
 * otherwise log every heartbeat. */
static void send_packed(worker *w, const uint8_t *buf, size_t len, const char *what) {
    if (zmq_send(w->sock, buf, len, ZMQ_DONTWAIT) >= 0) {
        w->send_failing = false;
        return;
    }
    if (!w->send_failing && w->refusals == 0) /* a refusal was already explained */
        wlog(w,
             "send %s: %s (dropped; resent on re-register when it matters; further failed "
             "sends are not logged until one succeeds)",
             what, zmq_strerror(errno));
    w->send_failing = true;
}

static void send_env(worker *w, Qsweep__Envelope *env) {
    uint8_t *buf = NULL;
    size_t len = 0;
    qs_error err;
    if (qs_proto_encode(env, &buf, &len, &err) != QS_OK) {
        wlog(w, "encode %s: %s", qs_proto_kind_name(env->body_case), err.msg);
        return;
    }
    send_packed(w, buf, len, qs_proto_kind_name(env->body_case));
    free(buf);
}

static void send_hello(worker *w) {
    Qsweep__Hello h = QSWEEP__HELLO__INIT;
    h.worker_id = w->id;
    h.host = w->host;
    h.pid = (uint32_t)getpid();
    h.cpu_threads = (uint32_t)w->threads;
    Qsweep__Gpu gpus[16], *gp[16];
    h.n_gpus = w->o->n_gpus < 16 ? w->o->n_gpus : 16;
    for (size_t i = 0; i < h.n_gpus; i++) {
        qsweep__gpu__init(&gpus[i]);
        gpus[i].name = (char *)w->o->gpus[i].name;
        gpus[i].memory_bytes = w->o->gpus[i].memory_bytes;
        gpus[i].cc_major = w->o->gpus[i].cc_major;
        gpus[i].cc_minor = w->o->gpus[i].cc_minor;
        gpus[i].native_fp4 = w->o->gpus[i].native_fp4;
        gp[i] = &gpus[i];
    }
    h.gpus = gp;
    if (w->job) {
        h.running_job_id = w->job->job_id;
        h.running_attempt = w->job->attempt;
    } else if (w->end_buf) {
        h.running_job_id = w->end_job;
        h.running_attempt = w->end_attempt;
    } else if (w->rx_spec) {
        h.running_job_id = w->rx_job;
        h.running_attempt = w->rx_attempt;
        h.receiving = true;
    }
    char *keys[CACHE_SLOTS];
    Qsweep__Envelope env = QSWEEP__ENVELOPE__INIT;
    env.body_case = QSWEEP__ENVELOPE__BODY_HELLO;
    env.hello = &h;
    pthread_mutex_lock(&w->mu);
    h.n_models_loaded = cache_keys(w, keys);
    h.models_loaded = keys;
    send_env(w, &env);
    pthread_mutex_unlock(&w->mu);
    w->ready_sent = false;
}

static void send_ready(worker *w) {
    Qsweep__Ready r = QSWEEP__READY__INIT;
    char *keys[CACHE_SLOTS];
    Qsweep__Envelope env = QSWEEP__ENVELOPE__INIT;
    env.body_case = QSWEEP__ENVELOPE__BODY_READY;
    env.ready = &r;
    pthread_mutex_lock(&w->mu);
    r.n_models_loaded = cache_keys(w, keys);
    r.models_loaded = keys;
    send_env(w, &env);
    pthread_mutex_unlock(&w->mu);
    w->ready_sent = true;
}

/* Packs n metrics v into a RESULT envelope in *buf (malloc'd); chunk/chunks as in
 * qsweep.proto (0, 0: not split). */
static qs_status pack_result(int64_t job, uint32_t attempt, const metric_rec *v, size_t n,
                             bool final, uint64_t seq, uint32_t chunk, uint32_t chunks,
                             uint8_t **buf, size_t *len) {
    Qsweep__Metric *ms = calloc(n ? n : 1, sizeof *ms);
    Qsweep__Metric **mp = calloc(n ? n : 1, sizeof *mp);
    if (!ms || !mp) {
        free(ms);
        free(mp);
        return QS_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        qsweep__metric__init(&ms[i]);
        ms[i].name = (char *)v[i].name;
        ms[i].value = v[i].value;
        ms[i].step = v[i].step;
        ms[i].final = v[i].final;
        mp[i] = &ms[i];
    }
    Qsweep__Result r = QSWEEP__RESULT__INIT;
    r.job_id = job;
    r.attempt = attempt;
    r.final = final;
    r.seq = seq;
    r.chunk = chunk;
    r.chunks = chunks;
    r.n_metrics = n;
    r.metrics = mp;
    Qsweep__Envelope env = QSWEEP__ENVELOPE__INIT;
    env.body_case = QSWEEP__ENVELOPE__BODY_RESULT;
    env.result = &r;
    qs_error err;
    qs_status st = qs_proto_encode(&env, buf, len, &err);
    free(ms);
    free(mp);
    return st;
}

/* Bytes metric m adds to a RESULT: its packed size plus the field's tag and length. */
static size_t metric_wire_bytes(const metric_rec *m) {
    Qsweep__Metric pm = QSWEEP__METRIC__INIT;
    pm.name = (char *)m->name;
    pm.value = m->value;
    pm.step = m->step;
    pm.final = m->final;
    return qsweep__metric__get_packed_size(&pm) + 4;
}

/* Splits v[0..n) into consecutive slices of at most QS_PROTO_CHUNK_BYTES on the wire (less
 * room for the RESULT's own fields): starts[k] is where slice k begins, *n_slices their
 * count (at least 1); *total the metrics' wire bytes. starts is malloc'd. */
static qs_status slice_metrics(const metric_rec *v, size_t n, size_t **starts, uint32_t *n_slices,
                               size_t *total) {
    const size_t room = QS_PROTO_CHUNK_BYTES - 64;
    size_t cap = 16, k = 0, bytes = 0;
    size_t *st = malloc(cap * sizeof *st);
    if (!st) return QS_ENOMEM;
    st[k++] = 0;
    *total = 0;
    for (size_t i = 0; i < n; i++) {
        size_t b = metric_wire_bytes(&v[i]);
        *total += b;
        if (bytes + b > room && bytes > 0) {
            if (k == cap) {
                size_t *q = realloc(st, 2 * cap * sizeof *st);
                if (!q) {
                    free(st);
                    return QS_ENOMEM;
                }
                st = q;
                cap *= 2;
            }
            st[k++] = i;
            bytes = 0;
        }
        bytes += b;
    }
    *starts = st;
    *n_slices = (uint32_t)k;
    return QS_OK;
}

static void end_clear(worker *w) {
    for (uint32_t i = 0; i < w->end_n; i++)
        free(w->end_parts[i]);
    free(w->end_parts);
    free(w->end_lens);
    w->end_parts = NULL;
    w->end_lens = NULL;
    w->end_n = w->end_next = 0;
    w->end_buf = NULL;
    w->end_len = 0;
}

/* Takes the n parts (malloc'd buffers, the arrays too) as the attempt's end and sends the
 * first. */
static void set_end_parts(worker *w, uint8_t **parts, size_t *lens, uint32_t n, int64_t job,
                          uint32_t attempt) {
    end_clear(w);
    w->end_parts = parts;
    w->end_lens = lens;
    w->end_n = n;
    w->end_next = 0;
    w->end_buf = parts[0];
    w->end_len = lens[0];
    w->end_job = job;
    w->end_attempt = attempt;
    w->end_sent_ms = qs_clock_ms();
    send_packed(w, w->end_buf, w->end_len, n > 1 ? "final RESULT chunk" : "attempt end");
}

static void set_end(worker *w, uint8_t *buf, size_t len, int64_t job, uint32_t attempt) {
    uint8_t **parts = malloc(sizeof *parts);
    size_t *lens = malloc(sizeof *lens);
    if (!parts || !lens) {
        free(parts);
        free(lens);
        free(buf);
        wlog(w, "out of memory keeping the end of job %lld attempt %u", (long long)job, attempt);
        return;
    }
    parts[0] = buf;
    lens[0] = len;
    set_end_parts(w, parts, lens, 1, job, attempt);
}

static void send_failed(worker *w, int64_t job, uint32_t attempt, Qsweep__FailureClass cls,
                        const char *msg) {
    Qsweep__Failed f = QSWEEP__FAILED__INIT;
    f.job_id = job;
    f.attempt = attempt;
    f.class_ = cls;
    f.message = (char *)msg;
    Qsweep__Envelope env = QSWEEP__ENVELOPE__INIT;
    env.body_case = QSWEEP__ENVELOPE__BODY_FAILED;
    env.failed = &f;
    uint8_t *buf = NULL;
    size_t len = 0;
    qs_error err;
    if (qs_proto_encode(&env, &buf, &len, &err) != QS_OK) {
        wlog(w, "encode FAILED: %s", err.msg);
        return;
    }
    set_end(w, buf, len, job, attempt);
}

static void send_heartbeat(worker *w) {
    Qsweep__Heartbeat hb = QSWEEP__HEARTBEAT__INIT;
    char phase[PHASE_MAX + 1] = "";
    if (w->job) {
        pthread_mutex_lock(&w->mu);
        hb.job_id = w->job->job_id;
        hb.attempt = w->job->attempt;
        hb.step = w->job->step;
        hb.total = w->job->total;
        memcpy(phase, w->job->phase, sizeof phase);
        pthread_mutex_unlock(&w->mu);
    } else if (w->end_buf) { /* still delivering: the lease must not expire meanwhile */
        hb.job_id = w->end_job;
        hb.attempt = w->end_attempt;
        hb.step = w->end_next;
        hb.total = w->end_n;
        strcpy(phase, "deliver");
    } else if (w->rx_spec) { /* receiving a split ASSIGN */
        hb.job_id = w->rx_job;
        hb.attempt = w->rx_attempt;
        hb.step = w->rx_next;
        hb.total = w->rx_chunks;
        strcpy(phase, "receive");
    }
    hb.phase = phase;
    Qsweep__Envelope env = QSWEEP__ENVELOPE__INIT;
    env.body_case = QSWEEP__ENVELOPE__BODY_HEARTBEAT;
    env.heartbeat = &hb;
    send_env(w, &env);
}

/* Sends the running job's new non-final metrics as a partial RESULT batch, kept until ACKed. */
/* Sends the running job's new non-final metrics as partial RESULT batches of at most
 * QS_PROTO_CHUNK_BYTES each (codec.h), each kept until ACKed by its seq. */
static void flush_partials(worker *w) {
    if (!w->job) return;
    pthread_mutex_lock(&w->mu);
    metric_vec mv = w->job->partials;
    memset(&w->job->partials, 0, sizeof w->job->partials);
    pthread_mutex_unlock(&w->mu);
    if (mv.n == 0) {
        free(mv.v);
        return;
    }
    size_t *starts = NULL, total = 0;
    uint32_t n = 0;
    partial_batch *nb = NULL;
    if (slice_metrics(mv.v, mv.n, &starts, &n, &total) != QS_OK ||
        !(nb = realloc(w->batches, (w->n_batches + n) * sizeof *nb))) {
        wlog(w, "out of memory: %zu partial metrics dropped", mv.n);
        free(starts);
        free(mv.v);
        return;
    }
    w->batches = nb;
    for (uint32_t k = 0; k < n; k++) {
        size_t from = starts[k], to = k + 1 < n ? starts[k + 1] : mv.n;
        metric_vec part = {.n = to - from, .cap = to - from};
        part.v = malloc(part.n * sizeof *part.v);
        uint8_t *buf = NULL;
        size_t len = 0;
        if (!part.v || pack_result(w->job->job_id, w->job->attempt, mv.v + from, part.n, false,
                                   w->next_seq, 0, 0, &buf, &len) != QS_OK) {
            wlog(w, "out of memory: %zu partial metrics dropped", part.n);
            free(part.v);
            continue;
        }
        memcpy(part.v, mv.v + from, part.n * sizeof *part.v);
        w->batches[w->n_batches++] = (partial_batch){.seq = w->next_seq++, .metrics = part};
        send_packed(w, buf, len, "partial RESULT");
        free(buf);
    }
    free(starts);
    free(mv.v);
}

static void resend_partials(worker *w) {
    for (size_t i = 0; i < w->n_batches && w->job; i++) {
        uint8_t *buf = NULL;
        size_t len = 0;
        if (pack_result(w->job->job_id, w->job->attempt, w->batches[i].metrics.v,
                        w->batches[i].metrics.n, false, w->batches[i].seq, 0, 0, &buf,
                        &len) == QS_OK) {
            send_packed(w, buf, len, "partial RESULT");
            free(buf);
        }
    }
}

static void drop_batches(worker *w) {
    for (size_t i = 0; i < w->n_batches; i++)
        free(w->batches[i].metrics.v);
    free(w->batches);
    w->batches = NULL;
    w->n_batches = 0;
}

/* ---- the compute thread ---- */

static void *compute_main(void *arg) {
    qw_job_ctx *ctx = arg;
    qs_error err;
    qs_error_clear(&err);
    qw_job_fn fn = qw_registry_find(ctx->kind);
    qs_status st = fn ? fn(ctx, &err)
                      : qs_error_set(&err, QS_EUNSUPPORTED,
                                     "job kind \"%s\" is not registered in this worker", ctx->kind);
    if (st != QS_OK && !err.msg[0]) qs_error_set(&err, st, "job returned %s", qs_status_name(st));
    pthread_mutex_lock(&ctx->w->mu);
    ctx->status = st;
    ctx->err = err;
    ctx->done = true;
    pthread_mutex_unlock(&ctx->w->mu);
    return NULL;
}

static void job_free(qw_job_ctx *ctx) {
    if (!ctx) return;
    json_decref(ctx->spec);
    free(ctx->finals.v);
    free(ctx->partials.v);
    free(ctx);
}

static void start_job(worker *w, const Qsweep__Assign *a) {
    if (w->job || w->end_buf || w->rx_spec || stop_requested) {
        if (w->job && w->job->job_id == a->job_id && w->job->attempt == a->attempt)
            return; /* duplicate */
        char msg[300];
        snprintf(msg, sizeof msg, "worker %s is busy or stopping; job %lld not started", w->id,
                 (long long)a->job_id);
        /* Not the job's fault: PREEMPTED does not count against its attempts. Sent once,
           not kept: the coordinator's lease covers a lost copy. */
        Qsweep__Failed f = QSWEEP__FAILED__INIT;
        f.job_id = a->job_id;
        f.attempt = a->attempt;
        f.class_ = QSWEEP__FAILURE_CLASS__PREEMPTED;
        f.message = msg;
        Qsweep__Envelope env = QSWEEP__ENVELOPE__INIT;
        env.body_case = QSWEEP__ENVELOPE__BODY_FAILED;
        env.failed = &f;
        send_env(w, &env);
        wlog(w, "%s", msg);
        return;
    }
    w->ready_sent = false;
    qw_job_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
        send_failed(w, a->job_id, a->attempt, QSWEEP__FAILURE_CLASS__WORKER_ERROR,
                    "worker out of memory");
        return;
    }
    ctx->w = w;
    ctx->job_id = a->job_id;
    ctx->attempt = a->attempt;
    snprintf(ctx->kind, sizeof ctx->kind, "%s", a->kind);
    atomic_init(&ctx->cancel, false);
    json_error_t jerr;
    ctx->spec = json_loads(a->spec_json, 0, &jerr);
    if (!ctx->spec || !json_is_object(ctx->spec)) {
        char msg[300];
        snprintf(msg, sizeof msg, "job %lld: spec is not a JSON object (line %d column %d: %s)",
                 (long long)a->job_id, jerr.line, jerr.column,
                 ctx->spec ? "not an object" : jerr.text);
        job_free(ctx);
        send_failed(w, a->job_id, a->attempt, QSWEEP__FAILURE_CLASS__JOB_ERROR, msg);
        return;
    }
    w->next_seq = 1;
    if (pthread_create(&ctx->thread, NULL, compute_main, ctx) != 0) {
        job_free(ctx);
        send_failed(w, a->job_id, a->attempt, QSWEEP__FAILURE_CLASS__WORKER_ERROR,
                    "cannot start compute thread");
        return;
    }
    w->job = ctx;
    w->lease_hb_ms = (int)(a->lease_ms / 4) < w->hb_ms ? (int)(a->lease_ms / 4) : w->hb_ms;
    if (w->lease_hb_ms < 50) w->lease_hb_ms = 50;
    if (w->next_hb_ms > qs_clock_ms() + w->lease_hb_ms)
        w->next_hb_ms = qs_clock_ms() + w->lease_hb_ms;
    wlog(w, "job %lld attempt %u (%s) started, lease %u ms", (long long)a->job_id, a->attempt,
         a->kind, a->lease_ms);
}

/* Makes the final RESULT of metrics all the attempt's end: one frame when it fits in
 * QS_PROTO_CHUNK_BYTES, else chunks (qsweep.proto: Result) sent one at a time as the
 * coordinator ACKs them; over QS_PROTO_MAX_RESULT_BYTES the worker refuses it with a job
 * error giving its size and the limit (codec.h). */
static void deliver_result(worker *w, int64_t job, uint32_t attempt, const metric_vec *all) {
    size_t *starts = NULL, total = 0;
    uint32_t n = 0;
    uint8_t **parts = NULL;
    size_t *lens = NULL;
    size_t limit = w->o->max_result_bytes && w->o->max_result_bytes < QS_PROTO_MAX_RESULT_BYTES
                       ? w->o->max_result_bytes
                       : QS_PROTO_MAX_RESULT_BYTES;
    bool ok = slice_metrics(all->v, all->n, &starts, &n, &total) == QS_OK;
    if (ok && total > limit) {
        char msg[300];
        snprintf(msg, sizeof msg,
                 "the final result of %zu metrics encodes to %zu bytes, over the limit of %zu "
                 "bytes of one result (%s): report fewer metrics per job",
                 all->n, total, limit,
                 limit == QS_PROTO_MAX_RESULT_BYTES ? "QS_PROTO_MAX_RESULT_BYTES, proto/codec.h"
                                                    : "this worker's max_result_bytes");
        free(starts);
        send_failed(w, job, attempt, QSWEEP__FAILURE_CLASS__JOB_ERROR, msg);
        wlog(w, "job %lld attempt %u failed: %s", (long long)job, attempt, msg);
        return;
    }
    ok = ok && (parts = calloc(n, sizeof *parts)) && (lens = calloc(n, sizeof *lens));
    for (uint32_t k = 0; k < n && ok; k++) {
        size_t from = starts[k], to = k + 1 < n ? starts[k + 1] : all->n;
        ok = pack_result(job, attempt, all->v + from, to - from, true, 0, n > 1 ? k : 0,
                         n > 1 ? n : 0, &parts[k], &lens[k]) == QS_OK;
    }
    free(starts);
    if (!ok) {
        for (uint32_t k = 0; parts && k < n; k++)
            free(parts[k]);
        free(parts);
        free(lens);
        send_failed(w, job, attempt, QSWEEP__FAILURE_CLASS__WORKER_ERROR,
                    "worker out of memory packing the result");
        return;
    }
    set_end_parts(w, parts, lens, n, job, attempt);
    if (n > 1)
        wlog(w, "job %lld attempt %u succeeded (%zu metrics, %zu bytes: delivered in %u chunks)",
             (long long)job, attempt, all->n, total, n);
    else
        wlog(w, "job %lld attempt %u succeeded (%zu metrics)", (long long)job, attempt, all->n);
}

/* Joins a finished job and turns its outcome into the attempt's end message. */
static void finish_job(worker *w) {
    qw_job_ctx *ctx = w->job;
    pthread_join(ctx->thread, NULL);
    w->job = NULL;
    if (ctx->status == QS_OK) {
        /* Unacked partial metrics ride along: the store keeps one value per (job, name, step). */
        metric_vec all = {0};
        bool ok = true;
        for (size_t j = 0; j < ctx->finals.n && ok; j++)
            ok = metric_push(&all, &ctx->finals.v[j]) == QS_OK;
        for (size_t i = 0; i < w->n_batches && ok; i++)
            for (size_t j = 0; j < w->batches[i].metrics.n && ok; j++)
                ok = metric_push(&all, &w->batches[i].metrics.v[j]) == QS_OK;
        for (size_t j = 0; j < ctx->partials.n && ok; j++)
            ok = metric_push(&all, &ctx->partials.v[j]) == QS_OK;
        if (ok) {
            deliver_result(w, ctx->job_id, ctx->attempt, &all);
        } else {
            send_failed(w, ctx->job_id, ctx->attempt, QSWEEP__FAILURE_CLASS__WORKER_ERROR,
                        "worker out of memory packing the result");
        }
        free(all.v);
    } else {
        Qsweep__FailureClass cls = QSWEEP__FAILURE_CLASS__JOB_ERROR;
        if (ctx->status == QS_ECANCELLED && atomic_load(&ctx->cancel))
            cls = ctx->preempted ? QSWEEP__FAILURE_CLASS__PREEMPTED
                                 : QSWEEP__FAILURE_CLASS__CANCELLED;
        else if (ctx->status == QS_EIO || ctx->status == QS_ENOMEM ||
                 ctx->status == QS_EUNSUPPORTED)
            cls = QSWEEP__FAILURE_CLASS__WORKER_ERROR;
        send_failed(w, ctx->job_id, ctx->attempt, cls, ctx->err.msg);
        wlog(w, "job %lld attempt %u failed (%s): %s", (long long)ctx->job_id, ctx->attempt,
             protobuf_c_enum_descriptor_get_value(&qsweep__failure_class__descriptor, cls)->name,
             ctx->err.msg);
    }
    drop_batches(w);
    job_free(ctx);
}

/* ---- the socket ---- */

/* Watches the socket's handshakes (zmq_socket_monitor, libzmq 4.3: each event is two
 * frames, a 16-bit event id and a 32-bit value in host order, then the endpoint): a worker
 * the coordinator refuses (its ZAP handler's allow-list, coordinator/server/zap.h) or whose
 * security mechanism differs (no CURVE keys against a CURVE coordinator, or the reverse)
 * otherwise only sees a silent coordinator; an admitted one says that it connected. */
static void watch_handshakes(worker *w) {
    char ep[96];
    snprintf(ep, sizeof ep, "inproc://qsweep-worker-monitor-%p-%u", (void *)w, ++w->mon_seq);
    if (zmq_socket_monitor(w->sock, ep,
                           ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                               ZMQ_EVENT_HANDSHAKE_SUCCEEDED) != 0)
        return;
    w->mon = zmq_socket(w->zctx, ZMQ_PAIR);
    int linger = 0;
    if (w->mon && (zmq_setsockopt(w->mon, ZMQ_LINGER, &linger, sizeof linger) != 0 ||
                   zmq_connect(w->mon, ep) != 0)) {
        zmq_close(w->mon);
        w->mon = NULL;
    }
}

/* One refused handshake: says what is wrong the first time (libzmq retries every 100 ms),
 * and counts. */
static void refused(worker *w, int64_t now, const char *why) {
    if (w->refusals++ == 0) {
        w->first_refusal_ms = now;
        snprintf(w->refusal, sizeof w->refusal, "%s", why);
        wlog(w, "%s", why);
    }
}

/* Reads the monitor's events. Returns true when the worker should give up: the coordinator
 * refused it at least QW_REFUSALS_MAX times over at least QW_REFUSAL_SPAN_MS with no
 * successful handshake in between (loop.h). */
static bool read_handshakes(worker *w, int64_t now) {
    for (;;) {
        zmq_msg_t ev;
        zmq_msg_init(&ev);
        if (zmq_msg_recv(&ev, w->mon, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&ev);
            break;
        }
        uint16_t id = 0;
        uint32_t value = 0;
        if (zmq_msg_size(&ev) >= 6) {
            memcpy(&id, zmq_msg_data(&ev), 2);
            memcpy(&value, (const char *)zmq_msg_data(&ev) + 2, 4);
        }
        bool more = zmq_msg_more(&ev);
        zmq_msg_close(&ev);
        if (more) { /* the endpoint frame */
            zmq_msg_init(&ev);
            zmq_msg_recv(&ev, w->mon, ZMQ_DONTWAIT);
            zmq_msg_close(&ev);
        }
        char why[400];
        if (id == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
            if (!w->connected_told)
                wlog(w, "connected to the coordinator at %s%s", w->o->endpoint,
                     w->o->curve_server_key ? " (CURVE: encrypted, key accepted)" : "");
            w->connected_told = true;
            w->refusals = 0;
        } else if (id == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
            snprintf(why, sizeof why,
                     "the coordinator refused this worker's CURVE key (ZAP status %u): is its "
                     "public key %s in the coordinator's allow-list (--authorized-keys)?",
                     value, w->o->curve_public_key);
            refused(w, now, why);
        } else if (id == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL &&
                   value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) {
            snprintf(why, sizeof why, "%s",
                     w->o->curve_server_key
                         ? "the coordinator does not use CURVE but this worker does: unset "
                           "QSWEEP_CURVE_SERVER/PUBLIC/SECRET or start the coordinator with "
                           "QSWEEP_CURVE_SECRET"
                         : "the coordinator requires CURVE and this worker has no keys: set "
                           "QSWEEP_CURVE_SERVER (the coordinator's public key) and this "
                           "worker's QSWEEP_CURVE_PUBLIC/QSWEEP_CURVE_SECRET (qsweep keygen)");
            refused(w, now, why);
        } else if (id == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
            snprintf(why, sizeof why,
                     "the handshake with the coordinator failed (ZeroMQ protocol error 0x%x): "
                     "is QSWEEP_CURVE_SERVER the coordinator's public key?",
                     value);
            refused(w, now, why);
        }
    }
    return w->refusals >= QW_REFUSALS_MAX && now - w->first_refusal_ms >= QW_REFUSAL_SPAN_MS;
}

static void close_socket(worker *w) {
    if (w->mon) {
        zmq_socket_monitor(w->sock, NULL, 0); /* stops the monitor */
        zmq_close(w->mon);
    }
    if (w->sock) zmq_close(w->sock);
    w->mon = w->sock = NULL;
}

static qs_status open_socket(worker *w, qs_error *err) {
    close_socket(w);
    w->sock = zmq_socket(w->zctx, ZMQ_DEALER);
    if (!w->sock) return qs_error_set(err, QS_ENET, "zmq_socket(DEALER): %s", zmq_strerror(errno));
    int linger = 0;
    zmq_setsockopt(w->sock, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_setsockopt(w->sock, ZMQ_ROUTING_ID, w->id, strlen(w->id)) != 0)
        return qs_error_set(err, QS_ENET, "worker_id \"%s\": not usable as a ZeroMQ routing id: %s",
                            w->id, zmq_strerror(errno));
    if (w->o->curve_server_key) {
        if (zmq_setsockopt(w->sock, ZMQ_CURVE_SERVERKEY, w->o->curve_server_key, 41) != 0 ||
            zmq_setsockopt(w->sock, ZMQ_CURVE_PUBLICKEY, w->o->curve_public_key, 41) != 0 ||
            zmq_setsockopt(w->sock, ZMQ_CURVE_SECRETKEY, w->o->curve_secret_key, 41) != 0)
            return qs_error_set(err, QS_EINVAL, "CURVE keys: need three 40-character Z85 keys: %s",
                                zmq_strerror(errno));
    }
    watch_handshakes(w);
    w->connected_told = false;
    if (zmq_connect(w->sock, w->o->endpoint) != 0)
        return qs_error_set(err, QS_ENET, "connect %s: %s", w->o->endpoint, zmq_strerror(errno));
    return QS_OK;
}

/* Re-registers: HELLO (naming the running or finished job), then whatever is unacked. */
static void reregister(worker *w) {
    w->registering = true; /* until the coordinator is heard again */
    send_hello(w);
    resend_partials(w);
    if (w->end_buf) { /* the part being delivered; a restarted coordinator asks for chunk 0 */
        send_packed(w, w->end_buf, w->end_len, "attempt end");
        w->end_sent_ms = qs_clock_ms();
    }
}

static void rx_clear(worker *w) {
    free(w->rx_spec);
    w->rx_spec = NULL;
    w->rx_len = 0;
}

/* One part of a split ASSIGN (qsweep.proto: Assign): chunk 0 starts a new one, the next
 * expected chunk is appended, anything else is dropped (the coordinator sends the whole
 * ASSIGN again when this worker's HELLO says it is receiving). The last part starts the job. */
static void receive_assign(worker *w, const Qsweep__Assign *a) {
    if (a->chunk == 0) {
        if (w->job || w->end_buf || stop_requested) {
            start_job(w, a); /* says busy or stopping (PREEMPTED) */
            return;
        }
        rx_clear(w);
        w->rx_job = a->job_id;
        w->rx_attempt = a->attempt;
        w->rx_lease_ms = a->lease_ms;
        w->rx_chunks = a->chunks;
        w->rx_next = 0;
        w->lease_hb_ms = (int)(a->lease_ms / 4) < w->hb_ms ? (int)(a->lease_ms / 4) : w->hb_ms;
        if (w->lease_hb_ms < 50) w->lease_hb_ms = 50;
        snprintf(w->rx_kind, sizeof w->rx_kind, "%s", a->kind);
        w->rx_spec = calloc(1, 1);
        if (!w->rx_spec) {
            send_failed(w, a->job_id, a->attempt, QSWEEP__FAILURE_CLASS__WORKER_ERROR,
                        "worker out of memory receiving the spec");
            return;
        }
        wlog(w, "job %lld attempt %u: receiving its spec in %u parts", (long long)a->job_id,
             a->attempt, a->chunks);
        w->ready_sent = false;
    }
    if (!w->rx_spec || a->job_id != w->rx_job || a->attempt != w->rx_attempt ||
        a->chunks != w->rx_chunks || a->chunk != w->rx_next)
        return;
    size_t add = strlen(a->spec_json);
    char *grown = realloc(w->rx_spec, w->rx_len + add + 1);
    if (!grown) {
        rx_clear(w);
        send_failed(w, a->job_id, a->attempt, QSWEEP__FAILURE_CLASS__WORKER_ERROR,
                    "worker out of memory receiving the spec");
        return;
    }
    memcpy(grown + w->rx_len, a->spec_json, add + 1);
    w->rx_spec = grown;
    w->rx_len += add;
    if (++w->rx_next < w->rx_chunks) return;
    Qsweep__Assign whole = QSWEEP__ASSIGN__INIT;
    whole.job_id = w->rx_job;
    whole.attempt = w->rx_attempt;
    whole.lease_ms = w->rx_lease_ms;
    whole.kind = w->rx_kind;
    whole.spec_json = w->rx_spec;
    w->rx_spec = NULL; /* not receiving any more: start_job must not see itself as busy */
    w->rx_len = 0;
    start_job(w, &whole);
    free(whole.spec_json);
}

static void handle(worker *w, Qsweep__Envelope *env) {
    switch (env->body_case) {
    case QSWEEP__ENVELOPE__BODY_ASSIGN:
        if (env->assign->chunks > 1)
            receive_assign(w, env->assign);
        else
            start_job(w, env->assign);
        break;
    case QSWEEP__ENVELOPE__BODY_ACK: {
        const Qsweep__Ack *a = env->ack;
        if (a->final && w->end_buf && a->job_id == w->end_job && a->attempt == w->end_attempt) {
            end_clear(w);
            w->ready_sent = false;
        } else if (a->chunk && w->end_buf && a->job_id == w->end_job &&
                   a->attempt == w->end_attempt && a->next_chunk < w->end_n) {
            /* the coordinator holds the chunks before next_chunk: send the one it wants */
            w->end_next = a->next_chunk;
            w->end_buf = w->end_parts[w->end_next];
            w->end_len = w->end_lens[w->end_next];
            send_packed(w, w->end_buf, w->end_len, "final RESULT chunk");
            w->end_sent_ms = qs_clock_ms();
        } else if (!a->final && w->job && a->job_id == w->job->job_id &&
                   a->attempt == w->job->attempt) {
            for (size_t i = 0; i < w->n_batches; i++)
                if (w->batches[i].seq == a->seq) {
                    free(w->batches[i].metrics.v);
                    w->batches[i] = w->batches[--w->n_batches];
                    break;
                }
        }
        break;
    }
    case QSWEEP__ENVELOPE__BODY_CANCEL:
        if (w->job && env->cancel->job_id == w->job->job_id &&
            env->cancel->attempt == w->job->attempt) {
            wlog(w, "job %lld attempt %u cancelled by the coordinator: %s",
                 (long long)w->job->job_id, w->job->attempt, env->cancel->reason);
            atomic_store(&w->job->cancel, true);
        } else if (w->end_buf && env->cancel->job_id == w->end_job &&
                   env->cancel->attempt == w->end_attempt) {
            end_clear(w); /* the coordinator has given up on this attempt: nothing to deliver */
            w->ready_sent = false;
        } else if (w->rx_spec && env->cancel->job_id == w->rx_job &&
                   env->cancel->attempt == w->rx_attempt) {
            rx_clear(w); /* its ASSIGN was still arriving */
            w->ready_sent = false;
        }
        break;
    case QSWEEP__ENVELOPE__BODY_REREGISTER:
        wlog(w, "coordinator asks to re-register: %s", env->reregister->reason);
        reregister(w);
        break;
    case QSWEEP__ENVELOPE__BODY_HEARTBEAT:
        break; /* liveness only: last_heard_ms is updated by the caller */
    default:
        wlog(w, "unexpected %s from the coordinator, dropped", qs_proto_kind_name(env->body_case));
    }
}

static void cache_clear(worker *w) {
    for (int i = 0; i < CACHE_SLOTS; i++)
        cache_entry_drop(&w->cache[i]);
}

qs_status qw_run(const qw_options *opts, qs_error *err) {
    if (!opts || !opts->endpoint || !opts->endpoint[0])
        return qs_error_set(err, QS_EINVAL, "qw_run: options.endpoint is required");
    if (opts->worker_id && (!opts->worker_id[0] || strlen(opts->worker_id) > ID_MAX))
        return qs_error_set(err, QS_EINVAL, "qw_run: options.worker_id must be 1..%d bytes",
                            ID_MAX);
    if ((opts->curve_server_key != NULL) != (opts->curve_secret_key != NULL) ||
        (opts->curve_public_key != NULL) != (opts->curve_secret_key != NULL))
        return qs_error_set(err, QS_EINVAL, "qw_run: options.curve_*: give all three keys or none");
    if (opts->curve_secret_key &&
        (strlen(opts->curve_server_key) != 40 || strlen(opts->curve_public_key) != 40 ||
         strlen(opts->curve_secret_key) != 40))
        return qs_error_set(err, QS_EINVAL,
                            "qw_run: options.curve_*: each key must be 40 Z85 characters");
    if (opts->heartbeat_ms < 0 || opts->coordinator_timeout_ms < 0 || opts->threads < 0 ||
        opts->exit_when_idle_ms < 0)
        return qs_error_set(
            err, QS_EINVAL,
            "qw_run: options.heartbeat_ms/coordinator_timeout_ms/threads/exit_when_idle_ms < 0");
    qs_status st = QS_OK;

    worker *w = calloc(1, sizeof *w);
    if (!w) return qs_error_set(err, QS_ENOMEM, "qw_run");
    w->o = opts;
    if (gethostname(w->host, sizeof w->host - 1) != 0) strcpy(w->host, "unknown");
    if (opts->worker_id)
        snprintf(w->id, sizeof w->id, "%s", opts->worker_id);
    else
        snprintf(w->id, sizeof w->id, "%.150s-%ld", w->host, (long)getpid());
    w->hb_ms = opts->heartbeat_ms ? opts->heartbeat_ms : 2000;
    w->timeout_ms = opts->coordinator_timeout_ms ? opts->coordinator_timeout_ms : 4 * w->hb_ms;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    w->threads = opts->threads ? opts->threads : (ncpu > 0 ? (int)ncpu : 1);
    pthread_mutex_init(&w->mu, NULL);

    struct sigaction old_term, old_int;
    if (!opts->no_signal_handlers) {
        struct sigaction sa = {.sa_handler = on_stop_signal};
        sigemptyset(&sa.sa_mask);
        sigaction(SIGTERM, &sa, &old_term);
        sigaction(SIGINT, &sa, &old_int);
    }
    stop_requested = 0;

    w->zctx = zmq_ctx_new();
    st = w->zctx ? open_socket(w, err)
                 : qs_error_set(err, QS_ENET, "zmq_ctx_new: %s", zmq_strerror(errno));
    if (st == QS_OK) {
        wlog(w, "connecting to %s (heartbeat %d ms, coordinator timeout %d ms)", opts->endpoint,
             w->hb_ms, w->timeout_ms);
        send_hello(w);
        w->last_heard_ms = qs_clock_ms();
        w->next_hb_ms = w->last_heard_ms + w->hb_ms;
        w->idle_since_ms = w->last_heard_ms;
    }
    int64_t stop_deadline = 0;
    const char *bye_reason = "stopped";
    while (st == QS_OK) {
        int64_t t = qs_clock_ms();
        if (stop_requested && !w->stopping) {
            w->stopping = true;
            stop_deadline = t + w->timeout_ms; /* for the ACK; restarted when the job ends */
            wlog(w, "stopping: no new work%s",
                 w->job ? ", cancelling the running job (preempted)" : "");
            if (w->job) {
                w->job->preempted = true;
                atomic_store(&w->job->cancel, true);
            }
        }
        if (w->job) {
            pthread_mutex_lock(&w->mu);
            bool done = w->job->done;
            pthread_mutex_unlock(&w->mu);
            if (done) {
                flush_partials(w);
                finish_job(w);
                if (w->stopping)
                    stop_deadline = t + w->timeout_ms; /* its end gets that long to be ACKed */
            }
        }
        transition(w);
        switch (w->state) {
        case QW_LEAVING:
            if (has_work(w)) w->idle_since_ms = t;
            break;
        case QW_RECEIVING:
        case QW_RUNNING:
        case QW_DELIVERING:
            w->idle_since_ms = t;
            break;
        case QW_CONNECTING:
        case QW_REGISTERING:
        case QW_IDLE:
            break;
        }
        if (w->state == QW_LEAVING && !w->job && (!w->end_buf || t >= stop_deadline)) break;
        if ((w->state == QW_CONNECTING || w->state == QW_REGISTERING || w->state == QW_IDLE) &&
            opts->exit_when_idle_ms > 0 && t - w->idle_since_ms >= opts->exit_when_idle_ms) {
            if (w->state == QW_CONNECTING) { /* not idle: alone; the sweep was never seen */
                st = qs_error_set(err, QS_ENET,
                                  "no answer from the coordinator at %s in %d ms "
                                  "(--exit-when-idle): it was never reached",
                                  opts->endpoint, opts->exit_when_idle_ms);
                break;
            }
            wlog(w, "no job for %d ms (--exit-when-idle): leaving", opts->exit_when_idle_ms);
            bye_reason = "idle (exit when idle)";
            break;
        }
        if ((w->state == QW_CONNECTING || w->state == QW_REGISTERING || w->state == QW_IDLE) &&
            !w->ready_sent)
            send_ready(w);
        if (t >= w->next_hb_ms) {
            send_heartbeat(w);
            flush_partials(w);
            w->next_hb_ms = t + (has_work(w) && w->lease_hb_ms ? w->lease_hb_ms : w->hb_ms);
        }
        if (w->end_buf && t - w->end_sent_ms >= w->timeout_ms) {
            send_packed(w, w->end_buf, w->end_len, "attempt end (resend)");
            w->end_sent_ms = t;
        }
        if (t - w->last_heard_ms > w->timeout_ms) {
            if (w->refusals == 0) /* else the refusal was explained, once */
                wlog(w, "coordinator silent for %lld ms (%s): reconnecting and re-registering",
                     (long long)(t - w->last_heard_ms), state_name(w->state));
            st = open_socket(w, err);
            if (st != QS_OK) break;
            reregister(w);
            w->last_heard_ms = t;
        }

        zmq_pollitem_t items[2] = {{.socket = w->sock, .events = ZMQ_POLLIN},
                                   {.socket = w->mon, .events = ZMQ_POLLIN}};
        long wait =
            w->state == QW_RUNNING || w->state == QW_LEAVING ? 20 : (long)(w->next_hb_ms - t);
        if (wait > 100) wait = 100;
        if (wait < 0) wait = 0;
        int rc = zmq_poll(items, w->mon ? 2 : 1, wait);
        if (rc < 0 && errno != EINTR) {
            st = qs_error_set(err, QS_ENET, "zmq_poll: %s", zmq_strerror(errno));
            break;
        }
        if (w->mon && (items[1].revents & ZMQ_POLLIN)) {
            if (read_handshakes(w, qs_clock_ms())) {
                st = qs_error_set(err, QS_ENET,
                                  "the coordinator at %s refused this worker %d times in %lld "
                                  "s, giving up: %s",
                                  opts->endpoint, w->refusals,
                                  (long long)((qs_clock_ms() - w->first_refusal_ms) / 1000),
                                  w->refusal);
                break;
            }
            rc -= rc > 0;
        }
        while (rc > 0) {
            zmq_msg_t msg;
            zmq_msg_init(&msg);
            if (zmq_msg_recv(&msg, w->sock, ZMQ_DONTWAIT) < 0) {
                zmq_msg_close(&msg);
                break;
            }
            w->last_heard_ms = qs_clock_ms();
            w->heard = true;
            w->registering = false;
            Qsweep__Envelope *env = NULL;
            qs_error derr;
            if (qs_proto_decode(zmq_msg_data(&msg), zmq_msg_size(&msg), QS_PROTO_MAX_BYTES,
                                "coordinator", &env, &derr) == QS_OK) {
                handle(w, env);
                qs_proto_free(env);
            } else {
                wlog(w, "dropped: %s", derr.msg);
            }
            zmq_msg_close(&msg);
        }
    }
    if (w->job) { /* only on a socket error: the compute thread must not outlive w */
        atomic_store(&w->job->cancel, true);
        pthread_join(w->job->thread, NULL);
        job_free(w->job);
        w->job = NULL;
    }
    if (st == QS_OK) {
        Qsweep__Bye bye = QSWEEP__BYE__INIT;
        bye.reason = (char *)bye_reason;
        Qsweep__Envelope env = QSWEEP__ENVELOPE__INIT;
        env.body_case = QSWEEP__ENVELOPE__BODY_BYE;
        env.bye = &bye;
        send_env(w, &env);
        wlog(w, "BYE%s", w->end_buf ? " (the last attempt's end was not acknowledged)" : "");
        /* Give the BYE a moment on the wire: LINGER is 0 to never hang on a dead peer. */
        int linger = 200;
        zmq_setsockopt(w->sock, ZMQ_LINGER, &linger, sizeof linger);
    }
    close_socket(w);
    if (w->zctx) zmq_ctx_term(w->zctx);
    if (!opts->no_signal_handlers) {
        sigaction(SIGTERM, &old_term, NULL);
        sigaction(SIGINT, &old_int, NULL);
    }
    drop_batches(w);
    end_clear(w);
    rx_clear(w);
    cache_clear(w);
    pthread_mutex_destroy(&w->mu);
    free(w);
    return st;
}
