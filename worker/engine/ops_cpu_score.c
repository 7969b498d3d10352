/* Log-softmax over the vocabulary and the evaluation's per-row scores on the CPU (ops.h
 * qw_score_rows_forward, the table's score_rows): NLL, KL against a baseline's log-probabilities
 * and top-1, as eval.h defines them after llama.cpp's tools/perplexity/perplexity.cpp. The CUDA
 * backend's twin is ops_cuda.h qw_cuda_score_rows. */
#include "ops.h"

#include <math.h>

#include "exp_vec.h"

/* Elements of a row whose exponentials are taken together (exp_vec.h), then summed in order. */
#define EXP_BLOCK 256

/* log(sum_i exp(l_i)) of a row whose maximum is mx, summed in double in vocabulary order (the
 * exponentials are the C library's exp, taken a block at a time). */
static double row_lse(const float *l, int V, float mx) {
    double sum = 0.0, e[EXP_BLOCK];
    for (int i0 = 0; i0 < V; i0 += EXP_BLOCK) {
        int n = V - i0 < EXP_BLOCK ? V - i0 : EXP_BLOCK;
        for (int j = 0; j < n; j++)
            e[j] = (double)l[i0 + j] - mx;
        qw_exp_vec(e, e, (size_t)n);
        for (int j = 0; j < n; j++)
            sum += e[j];
    }
    /* sum >= 1: the maximum contributes exp(0) (V >= 1 is checked by the callers). */
    // cppcheck-suppress invalidFunctionArg
    return (double)mx + log(sum);
}

double qw_logsoftmax_row(const float *l, int V, float *lp) {
    float mx = l[0];
    for (int i = 1; i < V; i++)
        mx = l[i] > mx ? l[i] : mx;
    double lse = row_lse(l, V, mx);
    if (lp)
        for (int i = 0; i < V; i++)
            lp[i] = (float)((double)l[i] - lse);
    return lse;
}

void qw_logsoftmax_forward(float *lp, const float *logits, int R, int V, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int r = 0; r < R; r++)
        (void)qw_logsoftmax_row(logits + (size_t)r * V, V, lp + (size_t)r * V);
}

qs_status qw_score_rows_forward(const float *logits, int R, int V, const uint32_t *targets,
                                const float *ref_lp, double *nll, double *kl, int32_t *argmax,
                                int32_t *ref_argmax, int nt, qs_error *err) {
    if (R < 1 || V < 1) return qs_error_set(err, QS_EINVAL, "score rows: logits [%d x %d]", R, V);
    if (targets)
        for (int r = 0; r < R; r++)
            if (targets[r] >= (uint32_t)V)
                return qs_error_set(err, QS_EINVAL, "score rows: row %d: target %u >= vocab %d", r,
                                    targets[r], V);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int r = 0; r < R; r++) {
        const float *l = logits + (size_t)r * V;
        /* the maximum and the first index that holds it in one pass (qw_logsoftmax_row's
         * maximum, the same comparisons) */
        float mx = l[0];
        int aq = 0;
        for (int i = 1; i < V; i++)
            if (l[i] > mx) mx = l[i], aq = i;
        double lse = row_lse(l, V, mx);
        if (targets && nll) nll[r] = lse - (double)l[targets[r]];
        if (argmax) argmax[r] = aq;
        if (!ref_lp) {
            if (kl) kl[r] = 0.0;
            if (ref_argmax) ref_argmax[r] = -1;
            continue;
        }
        /* Both sides as FP32 log-probs (q_i the value qw_logsoftmax_row would store), the KL
         * summed in double in vocabulary order: identical logits give 0. */
        const float *lp = ref_lp + (size_t)r * V;
        double d = 0.0;
        int ap = 0;
        if (!kl) { /* top-1 alone: the baseline's argmax, no exponential */
            for (int i = 1; i < V; i++)
                if (lp[i] > lp[ap]) ap = i;
            if (ref_argmax) ref_argmax[r] = ap;
            continue;
        }
        double p[EXP_BLOCK];
        for (int i0 = 0; i0 < V; i0 += EXP_BLOCK) {
            int n = V - i0 < EXP_BLOCK ? V - i0 : EXP_BLOCK;
            for (int j = 0; j < n; j++)
                p[j] = (double)lp[i0 + j];
            qw_exp_vec(p, p, (size_t)n);
            for (int j = 0; j < n; j++) {
                int i = i0 + j;
                float q = (float)((double)l[i] - lse);
                d += p[j] * ((double)lp[i] - (double)q);
                if (lp[i] > lp[ap]) ap = i;
            }
        }
        if (kl) kl[r] = d;
        if (ref_argmax) ref_argmax[r] = ap;
    }
    return QS_OK;
}
