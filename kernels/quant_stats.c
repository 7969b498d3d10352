/* Error statistics of one fake-quant call, summed per row group and then in group order,
 * so the same for any thread count. */
#include "quant_plan.h"

void qk_stats_finish(const qk_plan *p, const stats_acc *accs, size_t ngroups, size_t n,
                     qk_quant_stats *st) {
    stats_acc t = {0};
    for (size_t g = 0; g < ngroups; g++) { /* fixed order: deterministic for any thread count */
        t.sq_err += accs[g].sq_err;
        t.sq_sig += accs[g].sq_sig;
        t.clipped += accs[g].clipped;
        t.blocks += accs[g].blocks;
        t.underflow += accs[g].underflow;
        t.nonfinite += accs[g].nonfinite;
    }
    memset(st, 0, sizeof *st);
    st->n_elements = n;
    st->mse = t.sq_err / (double)n;
    st->signal_power = t.sq_sig / (double)n;
    st->sqnr_db = st->mse == 0.0 ? INFINITY : 10.0 * log10(st->signal_power / st->mse);
    st->n_clipped = t.clipped;
    st->n_blocks = t.blocks;
    st->n_underflow_blocks = t.underflow;
    st->n_nonfinite = t.nonfinite;
    st->tensor_scale = 1.0f;
    if (p && p->fmt->tensor_scale) {
        st->n_tiny_tensors = (size_t)p->tiny;
        st->tensor_amax = p->amax_t;
        st->tensor_scale = p->s_dec;
        st->tensor_scale_exp2 = -p->exp2;
        st->tensor_amax_given = p->amax_given;
    }
}

void qk_stats_identity(const float *x, size_t n, qk_quant_stats *st) {
    stats_acc zero = {0};
    double sg = 0.0;
    for (size_t i = 0; i < n; i++) {
        sg += (double)x[i] * (double)x[i];
        zero.nonfinite += !(fabsf(x[i]) <= FLT_MAX);
    }
    zero.sq_sig = sg;
    qk_stats_finish(NULL, &zero, 1, n, st);
}
