/* The training loop: micro-batches with gradient accumulation, global-norm clipping, AdamW
 * under a learning-rate schedule, periodic validation, and divergence detection, one optimizer
 * step per qw_trainer_step call so a job can heartbeat and checkpoint between steps.
 *
 * Step s (0-based) runs micro-steps s*accum .. s*accum+accum-1 (the SR stream step of each);
 * each micro-batch is B windows from qw_data; the gradient is the mean over all accum*B*T
 * positions. Bit-identical for any thread count (every part is). The only allocation is the
 * token buffers, in qw_trainer_create. */
#ifndef QW_TRAIN_TRAINER_H
#define QW_TRAIN_TRAINER_H

#include <stddef.h>
#include <stdint.h>

#include "data.h"
#include "error.h"
#include "optim.h"
#include "tmodel.h"

typedef struct qw_train_config {
    int steps;            /* optimizer steps */
    int accum;            /* micro-batches per step (>= 1) */
    qw_lr_schedule sched; /* sched.total is set to steps */
    qw_adamw adamw;
    float clip;          /* global-norm clip; 0 = off */
    int eval_every;      /* validation every this many steps and at the end; 0 = only at the end */
    int eval_batches;    /* validation batches of B windows; 0 = every validation window */
    double diverge_loss; /* a train loss above this (or NaN/Inf loss or gradient) diverges */
} qw_train_config;

/* Metrics of one optimizer step. */
typedef struct qw_step_metrics {
    int step;          /* 1-based: steps done */
    double train_loss; /* mean over the step's micro-batches */
    double lr;
    double grad_norm; /* before clipping */
    double val_loss;  /* NaN unless validated at this step */
    double tokens_per_s;
    size_t tokens_seen;
} qw_step_metrics;

typedef struct qw_trainer {
    qw_tmodel *model; /* not owned */
    qw_data *data;    /* not owned */
    qw_train_config cfg;
    int nt;
    int step; /* optimizer steps done */
    size_t tokens_seen;
    int diverged;      /* 1 after a step diverged */
    int diverged_step; /* 1-based step that diverged */
    double last_loss;
    uint32_t *in, *tg; /* [B*T] */
} qw_trainer;

/* Errors: QS_EINVAL (steps < 1, accum < 1, data ctx differs from the model's T), QS_ENOMEM. */
qs_status qw_trainer_create(qw_trainer *tr, qw_tmodel *m, qw_data *d, const qw_train_config *c,
                            int nt, qs_error *err);
void qw_trainer_free(qw_trainer *tr);

/* One optimizer step. Errors: QS_ESTATE "diverged at step S: ..." (tr->diverged set; the
 * parameters are not updated by that step), errors of the model. */
qs_status qw_trainer_step(qw_trainer *tr, qw_step_metrics *out, qs_error *err);

/* Mean validation loss over cfg.eval_batches batches (or all). Errors: QS_ESTATE (no
 * validation windows), errors of the model. */
qs_status qw_trainer_validate(qw_trainer *tr, double *loss, qs_error *err);

#endif
