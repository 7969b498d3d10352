/* A method over a model's quantized block linears, block by block (method_apply.h). */
#include "method_apply.h"

#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "format.h"
#include "group_scale.h"
#include "method_linear.h"

struct qw_method_state {
    int n;                  /* block linears: n_layers * 7 */
    qw_method_linear *lins; /* [n]; .L NULL where the policy quantizes nothing */
};

void qw_method_state_free(qw_method_state *s) {
    if (!s) return;
    for (int i = 0; i < s->n; i++)
        qw_method_linear_free(&s->lins[i]);
    free(s->lins);
    free(s);
}

int qw_method_made(const qw_method_state *s, int i) {
    return s && i >= 0 && i < s->n && s->lins[i].w != NULL;
}

const qk_packed *qw_method_packed(const qw_method_state *s, int i) {
    if (!qw_method_made(s, i) || !s->lins[i].packed.codes) return NULL;
    return &s->lins[i].packed;
}

/* The rotation tile of a linear: the plan's size, the weight format's group (mr-gptq), or K. */
static qs_status tile_of(const qw_method_plan *plan, const qw_linear *L, int *tile, qs_error *err) {
    *tile = 0;
    if (plan->rotate > 0) *tile = plan->rotate;
    if (plan->rotate == -2) *tile = L->in;
    if (plan->rotate == -1) {
        const qk_format *f = L->spec.weight ? L->spec.weight : L->spec.act;
        size_t g = f ? qk_group_cols(f, &L->spec.weight_opt, (size_t)L->in) : (size_t)L->in;
        if (!f || f->block == 0)
            return qs_error_set(err, QS_EUNSUPPORTED,
                                "method %s: format %s has no block to match the rotation to",
                                plan->name, f ? qk_format_name(f) : "(none)");
        *tile = (int)g;
    }
    if (*tile && (*tile & (*tile - 1)))
        return qs_error_set(err, QS_EINVAL,
                            "method %s: a rotation of %d (K of a global rotation) is not a power "
                            "of two: no Hadamard matrix of that size here",
                            plan->name, *tile);
    if (*tile && L->in % *tile)
        return qs_error_set(err, QS_EINVAL,
                            "method %s: K=%d is not a multiple of the %d-point tile", plan->name,
                            L->in, *tile);
    return QS_OK;
}

/* The plan of block linear i: the plan itself, or its per-linear entry (NULL: round-to-nearest
 * stays). */
static const qw_method_plan *linear_plan(const qw_method_plan *plan, int i) {
    if (!plan->linear) return plan;
    return i < plan->n_linear ? plan->linear[i] : NULL;
}

/* The calibration chunks' residual streams, carried block to block as GPTQ's reference code
 * carries its inputs: resid [chunks][ctx x D] holds each chunk's input to block `at`, made by the
 * blocks before it as they stand (already their method's weights). */
typedef struct calib_carry {
    float *resid;
    int at;
} calib_carry;

/* Every calibration chunk through block b, the block's observing linears collecting their
 * statistics: each chunk's residual is first carried from block c->at to b (blocks at..b-1, or
 * from the embeddings with the prefix cache serving an unquantized lead), then block b runs on it
 * up to `last`, the block's last observed linear (forward order q, k, v, o, gate, up, down), whose
 * hook ends the pass: the rest would compute what nobody reads. Block by block, a chunk costs
 * about two forwards, where a pass from the embeddings per block would cost n_layers / 2. */
static qs_status calibrate(qw_model *m, const qw_method_plan *plan, int b, qw_method_linear *last,
                           calib_carry *c, qw_method_info *info, qs_error *err) {
    const size_t D = (size_t)qw_model_config(m)->dim, T = (size_t)plan->ctx;
    for (size_t k = 0; k < plan->calib_chunks; k++) {
        const uint32_t *tokens = plan->calib + k * T;
        float *r = c->resid + k * T * D;
        qs_status st = QS_OK;
        if (c->at < b) st = qw_model_forward_blocks(m, tokens, plan->ctx, c->at, b, r, r, err);
        if (!st) st = qw_model_forward_blocks(m, tokens, plan->ctx, b, b + 1, r, NULL, err);
        if (st == QS_ECANCELLED && last->stopped) st = QS_OK;
        last->stopped = 0;
        if (st) return qs_error_wrap(err, "method %s: calibration chunk %zu", plan->name, k);
        info->calib_tokens += T;
    }
    c->at = b;
    return QS_OK;
}

