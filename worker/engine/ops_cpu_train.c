/* The training half of the CPU backend (ops.h, "CPU training functions"): forwards that save
 * what the backward needs, the backward of every layer, the optimizer's sums and update, and
 * the recipe linear's BF16 rounding.
 *
 * Determinism: every parallel loop gives each output element to one thread and sums in a fixed
 * order, and GEMMs are cut into pieces fixed by the shape (never by the thread count), each a
 * single-threaded qw_cpu_sgemm (gemm_cpu.h: OpenBLAS, or the fixed-order GEMM) or, in the tiled
 * attention that runs only on the fixed-order path, the fixed GEMM's packed entry itself, so
 * results are bit-identical for any thread count. */
#include "ops.h"

#include "adamw.h"

#include "gemm_cpu.h"
#include "gemm_fixed.h"
#include <math.h>
#include <omp.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* ---------------------------------------------------------------- GEMM */

void qw_train_gemm_abt(float *C, const float *A, const float *Bm, int M, int Ncol, int K,
                       float beta, int nt) {
    int pieces = (Ncol + QW_TRAIN_GEMM_COLS - 1) / QW_TRAIN_GEMM_COLS;
    if (nt > pieces) nt = pieces;
    if (nt < 1) nt = 1;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (int p = 0; p < pieces; p++) {
        int c0 = p * QW_TRAIN_GEMM_COLS;
        int c1 = c0 + QW_TRAIN_GEMM_COLS < Ncol ? c0 + QW_TRAIN_GEMM_COLS : Ncol;
        qw_cpu_sgemm(0, 1, M, c1 - c0, K, (float)1, A, K, Bm + (size_t)c0 * K, K, beta, C + c0,
                     Ncol);
    }
}

void qw_train_gemm_tt(float *C, int ta, const float *A, int lda, int tb, const float *Bm, int ldb,
                      int M, int Ncol, int K, float beta, int nt) {
    int pieces = (Ncol + QW_TRAIN_GEMM_COLS - 1) / QW_TRAIN_GEMM_COLS;
    if (nt > pieces) nt = pieces;
    if (nt < 1) nt = 1;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (int p = 0; p < pieces; p++) {
        int c0 = p * QW_TRAIN_GEMM_COLS;
        int c1 = c0 + QW_TRAIN_GEMM_COLS < Ncol ? c0 + QW_TRAIN_GEMM_COLS : Ncol;
        /* columns c0.. of op(Bm): rows c0.. of a stored [Ncol x K], columns c0.. of [K x Ncol] */
        const float *Bp = tb ? Bm + (size_t)c0 * ldb : Bm + c0;
        qw_cpu_sgemm(ta, tb, M, c1 - c0, K, (float)1, A, lda, Bp, ldb, beta, C + c0, Ncol);
    }
}

void qw_train_transpose(float *dst, const float *src, int rows, int cols, int nt) {
    /* 32 x 32 tiles, so that both the rows read and the rows written stay in cache */
    int tr = (rows + 31) / 32, tc = (cols + 31) / 32;
#pragma omp parallel for num_threads(nt) schedule(static) collapse(2)
    for (int bc = 0; bc < tc; bc++)
        for (int br = 0; br < tr; br++) {
            int c1 = bc * 32 + 32 < cols ? bc * 32 + 32 : cols;
            int r1 = br * 32 + 32 < rows ? br * 32 + 32 : rows;
            for (int c = bc * 32; c < c1; c++)
                for (int r = br * 32; r < r1; r++)
                    dst[(size_t)c * rows + r] = src[(size_t)r * cols + c];
        }
}

/* ---------------------------------------------------------------- embedding */

void qw_train_embedding_forward(float *out, const uint32_t *tokens, const float *emb, int N,
                                int D) {
    for (int i = 0; i < N; i++)
        memcpy(out + (size_t)i * D, emb + (size_t)tokens[i] * D, (size_t)D * sizeof(float));
}

void qw_train_embedding_backward(float *demb, const float *dout, const uint32_t *tokens, int N,
                                 int D) {
    /* Serial over tokens: two positions with the same token add into one row, in token
     * order, so the sum does not depend on a thread schedule. */
    for (int i = 0; i < N; i++) {
        float *row = demb + (size_t)tokens[i] * D;
        const float *g = dout + (size_t)i * D;
        for (int j = 0; j < D; j++)
            row[j] += g[j];
    }
}

/* ---------------------------------------------------------------- RMSNorm */

/* The RMSNorm forward, with rstd, is ops_cpu.c's qw_rmsnorm_forward. */

