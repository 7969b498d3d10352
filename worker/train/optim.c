/* AdamW, learning-rate schedule, global-norm clipping (optim.h). */
#include "optim.h"

#include <math.h>
#include <string.h>

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

#define NORM_RANGES 64

double qw_grad_global_norm(const float *g, size_t n, int nt) {
    double part[NORM_RANGES];
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int r = 0; r < NORM_RANGES; r++) {
        size_t a = n * (size_t)r / NORM_RANGES, b = n * (size_t)(r + 1) / NORM_RANGES;
        double s = 0.0;
        for (size_t i = a; i < b; i++)
            s += (double)g[i] * g[i];
        part[r] = s;
    }
    double s = 0.0;
    for (int r = 0; r < NORM_RANGES; r++)
        s += part[r];
    return sqrt(s);
}

void qw_adamw_step(qw_tmodel *m, const qw_adamw *opt, float lr, float grad_scale, int t, int nt) {
    float b1 = opt->beta1, b2 = opt->beta2;
    float c1 = 1.0f - powf(b1, (float)t), c2 = 1.0f - powf(b2, (float)t);
    for (int i = 0; i < qw_tmodel_n_tensors(m); i++) {
        qw_tensor_view v;
        qw_tmodel_tensor(m, i, &v);
        size_t n = (size_t)v.rows * v.cols;
        float wd = v.decay ? opt->weight_decay : 0.0f;
#pragma omp parallel for num_threads(nt) schedule(static)
        for (size_t j = 0; j < n; j++) {
            float g = v.grad[j] * grad_scale;
            float mm = b1 * v.m[j] + (1.0f - b1) * g;
            float vv = b2 * v.v[j] + (1.0f - b2) * g * g;
            v.m[j] = mm;
            v.v[j] = vv;
            float p = v.data[j];
            p -= lr * wd * p;
            p -= lr * (mm / c1) / (sqrtf(vv / c2) + opt->eps);
            v.data[j] = p;
        }
    }
}
