/* Fake-quant entry points: quantize then dequantize in FP32, by the fastest path that gives
 * the reference's bits. Work is split over row groups (1 row, or 16 for 2D blocks) with
 * OpenMP; each output element depends only on its block and the tensor amax, so the bits are
 * the same for any thread count. */
#include <stdlib.h>

#include "quant_plan.h"

qs_status qk_fake_quant(const qk_format *fmt, const qk_quant_options *opt, float *x, size_t rows,
                        size_t k, qk_quant_stats *stats, qs_error *err) {
    return qk_fake_quant_into(fmt, opt, x, x, rows, k, stats, err);
}

/* Out of place, the fast row paths copy a row of x into y and work on it there while it is
 * in the cache; the reference reads x and writes y. */
qs_status qk_fake_quant_into(const qk_format *fmt, const qk_quant_options *opt, const float *x,
                             float *y, size_t rows, size_t k, qk_quant_stats *stats,
                             qs_error *err) {
    static const qk_quant_options defaults;
    if (!opt) opt = &defaults;
    qk_plan p;
    qs_status st = qk_plan_shape(&p, fmt, opt, rows, k, err);
    if (st) return st;
    if (!x || !y) return qs_error_set(err, QS_EINVAL, "kernels: %s: x or y is NULL", fmt->name);
    if (fmt->rule == QK_RULE_IDENTITY) {
        if (y != x) memcpy(y, x, rows * k * sizeof *x);
        if (stats) qk_stats_identity(x, rows * k, stats);
        return QS_OK;
    }
    qk_plan_tensor_scales(&p, x, opt);
    size_t ngroups = (rows + p.brows - 1) / p.brows;
    stats_acc *accs = NULL;
    if (stats) {
        accs = calloc(ngroups, sizeof *accs);
        if (!accs)
            return qs_error_set(err, QS_ENOMEM, "kernels: %s: statistics for %zu row groups",
                                fmt->name, ngroups);
    }
    int fast = !opt->reference_only && qk_fast_path_applies(&p);
    int int_fast = !opt->reference_only && qk_int_fast_path_applies(&p);
    int fast_2d = !opt->reference_only && !accs && p.rounding == QK_ROUND_RNE &&
                  fmt->rule == QK_RULE_NVFP4 && p.brows == 16 && p.block == 16 && !p.exp2;
    int batched = fast && !accs &&
                  ((fmt->rule == QK_RULE_NVFP4 && p.block == 16) ||
                   (fmt->rule == QK_RULE_MX && p.block == 32));
#pragma omp parallel for schedule(static) num_threads(p.threads)
    for (size_t g = 0; g < ngroups; g++) {
        size_t r0 = g * p.brows;
        size_t h = rows - r0 < p.brows ? rows - r0 : p.brows;
        float *out = y + r0 * k;
        if ((batched || fast || int_fast || fast_2d) && y != x)
            memcpy(out, x + r0 * k, h * k * sizeof *out);
        if (batched) {
            size_t done = p.block == 16 ? qk_quant_row_batched16(&p, r0, out)
                                        : qk_quant_row_batched32(&p, r0, out);
            if (done < k) qk_quant_row_fast(&p, r0, out, done, NULL);
        } else if (fast)
            qk_quant_row_fast(&p, r0, out, 0, accs ? &accs[g] : NULL);
        else if (int_fast)
            qk_quant_row_int_fast(&p, out, accs ? &accs[g] : NULL);
        else if (fast_2d)
            qk_quant_group_nvfp4_2d_fast(&p, out, h);
        else
            qk_quant_group_ref(&p, x, r0, h, NULL, y, accs ? &accs[g] : NULL);
    }
    if (stats) qk_stats_finish(&p, accs, ngroups, rows * k, stats);
    free(accs);
    return QS_OK;
}