void qw_train_rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x,
                               const float *w, const float *rstd, int N, int D, int nt) {
    /* y_i = w_i x_i r, r = (mean(x^2) + eps)^-1/2; dr/dx_j = -r^3 x_j / D, so
     * dx_j = r w_j dy_j - x_j r^3 / D * sum_i(w_i dy_i x_i). The dot products of QW_NORM_ROWS
     * rows advance together (a last group repeats its last row, whose copies are not used). */
    int groups = (N + QW_NORM_ROWS - 1) / QW_NORM_ROWS;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int gi = 0; gi < groups; gi++) {
        int t0 = gi * QW_NORM_ROWS, nr = N - t0 < QW_NORM_ROWS ? N - t0 : QW_NORM_ROWS;
        const float *xr[QW_NORM_ROWS], *gr[QW_NORM_ROWS];
        for (int q = 0; q < QW_NORM_ROWS; q++) {
            size_t t = (size_t)t0 + (size_t)(q < nr ? q : nr - 1);
            xr[q] = x + t * D;
            gr[q] = dout + t * D;
        }
        double dot[QW_NORM_ROWS] = {0.0};
        for (int i = 0; i < D; i++)
            for (int q = 0; q < QW_NORM_ROWS; q++)
                dot[q] += (double)w[i] * gr[q][i] * xr[q][i];
        for (int q = 0; q < nr; q++) {
            float *d = dx + (size_t)(t0 + q) * D;
            float r = rstd[t0 + q];
            float c = (float)(dot[q] * (double)r * r * r / D);
            for (int i = 0; i < D; i++)
                d[i] += r * w[i] * gr[q][i] - xr[q][i] * c;
        }
    }
    /* dw_i = sum_t dy_ti x_ti r_t: ranges of 64 columns split across threads, each column's
     * rows summed in order, a range's columns side by side as the rows stream past. */
    int ranges = (D + 63) / 64;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int rg = 0; rg < ranges; rg++) {
        int i0 = rg * 64, i1 = i0 + 64 < D ? i0 + 64 : D;
        float s[64] = {0};
        for (int t = 0; t < N; t++) {
            const float *dr = dout + (size_t)t * D, *xr = x + (size_t)t * D;
            float r = rstd[t];
            for (int i = i0; i < i1; i++)
                s[i - i0] += dr[i] * (xr[i] * r);
        }
        for (int i = i0; i < i1; i++)
            dw[i] += s[i - i0];
    }
}

/* ---------------------------------------------------------------- RoPE */

/* Rotates pairs (x[j], x[j+E/2]) of every head by sign * angle: +1 the forward rotation, -1
 * its transpose (the backward). Negating sin is exact, so both directions round as the
 * forward always did. */
static void rope_rotate(float *x, const float *cosb, const float *sinb, float sign, int B, int T,
                        int nh, int E, int nt) {
    int h2 = E / 2, N = B * T;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int i = 0; i < N; i++) {
        int t = i % T;
        const float *c = cosb + (size_t)t * h2, *s = sinb + (size_t)t * h2;
        for (int h = 0; h < nh; h++) {
            float *v = x + ((size_t)i * nh + h) * E;
            for (int j = 0; j < h2; j++) {
                float x1 = v[j], x2 = v[j + h2], sj = sign * s[j];
                v[j] = x1 * c[j] - x2 * sj;
                v[j + h2] = x2 * c[j] + x1 * sj;
            }
        }
    }
}

void qw_rope_forward(float *x, const float *cosb, const float *sinb, int B, int T, int nh, int E,
                     int nt) {
    rope_rotate(x, cosb, sinb, 1.0f, B, T, nh, E, nt);
}

void qw_train_rope_backward(float *dx, const float *cosb, const float *sinb, int B, int T, int nh,
                            int E, int nt) {
    rope_rotate(dx, cosb, sinb, -1.0f, B, T, nh, E, nt);
}

/* ---------------------------------------------------------------- attention */

void qw_train_attention_forward(float *out, float *probs, const float *q, const float *k,
                                const float *v, int B, int T, int H, int G, int E, int nt) {
    int rep = H / G, HE = H * E, GE = G * E;
    float scale = (float)(1.0 / sqrt((double)E));
    /* One (sequence, head) per task, each a pair of single-threaded GEMMs over strided head
     * slices: S = scale * Q_h K_g^T [T x T], causal softmax of each row, O_h = P V_g. The masked
     * upper triangle is computed and then zeroed (simpler than tiles; at most 2x the work). */
#pragma omp parallel for num_threads(nt) schedule(static) collapse(2)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            int g = h / rep;
            float *P = probs + ((size_t)b * H + h) * T * T;
            const float *qh = q + (size_t)b * T * HE + (size_t)h * E;
            const float *kg = k + (size_t)b * T * GE + (size_t)g * E;
            const float *vg = v + (size_t)b * T * GE + (size_t)g * E;
            qw_cpu_sgemm(0, 1, T, T, E, scale, qh, HE, kg, GE, (float)0, P, T);
            qw_cpu_causal_softmax(P, T, T, 0, NULL); /* the evaluation's softmax */
            qw_cpu_sgemm(0, 0, T, E, T, (float)1, P, T, vg, GE, (float)0,
                         out + (size_t)b * T * HE + (size_t)h * E, HE);
        }
}

