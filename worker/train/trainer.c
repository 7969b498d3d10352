/* The training loop (trainer.h). */
#include "trainer.h"

#include <math.h>
#include <stdlib.h>
#include <time.h>

qs_status qw_trainer_create(qw_trainer *tr, qw_tmodel *m, qw_data *d, const qw_train_config *c,
                            int nt, qs_error *err) {
    return qw_trainer_create_dp(tr, &m, 1, NULL, d, c, nt, err);
}

qs_status qw_trainer_sync_replicas(qw_trainer *tr, qs_error *err) {
    if (tr->ranks < 2) return QS_OK;
    size_t n = qw_tmodel_n_params(tr->models[0]);
    float *h = malloc(n * sizeof *h);
    if (!h) return qs_error_set(err, QS_ENOMEM, "data parallel: %zu parameters", n);
    static const qw_tmodel_array arrays[3] = {QW_TMODEL_PARAMS, QW_TMODEL_MOMENT_M,
                                              QW_TMODEL_MOMENT_V};
    qs_status st = QS_OK;
    for (int a = 0; a < 3 && st == QS_OK; a++) {
        st = qw_tmodel_fetch(tr->models[0], arrays[a], h, err);
        for (int r = 1; r < tr->ranks && st == QS_OK; r++)
            st = qw_tmodel_put(tr->models[r], arrays[a], h, err);
    }
    free(h);
    return st;
}

qs_status qw_trainer_create_dp(qw_trainer *tr, qw_tmodel *const *models, int ranks, qw_group *group,
                               qw_data *d, const qw_train_config *c, int nt, qs_error *err) {
    tr->in = tr->tg = NULL;
    if (ranks < 1 || ranks > QW_TRAIN_MAX_RANKS)
        return qs_error_set(err, QS_EINVAL, "train: data_parallel %d outside 1..%d", ranks,
                            QW_TRAIN_MAX_RANKS);
    if (ranks > 1 && (!group || group->n != ranks))
        return qs_error_set(err, QS_EINVAL, "train: data_parallel %d needs a group of %d ranks",
                            ranks, ranks);
    qw_tmodel *m = models[0];
    for (int r = 1; r < ranks; r++)
        if (qw_tmodel_n_params(models[r]) != qw_tmodel_n_params(m) ||
            qw_tmodel_rows(models[r]) != qw_tmodel_rows(m) ||
            qw_tmodel_ctx(models[r]) != qw_tmodel_ctx(m))
            return qs_error_set(err, QS_EINVAL, "train: rank %d's replica differs from rank 0's",
                                r);
    for (int r = 0; r < ranks; r++)
        tr->models[r] = models[r];
    tr->ranks = ranks;
    tr->group = group;
    if (c->steps < 1) return qs_error_set(err, QS_EINVAL, "train: steps %d < 1", c->steps);
    if (c->accum < 1) return qs_error_set(err, QS_EINVAL, "train: accum %d < 1", c->accum);
    tr->model = m;
    tr->data = d;
    tr->cfg = *c;
    tr->cfg.sched.total = c->steps;
    tr->nt = nt > 0 ? nt : 1;
    tr->step = 0;
    tr->tokens_seen = 0;
    tr->diverged = 0;
    tr->diverged_step = 0;
    tr->last_loss = NAN;
    /* one batch per (micro-step, rank) of a step, read before the ranks start */
    size_t N = qw_tmodel_rows(m) * (size_t)c->accum * (size_t)ranks;
    if (d->T != qw_tmodel_ctx(m))
        return qs_error_set(err, QS_EINVAL, "train: data ctx %d, model ctx %d", d->T,
                            qw_tmodel_ctx(m));
    tr->in = malloc(N * sizeof *tr->in);
    tr->tg = malloc(N * sizeof *tr->tg);
    if (!tr->in || !tr->tg) {
        qw_trainer_free(tr);
        return qs_error_set(err, QS_ENOMEM, "train: token buffers");
    }
    qs_status st = qw_trainer_sync_replicas(tr, err);
    if (st != QS_OK) qw_trainer_free(tr);
    return st;
}

