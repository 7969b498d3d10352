/* What the worker sends while it runs (loop.h): HELLO, READY, heartbeats naming the
 * attempt on, and partial RESULT batches kept until ACKed. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zmq.h>

#include "cache.h"
#include "kind_registry.h"
#include "outbox.h"
#include "pack.h"
#include "wlog.h"

/* Sends one frame without blocking. A failure (no connection yet, or its queue full) is
 * logged once until a send succeeds again: a worker that cannot reach the coordinator would
 * otherwise log every heartbeat. */
void qw_loop_send_packed(worker *w, const uint8_t *buf, size_t len, const char *what) {
    if (zmq_send(w->sock, buf, len, ZMQ_DONTWAIT) >= 0) {
        w->send_failing = false;
        return;
    }
    if (!w->send_failing && w->refusals == 0) /* a refusal was already explained */
        qw_loop_wlog(w,
                     "send %s: %s (dropped; resent on re-register when it matters; further failed "
                     "sends are not logged until one succeeds)",
                     what, zmq_strerror(errno));
    w->send_failing = true;
}

void qw_loop_send_env(worker *w, Qsweep__Envelope *env) {
    uint8_t *buf = NULL;
    size_t len = 0;
    qs_error err;
    if (qs_proto_encode(env, &buf, &len, &err) != QS_OK) {
        qw_loop_wlog(w, "encode %s: %s", qs_proto_kind_name(env->body_case), err.msg);
        return;
    }
    qw_loop_send_packed(w, buf, len, qs_proto_kind_name(env->body_case));
    free(buf);
}

void qw_loop_send_hello(worker *w) {
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
    if (h.running_job_id) h.running_token = (ProtobufCBinaryData){w->token_len, w->token};
    if (w->o->previous_exit && !w->assigned) {
        h.previous_exit = (char *)w->o->previous_exit;
        h.previous_worker_id =
            (char *)(w->o->previous_worker_id ? w->o->previous_worker_id : w->id);
    }
    if (w->o->numerics_path) h.numerics_path = (char *)w->o->numerics_path;
    if (w->o->backend_note) h.backend_note = (char *)w->o->backend_note;
    const char *kinds[64];
    h.n_kinds = qw_registry_kinds(kinds, 64);
    h.kinds = (char **)kinds;
    char *keys[CACHE_SLOTS];
    Qsweep__Envelope env = QSWEEP__ENVELOPE__INIT;
    env.body_case = QSWEEP__ENVELOPE__BODY_HELLO;
    env.hello = &h;
    pthread_mutex_lock(&w->mu);
    h.n_models_loaded = qw_loop_cache_keys(w, keys);
    h.models_loaded = keys;
    qw_loop_send_env(w, &env);
    pthread_mutex_unlock(&w->mu);
    w->ready_sent = false;
}

void qw_loop_send_ready(worker *w) {
    Qsweep__Ready r = QSWEEP__READY__INIT;
    char *keys[CACHE_SLOTS];
    Qsweep__Envelope env = QSWEEP__ENVELOPE__INIT;
    env.body_case = QSWEEP__ENVELOPE__BODY_READY;
    env.ready = &r;
    pthread_mutex_lock(&w->mu);
    r.n_models_loaded = qw_loop_cache_keys(w, keys);
    r.models_loaded = keys;
    qw_loop_send_env(w, &env);
    pthread_mutex_unlock(&w->mu);
    w->ready_sent = true;
}

void qw_loop_send_heartbeat(worker *w) {
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
    if (hb.job_id) hb.token = (ProtobufCBinaryData){w->token_len, w->token};
    Qsweep__Envelope env = QSWEEP__ENVELOPE__INIT;
    env.body_case = QSWEEP__ENVELOPE__BODY_HEARTBEAT;
    env.heartbeat = &hb;
    qw_loop_send_env(w, &env);
}

/* Sends the running job's new non-final metrics as partial RESULT batches of at most
 * QS_PROTO_CHUNK_BYTES each (codec.h), each kept until ACKed by its seq. */
void qw_loop_flush_partials(worker *w) {
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
    if (qw_loop_slice_metrics(mv.v, mv.n, &starts, &n, &total) != QS_OK ||
        !(nb = realloc(w->batches, (w->n_batches + n) * sizeof *nb))) {
        qw_loop_wlog(w, "out of memory: %zu partial metrics dropped", mv.n);
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
        if (!part.v || qw_loop_pack_result(w, w->job->job_id, w->job->attempt, mv.v + from, part.n,
                                           false, w->next_seq, 0, 0, &buf, &len) != QS_OK) {
            qw_loop_wlog(w, "out of memory: %zu partial metrics dropped", part.n);
            free(part.v);
            continue;
        }
        memcpy(part.v, mv.v + from, part.n * sizeof *part.v);
        w->batches[w->n_batches++] = (partial_batch){.seq = w->next_seq++, .metrics = part};
        qw_loop_send_packed(w, buf, len, "partial RESULT");
        free(buf);
    }
    free(starts);
    free(mv.v);
}

void qw_loop_resend_partials(worker *w) {
    for (size_t i = 0; i < w->n_batches && w->job; i++) {
        uint8_t *buf = NULL;
        size_t len = 0;
        if (qw_loop_pack_result(w, w->job->job_id, w->job->attempt, w->batches[i].metrics.v,
                                w->batches[i].metrics.n, false, w->batches[i].seq, 0, 0, &buf,
                                &len) == QS_OK) {
            qw_loop_send_packed(w, buf, len, "partial RESULT");
            free(buf);
        }
    }
}

void qw_loop_drop_batches(worker *w) {
    for (size_t i = 0; i < w->n_batches; i++)
        free(w->batches[i].metrics.v);
    free(w->batches);
    w->batches = NULL;
    w->n_batches = 0;
}