void qw_train_attention_backward(float *dq, float *dk, float *dv, float *dscratch,
                                 const float *dout, const float *q, const float *k, const float *v,
                                 const float *probs, int B, int T, int H, int G, int E, int nt) {
    int rep = H / G, HE = H * E, GE = G * E;
    float scale = (float)(1.0 / sqrt((double)E));
    /* One (sequence, kv head) per task: the query heads of a group add into the same dk/dv
     * rows, in head order, inside one task. Per head: dP = dO_h V_g^T; dS = P (dP - rowsum(P dP))
     * * scale (zero above the diagonal, where P is); dQ_h = dS K_g; dK_g += dS^T Q_h;
     * dV_g += P^T dO_h. */
#pragma omp parallel for num_threads(nt) schedule(static) collapse(2)
    for (int b = 0; b < B; b++)
        for (int g = 0; g < G; g++) {
            float *dS = dscratch + (size_t)omp_get_thread_num() * T * T;
            float *dkg = dk + (size_t)b * T * GE + (size_t)g * E;
            float *dvg = dv + (size_t)b * T * GE + (size_t)g * E;
            const float *kg = k + (size_t)b * T * GE + (size_t)g * E;
            const float *vg = v + (size_t)b * T * GE + (size_t)g * E;
            for (int s2 = 0; s2 < T; s2++) {
                memset(dkg + (size_t)s2 * GE, 0, (size_t)E * sizeof(float));
                memset(dvg + (size_t)s2 * GE, 0, (size_t)E * sizeof(float));
            }
            for (int h = g * rep; h < (g + 1) * rep; h++) {
                const float *P = probs + ((size_t)b * H + h) * T * T;
                const float *doh = dout + (size_t)b * T * HE + (size_t)h * E;
                const float *qh = q + (size_t)b * T * HE + (size_t)h * E;
                float *dqh = dq + (size_t)b * T * HE + (size_t)h * E;
                qw_cpu_sgemm(0, 1, T, T, E, (float)1, doh, HE, vg, GE, (float)0, dS, T);
                for (int t = 0; t < T; t++) {
                    const float *prow = P + (size_t)t * T;
                    float *drow = dS + (size_t)t * T;
                    float acc = 0;
                    for (int s2 = 0; s2 <= t; s2++)
                        acc += drow[s2] * prow[s2];
                    for (int s2 = 0; s2 <= t; s2++)
                        drow[s2] = prow[s2] * (drow[s2] - acc) * scale;
                    for (int s2 = t + 1; s2 < T; s2++)
                        drow[s2] = 0;
                }
                qw_cpu_sgemm(0, 0, T, E, T, (float)1, dS, T, kg, GE, (float)0, dqh, HE);
                qw_cpu_sgemm(1, 0, T, E, T, (float)1, dS, T, qh, HE, (float)1, dkg, GE);
                qw_cpu_sgemm(1, 0, T, E, T, (float)1, P, T, doh, HE, (float)1, dvg, GE);
            }
        }
}

/* ---------------------------------------------------------------- attention, tiled */

/* Floats of one packing of a [T x E] head slice, as op(B) of either orientation: K^T for the
 * scores (N T, K E) or V, K, Q, dO for the products over keys or queries (N E, K T). */
static size_t pack_keys_floats(int T, int E) {
    return qw_gemm_fixed_packed_floats(T, E);
}
static size_t pack_rows_floats(int T, int E) {
    return qw_gemm_fixed_packed_floats(E, T);
}

size_t qw_train_attention_tiled_saved_floats(int B, int T, int H) {
    return (size_t)B * H * T * 2;
}

/* One thread's share of the scratch: the backward's P, dS, K^T, V^T, K, Q, dO. */
static size_t scratch_per_thread(int T, int E) {
    return (size_t)2 * QW_TRAIN_ATT_TILE * T + 2 * pack_keys_floats(T, E) +
           3 * pack_rows_floats(T, E);
}

size_t qw_train_attention_tiled_scratch_floats(int T, int E, int nt) {
    return (size_t)nt * scratch_per_thread(T, E);
}

/* Rows of one causal softmax row set taken together in the backward's row sums: independent
 * serial chains the core overlaps (each row's sum keeps its own order). */
#define ATT_ROWS_TOGETHER 8

/* P [rows x t1] = the causal softmax of query rows t0.. over keys 0..t1-1 (zeros after each
 * row's own position), the scores S = scale Q K^T of those rows computed into P first from
 * K^T packed whole (Kt, qw_gemm_fixed_pack_b of E rows): qw_cpu_causal_softmax, each row's max
 * and 1/sum into stats [rows x 2] (save), or taken from there (recompute; qw_cpu_exp_shift_sum
 * then gives the same exponentials and its sum is not needed). */
