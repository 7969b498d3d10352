/* One linear held by a method (method_linear.h). */
#include "method_linear.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "block_hadamard.h"
#include "clock.h"
#include "format.h"
#include "policy.h"
#include "smooth.h"

/* buf with room for n floats (grown once per larger input; the forward's T is at most ctx). */
static qs_status room(qw_method_linear *ml, size_t n, qs_error *err) {
    if (ml->cap >= n) return QS_OK;
    float *b = realloc(ml->buf, n * sizeof *b);
    if (!b) return qs_error_set(err, QS_ENOMEM, "method %s: input of %zu floats", ml->method, n);
    ml->buf = b;
    ml->cap = n;
    return QS_OK;
}

/* On a device backend: dev_y with room for n floats and s's copy there, made through be (s is
 * fixed once the weight is made, so it is uploaded once, not per call). Buffers of a backend
 * that has since been replaced under the same rank are dropped, not freed through the new one. */
static qs_status device_room(qw_method_linear *ml, qw_backend *be, size_t n, qs_error *err) {
    if (ml->dev && ml->dev_impl != be->impl) {
        ml->dev_y = ml->dev_s = NULL;
        ml->dev_cap = 0;
    }
    ml->dev = be;
    ml->dev_impl = be->impl;
    if (ml->s && !ml->dev_s) {
        const size_t bytes = (size_t)ml->in * sizeof *ml->s;
        if (!(ml->dev_s = be->ops->alloc(be, bytes)))
            return qs_error_set(err, QS_ENOMEM, "method %s: scales on the %s backend", ml->method,
                                be->ops->name);
        qs_status st = be->ops->upload(be, ml->dev_s, ml->s, bytes, err);
        if (st) {
            be->ops->free(be, ml->dev_s);
            ml->dev_s = NULL;
            return st;
        }
    }
    if (ml->dev_cap >= n) return QS_OK;
    be->ops->free(be, ml->dev_y);
    ml->dev_cap = 0;
    if (!(ml->dev_y = be->ops->alloc(be, n * sizeof *ml->dev_y)))
        return qs_error_set(err, QS_ENOMEM, "method %s: input of %zu floats on the %s backend",
                            ml->method, n, be->ops->name);
    ml->dev_cap = n;
    return QS_OK;
}

qs_status qw_method_linear_hook(void *ctx, const struct qw_backend *be_in, const float *x, int T,
                                const float **out, qs_error *err) {
    qw_method_linear *ml = ctx;
    /* the rank's own backend (forward.c passes &r->be): its table takes it writable */
    qw_backend *be = (qw_backend *)be_in;
    *out = x;
    const size_t n = (size_t)T * (size_t)ml->in;
    qs_status st;
    if (ml->observing) {
        double t0 = qs_clock_s();
        /* the statistics are the CPU's: a device's x is fetched (the backend waits there) */
        if (be->impl) {
            if ((st = room(ml, n, err))) return st;
            if ((st = be->ops->fetch(be, ml->buf, x, n * sizeof *x, err)))
                return qs_error_wrap(err, "method %s: calibration input", ml->method);
            x = ml->buf;
        }
        if (ml->amax)
            for (size_t i = 0; i < n; i++)
                ml->amax[i % (size_t)ml->in] = fmaxf(ml->amax[i % (size_t)ml->in], fabsf(x[i]));
        if (ml->h) {
            const float *xr = x;
            if (ml->tile) {
                if ((st = room(ml, n, err))) return st;
                if (x != ml->buf) memcpy(ml->buf, x, n * sizeof *x);
                if ((st = qk_block_hadamard(ml->buf, (size_t)T, (size_t)ml->in, (size_t)ml->tile, 1,
                                            err)))
                    return st;
                xr = ml->buf;
            }
            qk_gptq_hessian_add(ml->h, (size_t)ml->in, xr, (size_t)T, ml->threads);
        }
        ml->stat_s += qs_clock_s() - t0;
        if (ml->last) { /* nothing after this linear is observed: end the pass here */
            ml->stopped = 1;
            return qs_error_set(err, QS_ECANCELLED, "method %s: calibration pass ends here",
                                ml->method);
        }
        return QS_OK; /* observed unquantized: the input as it is */
    }
    if (!ml->tile && !ml->s) return QS_OK;
    if (!be->ops->method_input)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "method %s: the %s backend has no input transform", ml->method,
                            be->ops->name);
    float *y;
    const float *s;
    if (be->impl) {
        if ((st = device_room(ml, be, n, err))) return st;
        y = ml->dev_y;
        s = ml->dev_s;
    } else {
        if ((st = room(ml, n, err))) return st;
        y = ml->buf;
        s = ml->s;
    }
    if ((st = be->ops->method_input(be, y, x, T, ml->in, s, ml->tile, err))) {
        const int i = ml->L->tensor_index;
        return qs_error_wrap(err, "method %s: model.layers.%d.%s", ml->method, i / QW_LINEAR_KINDS,
                             qw_linear_module_name((qw_linear_kind)(i % QW_LINEAR_KINDS)));
    }
    *out = y;
    return QS_OK;
}