qs_status qw_method_apply(qw_model *m, const qw_method_plan *plan, qw_method_state **out,
                          qw_method_info *info, qs_error *err) {
    double t0 = qs_clock_s();
    *out = NULL;
    memset(info, 0, sizeof *info);
    const int nl = qw_model_config(m)->n_layers, n = nl * QW_LINEAR_KINDS;
    const int threads = qw_model_threads(m);
    int calibrated = 0;
    for (int i = 0; i < n; i++) {
        const qw_method_plan *lp = linear_plan(plan, i);
        calibrated |= lp && qw_model_linear(m, i)->quantized && (lp->gptq || lp->smooth);
    }
    if (qw_model_tensor_parallel(m) > 1)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "method %s: tensor parallelism (the input hook holds the unsharded "
                            "linear)",
                            plan->name);
    if (calibrated && (!plan->calib || !plan->calib_chunks || plan->ctx < 1))
        return qs_error_set(err, QS_EINVAL, "method %s: no calibration chunks", plan->name);
    qw_method_state *s = calloc(1, sizeof *s);
    if (!s || !(s->lins = calloc((size_t)n, sizeof *s->lins))) {
        free(s);
        return qs_error_set(err, QS_ENOMEM, "method %s: %d linears", plan->name, n);
    }
    s->n = n;
    calib_carry carry = {NULL, 0};
    size_t carry_bytes = calibrated ? plan->calib_chunks * (size_t)plan->ctx *
                                          (size_t)qw_model_config(m)->dim * sizeof(float)
                                    : 0;
    if (carry_bytes && !(carry.resid = malloc(carry_bytes))) {
        qw_method_state_free(s);
        return qs_error_set(err, QS_ENOMEM,
                            "method %s: %zu bytes for the calibration chunks' residuals",
                            plan->name, carry_bytes);
    }
    qs_status st = QS_OK;
    for (int i = 0; i < n && !st; i++) {
        qw_linear *L = qw_model_linear(m, i);
        const qw_method_plan *lp = linear_plan(plan, i);
        if (!L->quantized || !lp) continue;
        qw_method_linear *ml = &s->lins[i];
        ml->L = L;
        ml->in = L->in;
        ml->out = L->out;
        ml->method = lp->name;
        ml->threads = threads;
        ml->keep_packed = plan->packed;
        ml->w0 = L->w;
        ml->spec0 = L->spec;
        st = tile_of(lp, L, &ml->tile, err);
        if (st) {
            ml->L = NULL; /* nothing changed on it */
            qs_error_wrap(err, "model.layers.%d linear %s", i / QW_LINEAR_KINDS,
                          qw_linear_kind_name((qw_linear_kind)(i % QW_LINEAR_KINDS)));
        }
    }
    for (int b = 0; b < nl && !st; b++) {
        qw_method_linear *blk = &s->lins[b * QW_LINEAR_KINDS];
        int any = 0;
        for (int k = 0; k < QW_LINEAR_KINDS; k++)
            any |= blk[k].L != NULL;
        if (!any) continue;
        /* the block's calibrated linears observe one pass (the others need no statistics) */
        int last = -1;
        for (int k = 0; k < QW_LINEAR_KINDS && !st; k++) {
            const qw_method_plan *lp = linear_plan(plan, b * QW_LINEAR_KINDS + k);
            if (blk[k].L && (lp->gptq || lp->smooth)) {
                st = qw_method_linear_observe(&blk[k], lp, err);
                last = k;
            }
        }
        if (last >= 0) {
            blk[last].last = 1;
            double c0 = qs_clock_s();
            size_t hits0, skipped0, hits1, skipped1;
            qw_model_prefix_cache_stats(m, &hits0, &skipped0);
            if (!st) st = calibrate(m, plan, b, &blk[last], &carry, info, err);
            qw_model_prefix_cache_stats(m, &hits1, &skipped1);
            info->calib_blocks_skipped += skipped1 - skipped0;
            blk[last].last = 0;
            info->calib_s += qs_clock_s() - c0;
        }
        for (int k = 0; k < QW_LINEAR_KINDS && !st; k++) {
            if (!blk[k].L) continue;
            st = qw_method_linear_make(&blk[k], linear_plan(plan, b * QW_LINEAR_KINDS + k), threads,
                                       err);
            if (st)
                qs_error_wrap(err, "model.layers.%d.%s", b,
                              qw_linear_module_name((qw_linear_kind)k));
            else
                info->linears++;
        }
    }
    free(carry.resid);
    if (st) {
        for (int i = 0; i < n; i++)
            qw_method_linear_restore(&s->lins[i]);
        qw_method_state_free(s);
        return st;
    }
    info->method_s = qs_clock_s() - t0;
    *out = s;
    return QS_OK;
}