static void softmax_tile(float *P, float *stats, int save, const float *qh, const float *Kt, int HE,
                         int E, float scale, int t0, int rows, int t1) {
    qw_gemm_fixed_packed_rows(0, rows, t1, E, scale, qh + (size_t)t0 * HE, HE, Kt, E, (float)0, P,
                              t1);
    if (save) {
        qw_cpu_causal_softmax(P, rows, t1, t0, stats);
        return;
    }
    for (int r = 0; r < rows; r++) {
        float *row = P + (size_t)r * t1;
        int last = t0 + r;
        float inv = stats[2 * r + 1];
        qw_cpu_exp_shift_sum(row, (size_t)last + 1, stats[2 * r]);
        for (int j = 0; j <= last; j++)
            row[j] *= inv;
        for (int j = last + 1; j < t1; j++)
            row[j] = 0.0f;
    }
}

void qw_train_attention_forward_tiled(float *out, float *saved, float *scratch, const float *q,
                                      const float *k, const float *v, int B, int T, int H, int G,
                                      int E, int nt) {
    int rep = H / G, HE = H * E, GE = G * E;
    float scale = (float)(1.0 / sqrt((double)E));
    size_t per_thread = scratch_per_thread(T, E);
    /* One (sequence, head) per task, its K^T and V packed once for all its tiles; per query tile
     * [t0, t1): P = softmax(scale Q K[0..t1)^T), O = P V[0..t1). An element's FMA chain is the
     * whole-T kernel's less trailing zero terms. */
#pragma omp parallel for num_threads(nt) schedule(static) collapse(2)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            int g = h / rep;
            float *P = scratch + (size_t)omp_get_thread_num() * per_thread;
            float *Kt = P + (size_t)QW_TRAIN_ATT_TILE * T, *Vn = Kt + pack_keys_floats(T, E);
            float *stats = saved + ((size_t)b * H + h) * T * 2;
            const float *qh = q + (size_t)b * T * HE + (size_t)h * E;
            const float *kg = k + (size_t)b * T * GE + (size_t)g * E;
            const float *vg = v + (size_t)b * T * GE + (size_t)g * E;
            float *oh = out + (size_t)b * T * HE + (size_t)h * E;
            qw_gemm_fixed_pack_b(1, T, E, kg, GE, Kt);
            qw_gemm_fixed_pack_b(0, E, T, vg, GE, Vn);
            for (int t0 = 0; t0 < T; t0 += QW_TRAIN_ATT_TILE) {
                int rows = T - t0 < QW_TRAIN_ATT_TILE ? T - t0 : QW_TRAIN_ATT_TILE, t1 = t0 + rows;
                softmax_tile(P, stats + (size_t)t0 * 2, 1, qh, Kt, HE, E, scale, t0, rows, t1);
                qw_gemm_fixed_packed_rows(0, rows, E, t1, (float)1, P, t1, Vn, T, (float)0,
                                          oh + (size_t)t0 * HE, HE);
            }
        }
}

/* dS [rows x t1] = P (dP - rowsum(P dP)) scale in place of dP, query rows t0.. (zeros after each
 * row's position). Each row's sum runs over its keys in order; ATT_ROWS_TOGETHER rows at a time
 * over their common keys (a last group of fewer rows repeats its last row, whose copies are not
 * used), then each row's own tail, so the chains overlap and stay the same. */
static void softmax_backward_tile(float *dS, const float *P, int t0, int rows, int t1,
                                  float scale) {
    for (int r0 = 0; r0 < rows; r0 += ATT_ROWS_TOGETHER) {
        int n = rows - r0 < ATT_ROWS_TOGETHER ? rows - r0 : ATT_ROWS_TOGETHER;
        const float *dr[ATT_ROWS_TOGETHER], *pr[ATT_ROWS_TOGETHER];
        for (int r = 0; r < ATT_ROWS_TOGETHER; r++) {
            size_t o = (size_t)(r0 + (r < n ? r : n - 1)) * t1;
            dr[r] = dS + o;
            pr[r] = P + o;
        }
        float acc[ATT_ROWS_TOGETHER] = {0};
        int common = t0 + r0 + 1; /* keys of the group's first row */
        for (int s2 = 0; s2 < common; s2++)
#pragma GCC unroll 8
            for (int r = 0; r < ATT_ROWS_TOGETHER; r++)
                acc[r] += dr[r][s2] * pr[r][s2];
        for (int r = 0; r < n; r++) {
            int t = t0 + r0 + r;
            const float *prow = pr[r];
            float *drow = dS + (size_t)(r0 + r) * t1;
            float a = acc[r];
            for (int s2 = common; s2 <= t; s2++)
                a += drow[s2] * prow[s2];
            for (int s2 = 0; s2 <= t; s2++)
                drow[s2] = prow[s2] * (drow[s2] - a) * scale;
            for (int s2 = t + 1; s2 < t1; s2++)
                drow[s2] = 0;
        }
    }
}

