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
    void *mon;               /* PAIR reading the socket's handshake failures (CURVE only) */
    unsigned mon_seq;        /* makes each monitor endpoint unique */
    int64_t next_refusal_ms; /* when a refused key may be logged again */
    pthread_mutex_t mu; /* guards the cache and the job's shared fields */
    cache_entry cache[CACHE_SLOTS];
    uint64_t cache_clock;
    qw_job_ctx *job;        /* running (or finished, not yet joined) job */
    partial_batch *batches; /* unacked partial batches of the running job */
    size_t n_batches;
    uint64_t next_seq;
    /* The attempt's end (final RESULT or FAILED), kept until ACKed. */
    uint8_t *end_buf;
    size_t end_len;
    int64_t end_job;
    uint32_t end_attempt;
    int64_t end_sent_ms;
    bool ready_sent;
    int64_t last_heard_ms, next_hb_ms;
    int64_t idle_since_ms; /* when the worker last had neither a job nor an unacked end */
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

static void send_packed(worker *w, const uint8_t *buf, size_t len, const char *what) {
    if (zmq_send(w->sock, buf, len, ZMQ_DONTWAIT) < 0)
        wlog(w, "send %s: %s (dropped; resent on re-register when it matters)", what,
             zmq_strerror(errno));
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

/* Packs the metrics of a (then b, may be NULL) into a RESULT envelope in *buf (malloc'd). */
static qs_status pack_result(int64_t job, uint32_t attempt, const metric_vec *a,
                             const metric_vec *b, bool final, uint64_t seq, uint8_t **buf,
                             size_t *len) {
    size_t n = a->n + (b ? b->n : 0);
    Qsweep__Metric *ms = calloc(n ? n : 1, sizeof *ms);
    Qsweep__Metric **mp = calloc(n ? n : 1, sizeof *mp);
    if (!ms || !mp) {
        free(ms);
        free(mp);
        return QS_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        const metric_rec *m = i < a->n ? &a->v[i] : &b->v[i - a->n];
        qsweep__metric__init(&ms[i]);
        ms[i].name = (char *)m->name;
        ms[i].value = m->value;
        ms[i].step = m->step;
        ms[i].final = m->final;
        mp[i] = &ms[i];
    }
    Qsweep__Result r = QSWEEP__RESULT__INIT;
    r.job_id = job;
    r.attempt = attempt;
    r.final = final;
    r.seq = seq;
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

static void set_end(worker *w, uint8_t *buf, size_t len, int64_t job, uint32_t attempt) {
    free(w->end_buf);
    w->end_buf = buf;
    w->end_len = len;
    w->end_job = job;
    w->end_attempt = attempt;
    w->end_sent_ms = qs_clock_ms();
    send_packed(w, buf, len, "attempt end");
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
    }
    hb.phase = phase;
    Qsweep__Envelope env = QSWEEP__ENVELOPE__INIT;
    env.body_case = QSWEEP__ENVELOPE__BODY_HEARTBEAT;
    env.heartbeat = &hb;
    send_env(w, &env);
}

/* Sends the running job's new non-final metrics as a partial RESULT batch, kept until ACKed. */
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
    partial_batch *nb = realloc(w->batches, (w->n_batches + 1) * sizeof *nb);
    uint8_t *buf = NULL;
    size_t len = 0;
    if (!nb || pack_result(w->job->job_id, w->job->attempt, &mv, NULL, false, w->next_seq, &buf,
                           &len) != QS_OK) {
        if (nb) w->batches = nb;
        wlog(w, "out of memory: %zu partial metrics dropped", mv.n);
        free(mv.v);
        return;
    }
    w->batches = nb;
    w->batches[w->n_batches++] = (partial_batch){.seq = w->next_seq++, .metrics = mv};
    send_packed(w, buf, len, "partial RESULT");
    free(buf);
}