qs_status qw_method_linear_observe(qw_method_linear *ml, const qw_method_plan *plan,
                                   qs_error *err) {
    size_t k = (size_t)ml->in;
    if (plan->gptq && !(ml->h = calloc(k * k, sizeof *ml->h)))
        return qs_error_set(err, QS_ENOMEM, "method %s: %zu x %zu Hessian", plan->name, k, k);
    if (plan->smooth && !(ml->amax = calloc(k, sizeof *ml->amax)))
        return qs_error_set(err, QS_ENOMEM, "method %s: activation maxima", plan->name);
    ml->observing = 1;
    ml->L->w = *ml->L->master;
    ml->L->spec.act = NULL;
    ml->L->in_hook = qw_method_linear_hook;
    ml->L->in_hook_ctx = ml;
    ml->L->method = 1;
    return QS_OK;
}

/* Whether f quantizes (a format other than the identity "bf16"). */
static int quantizes(const qk_format *f) {
    return f && f->rule != QK_RULE_IDENTITY;
}

qs_status qw_method_linear_make(qw_method_linear *ml, const qw_method_plan *plan, int threads,
                                qs_error *err) {
    const size_t rows = (size_t)ml->out, k = (size_t)ml->in;
    qs_status st = QS_OK;
    ml->w = malloc(rows * k * sizeof *ml->w);
    if (!ml->w)
        return qs_error_set(err, QS_ENOMEM, "method %s: %zu x %zu weight", plan->name, rows, k);
    st = qw_weight_rows_f32(ml->L->master, 0, (int64_t)rows, ml->w, err);
    if (!st && plan->smooth) {
        if (!(ml->s = malloc(k * sizeof *ml->s)))
            st = qs_error_set(err, QS_ENOMEM, "method %s: scales", plan->name);
        if (!st) st = qk_smooth_scales(ml->amax, ml->w, rows, k, plan->alpha, ml->s, err);
        if (!st) qk_smooth_apply(ml->w, rows, k, ml->s, 0);
    }
    if (!st && ml->tile) st = qk_block_hadamard(ml->w, rows, k, (size_t)ml->tile, threads, err);
    const qk_format *f = ml->spec0.weight;
    if (!st && quantizes(f)) {
        qk_quant_options opt = ml->spec0.weight_opt;
        opt.tensor_id += (uint32_t)ml->L->tensor_index; /* as apply_policy.c */
        if (opt.threads == 0) opt.threads = threads;
        if (plan->gptq) {
            qk_gptq_options g = plan->gptq_opt;
            g.threads = threads;
            if (ml->keep_packed && !ml->tile && !ml->s &&
                (f->rule == QK_RULE_NVFP4 || f->rule == QK_RULE_MX))
                g.packed = &ml->packed;
            st = qk_gptq(f, &opt, ml->w, rows, k, ml->h, &g, err);
        } else {
            st = qk_fake_quant(f, &opt, ml->w, rows, k, NULL, err);
        }
    }
    free(ml->h);
    free(ml->amax);
    ml->h = NULL;
    ml->amax = NULL;
    ml->observing = 0;
    if (st) return st;
    qw_linear *L = ml->L;
    L->w.form = QW_WEIGHT_F32;
    L->w.rows = rows;
    L->w.cols = k;
    L->w.f32 = ml->w;
    L->w.version = qk_version_new();
    L->spec = ml->spec0;
    L->in_hook = qw_method_linear_hook;
    L->in_hook_ctx = ml;
    L->method = 1;
    return QS_OK;
}

void qw_method_linear_restore(qw_method_linear *ml) {
    if (!ml->L) return;
    ml->L->w = ml->w0;
    ml->L->spec = ml->spec0;
    ml->L->in_hook = NULL;
    ml->L->in_hook_ctx = NULL;
    ml->L->method = 0;
}

void qw_method_linear_free(qw_method_linear *ml) {
    if (ml->dev && ml->dev->impl == ml->dev_impl) {
        ml->dev->ops->free(ml->dev, ml->dev_y);
        ml->dev->ops->free(ml->dev, ml->dev_s);
    }
    qk_packed_release(&ml->packed);
    free(ml->s);
    free(ml->w);
    free(ml->h);
    free(ml->amax);
    free(ml->buf);
    memset(ml, 0, sizeof *ml);
}