void qw_train_attention_backward_tiled(float *dq, float *dk, float *dv, float *dscratch,
                                       const float *dout, const float *q, const float *k,
                                       const float *v, const float *saved, int B, int T, int H,
                                       int G, int E, int nt) {
    int rep = H / G, HE = H * E, GE = G * E;
    float scale = (float)(1.0 / sqrt((double)E));
    size_t nkeys = pack_keys_floats(T, E), nrows = pack_rows_floats(T, E);
    size_t per_thread = scratch_per_thread(T, E);
    /* One (sequence, kv head) per task, its query heads in order and each head's query tiles
     * in order, so dK and dV rows take their terms in the whole-T backward's order (its terms
     * above the diagonal are zeros, which leave a sum as it is). K^T, V^T and K packed once a
     * task, Q and dO once a head. Per tile: P recomputed, dP = dO V^T,
     * dS = P (dP - rowsum(P dP)) scale, dQ = dS K, dK += dS^T Q, dV += P^T dO. */
#pragma omp parallel for num_threads(nt) schedule(static) collapse(2)
    for (int b = 0; b < B; b++)
        for (int g = 0; g < G; g++) {
            float *P = dscratch + (size_t)omp_get_thread_num() * per_thread;
            float *dS = P + (size_t)QW_TRAIN_ATT_TILE * T;
            float *Kt = dS + (size_t)QW_TRAIN_ATT_TILE * T, *Vt = Kt + nkeys;
            float *Kn = Vt + nkeys, *Qn = Kn + nrows, *dOn = Qn + nrows;
            float *dkg = dk + (size_t)b * T * GE + (size_t)g * E;
            float *dvg = dv + (size_t)b * T * GE + (size_t)g * E;
            const float *kg = k + (size_t)b * T * GE + (size_t)g * E;
            const float *vg = v + (size_t)b * T * GE + (size_t)g * E;
            for (int s2 = 0; s2 < T; s2++) {
                memset(dkg + (size_t)s2 * GE, 0, (size_t)E * sizeof(float));
                memset(dvg + (size_t)s2 * GE, 0, (size_t)E * sizeof(float));
            }
            qw_gemm_fixed_pack_b(1, T, E, kg, GE, Kt);
            qw_gemm_fixed_pack_b(1, T, E, vg, GE, Vt);
            qw_gemm_fixed_pack_b(0, E, T, kg, GE, Kn);
            for (int h = g * rep; h < (g + 1) * rep; h++) {
                const float *stats = saved + ((size_t)b * H + h) * T * 2;
                const float *doh = dout + (size_t)b * T * HE + (size_t)h * E;
                const float *qh = q + (size_t)b * T * HE + (size_t)h * E;
                float *dqh = dq + (size_t)b * T * HE + (size_t)h * E;
                qw_gemm_fixed_pack_b(0, E, T, qh, HE, Qn);
                qw_gemm_fixed_pack_b(0, E, T, doh, HE, dOn);
                for (int t0 = 0; t0 < T; t0 += QW_TRAIN_ATT_TILE) {
                    int rows = T - t0 < QW_TRAIN_ATT_TILE ? T - t0 : QW_TRAIN_ATT_TILE;
                    int t1 = t0 + rows;
                    softmax_tile(P, (float *)stats + (size_t)t0 * 2, 0, qh, Kt, HE, E, scale, t0,
                                 rows, t1);
                    qw_gemm_fixed_packed_rows(0, rows, t1, E, (float)1, doh + (size_t)t0 * HE, HE,
                                              Vt, E, (float)0, dS, t1);
                    softmax_backward_tile(dS, P, t0, rows, t1, scale);
                    qw_gemm_fixed_packed_rows(0, rows, E, t1, (float)1, dS, t1, Kn, T, (float)0,
                                              dqh + (size_t)t0 * HE, HE);
                    qw_gemm_fixed_packed_rows(1, t1, E, rows, (float)1, dS, t1,
                                              Qn + (size_t)t0 * 16, T, (float)1, dkg, GE);
                    qw_gemm_fixed_packed_rows(1, t1, E, rows, (float)1, P, t1,
                                              dOn + (size_t)t0 * 16, T, (float)1, dvg, GE);
                }
            }
        }
}

/* ---------------------------------------------------------------- SwiGLU */

#if defined(__x86_64__)
/* qw_train_swiglu_backward's formulas on 16 lanes, the same operations in the same order (IEEE
 * division and products, no FMA), e[m] holding e^-g: the elements before the last whole 16,
 * returning their count (the caller's scalar loop takes the rest). */