void qw_trainer_free(qw_trainer *tr) {
    free(tr->in);
    free(tr->tg);
    tr->in = tr->tg = NULL;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One step's work shared by the rank threads: batch (a, r) of micro-step a of rank r at
 * in/tg + (a*R + r)*N, its loss at loss[a*R + r]. */
typedef struct step_run {
    qw_trainer *tr;
    size_t N;
    uint32_t micro0;
    float scale, lr, gscale;
    double *loss;
} step_run;

/* Rank r's micro-steps (forward, backward into its gradients), then the gradient all-reduce
 * that every rank's thread meets at. */
static qs_status rank_grads(void *ctx, int r, qs_error *err) {
    const step_run *sr = ctx;
    qw_trainer *tr = sr->tr;
    qw_tmodel *m = tr->models[r];
    int R = tr->ranks;
    qs_status st = qw_tmodel_zero_grad(m, err);
    for (int a = 0; a < tr->cfg.accum && st == QS_OK; a++) {
        size_t k = (size_t)a * (size_t)R + (size_t)r;
        st = qw_tmodel_forward(m, tr->in + k * sr->N, tr->tg + k * sr->N, sr->micro0 + (uint32_t)k,
                               &sr->loss[k], err);
        if (st == QS_OK) st = qw_tmodel_backward(m, sr->scale, err);
    }
    if (st != QS_OK || R < 2) return st;
    st = qw_group_allreduce_rank(tr->group, r, qw_tmodel_grads(m), qw_tmodel_n_params(m),
                                 QW_GROUP_SUM, err);
    return st == QS_OK ? QS_OK : qs_error_wrap(err, "gradient all-reduce");
}

/* Rank r's optimizer step on the all-reduced gradients. */
static qs_status rank_update(void *ctx, int r, qs_error *err) {
    const step_run *sr = ctx;
    qw_trainer *tr = sr->tr;
    return qw_adamw_step(tr->models[r], &tr->cfg.adamw, sr->lr, sr->gscale, tr->step + 1, err);
}

qs_status qw_trainer_step(qw_trainer *tr, qw_step_metrics *out, qs_error *err) {
    if (tr->diverged) return qs_error_set(err, QS_ESTATE, "diverged at step %d", tr->diverged_step);
    qw_tmodel *m = tr->model;
    const qw_train_config *c = &tr->cfg;
    int B = qw_tmodel_batch(m), R = tr->ranks;
    size_t N = qw_tmodel_rows(m), micro_n = (size_t)c->accum * (size_t)R;
    double t0 = now_s();
    /* The batches in the order one thread read them (micro-step a, then rank r), so the data
     * stream does not depend on the ranks' timing. */
    for (size_t k = 0; k < micro_n; k++)
        qw_data_next(tr->data, B, tr->in + k * N, tr->tg + k * N);
    double losses[micro_n]; /* micro-batch k's loss, written by the rank that ran it */
    for (size_t k = 0; k < micro_n; k++)
        losses[k] = 0.0;
    step_run sr = {.tr = tr,
                   .N = N,
                   .micro0 = (uint32_t)tr->step * (uint32_t)micro_n,
                   .scale = 1.0f / (float)micro_n,
                   .loss = losses};
    /* One host thread per rank (rank 0 on this one), meeting at the gradient all-reduce. */
    qs_status st = qw_ranks_run(tr->group, R, rank_grads, &sr, err);
    if (st != QS_OK) return qs_error_wrap(err, "step %d", tr->step + 1);
    double loss_sum = 0.0;
    for (size_t k = 0; k < micro_n; k++)
        loss_sum += losses[k];
    double loss = loss_sum / (double)micro_n;
    double norm = 0.0;
    st = qw_tmodel_grad_norm(m, &norm, err);
    if (st != QS_OK) return qs_error_wrap(err, "step %d", tr->step + 1);
    tr->last_loss = loss;
    if (!isfinite(loss) || !isfinite(norm) || loss > c->diverge_loss) {
        tr->diverged = 1;
        tr->diverged_step = tr->step + 1;
        return qs_error_set(
            err, QS_ESTATE,
            "diverged at step %d: train loss %g (diverge_loss %g), gradient norm %g",
            tr->diverged_step, loss, c->diverge_loss, norm);
    }
    sr.gscale = c->clip > 0 && norm > c->clip ? (float)(c->clip / norm) : 1.0f;
    sr.lr = qw_lr_at(&c->sched, tr->step);
    st = qw_ranks_run(tr->group, R, rank_update, &sr, err);
    if (st != QS_OK) return qs_error_wrap(err, "step %d", tr->step + 1);
    tr->step++;
    tr->tokens_seen += N * micro_n;
    if (out) {
        out->step = tr->step;
        out->train_loss = loss;
        out->lr = sr.lr;
        out->grad_norm = norm;
        out->val_loss = NAN;
        double dt = now_s() - t0;
        out->tokens_per_s = dt > 0 ? (double)(N * micro_n) / dt : 0.0;
        out->tokens_seen = tr->tokens_seen;
    }
    return QS_OK;
}

qs_status qw_trainer_validate(qw_trainer *tr, double *loss, qs_error *err) {
    qw_tmodel *m = tr->model;
    int B = qw_tmodel_batch(m);
    size_t nb = tr->data->n_val_windows / (size_t)B;
    if (nb == 0) nb = tr->data->n_val_windows ? 1 : 0;
    if (tr->cfg.eval_batches > 0 && (size_t)tr->cfg.eval_batches < nb)
        nb = (size_t)tr->cfg.eval_batches;
    if (nb == 0) return qs_error_set(err, QS_ESTATE, "validation: no validation windows");
    double sum = 0.0;
    for (size_t i = 0; i < nb; i++) {
        qs_status st = qw_data_val(tr->data, i, B, tr->in, tr->tg, err);
        double l = 0.0;
        if (st == QS_OK) st = qw_tmodel_forward(m, tr->in, tr->tg, 0xFFFFFFF0u, &l, err);
        if (st != QS_OK) return qs_error_wrap(err, "validation batch %zu", i);
        sum += l;
    }
    *loss = sum / (double)nb;
    return QS_OK;
}
