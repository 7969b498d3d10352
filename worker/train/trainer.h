/* The training loop: micro-batches with gradient accumulation, global-norm clipping, AdamW
 * under a learning-rate schedule, periodic validation, and divergence detection, one optimizer
 * step per qw_trainer_step call so a job can heartbeat and checkpoint between steps.
 *
 * Data parallel over R ranks (qw_trainer_create_dp; R = 1 is qw_trainer_create): one model
 * replica per rank, on its own backend, driven in lockstep from this thread. Step s draws its
 * accum*R micro-batches from qw_data in order; micro-batch j = a*R + r (a = 0..accum-1) goes
 * to rank r (the ranks' data shards interleave the one data order) and is SR stream step
 * s*accum*R + j. Each rank adds 1/(accum*R) of its micro-batches' mean-loss gradients, the
 * group all-reduces (sums) the gradients (comm.h), and every rank takes the same AdamW step.
 * So R ranks with accumulation A train on exactly the samples (and SR streams) of one rank
 * with accumulation A*R, the gradient summed in another order. The loss is the mean over all
 * accum*R*B*T positions. On the CPU bit-identical for any thread count (every part is). The
 * only allocation is the token buffers, in qw_trainer_create. */
#ifndef QW_TRAIN_TRAINER_H
#define QW_TRAIN_TRAINER_H

#include <stddef.h>
#include <stdint.h>

#include "comm.h"
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

#define QW_TRAIN_MAX_RANKS QW_GROUP_MAX_RANKS

typedef struct qw_trainer {
    qw_tmodel *model; /* rank 0's replica (validation, checkpoints, export); not owned */
    qw_tmodel *models[QW_TRAIN_MAX_RANKS]; /* [ranks], not owned */
    int ranks;
    qw_group *group;  /* ranks > 1: the gradient all-reduce (not owned) */
    qw_data *data;    /* not owned */
    qw_train_config cfg;
    int nt;
    int step; /* optimizer steps done */
    size_t tokens_seen;
    int diverged;      /* 1 after a step diverged */
    int diverged_step; /* 1-based step that diverged */
    double last_loss;
    uint32_t *in, *tg; /* [accum x ranks x B*T]: a step's batches; validation uses the first */
} qw_trainer;

/* Errors: QS_EINVAL (steps < 1, accum < 1, data ctx differs from the model's T), QS_ENOMEM. */
qs_status qw_trainer_create(qw_trainer *tr, qw_tmodel *m, qw_data *d, const qw_train_config *c,
                            int nt, qs_error *err);

/* Data parallel: models[0..ranks-1] replicas of one config, B and T (each on its backend; group
 * of `ranks` ranks whose buffers are those backends' memory). The replicas' parameters are
 * made equal to rank 0's (qw_trainer_sync_replicas). Errors: as qw_trainer_create, QS_EINVAL
 * (ranks outside 1..QW_TRAIN_MAX_RANKS, shapes differ, no group for ranks > 1). */
qs_status qw_trainer_create_dp(qw_trainer *tr, qw_tmodel *const *models, int ranks, qw_group *group,
                               qw_data *d, const qw_train_config *c, int nt, qs_error *err);

/* Copies rank 0's parameters and AdamW moments to every other replica (after an
 * initialisation or a checkpoint load of rank 0). Errors: QS_ENOMEM, the backends'. */
qs_status qw_trainer_sync_replicas(qw_trainer *tr, qs_error *err);
void qw_trainer_free(qw_trainer *tr);

/* One optimizer step. Errors: QS_ESTATE "diverged at step S: ..." (tr->diverged set; the
 * parameters are not updated by that step), errors of the model. */
qs_status qw_trainer_step(qw_trainer *tr, qw_step_metrics *out, qs_error *err);

/* Mean validation loss over cfg.eval_batches batches (or all). Errors: QS_ESTATE (no
 * validation windows), errors of the model. */
qs_status qw_trainer_validate(qw_trainer *tr, double *loss, qs_error *err);

#endif
