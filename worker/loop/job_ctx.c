/* The job context (loop.h): what one attempt owns as its job function sees it (id,
 * attempt, spec, threads, progress, cancellation, metrics), the compute thread that runs the
 * kind's function, and its end. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job_ctx.h"
#include "kind_registry.h"

qs_status qw_loop_metric_push(metric_vec *mv, const metric_rec *m) {
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

int64_t qw_job_id(const qw_job_ctx *ctx) {
    return ctx->job_id;
}

uint32_t qw_job_attempt(const qw_job_ctx *ctx) {
    return ctx->attempt;
}

const json_t *qw_job_spec(const qw_job_ctx *ctx) {
    return ctx->spec;
}

const char *qw_job_model_digest(const qw_job_ctx *ctx) {
    return ctx->model_digest;
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
    qs_status st = qw_loop_metric_push(final ? &ctx->finals : &ctx->partials, &m);
    pthread_mutex_unlock(&ctx->w->mu);
    return st == QS_OK ? QS_OK : qs_error_set(err, st, "metric %s: out of memory", name);
}

void *qw_loop_compute_main(void *arg) {
    qw_job_ctx *ctx = arg;
    qs_error err;
    qs_error_clear(&err);
    qw_job_fn fn = qw_registry_find(ctx->kind);
    qs_status st = fn ? fn(ctx, &err)
                      : qs_error_set(&err, QS_ENOTFOUND,
                                     "job kind \"%s\" is not registered in this worker", ctx->kind);
    if (st != QS_OK && !err.msg[0]) qs_error_set(&err, st, "job returned %s", qs_status_name(st));
    pthread_mutex_lock(&ctx->w->mu);
    ctx->status = st;
    ctx->err = err;
    ctx->done = true;
    pthread_mutex_unlock(&ctx->w->mu);
    return NULL;
}

void qw_loop_job_free(qw_job_ctx *ctx) {
    if (!ctx) return;
    json_decref(ctx->spec);
    free(ctx->finals.v);
    free(ctx->partials.v);
    free(ctx);
}
