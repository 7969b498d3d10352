/* MR-GPTQ's scale search over shrunken amax values (scale_search.h). */
#include "scale_search.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double qk_scale_search_error(const qk_format *fmt, const qk_quant_options *opt,
                             const qk_group_scale *g, float s_dec, const float *x, size_t cols) {
    double e = 0.0;
    for (size_t j = 0; j < cols; j++) {
        double d = (double)x[j] - (double)qk_group_scale_apply(fmt, opt, g, s_dec, x[j]);
        e += pow(fabs(d), QK_SCALE_SEARCH_NORM);
    }
    return e;
}

static int same_scale(const qk_group_scale *a, const qk_group_scale *b) {
    return a->enc == b->enc && a->dec == b->dec && a->divide == b->divide;
}

qs_status qk_scale_search(const qk_format *fmt, const qk_quant_options *opt, const float *x,
                          size_t rows, size_t cols, size_t ld, float tensor_amax,
                          qk_group_scale *out, float *s_dec, qs_error *err) {
    /* candidate 0: the amax rule, on the group as it is */
    qs_status st = qk_group_scales(fmt, opt, x, rows, cols, ld, tensor_amax, out, s_dec, err);
    if (st) return st;
    const size_t unit = fmt->block_rows > 1 ? (size_t)fmt->block_rows : 1; /* rows of one scale */
    const size_t units = (rows + unit - 1) / unit;
    /* one allocation: a candidate's scales [rows], each row's amax and its shrunk copy [rows],
     * the best error and the last candidate's error per unit */
    char *mem = malloc(rows * sizeof(qk_group_scale) + 2 * rows * sizeof(float) +
                       2 * units * sizeof(double));
    if (!mem) return qs_error_set(err, QS_ENOMEM, "methods: scale search of %zu x %zu", rows, cols);
    qk_group_scale *cand = (qk_group_scale *)mem;
    float *am = (float *)(cand + rows), *xs = am + rows;
    double *best = (double *)(xs + rows), *last = best + units;
    for (size_t r = 0; r < rows; r++) {
        am[r] = 0.0f;
        for (size_t j = 0; j < cols; j++)
            am[r] = fmaxf(am[r], fabsf(x[r * ld + j]));
    }
    qk_group_scale *prev = malloc(rows * sizeof *prev);
    if (!prev) {
        free(mem);
        return qs_error_set(err, QS_ENOMEM, "methods: scale search of %zu rows", rows);
    }
    memcpy(prev, out, rows * sizeof *prev);
    for (size_t u = 0; u < units; u++) {
        double e = 0.0;
        for (size_t r = u * unit; r < rows && r < (u + 1) * unit; r++)
            e += qk_scale_search_error(fmt, opt, &out[r], *s_dec, x + r * ld, cols);
        best[u] = last[u] = e;
    }
    for (int i = 1; i < QK_SCALE_SEARCH_STEPS && !st; i++) {
        const float f = (float)(1.0 - i * QK_SCALE_SEARCH_SHRINK / QK_SCALE_SEARCH_STEPS);
        /* a rule reads only the amax: each row's amax * f as a group of one column gives the
         * scale the group would get with every value times f (rounding is monotone) */
        for (size_t r = 0; r < rows; r++)
            xs[r] = am[r] * f;
        float sd = *s_dec;
        st = qk_group_scales(fmt, opt, xs, rows, 1, 1, tensor_amax, cand, &sd, err);
        for (size_t u = 0; u < units && !st; u++) {
            const size_t r0 = u * unit, r1 = r0 + unit < rows ? r0 + unit : rows;
            int changed = 0; /* the same scales as the last candidate give the same error */
            for (size_t r = r0; r < r1; r++)
                changed |= !same_scale(&cand[r], &prev[r]);
            if (changed) {
                double e = 0.0;
                for (size_t r = r0; r < r1; r++)
                    e += qk_scale_search_error(fmt, opt, &cand[r], *s_dec, x + r * ld, cols);
                last[u] = e;
                memcpy(&prev[r0], &cand[r0], (r1 - r0) * sizeof *prev);
            }
            if (last[u] < best[u]) {
                best[u] = last[u];
                memcpy(&out[r0], &cand[r0], (r1 - r0) * sizeof *out);
            }
        }
    }
    free(prev);
    free(mem);
    return st;
}
