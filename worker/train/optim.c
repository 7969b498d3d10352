/* AdamW, learning-rate schedule, global-norm clipping (optim.h). */
#include "optim.h"

#include <math.h>
#include <string.h>

#include "clock.h"

float qw_lr_at(const qw_lr_schedule *s, int step) {
    if (s->warmup > 0 && step < s->warmup) return s->lr * (float)(step + 1) / (float)s->warmup;
    if (s->decay == QW_DECAY_CONSTANT) return s->lr;
    int span = s->total - 1 - s->warmup;
    if (span <= 0) return s->lr;
    double frac = (double)(step - s->warmup) / span;
    if (frac > 1) frac = 1;
    double w = s->decay == QW_DECAY_COSINE ? 0.5 * (1.0 + cos(M_PI * frac)) : 1.0 - frac;
    return (float)(s->min_lr + (s->lr - s->min_lr) * w);
}

qs_status qw_lr_decay_by_name(const char *name, qw_lr_decay *out, qs_error *err) {
    static const char *names[] = {"cosine", "linear", "constant"};
    for (int i = 0; i < 3; i++)
        if (!strcmp(name, names[i])) {
            *out = (qw_lr_decay)i;
            return QS_OK;
        }
    return qs_error_set(err, QS_EINVAL, "lr decay \"%s\": expected cosine, linear or constant",
                        name);
}

double qw_grad_global_norm(const float *g, size_t n, int nt) {
    return sqrt(qw_train_sumsq(g, n, nt));
}

qs_status qw_tmodel_grad_norm(qw_tmodel *m, double *norm, qs_error *err) {
    qw_backend *be = qw_tmodel_backend(m);
    double s = 0.0, t0 = qs_clock_s();
    qs_status st = be->ops->sumsq(be, qw_tmodel_grads(m), qw_tmodel_n_params(m), &s, err);
    qw_tprofile_add_since(qw_tmodel_profile(m), QW_TPHASE_OPTIMIZER, t0);
    *norm = sqrt(s);
    return st;
}

qs_status qw_adamw_step(qw_tmodel *m, const qw_adamw *opt, float lr, float grad_scale, int t,
                        qs_error *err) {
    float b1 = opt->beta1, b2 = opt->beta2;
    float c1 = 1.0f - powf(b1, (float)t), c2 = 1.0f - powf(b2, (float)t);
    qw_backend *be = qw_tmodel_backend(m);
    double t0 = qs_clock_s();
    qw_tmodel_weights_changed(m);
    for (int i = 0; i < qw_tmodel_n_tensors(m); i++) {
        qw_tensor_view v;
        qw_tmodel_tensor(m, i, &v);
        size_t n = (size_t)v.rows * v.cols;
        float wd = v.decay ? opt->weight_decay : 0.0f;
        qs_status st = be->ops->adamw(be, v.data, v.grad, v.m, v.v, n, lr, wd, b1, b2, opt->eps, c1,
                                      c2, grad_scale, err);
        if (st != QS_OK) return qs_error_wrap(err, "AdamW of %s", v.name);
    }
    qw_tprofile_add_since(qw_tmodel_profile(m), QW_TPHASE_OPTIMIZER, t0);
    return QS_OK;
}