static void resend_partials(worker *w) {
    for (size_t i = 0; i < w->n_batches && w->job; i++) {
        uint8_t *buf = NULL;
        size_t len = 0;
        if (pack_result(w->job->job_id, w->job->attempt, &w->batches[i].metrics, NULL, false,
                        w->batches[i].seq, &buf, &len) == QS_OK) {
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
    if (w->job || w->end_buf || stop_requested) {
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
    wlog(w, "job %lld attempt %u (%s) started, lease %u ms", (long long)a->job_id, a->attempt,
         a->kind, a->lease_ms);
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
        for (size_t i = 0; i < w->n_batches && ok; i++)
            for (size_t j = 0; j < w->batches[i].metrics.n && ok; j++)
                ok = metric_push(&all, &w->batches[i].metrics.v[j]) == QS_OK;
        for (size_t j = 0; j < ctx->partials.n && ok; j++)
            ok = metric_push(&all, &ctx->partials.v[j]) == QS_OK;
        uint8_t *buf = NULL;
        size_t len = 0;
        if (ok && pack_result(ctx->job_id, ctx->attempt, &ctx->finals, &all, true, 0, &buf, &len) ==
                      QS_OK) {
            set_end(w, buf, len, ctx->job_id, ctx->attempt);
            wlog(w, "job %lld attempt %u succeeded (%zu metrics)", (long long)ctx->job_id,
                 ctx->attempt, ctx->finals.n + all.n);
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

/* With CURVE, watches the socket for a handshake the coordinator refused (its ZAP handler's
 * allow-list, coordinator/server/zap.h): a refused worker otherwise only sees a silent
 * coordinator. zmq_socket_monitor (libzmq 4.3) sends each event as two frames: a 16-bit
 * event id and a 32-bit value (the ZAP status code) in host order, then the endpoint. */
static void watch_handshakes(worker *w) {
    char ep[96];
    snprintf(ep, sizeof ep, "inproc://qsweep-worker-monitor-%p-%u", (void *)w, ++w->mon_seq);
    if (zmq_socket_monitor(w->sock, ep, ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) != 0) return;
    w->mon = zmq_socket(w->zctx, ZMQ_PAIR);
    int linger = 0;
    if (w->mon && (zmq_setsockopt(w->mon, ZMQ_LINGER, &linger, sizeof linger) != 0 ||
                   zmq_connect(w->mon, ep) != 0)) {
        zmq_close(w->mon);
        w->mon = NULL;
    }
}

/* Reads the monitor's events; logs a refused key at most once a minute (libzmq retries the
 * handshake every 100 ms). */
static void read_handshakes(worker *w, int64_t now) {
    for (;;) {
        zmq_msg_t ev;
        zmq_msg_init(&ev);
        if (zmq_msg_recv(&ev, w->mon, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&ev);
            return;
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
        if (id == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH && now >= w->next_refusal_ms) {
            wlog(w,
                 "the coordinator refused this worker's CURVE key (ZAP status %u): is its "
                 "public key %s in the coordinator's allow-list (--authorized-keys)?",
                 value, w->o->curve_public_key);
            w->next_refusal_ms = now + 60000;
        }
    }
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
        watch_handshakes(w);
    }
    if (zmq_connect(w->sock, w->o->endpoint) != 0)
        return qs_error_set(err, QS_ENET, "connect %s: %s", w->o->endpoint, zmq_strerror(errno));
    return QS_OK;
}

/* Re-registers: HELLO (naming the running or finished job), then whatever is unacked. */
static void reregister(worker *w) {
    send_hello(w);
    resend_partials(w);
    if (w->end_buf) {
        send_packed(w, w->end_buf, w->end_len, "attempt end");
        w->end_sent_ms = qs_clock_ms();
    }
}

static void handle(worker *w, Qsweep__Envelope *env) {
    switch (env->body_case) {
    case QSWEEP__ENVELOPE__BODY_ASSIGN:
        start_job(w, env->assign);
        break;
    case QSWEEP__ENVELOPE__BODY_ACK: {
        const Qsweep__Ack *a = env->ack;
        if (a->final && w->end_buf && a->job_id == w->end_job && a->attempt == w->end_attempt) {
            free(w->end_buf);
            w->end_buf = NULL;
            w->ready_sent = false;
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
            free(w->end_buf); /* the coordinator has given up on this attempt: nothing to deliver */
            w->end_buf = NULL;
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
    qs_status st = qw_register_builtin_kinds(err);
    if (st != QS_OK) return st;

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
    bool stopping = false;
    int64_t stop_deadline = 0;
    const char *bye_reason = "stopped";
    while (st == QS_OK) {
        int64_t t = qs_clock_ms();
        if (stop_requested && !stopping) {
            stopping = true;
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
                if (stopping)
                    stop_deadline = t + w->timeout_ms; /* its end gets that long to be ACKed */
            }
        }
        if (stopping && !w->job && (!w->end_buf || t >= stop_deadline)) break;
        if (w->job || w->end_buf) {
            w->idle_since_ms = t;
        } else if (!stopping && opts->exit_when_idle_ms > 0 &&
                   t - w->idle_since_ms >= opts->exit_when_idle_ms) {
            wlog(w, "no job for %d ms (--exit-when-idle): leaving", opts->exit_when_idle_ms);
            bye_reason = "idle (exit when idle)";
            break;
        }
        if (!stopping && !w->job && !w->end_buf && !w->ready_sent) send_ready(w);
        if (t >= w->next_hb_ms) {
            send_heartbeat(w);
            flush_partials(w);
            w->next_hb_ms = t + w->hb_ms;
        }
        if (w->end_buf && t - w->end_sent_ms >= w->timeout_ms) {
            send_packed(w, w->end_buf, w->end_len, "attempt end (resend)");
            w->end_sent_ms = t;
        }
        if (t - w->last_heard_ms > w->timeout_ms) {
            wlog(w, "coordinator silent for %lld ms: reconnecting and re-registering",
                 (long long)(t - w->last_heard_ms));
            st = open_socket(w, err);
            if (st != QS_OK) break;
            reregister(w);
            w->last_heard_ms = t;
        }

        zmq_pollitem_t items[2] = {{.socket = w->sock, .events = ZMQ_POLLIN},
                                   {.socket = w->mon, .events = ZMQ_POLLIN}};
        long wait = w->job || stopping ? 20 : (long)(w->next_hb_ms - t);
        if (wait > 100) wait = 100;
        if (wait < 0) wait = 0;
        int rc = zmq_poll(items, w->mon ? 2 : 1, wait);
        if (rc < 0 && errno != EINTR) {
            st = qs_error_set(err, QS_ENET, "zmq_poll: %s", zmq_strerror(errno));
            break;
        }
        if (w->mon && (items[1].revents & ZMQ_POLLIN)) {
            read_handshakes(w, qs_clock_ms());
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
    free(w->end_buf);
    cache_clear(w);
    pthread_mutex_destroy(&w->mu);
    free(w);
    return st;
}
