/* AdamW with decoupled weight decay, a warmup + cosine/linear learning-rate schedule and
 * gradient clipping by global norm, over the FP32 masters and moments of a qw_tmodel.
 * Formulas: Loshchilov & Hutter, "Decoupled Weight Decay Regularization" (ICLR 2019),
 * Algorithm 2, as torch.optim.AdamW computes it:
 *   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  p -= lr * wd * p (matrices only);
 *   p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps).
 * The update and the norm run on the model's backend (ops.h adamw, sumsq); nothing allocates;
 * on the CPU bit-identical for any thread count. */
#ifndef QW_TRAIN_OPTIM_H
#define QW_TRAIN_OPTIM_H

#include <stddef.h>

#include "error.h"
#include "tmodel.h"

typedef struct qw_adamw {
    float beta1, beta2, eps; /* 0.9, 0.95, 1e-8 are the NVFP4 paper's betas and the usual eps */
    float weight_decay;      /* decoupled; applied to matrices, not to norm weights */
} qw_adamw;

typedef enum qw_lr_decay {
    QW_DECAY_COSINE = 0,
    QW_DECAY_LINEAR = 1,
    QW_DECAY_CONSTANT = 2,
} qw_lr_decay;

/* lr rises linearly over warmup steps (lr * (s+1)/warmup for s < warmup), then decays from lr
 * to min_lr at step total-1 by a half cosine or a straight line (constant: stays at lr). */
typedef struct qw_lr_schedule {
    float lr, min_lr;
    int warmup, total;
    qw_lr_decay decay;
} qw_lr_schedule;

/* Learning rate of optimizer step s (0-based). */
float qw_lr_at(const qw_lr_schedule *s, int step);

/* "cosine", "linear", "constant" -> decay. Errors: QS_EINVAL listing the choices. */
qs_status qw_lr_decay_by_name(const char *name, qw_lr_decay *out, qs_error *err);

/* sqrt(sum g^2) over n host elements (qw_train_sumsq: 64 fixed ranges in double, then in range
 * order, so the bits do not depend on nt). NaN/Inf propagate. */
double qw_grad_global_norm(const float *g, size_t n, int nt);

/* The same over the gradients of m, on its backend. Errors: the backend's. */
qs_status qw_tmodel_grad_norm(qw_tmodel *m, double *norm, qs_error *err);

/* One AdamW update of every parameter of m with learning rate lr, gradients multiplied by
 * grad_scale first (clipping: min(1, clip / norm)), t the 1-based step (bias correction).
 * Errors: the backend's, naming the tensor. */
qs_status qw_adamw_step(qw_tmodel *m, const qw_adamw *opt, float lr, float grad_scale, int t,
                        qs_error *err);

#endif
