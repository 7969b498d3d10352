/* Per-linear SQNR of a scored checkpoint's weights against its reference's (compare_weights.h). */
#include "compare_weights.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_cache.h"

void qw_jobs_sqnr_metric_name(const char *linear, char *buf, size_t cap) {
    int block;
    char module[64];
    if (sscanf(linear, "model.layers.%d.%63s", &block, module) == 2)
        for (int k = 0; k < QW_LINEAR_KINDS; k++)
            if (!strcmp(module, qw_linear_module_name((qw_linear_kind)k))) {
                snprintf(buf, cap, "sqnr_db.%d.%s", block, qw_linear_kind_name((qw_linear_kind)k));
                return;
            }
    snprintf(buf, cap, "sqnr_db.%s", linear);
}

/* Sums w_ref^2 and (w - w_ref)^2 over two stored tensors of one shape, a block of rows at a
 * time (the stored forms are converted piecewise: no FP32 copy of a whole model). */
static qs_status weight_sqnr_sums(const qw_stored_tensor *a, const qw_stored_tensor *b,
                                  double *sig, double *noise, qs_error *err) {
    const int64_t block = 64;
    float *fa = malloc((size_t)(block * a->cols) * sizeof *fa),
          *fb = malloc((size_t)(block * b->cols) * sizeof *fb);
    qs_status st = fa && fb ? QS_OK : qs_error_set(err, QS_ENOMEM, "compare: out of memory");
    *sig = *noise = 0.0;
    for (int64_t r = 0; !st && r < a->rows; r += block) {
        int64_t n = a->rows - r < block ? a->rows - r : block;
        qw_stored_rows_f32(a, r, n, fa);
        qw_stored_rows_f32(b, r, n, fb);
        for (int64_t j = 0; j < n * a->cols; j++) {
            double d = (double)fa[j] - (double)fb[j];
            *sig += (double)fb[j] * fb[j];
            *noise += d * d;
        }
    }
    free(fa);
    free(fb);
    return st;
}

qs_status qw_jobs_compare_weights(qw_job_ctx *ctx, const qs_sensitivity_spec *s,
                                  const qw_model *model, qs_error *err) {
    qw_checkpoint *ck = qw_jobs_cached_checkpoint(ctx, s), *rck = NULL;
    qs_status st = ck ? QS_OK
                                : qs_error_set(err, QS_EINVAL,
                                               "compare: model %s is not a checkpoint",
                                               s->model.path);
    /* the reference's checkpoint alone (its weights are read, not run) */
    if (!st) st = qw_checkpoint_open(s->reference.path, &rck, err);
    char got[65];
    if (!st) st = qw_checkpoint_digest(rck, got, err);
    if (!st && strcmp(got, s->reference.digest))
        st = qs_error_set(err, QS_EINVAL,
                          "reference model %s: digest %s differs from the job's %s (the file "
                          "changed since the grid was submitted)",
                          s->reference.path, got, s->reference.digest);
    int n = qw_model_n_linears(model);
    for (int i = 0; !st && i < n; i++) {
        char name[256], tname[272];
        qw_model_linear_name(model, i, name, sizeof name);
        if (!strcmp(name, "model.embed_tokens")) continue;
        snprintf(tname, sizeof tname, "%s.weight", name);
        qw_stored_tensor a, b;
        int64_t sa[2], sb[2];
        int na, nb;
        qs_error ignored = {0};
        if (qw_checkpoint_tensor_stored(ck, tname, &a, sa, &na, &ignored) ||
            qw_checkpoint_tensor_stored(rck, tname, &b, sb, &nb, &ignored))
            continue;
        if (na != nb || sa[0] != sb[0] || sa[1] != sb[1]) {
            st = qs_error_set(err, QS_EINVAL,
                              "compare: %s is [%lld, %lld] in %s and [%lld, %lld] in its "
                              "reference %s",
                              tname, (long long)sa[0], (long long)sa[1], s->model.path,
                              (long long)sb[0], (long long)sb[1], s->reference.path);
            break;
        }
        double sig, noise;
        if ((st = weight_sqnr_sums(&a, &b, &sig, &noise, err))) break;
        char metric[160];
        qw_jobs_sqnr_metric_name(name, metric, sizeof metric);
        snprintf(tname, sizeof tname, "weight_%s", metric);
        st = qw_job_metric(ctx, tname, noise > 0.0 ? 10.0 * log10(sig / noise) : INFINITY, 0,
                           true, err);
    }
    qw_checkpoint_close(rck);
    return st;
}