__attribute__((target("avx512f"))) static size_t swiglu_bwd_avx512(float *dg, float *du,
                                                                   const float *dh, const float *g,
                                                                   const float *u, const float *e,
                                                                   size_t m) {
    const __m512 one = _mm512_set1_ps(1.0f);
    size_t j = 0;
    for (; j + 16 <= m; j += 16) {
        __m512 gv = _mm512_loadu_ps(g + j), dhv = _mm512_loadu_ps(dh + j);
        __m512 s = _mm512_div_ps(one, _mm512_add_ps(one, _mm512_loadu_ps(e + j)));
        _mm512_storeu_ps(du + j, _mm512_mul_ps(dhv, _mm512_mul_ps(gv, s)));
        __m512 d = _mm512_mul_ps(s, _mm512_add_ps(one, _mm512_mul_ps(gv, _mm512_sub_ps(one, s))));
        _mm512_storeu_ps(dg + j, _mm512_mul_ps(_mm512_mul_ps(dhv, _mm512_loadu_ps(u + j)), d));
    }
    return j;
}
#endif

void qw_train_swiglu_backward(float *dg, float *du, const float *dh, const float *g, const float *u,
                              size_t n, int nt) {
    /* silu(g) = g s, s = 1/(1+e^-g); silu'(g) = s (1 + g (1 - s)). In blocks of 1024 elements:
     * e^-g of a block into a stack buffer (qw_cpu_exp_shift_n, the forward's e^x), then the
     * elementwise formulas (16 lanes at a time on AVX-512F: the same bits). */
    size_t blocks = (n + 1023) / 1024;
#if defined(__x86_64__)
    int vec = __builtin_cpu_supports("avx512f");
#endif
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t b = 0; b < blocks; b++) {
        size_t i0 = b * 1024, m = n - i0 < 1024 ? n - i0 : 1024;
        float e[1024];
        for (size_t j = 0; j < m; j++)
            e[j] = -g[i0 + j];
        qw_cpu_exp_shift_n(e, e, m, (float)0);
        size_t j = 0;
#if defined(__x86_64__)
        if (vec) j = swiglu_bwd_avx512(dg + i0, du + i0, dh + i0, g + i0, u + i0, e, m);
#endif
        for (; j < m; j++) {
            size_t i = i0 + j;
            float s = (float)1 / ((float)1 + e[j]);
            float si = g[i] * s;
            du[i] = dh[i] * si;
            dg[i] = dh[i] * u[i] * (s * ((float)1 + g[i] * ((float)1 - s)));
        }
    }
}

/* ---------------------------------------------------------------- cross-entropy */

void qw_train_crossentropy_forward(float *logits, float *losses, const uint32_t *targets, int N,
                                   int V, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int i = 0; i < N; i++) {
        float *row = logits + (size_t)i * V;
        float mx = row[0];
        for (int j = 1; j < V; j++)
            mx = row[j] > mx ? row[j] : mx;
        /* -log p_target = log(sum_j e^(l_j - mx)) - (l_target - mx), from the logits, not the
         * rounded probability, so a confident model's loss does not flush to -log(0). */
        double lt = (double)row[targets[i]] - (double)mx;
        qw_cpu_exp_shift_n(row, row, (size_t)V, mx); /* gemm_cpu.h */
        double sum = 0.0;
        for (int j = 0; j < V; j++)
            sum += row[j];
        float inv = (float)(1.0 / sum);
        for (int j = 0; j < V; j++)
            row[j] *= inv;
        /* sum >= 1: the maximum's term is e^0 (V >= 1) */
        // cppcheck-suppress invalidFunctionArg
        losses[i] = (float)(log(sum) - lt);
    }
}

void qw_train_crossentropy_backward(float *probs, const uint32_t *targets, int N, int V,
                                    float scale, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int i = 0; i < N; i++) {
        float *row = probs + (size_t)i * V;
        row[targets[i]] -= (float)1;
        for (int j = 0; j < V; j++)
            row[j] *= scale;
    }
}

/* ---------------------------------------------------------------- linear (unquantized) */

