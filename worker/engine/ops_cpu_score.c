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

/* Rows scored side by side by one thread (qw_score_rows_forward). */
#define SCORE_ROWS 4

/* qw_score_rows_forward's rows r0 .. r0+nr-1 (nr <= SCORE_ROWS), pointers at row r0. Every
 * row's sums are chains of double adds in vocabulary order, each bound by the add's latency;
 * the rows' chains advance in the same loops so that the core overlaps them: each row's
 * operations, in its order, give its bits. */
static void score_group(const float *logits, int nr, int V, const uint32_t *targets,
                        const float *ref_lp, double *nll, double *kl, int32_t *argmax,
                        int32_t *ref_argmax) {
    const float *l[SCORE_ROWS], *lp[SCORE_ROWS];
    float mx[SCORE_ROWS], best[SCORE_ROWS];
    int aq[SCORE_ROWS], ap[SCORE_ROWS];
    double sum[SCORE_ROWS], lse[SCORE_ROWS], d[SCORE_ROWS];
    double e[SCORE_ROWS][EXP_BLOCK];
    for (int q = 0; q < nr; q++) {
        l[q] = logits + (size_t)q * V;
        lp[q] = ref_lp ? ref_lp + (size_t)q * V : NULL;
        mx[q] = l[q][0], aq[q] = 0;
    }
    /* the maximum and the first index that holds it in one pass (qw_logsoftmax_row's
     * maximum, the same comparisons) */
    for (int i = 1; i < V; i++)
        for (int q = 0; q < nr; q++)
            if (l[q][i] > mx[q]) mx[q] = l[q][i], aq[q] = i;
    /* row_lse of each row: the same blocks of exponentials, summed in order */
    for (int q = 0; q < nr; q++)
        sum[q] = 0.0;
    for (int i0 = 0; i0 < V; i0 += EXP_BLOCK) {
        int n = V - i0 < EXP_BLOCK ? V - i0 : EXP_BLOCK;
        for (int q = 0; q < nr; q++) {
            for (int j = 0; j < n; j++)
                e[q][j] = (double)l[q][i0 + j] - mx[q];
            qw_exp_vec(e[q], e[q], (size_t)n);
        }
        for (int j = 0; j < n; j++)
            for (int q = 0; q < nr; q++)
                sum[q] += e[q][j];
    }
    for (int q = 0; q < nr; q++) {
        /* sum >= 1: the maximum contributes exp(0) (V >= 1 is checked by the callers). */
        // cppcheck-suppress invalidFunctionArg
        lse[q] = (double)mx[q] + log(sum[q]);
        if (targets && nll) nll[q] = lse[q] - (double)l[q][targets[q]];
        if (argmax) argmax[q] = aq[q];
    }
    if (!ref_lp) {
        for (int q = 0; q < nr; q++) {
            if (kl) kl[q] = 0.0;
            if (ref_argmax) ref_argmax[q] = -1;
        }
        return;
    }
    /* Both sides as FP32 log-probs (q_i the value qw_logsoftmax_row would store), the KL
     * summed in double in vocabulary order: identical logits give 0. The baseline's argmax
     * keeps lp[ap] in a register rather than loading it again. */
    for (int q = 0; q < nr; q++)
        d[q] = 0.0, ap[q] = 0, best[q] = lp[q][0];
    if (!kl) { /* top-1 alone: the baseline's argmax, no exponential */
        for (int i = 1; i < V; i++)
            for (int q = 0; q < nr; q++)
                if (lp[q][i] > best[q]) best[q] = lp[q][i], ap[q] = i;
    } else {
        for (int i0 = 0; i0 < V; i0 += EXP_BLOCK) {
            int n = V - i0 < EXP_BLOCK ? V - i0 : EXP_BLOCK;
            for (int q = 0; q < nr; q++) {
                for (int j = 0; j < n; j++)
                    e[q][j] = (double)lp[q][i0 + j];
                qw_exp_vec(e[q], e[q], (size_t)n);
            }
            for (int j = 0; j < n; j++)
                for (int q = 0; q < nr; q++) {
                    int i = i0 + j;
                    float lq = (float)((double)l[q][i] - lse[q]);
                    d[q] += e[q][j] * ((double)lp[q][i] - (double)lq);
                    if (lp[q][i] > best[q]) best[q] = lp[q][i], ap[q] = i;
                }
        }
        for (int q = 0; q < nr; q++)
            kl[q] = d[q];
    }
    if (ref_argmax)
        for (int q = 0; q < nr; q++)
            ref_argmax[q] = ap[q];
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
    int groups = (R + SCORE_ROWS - 1) / SCORE_ROWS;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int gi = 0; gi < groups; gi++) {
        int r0 = gi * SCORE_ROWS, nr = R - r0 < SCORE_ROWS ? R - r0 : SCORE_ROWS;
        score_group(logits + (size_t)r0 * V, nr, V, targets ? targets + r0 : NULL,
                    ref_lp ? ref_lp + (size_t)r0 * V : NULL, nll ? nll + r0 : NULL,
                    kl ? kl + r0 : NULL, argmax ? argmax + r0 : NULL,
                    ref_argmax ? ref_argmax + r0 : NULL);
    }
    return QS_OK;
}
