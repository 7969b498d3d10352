/* An attempt from its ASSIGN (whole, or put together from its parts) to its end: starting
 * the compute thread, refusing work while busy or stopping (PREEMPTED), and turning the
 * job's outcome into the end to deliver (delivery.c). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attempt.h"
#include "clock.h"
#include "delivery.h"
#include "job_ctx.h"
#include "numerics_path.h"
#include "outbox.h"
#include "stop.h"
#include "wlog.h"

void qw_loop_take_token(worker *w, const Qsweep__Assign *a) {
    if (a->attempt_token.len > sizeof w->token) { /* not one this coordinator makes */
        w->token_len = 0;
        return;
    }
    if (a->attempt_token.data != w->token)
        memcpy(w->token, a->attempt_token.data, a->attempt_token.len);
    w->token_len = a->attempt_token.len;
}

void qw_loop_start_job(worker *w, const Qsweep__Assign *a) {
    if (w->job || w->end_buf || w->rx_spec || qw_loop_stop_requested()) {
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
        f.token = a->attempt_token; /* that ASSIGN's, not the one of the attempt on */
        Qsweep__Envelope env = QSWEEP__ENVELOPE__INIT;
        env.body_case = QSWEEP__ENVELOPE__BODY_FAILED;
        env.failed = &f;
        qw_loop_send_env(w, &env);
        qw_loop_wlog(w, "%s", msg);
        return;
    }
    w->ready_sent = false;
    qw_loop_take_token(w, a);
    qw_job_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
        qw_loop_send_failed(w, a->job_id, a->attempt, QSWEEP__FAILURE_CLASS__WORKER_ERROR,
                            "worker out of memory");
        return;
    }
    ctx->w = w;
    ctx->job_id = a->job_id;
    ctx->attempt = a->attempt;
    snprintf(ctx->kind, sizeof ctx->kind, "%s", a->kind);
    if (a->model_digest && strlen(a->model_digest) == sizeof ctx->model_digest - 1)
        memcpy(ctx->model_digest, a->model_digest, sizeof ctx->model_digest);
    atomic_init(&ctx->cancel, false);
    json_error_t jerr;
    ctx->spec = json_loads(a->spec_json, 0, &jerr);
    if (!ctx->spec || !json_is_object(ctx->spec)) {
        char msg[300];
        snprintf(msg, sizeof msg, "job %lld: spec is not a JSON object (line %d column %d: %s)",
                 (long long)a->job_id, jerr.line, jerr.column,
                 ctx->spec ? "not an object" : jerr.text);
        qw_loop_job_free(ctx);
        qw_loop_send_failed(w, a->job_id, a->attempt, QSWEEP__FAILURE_CLASS__JOB_ERROR, msg);
        return;
    }
    /* a job asking for a numerics path runs only on it (common/numerics_path.h): the
       coordinator sends none elsewhere, and a worker never computes it on another path */
    const char *want = json_string_value(json_object_get(ctx->spec, "numerics"));
    const char *mine = w->o->numerics_path;
    if (want && mine && *mine && !qs_numerics_path_matches(want, mine)) {
        char msg[400];
        snprintf(msg, sizeof msg,
                 "job %lld: its spec asks for numerics path '%.100s'; this worker runs on '%.100s'",
                 (long long)a->job_id, want, mine);
        qw_loop_job_free(ctx);
        qw_loop_send_failed(w, a->job_id, a->attempt, QSWEEP__FAILURE_CLASS__WORKER_ERROR, msg);
        return;
    }
    w->next_seq = 1;
    if (pthread_create(&ctx->thread, NULL, qw_loop_compute_main, ctx) != 0) {
        qw_loop_job_free(ctx);
        qw_loop_send_failed(w, a->job_id, a->attempt, QSWEEP__FAILURE_CLASS__WORKER_ERROR,
                            "cannot start compute thread");
        return;
    }
    w->job = ctx;
    w->lease_hb_ms = (int)(a->lease_ms / 4) < w->hb_ms ? (int)(a->lease_ms / 4) : w->hb_ms;
    if (w->lease_hb_ms < 50) w->lease_hb_ms = 50;
    if (w->next_hb_ms > qs_clock_ms() + w->lease_hb_ms)
        w->next_hb_ms = qs_clock_ms() + w->lease_hb_ms;
    qw_loop_wlog(w, "job %lld attempt %u (%s) started, lease %u ms", (long long)a->job_id,
                 a->attempt, a->kind, a->lease_ms);
}