void qw_train_linear_backward(float *dx, int dx_accumulate, float *dW, const float *dy,
                              const float *x, const float *W, int N, int in, int out, int nt) {
    /* dx[N x in] (+)= dy[N x out] W[out x in]; pieces over dx's columns. */
    int pieces = (in + QW_TRAIN_GEMM_COLS - 1) / QW_TRAIN_GEMM_COLS;
    int ntp = nt > pieces ? pieces : nt;
    if (dx) {
#pragma omp parallel for num_threads(ntp) schedule(dynamic, 1)
        for (int p = 0; p < pieces; p++) {
            int c0 = p * QW_TRAIN_GEMM_COLS;
            int c1 = c0 + QW_TRAIN_GEMM_COLS < in ? c0 + QW_TRAIN_GEMM_COLS : in;
            qw_cpu_sgemm(0, 0, N, c1 - c0, out, (float)1, dy, out, W + c0, in,
                         dx_accumulate ? (float)1 : (float)0, dx + c0, in);
        }
    }
    /* dW[out x in] += dy^T[out x N] x[N x in]; pieces over dW's columns. */
#pragma omp parallel for num_threads(ntp) schedule(dynamic, 1)
    for (int p = 0; p < pieces; p++) {
        int c0 = p * QW_TRAIN_GEMM_COLS;
        int c1 = c0 + QW_TRAIN_GEMM_COLS < in ? c0 + QW_TRAIN_GEMM_COLS : in;
        qw_cpu_sgemm(1, 0, out, c1 - c0, N, (float)1, dy, out, x + c0, in, (float)1, dW + c0, in);
    }
}

/* ---------------------------------------------------------------- optimizer */

#define SUMSQ_RANGES 64
#define SUMSQ_LANES 4 /* ranges summed side by side by one thread */

double qw_train_sumsq(const float *g, size_t n, int nt) {
    double part[SUMSQ_RANGES];
    /* Each range is one chain of double adds in element order, bound by the add's latency;
     * SUMSQ_LANES chains advance in one loop so the core overlaps them: the same chains, the
     * same bits. */
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int q = 0; q < SUMSQ_RANGES / SUMSQ_LANES; q++) {
        size_t a[SUMSQ_LANES], len[SUMSQ_LANES], common = n;
        double s[SUMSQ_LANES];
        for (int l = 0; l < SUMSQ_LANES; l++) {
            size_t r = (size_t)(q * SUMSQ_LANES + l);
            a[l] = n * r / SUMSQ_RANGES;
            len[l] = n * (r + 1) / SUMSQ_RANGES - a[l];
            common = len[l] < common ? len[l] : common;
            s[l] = 0.0;
        }
        for (size_t i = 0; i < common; i++)
            for (int l = 0; l < SUMSQ_LANES; l++)
                s[l] += (double)g[a[l] + i] * g[a[l] + i];
        for (int l = 0; l < SUMSQ_LANES; l++) {
            for (size_t i = common; i < len[l]; i++)
                s[l] += (double)g[a[l] + i] * g[a[l] + i];
            part[q * SUMSQ_LANES + l] = s[l];
        }
    }
    double s = 0.0;
    for (int r = 0; r < SUMSQ_RANGES; r++)
        s += part[r];
    return s;
}

#if defined(__x86_64__)
/* qw_adamw_update on 16 lanes at a time: the same single-precision operations in the same
 * order, none fused, each correctly rounded (vsqrtps as sqrtf), so the same bits; the scalar
 * loop does not vectorise because sqrtf may set errno. */
__attribute__((target("avx512f"))) static void
adamw_avx512(float *p, const float *g, float *m, float *v, size_t n, const qw_adamw_hp *h) {
    const __m512 gs = _mm512_set1_ps(h->grad_scale), b1 = _mm512_set1_ps(h->b1),
                 b2 = _mm512_set1_ps(h->b2), ob1 = _mm512_set1_ps(1.0f - h->b1),
                 ob2 = _mm512_set1_ps(1.0f - h->b2), lrwd = _mm512_set1_ps(h->lr * h->wd),
                 lr = _mm512_set1_ps(h->lr), c1 = _mm512_set1_ps(h->c1), c2 = _mm512_set1_ps(h->c2),
                 eps = _mm512_set1_ps(h->eps);
    size_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m512 gj = _mm512_mul_ps(_mm512_loadu_ps(g + j), gs);
        __m512 mm =
            _mm512_add_ps(_mm512_mul_ps(b1, _mm512_loadu_ps(m + j)), _mm512_mul_ps(ob1, gj));
        __m512 vv = _mm512_add_ps(_mm512_mul_ps(b2, _mm512_loadu_ps(v + j)),
                                  _mm512_mul_ps(_mm512_mul_ps(ob2, gj), gj));
        _mm512_storeu_ps(m + j, mm);
        _mm512_storeu_ps(v + j, vv);
        __m512 pj = _mm512_loadu_ps(p + j);
        pj = _mm512_sub_ps(pj, _mm512_mul_ps(lrwd, pj));
        __m512 den = _mm512_add_ps(_mm512_sqrt_ps(_mm512_div_ps(vv, c2)), eps);
        pj = _mm512_sub_ps(pj, _mm512_div_ps(_mm512_mul_ps(lr, _mm512_div_ps(mm, c1)), den));
        _mm512_storeu_ps(p + j, pj);
    }
    for (; j < n; j++)
        qw_adamw_update(&p[j], &m[j], &v[j], g[j], h);
}
#endif