/* Joins a finished job and turns its outcome into the attempt's end message. */
void qw_loop_finish_job(worker *w) {
    qw_job_ctx *ctx = w->job;
    pthread_join(ctx->thread, NULL);
    w->job = NULL;
    if (ctx->status == QS_OK) {
        /* Unacked partial metrics ride along: the store keeps one value per (job, name, step). */
        metric_vec all = {0};
        bool ok = true;
        for (size_t j = 0; j < ctx->finals.n && ok; j++)
            ok = qw_loop_metric_push(&all, &ctx->finals.v[j]) == QS_OK;
        for (size_t i = 0; i < w->n_batches && ok; i++)
            for (size_t j = 0; j < w->batches[i].metrics.n && ok; j++)
                ok = qw_loop_metric_push(&all, &w->batches[i].metrics.v[j]) == QS_OK;
        for (size_t j = 0; j < ctx->partials.n && ok; j++)
            ok = qw_loop_metric_push(&all, &ctx->partials.v[j]) == QS_OK;
        if (ok) {
            qw_loop_deliver_result(w, ctx->job_id, ctx->attempt, &all);
        } else {
            qw_loop_send_failed(w, ctx->job_id, ctx->attempt, QSWEEP__FAILURE_CLASS__WORKER_ERROR,
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
        /* an allocation failure says so, whatever words the job used */
        char msg[sizeof ctx->err.msg + 32];
        snprintf(msg, sizeof msg, "%s%s",
                 ctx->status == QS_ENOMEM && !strstr(ctx->err.msg, "out of memory")
                     ? "out of memory: "
                     : "",
                 ctx->err.msg);
        qw_loop_send_failed(w, ctx->job_id, ctx->attempt, cls, msg);
        qw_loop_wlog(
            w, "job %lld attempt %u %s (%s): %s", (long long)ctx->job_id, ctx->attempt,
            cls == QSWEEP__FAILURE_CLASS__PREEMPTED   ? "preempted"
            : cls == QSWEEP__FAILURE_CLASS__CANCELLED ? "cancelled"
                                                      : "failed",
            protobuf_c_enum_descriptor_get_value(&qsweep__failure_class__descriptor, cls)->name,
            msg);
    }
    qw_loop_drop_batches(w);
    qw_loop_job_free(ctx);
}

void qw_loop_rx_clear(worker *w) {
    free(w->rx_spec);
    w->rx_spec = NULL;
    w->rx_len = 0;
}

/* One part of a split ASSIGN (qsweep.proto: Assign): chunk 0 starts a new one, the next
 * expected chunk is appended, anything else is dropped (the coordinator sends the whole
 * ASSIGN again when this worker's HELLO says it is receiving). The last part starts the job. */
void qw_loop_receive_assign(worker *w, const Qsweep__Assign *a) {
    if (a->chunk == 0) {
        if (w->job || w->end_buf || qw_loop_stop_requested()) {
            qw_loop_start_job(w, a); /* says busy or stopping (PREEMPTED) */
            return;
        }
        qw_loop_rx_clear(w);
        qw_loop_take_token(w, a);
        w->rx_job = a->job_id;
        w->assigned = true;
        w->rx_attempt = a->attempt;
        w->rx_lease_ms = a->lease_ms;
        w->rx_chunks = a->chunks;
        w->rx_next = 0;
        w->lease_hb_ms = (int)(a->lease_ms / 4) < w->hb_ms ? (int)(a->lease_ms / 4) : w->hb_ms;
        if (w->lease_hb_ms < 50) w->lease_hb_ms = 50;
        snprintf(w->rx_kind, sizeof w->rx_kind, "%s", a->kind);
        w->rx_spec = calloc(1, 1);
        if (!w->rx_spec) {
            qw_loop_send_failed(w, a->job_id, a->attempt, QSWEEP__FAILURE_CLASS__WORKER_ERROR,
                                "worker out of memory receiving the spec");
            return;
        }
        qw_loop_wlog(w, "job %lld attempt %u: receiving its spec in %u parts", (long long)a->job_id,
                     a->attempt, a->chunks);
        w->ready_sent = false;
    }
    if (!w->rx_spec || a->job_id != w->rx_job || a->attempt != w->rx_attempt ||
        a->chunks != w->rx_chunks || a->chunk != w->rx_next)
        return;
    size_t add = strlen(a->spec_json);
    char *grown = realloc(w->rx_spec, w->rx_len + add + 1);
    if (!grown) {
        qw_loop_rx_clear(w);
        qw_loop_send_failed(w, a->job_id, a->attempt, QSWEEP__FAILURE_CLASS__WORKER_ERROR,
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
    whole.attempt_token = (ProtobufCBinaryData){w->token_len, w->token};
    whole.model_digest = a->model_digest; /* repeated in every part, as the other fields */
    w->rx_spec = NULL; /* not receiving any more: start_job must not see itself as busy */
    w->rx_len = 0;
    qw_loop_start_job(w, &whole);
    free(whole.spec_json);
}