/* Elements per share of the AdamW loop: whole vectors, few shares per thread. */
#define ADAMW_BLOCK 4096

void qw_train_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float wd,
                    float b1, float b2, float eps, float c1, float c2, float grad_scale, int nt) {
    qw_adamw_hp h = {lr, wd, b1, b2, eps, c1, c2, grad_scale};
#if defined(__x86_64__)
    int vec = __builtin_cpu_supports("avx512f");
#endif
    size_t blocks = (n + ADAMW_BLOCK - 1) / ADAMW_BLOCK;
    if ((size_t)nt > blocks) nt = blocks ? (int)blocks : 1;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t b = 0; b < blocks; b++) {
        size_t j0 = b * ADAMW_BLOCK, k = n - j0 < ADAMW_BLOCK ? n - j0 : ADAMW_BLOCK;
#if defined(__x86_64__)
        if (vec) {
            adamw_avx512(p + j0, g + j0, m + j0, v + j0, k, &h);
            continue;
        }
#endif
        for (size_t j = j0; j < j0 + k; j++)
            qw_adamw_update(&p[j], &m[j], &v[j], g[j], &h);
    }
}

/* ---------------------------------------------------------------- BF16 */

/* qw_round_bf16 on the bits, branch-free so that a loop of it vectorises. */
static inline uint32_t round_bf16_bits(uint32_t u) {
    uint32_t sign = u & 0x80000000u, sat = sign | 0x7F7F0000u;
    uint32_t r = u + 0x7FFFu + ((u >> 16) & 1u); /* round to nearest, ties to even */
    /* a finite value that rounds to Inf saturates to +-max finite */
    uint32_t fin = (r & 0x7F800000u) == 0x7F800000u ? sat : (r & 0xFFFF0000u);
    /* Inf stays (saturated like the codec: +-max finite); NaN becomes the codec's 0x7FC0 */
    uint32_t nonfin = (u & 0x007FFFFFu) ? 0x7FC00000u : sat;
    return (u & 0x7F800000u) == 0x7F800000u ? nonfin : fin;
}

float qw_round_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u = round_bf16_bits(u);
    memcpy(&x, &u, 4);
    return x;
}

#if defined(__x86_64__)
/* round_bf16_bits on 16 lanes, each select a mask move; the tail by the scalar rule. */
__attribute__((target("avx512f"))) static void round_bf16_avx512(float *dst, const float *src,
                                                                 size_t n) {
    const __m512i expo = _mm512_set1_epi32(0x7F800000), one = _mm512_set1_epi32(1);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i u = _mm512_loadu_si512(src + i);
        __m512i sat = _mm512_or_si512(_mm512_and_si512(u, _mm512_set1_epi32((int)0x80000000u)),
                                      _mm512_set1_epi32(0x7F7F0000));
        __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)),
                                     _mm512_and_si512(_mm512_srli_epi32(u, 16), one));
        __mmask16 r_inf = _mm512_cmpeq_epi32_mask(_mm512_and_si512(r, expo), expo);
        __m512i fin = _mm512_mask_mov_epi32(
            _mm512_and_si512(r, _mm512_set1_epi32((int)0xFFFF0000u)), r_inf, sat);
        __mmask16 u_inf = _mm512_cmpeq_epi32_mask(_mm512_and_si512(u, expo), expo);
        __mmask16 mant = _mm512_test_epi32_mask(u, _mm512_set1_epi32(0x007FFFFF));
        __m512i nonfin = _mm512_mask_mov_epi32(sat, mant, _mm512_set1_epi32(0x7FC00000));
        _mm512_storeu_si512(dst + i, _mm512_mask_mov_epi32(fin, u_inf, nonfin));
    }
    for (; i < n; i++) {
        uint32_t u;
        memcpy(&u, &src[i], 4);
        u = round_bf16_bits(u);
        memcpy(&dst[i], &u, 4);
    }
}
#endif

void qw_train_round_bf16_copy(float *dst, const float *src, size_t n, int nt) {
    /* ranges of 4096 elements: few threads' worth of work per call on the small operands */
    size_t blocks = (n + 4095) / 4096;
    if ((size_t)nt > blocks) nt = (int)blocks;
    if (nt < 1) nt = 1;
#if defined(__x86_64__)
    int vec = __builtin_cpu_supports("avx512f");
#endif
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t b = 0; b < blocks; b++) {
        size_t i0 = b * 4096, i1 = i0 + 4096 < n ? i0 + 4096 : n;
#if defined(__x86_64__)
        if (vec) {
            round_bf16_avx512(dst + i0, src + i0, i1 - i0);
            continue;
        }
#endif
        for (size_t i = i0; i < i1; i++) {
            uint32_t u;
            memcpy(&u, &src[i], 4);
            u = round_bf16_bits(u);
            memcpy(&dst[i], &u, 4);
        }
    }
}
