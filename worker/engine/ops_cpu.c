/* The CPU backend of the engine's operations (ops.h): the reference path.
 *
 * Threads: one OpenMP team of nt threads does all the work. GEMMs are split across it by output
 * columns (linears) or by head (attention), each piece a single-threaded qw_cpu_sgemm
 * (gemm_cpu.h: the fixed-order GEMM, or cblas_sgemm under QSWEEP_CPU_GEMM=openblas). OpenBLAS's
 * own thread pool is switched off (openblas_set_num_threads(1), by the model): with two pools on
 * the same cores, each spinning while the other works, the 2-thread forward ran at 13 GFLOP/s
 * against 52 on one thread (bench/engine on the 2-core development machine). */
#include "ops.h"

#include "convcache.h"
#include "clock.h"
#include "gemm_cpu.h"
#include "gemm_fixed.h"
#include "block_hadamard.h"
#include "hadamard.h"
#include "numerics_path.h"
#include "smooth.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- free functions */

void qw_embedding_forward(float *out, const uint32_t *tokens, int T, const qw_weight *table,
                          int nt) {
    int64_t D = table->cols;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int t = 0; t < T; t++)
        (void)qw_weight_rows_f32(table, tokens[t], 1, out + (size_t)t * D, NULL);
}

void qw_rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int T, int D,
                        float eps, int nt) {
    /* Each row's sum of squares is a chain of double adds in element order; QW_NORM_ROWS rows'
     * chains advance in one loop so that the core overlaps them, each in its own order. A last
     * group of fewer rows repeats its last row, whose copies are not written. */
    int groups = (T + QW_NORM_ROWS - 1) / QW_NORM_ROWS;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int g = 0; g < groups; g++) {
        int t0 = g * QW_NORM_ROWS, nr = T - t0 < QW_NORM_ROWS ? T - t0 : QW_NORM_ROWS;
        const float *xr[QW_NORM_ROWS];
        for (int q = 0; q < QW_NORM_ROWS; q++)
            xr[q] = x + (size_t)(t0 + (q < nr ? q : nr - 1)) * D;
        double ss[QW_NORM_ROWS] = {0.0};
        for (int i = 0; i < D; i++)
            for (int q = 0; q < QW_NORM_ROWS; q++)
                ss[q] += (double)xr[q][i] * xr[q][i];
        for (int q = 0; q < nr; q++) {
            float *o = out + (size_t)(t0 + q) * D;
            float r = (float)(1.0 / sqrt(ss[q] / D + (double)eps));
            if (rstd) rstd[t0 + q] = r;
            for (int i = 0; i < D; i++)
                o[i] = w[i] * (xr[q][i] * r);
        }
    }
}

void qw_rope_tables(const qw_config *c, int T, float *cosb, float *sinb) {
    int E = c->head_dim;
    float inv[E / 2 + 1];
    for (int i = 0; i < E / 2; i++) {
        float expo = (float)(2 * i) / (float)E;
        inv[i] = 1.0f / powf(c->rope_theta, expo);
    }
    if (c->rope_factor > 0.0f) {
        float old_ctx = (float)c->rope_original_max_pos;
        float low_wl = old_ctx / c->rope_low_freq_factor;
        float high_wl = old_ctx / c->rope_high_freq_factor;
        for (int i = 0; i < E / 2; i++) {
            float f = inv[i];
            float wl = 2.0f * (float)M_PI / f;
            float scaled = wl > low_wl ? f / c->rope_factor : f;
            if (!(wl < high_wl) && !(wl > low_wl)) {
                float smooth = (old_ctx / wl - c->rope_low_freq_factor) /
                               (c->rope_high_freq_factor - c->rope_low_freq_factor);
                scaled = (1.0f - smooth) * scaled / c->rope_factor + smooth * scaled;
            }
            inv[i] = scaled;
        }
    }
    for (size_t t = 0; t < (size_t)T; t++)
        for (int i = 0; i < E / 2; i++) {
            float ang = (float)t * inv[i];
            cosb[t * (E / 2) + i] = (float)cos((double)ang);
            sinb[t * (E / 2) + i] = (float)sin((double)ang);
        }
}

void qw_attention_forward(float *att, const float *q, const float *k, const float *v,
                          float *scores, int T, int H, int G, int E, int nt) {
    int group = H / G;
    int tiles = (T + QW_ATT_TILE - 1) / QW_ATT_TILE;
    float scale = 1.0f / sqrtf((float)E);
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (int w = 0; w < H * tiles; w++) {
        /* Later tiles have more keys: hand them out first so the team finishes together. */
        int h = w % H, tile = tiles - 1 - w / H, g = h / group;
        int t0 = tile * QW_ATT_TILE, rows = T - t0 < QW_ATT_TILE ? T - t0 : QW_ATT_TILE;
        int ncols = t0 + rows; /* keys 0..t0+rows-1: nothing past the tile's last query */
        float *S = scores + (size_t)omp_get_thread_num() * QW_ATT_TILE * T;
        qw_cpu_sgemm(0, 1, rows, ncols, E, scale, q + (size_t)t0 * H * E + (size_t)h * E, H * E,
                     k + (size_t)g * E, G * E, 0.0f, S, ncols);
        qw_cpu_causal_softmax(S, rows, ncols, t0, NULL);
        qw_cpu_sgemm(0, 0, rows, E, ncols, 1.0f, S, ncols, v + (size_t)g * E, G * E, 0.0f,
                     att + (size_t)t0 * H * E + (size_t)h * E, H * E);
    }
}

void qw_swiglu_forward(float *out, const float *g, const float *u, size_t n, int nt) {
    /* blocks of 4096 elements, each one qw_silu_mul_n call (elementwise: any split, same bits) */
    size_t blocks = (n + 4095) / 4096;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t b = 0; b < blocks; b++) {
        size_t i = b * 4096, m = n - i < 4096 ? n - i : 4096;
        qw_cpu_silu_mul(out + i, g + i, u + i, m);
    }
}

/* Row blocks per column piece of a linear's GEMM over T rows in `pieces` pieces on nt threads.
 * OpenBLAS: 1, every element from one call of the piece's full height (ops.h QW_GEMM_COLS).
 * The fixed-order GEMM gives each element's bits whatever the call (gemm_fixed.h), so a
 * linear with fewer pieces than 4 per thread (SmolLM2's q, k, v, o and down: 2 to 5 pieces)
 * also splits its rows, into blocks of at least 96 rows (12 to 16 register tiles), so that the
 * team's threads get equal shares: 5 pieces on 2 threads leave one idle a fifth of the time. */
static int row_blocks(int T, int pieces, int nt) {
    if (nt < 2 || qw_cpu_gemm_kind() != QW_CPU_GEMM_FIXED) return 1;
    int want = (4 * nt + pieces - 1) / pieces, most = T / 96;
    return want < 1 ? 1 : want < most ? want : most < 1 ? 1 : most;
}

/* Rows [*r0, *r1) of row block rb of nb over T rows, in multiples of the fixed GEMM's tile
 * height (qw_gemm_fixed_tile: 6 or 8 rows) except the last. */
static void row_block(int T, int rb, int nb, int *r0, int *r1) {
    int mr = qw_gemm_fixed_tile().mr > 0 ? qw_gemm_fixed_tile().mr : 1;
    int step = ((T + nb - 1) / nb + mr - 1) / mr * mr;
    *r0 = rb * step < T ? rb * step : T;
    *r1 = *r0 + step < T ? *r0 + step : T;
}

void qw_matmul_forward(float *y, const float *x, const float *W, int T, int in, int out, int nt) {
    int pieces = (out + QW_GEMM_COLS - 1) / QW_GEMM_COLS;
    int nb = row_blocks(T, pieces, nt);
    if (nt > pieces * nb) nt = pieces * nb;
    /* task: row block task / pieces of piece task % pieces (a piece's blocks far apart) */
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (int task = 0; task < pieces * nb; task++) {
        int p = task % pieces, r0, r1;
        row_block(T, task / pieces, nb, &r0, &r1);
        int c0 = p * QW_GEMM_COLS, c1 = c0 + QW_GEMM_COLS < out ? c0 + QW_GEMM_COLS : out;
        if (r1 > r0)
            qw_cpu_sgemm(0, 1, r1 - r0, c1 - c0, in, 1.0f, x + (size_t)r0 * in, in,
                         W + (size_t)c0 * in, in, 0.0f, y + (size_t)r0 * out + c0, out);
    }
}

/* qw_linear_forward, adding its activation fake-quant seconds to *act_s and the share of its
 * GEMM region's wall time spent converting weight pieces to *convert_s (both may be NULL), with
 * the pieces read from the conversion cache `cache` where it holds or takes them (NULL: every
 * piece converted into wscratch). */
static qs_status linear_timed(float *y, const float *x, int T, const qw_weight *w,
                              const qw_act_quant *act, float *xq, float *wscratch, int nt,
                              qw_convcache *cache, double *convert_s, double *act_s,
                              qs_error *err) {
    int in = (int)w->cols, out = (int)w->rows;
    const float *xin = x;
    if (act && act->fmt) {
        double t0 = qs_clock_s();
        memcpy(xq, x, (size_t)T * in * sizeof *x);
        qk_quant_options opt = act->opt;
        if (act->tensor_amax) {
            opt.tensor_amax_given = 1;
            opt.tensor_amax = act->tensor_amax[0];
        }
        qs_status st = qk_fake_quant(act->fmt, &opt, xq, (size_t)T, (size_t)in, NULL, err);
        if (act_s) *act_s += qs_clock_s() - t0;
        if (st != QS_OK) return st;
        xin = xq;
    }
    if (w->form == QW_WEIGHT_F32) {
        qw_matmul_forward(y, xin, w->f32, T, in, out, nt);
        return QS_OK;
    }
    /* The hot loop of a model whose masters are not FP32: each piece's rows are taken from the
     * conversion cache (under the fixed GEMM as its packed panels, so no forward packs a weight
     * again), or converted into this thread's scratch (it stays in cache for the GEMM) when the
     * cache has no room, then multiplied as qw_matmul_forward multiplies them, with the same
     * dimensions either way, so the bits are those of an FP32 copy (convcache.h, gemm_fixed.h).
     * Two clock reads per piece time the conversion against the GEMM (profile.h). */
    int pieces = (out + QW_GEMM_COLS - 1) / QW_GEMM_COLS;
    int nb = row_blocks(T, pieces, nt);
    if (nt > pieces * nb) nt = pieces * nb;
    int fixed = qw_cpu_gemm_kind() == QW_CPU_GEMM_FIXED;
    qs_status st = QS_OK;
    double conv = 0.0, gemm = 0.0, t_start = qs_clock_s();
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1) reduction(+ : conv, gemm)
    for (int task = 0; task < pieces * nb; task++) {
        int p = task % pieces, r0, r1;
        row_block(T, task / pieces, nb, &r0, &r1);
        if (r1 <= r0) continue;
        int c0 = p * QW_GEMM_COLS, c1 = c0 + QW_GEMM_COLS < out ? c0 + QW_GEMM_COLS : out;
        float *Wp = wscratch + (size_t)omp_get_thread_num() * QW_GEMM_COLS * in;
        qs_error e = {0};
        double t0 = qs_clock_s();
        const float *Wk = fixed ? qw_convcache_get_panels(cache, w, c0, c1 - c0, Wp) : NULL;
        const float *Wc = Wk ? NULL : qw_convcache_get(cache, w, c0, c1 - c0);
        if (!Wk && !Wc && qw_weight_rows_f32(w, c0, c1 - c0, Wp, &e) != QS_OK) {
#pragma omp critical(qw_linear_err)
            if (st == QS_OK) st = qs_error_set(err, e.code, "%s", e.msg);
            continue;
        }
        double t1 = qs_clock_s();
        if (Wk)
            qw_gemm_fixed_packed(0, r1 - r0, c1 - c0, in, 1.0f, xin + (size_t)r0 * in, in, Wk, 0.0f,
                                 y + (size_t)r0 * out + c0, out);
        else
            qw_cpu_sgemm(0, 1, r1 - r0, c1 - c0, in, 1.0f, xin + (size_t)r0 * in, in, Wc ? Wc : Wp,
                         in, 0.0f, y + (size_t)r0 * out + c0, out);
        qw_convcache_release(cache, Wk ? Wk : Wc);
        conv += t1 - t0;
        gemm += qs_clock_s() - t1;
    }
    if (convert_s && conv + gemm > 0.0)
        *convert_s += (qs_clock_s() - t_start) * conv / (conv + gemm);
    return st;
}

qs_status qw_linear_forward(float *y, const float *x, int T, const qw_weight *w,
                            const qw_act_quant *act, float *xq, float *wscratch, int nt,
                            qs_error *err) {
    return linear_timed(y, x, T, w, act, xq, wscratch, nt, NULL, NULL, NULL, err);
}

void qw_sqnr_sums_forward(const float *y, const float *ref, size_t n, double *signal,
                          double *noise) {
    double sig = 0.0, noi = 0.0;
    for (size_t i = 0; i < n; i++) {
        double r = ref[i], d = (double)y[i] - r;
        sig += r * r;
        noi += d * d;
    }
    *signal = sig;
    *noise = noi;
}

float qw_amax_forward(const float *x, size_t n) {
    float m = 0.0f;
    if (n) (void)qk_joint_amax(&x, &n, 1, 1, &m, NULL);
    return m;
}

/* ---------------------------------------------------------------- the CPU table */

static void *cpu_alloc(qw_backend *b, size_t bytes) {
    (void)b;
    return malloc(bytes ? bytes : 1);
}

static void cpu_free(qw_backend *b, void *p) {
    (void)b;
    free(p);
}

static void cpu_embedding(qw_backend *b, qw_tensor *x, const uint32_t *tokens,
                          const qw_weight *table) {
    qw_embedding_forward(x->data, tokens, (int)x->rows, table, b->threads);
}

static void cpu_attention(qw_backend *b, qw_tensor *att, const qw_tensor *q, const qw_tensor *k,
                          const qw_tensor *v, float *scores, int H, int G, int E) {
    qw_attention_forward(att->data, q->data, k->data, v->data, scores, (int)q->rows, H, G, E,
                         b->threads);
}

static qs_status cpu_linear(qw_backend *b, qw_tensor *y, const qw_tensor *x, const qw_weight *w,
                            const qw_act_quant *act, float *xq, qs_error *err) {
    return linear_timed(y->data, x->data, (int)x->rows, w, act, xq, b->wscratch, b->threads,
                        b->convcache, &b->convert_s, &b->act_quant_s, err);
}

static void cpu_logsoftmax(qw_backend *b, qw_tensor *lp, const qw_tensor *logits) {
    qw_logsoftmax_forward(lp->data, logits->data, (int)logits->rows, (int)logits->cols,
                          b->threads);
}

static void cpu_sqnr_sums(qw_backend *b, const qw_tensor *y, const qw_tensor *ref,
                          double *signal, double *noise) {
    (void)b;
    qw_sqnr_sums_forward(y->data, ref->data, (size_t)y->rows * (size_t)y->cols, signal, noise);
}

static void cpu_amax(qw_backend *b, const qw_tensor *x, float *out) {
    (void)b;
    out[0] = qw_amax_forward(x->data, (size_t)x->rows * (size_t)x->cols);
}

static void cpu_download(qw_backend *b, float *dst, size_t ld, const qw_tensor *src) {
    (void)b;
    for (int64_t r = 0; r < src->rows; r++)
        memcpy(dst + (size_t)r * ld, src->data + (size_t)r * (size_t)src->cols,
               (size_t)src->cols * sizeof *dst);
}

/* ---- training entries: the CPU training functions (ops_cpu_train.c) over host memory */

static qs_status cpu_upload(qw_backend *b, void *dst, const void *src, size_t bytes,
                            qs_error *err) {
    (void)b, (void)err;
    if (bytes) memcpy(dst, src, bytes);
    return QS_OK;
}

static qs_status cpu_zero(qw_backend *b, void *p, size_t bytes, qs_error *err) {
    (void)b, (void)err;
    if (bytes) memset(p, 0, bytes);
    return QS_OK;
}

static qs_status cpu_add(qw_backend *b, float *out, const float *x, const float *y, size_t n,
                         qs_error *err) {
    (void)err;
    int nt = b->threads;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t i = 0; i < n; i++)
        out[i] = x[i] + y[i];
    return QS_OK;
}

static qs_status cpu_gemm_abt(qw_backend *b, float *C, const float *A, const float *Bm, int M,
                              int Ncol, int K, float beta, qs_error *err) {
    (void)err;
    qw_train_gemm_abt(C, A, Bm, M, Ncol, K, beta, b->threads);
    return QS_OK;
}

static qs_status cpu_transpose(qw_backend *b, float *dst, const float *src, int rows, int cols,
                               qs_error *err) {
    (void)err;
    qw_train_transpose(dst, src, rows, cols, b->threads);
    return QS_OK;
}

static qs_status cpu_round_bf16(qw_backend *b, float *x, size_t n, qs_error *err) {
    (void)err;
    qw_train_round_bf16_copy(x, x, n, b->threads);
    return QS_OK;
}

static qs_status cpu_round_bf16_copy(qw_backend *b, float *dst, const float *src, size_t n,
                                     qs_error *err) {
    (void)err;
    qw_train_round_bf16_copy(dst, src, n, b->threads);
    return QS_OK;
}

static qs_status cpu_gemm_tt(qw_backend *b, int bf16, float *C, int ta, const float *A, int lda,
                             int tb, const float *Bm, int ldb, int M, int Ncol, int K, float beta,
                             qs_error *err) {
    (void)bf16;
    if (qw_cpu_gemm_kind() != QW_CPU_GEMM_FIXED)
        return qs_error_set(err, QS_EUNSUPPORTED, "gemm_tt: the fixed-order GEMM's only");
    qw_train_gemm_tt(C, ta, A, lda, tb, Bm, ldb, M, Ncol, K, beta, b->threads);
    return QS_OK;
}

static qs_status cpu_rht(qw_backend *b, float *x, size_t rows, size_t k, int d, uint64_t seed,
                         qs_error *err) {
    return qk_rht(x, rows, k, d, seed, 0, b->threads, err);
}

static qs_status cpu_rht_from(qw_backend *b, float *dst, const float *src, size_t rows, size_t k,
                              int transpose, int d, uint64_t seed, float *amax, qs_error *err) {
    return qk_rht_from(dst, src, rows, k, transpose, d, seed, b->threads, amax, err);
}

static qs_status cpu_fake_quant(qw_backend *b, const qk_format *fmt, const qk_quant_options *opt,
                                float *x, size_t rows, size_t k, qs_error *err) {
    (void)b;
    return qk_fake_quant(fmt, opt, x, rows, k, NULL, err);
}

static qs_status cpu_fake_quant_into(qw_backend *b, const qk_format *fmt,
                                     const qk_quant_options *opt, float *dst, const float *src,
                                     size_t rows, size_t k, qs_error *err) {
    (void)b;
    return qk_fake_quant_into(fmt, opt, src, dst, rows, k, NULL, err);
}

/* The CPU's kept operand is the fake-quantized FP32 copy, read as any FP32 GEMM input. */
static size_t cpu_quant_operand_bytes(qw_backend *b, const qk_format *fmt, size_t rows, size_t k) {
    (void)b, (void)fmt;
    return rows * k * sizeof(float);
}

static qs_status cpu_quant_operand(qw_backend *b, const qk_format *fmt, const qk_quant_options *opt,
                                   void *mem, const float *x, size_t rows, size_t k,
                                   qs_error *err) {
    (void)b;
    return qk_fake_quant_into(fmt, opt, x, mem, rows, k, NULL, err);
}

static qs_status cpu_method_input(qw_backend *b, float *y, const float *x, int T, int K,
                                  const float *s, int tile, qs_error *err) {
    (void)b;
    if (T < 1 || K < 1) return qs_error_set(err, QS_EINVAL, "method input: T=%d, K=%d", T, K);
    const size_t n = (size_t)T * (size_t)K;
    if (y != x) memcpy(y, x, n * sizeof *y);
    if (s) qk_smooth_apply(y, (size_t)T, (size_t)K, s, 1);
    /* one thread: T x K values, a few additions each, cheap beside the GEMM that follows */
    return tile ? qk_block_hadamard(y, (size_t)T, (size_t)K, (size_t)tile, 1, err) : QS_OK;
}

static qs_status cpu_embedding_fwd(qw_backend *b, float *out, const uint32_t *tokens,
                                   const float *emb, int N, int D, qs_error *err) {
    (void)b, (void)err;
    qw_train_embedding_forward(out, tokens, emb, N, D);
    return QS_OK;
}

static qs_status cpu_embedding_bwd(qw_backend *b, float *demb, const float *dout,
                                   const uint32_t *tokens, int N, int D, qs_error *err) {
    (void)b, (void)err;
    qw_train_embedding_backward(demb, dout, tokens, N, D);
    return QS_OK;
}

static qs_status cpu_rmsnorm(qw_backend *b, float *out, float *rstd, const float *x,
                                 const float *w, int N, int D, float eps, qs_error *err) {
    (void)err;
    qw_rmsnorm_forward(out, rstd, x, w, N, D, eps, b->threads);
    return QS_OK;
}

static qs_status cpu_rmsnorm_bwd(qw_backend *b, float *dx, float *dw, const float *dout,
                                 const float *x, const float *w, const float *rstd, int N, int D,
                                 qs_error *err) {
    (void)err;
    qw_train_rmsnorm_backward(dx, dw, dout, x, w, rstd, N, D, b->threads);
    return QS_OK;
}

static qs_status cpu_rope(qw_backend *b, float *x, const float *cosb, const float *sinb, int B,
                              int T, int nh, int E, qs_error *err) {
    (void)err;
    qw_rope_forward(x, cosb, sinb, B, T, nh, E, b->threads);
    return QS_OK;
}

static qs_status cpu_rope_bwd(qw_backend *b, float *dx, const float *cosb, const float *sinb, int B,
                              int T, int nh, int E, qs_error *err) {
    (void)err;
    qw_train_rope_backward(dx, cosb, sinb, B, T, nh, E, b->threads);
    return QS_OK;
}

static qs_status cpu_attention_fwd(qw_backend *b, float *out, float *probs, float *scratch,
                                   const float *q, const float *k, const float *v, int B, int T,
                                   int H, int G, int E, qs_error *err) {
    (void)err;
    /* the tiled kernel's bits are the whole-T kernel's on the fixed-order GEMM only: OpenBLAS
       sums other shapes in other orders, and its path keeps the results it has */
    if (qw_cpu_gemm_kind() == QW_CPU_GEMM_FIXED)
        qw_train_attention_forward_tiled(out, probs, scratch, q, k, v, B, T, H, G, E, b->threads);
    else
        qw_train_attention_forward(out, probs, q, k, v, B, T, H, G, E, b->threads);
    return QS_OK;
}

static qs_status cpu_attention_bwd(qw_backend *b, float *dq, float *dk, float *dv, float *dscratch,
                                   const float *dout, const float *q, const float *k,
                                   const float *v, const float *probs, int B, int T, int H, int G,
                                   int E, qs_error *err) {
    (void)err;
    if (qw_cpu_gemm_kind() == QW_CPU_GEMM_FIXED)
        qw_train_attention_backward_tiled(dq, dk, dv, dscratch, dout, q, k, v, probs, B, T, H, G, E,
                                          b->threads);
    else
        qw_train_attention_backward(dq, dk, dv, dscratch, dout, q, k, v, probs, B, T, H, G, E,
                                    b->threads);
    return QS_OK;
}

static qs_status cpu_swiglu(qw_backend *b, float *h, const float *g, const float *u, size_t n,
                                qs_error *err) {
    (void)err;
    qw_swiglu_forward(h, g, u, n, b->threads);
    return QS_OK;
}

static qs_status cpu_swiglu_bwd(qw_backend *b, float *dg, float *du, const float *dh,
                                const float *g, const float *u, size_t n, qs_error *err) {
    (void)err;
    qw_train_swiglu_backward(dg, du, dh, g, u, n, b->threads);
    return QS_OK;
}

static qs_status cpu_crossentropy_fwd(qw_backend *b, float *logits, float *losses,
                                      const uint32_t *targets, int N, int V, qs_error *err) {
    (void)err;
    qw_train_crossentropy_forward(logits, losses, targets, N, V, b->threads);
    return QS_OK;
}

static qs_status cpu_crossentropy_bwd(qw_backend *b, float *probs, const uint32_t *targets, int N,
                                      int V, float scale, qs_error *err) {
    (void)err;
    qw_train_crossentropy_backward(probs, targets, N, V, scale, b->threads);
    return QS_OK;
}

static qs_status cpu_linear_bwd(qw_backend *b, float *dx, int dx_accumulate, float *dW,
                                const float *dy, const float *x, const float *W, int N, int in,
                                int out, qs_error *err) {
    (void)err;
    qw_train_linear_backward(dx, dx_accumulate, dW, dy, x, W, N, in, out, b->threads);
    return QS_OK;
}

static qs_status cpu_sumsq(qw_backend *b, const float *g, size_t n, double *out, qs_error *err) {
    (void)err;
    *out = qw_train_sumsq(g, n, b->threads);
    return QS_OK;
}

static qs_status cpu_adamw(qw_backend *b, float *p, const float *g, float *m, float *v, size_t n,
                           float lr, float wd, float b1, float b2, float eps, float c1, float c2,
                           float grad_scale, qs_error *err) {
    (void)err;
    qw_train_adamw(p, g, m, v, n, lr, wd, b1, b2, eps, c1, c2, grad_scale, b->threads);
    return QS_OK;
}

static qs_status cpu_score_rows(qw_backend *b, const qw_tensor *logits, const uint32_t *targets,
                                const float *ref_lp, double *nll, double *kl, int32_t *argmax,
                                int32_t *ref_argmax, qs_error *err) {
    return qw_score_rows_forward(logits->data, (int)logits->rows, (int)logits->cols, targets,
                                 ref_lp, nll, kl, argmax, ref_argmax, b->threads, err);
}

/* Whether b's attention is the CPU's tiled kernel (a table copied from the CPU's, as tests and
 * the trainer's timed table make, keeps it). */
static int tiled_attention(const qw_backend *b) {
    return b->ops && b->ops->attention_bwd == cpu_attention_bwd &&
           qw_cpu_gemm_kind() == QW_CPU_GEMM_FIXED;
}

/* Whether b is the CUDA backend, whose attention is blocked too (ops_cuda_train.h: each row's
 * logsumexp saved, each row's D as scratch). */
static int cuda_attention(const qw_backend *b) {
    return b->ops && b->ops->name && strcmp(b->ops->name, "cuda") == 0;
}

size_t qw_train_attention_scratch_floats(const qw_backend *b, int T, int H, int E) {
    if (cuda_attention(b)) return (size_t)H * (size_t)T;
    if (tiled_attention(b)) return qw_train_attention_tiled_scratch_floats(T, E, b->threads);
    int n = b->threads > H ? b->threads : H;
    return (size_t)n * (size_t)T * (size_t)T;
}

size_t qw_train_attention_saved_floats(const qw_backend *b, int B, int T, int H) {
    if (cuda_attention(b)) return (size_t)B * (size_t)H * (size_t)T;
    if (tiled_attention(b)) return qw_train_attention_tiled_saved_floats(B, T, H);
    return (size_t)B * (size_t)H * (size_t)T * (size_t)T;
}

static const qw_ops cpu_ops = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .embedding = cpu_embedding,
    .rmsnorm = cpu_rmsnorm,
    .rope = cpu_rope,
    .attention = cpu_attention,
    .swiglu = cpu_swiglu,
    .linear = cpu_linear,
    .lm_head = cpu_linear,
    .logsoftmax = cpu_logsoftmax,
    .sqnr_sums = cpu_sqnr_sums,
    .amax = cpu_amax,
    .download = cpu_download,
    .score_rows = cpu_score_rows,
    .upload = cpu_upload,
    .fetch = cpu_upload,
    .copy = cpu_upload,
    .zero = cpu_zero,
    .add = cpu_add,
    .gemm_abt = cpu_gemm_abt,
    .gemm_abt_bf16 = cpu_gemm_abt, /* the same values, the same bits */
    .transpose = cpu_transpose,
    .round_bf16 = cpu_round_bf16,
    .rht = cpu_rht,
    .fake_quant = cpu_fake_quant,
    .embedding_fwd = cpu_embedding_fwd,
    .embedding_bwd = cpu_embedding_bwd,
    .rmsnorm_bwd = cpu_rmsnorm_bwd,
    .rope_bwd = cpu_rope_bwd,
    .attention_fwd = cpu_attention_fwd,
    .attention_bwd = cpu_attention_bwd,
    .swiglu_bwd = cpu_swiglu_bwd,
    .crossentropy_fwd = cpu_crossentropy_fwd,
    .crossentropy_bwd = cpu_crossentropy_bwd,
    .linear_bwd = cpu_linear_bwd,
    .sumsq = cpu_sumsq,
    .adamw = cpu_adamw,
    .gemm_tt = cpu_gemm_tt,
    .round_bf16_copy = cpu_round_bf16_copy,
    .rht_from = cpu_rht_from,
    .fake_quant_into = cpu_fake_quant_into,
    .quant_operand_bytes = cpu_quant_operand_bytes,
    .quant_operand = cpu_quant_operand,
    .method_input = cpu_method_input,
};

const qw_ops *qw_ops_cpu(void) {
    return &cpu_ops;
}

qs_status qw_backend_cpu_init(qw_backend *b, int threads, int max_in, qs_error *err) {
    memset(b, 0, sizeof *b);
    if (threads < 1 || max_in < 1)
        return qs_error_set(err, QS_EINVAL, "backend cpu: threads %d, max_in %d", threads,
                            max_in);
    qs_status st = qw_cpu_gemm_check(err); /* a QSWEEP_CPU_GEMM typo stops here */
    if (st != QS_OK) return st;
    size_t n = (size_t)threads * QW_GEMM_COLS * (size_t)max_in;
    b->wscratch = malloc(n * sizeof(float));
    if (!b->wscratch)
        return qs_error_set(err, QS_ENOMEM, "backend cpu: weight scratch of %zu floats", n);
    b->ops = &cpu_ops;
    b->threads = threads;
    b->wscratch_floats = n;
    return QS_OK;
}

void qw_backend_release(qw_backend *b) {
    if (!b) return;
    free(b->wscratch);
    memset(b, 0, sizeof *b);
}

static char cpu_path[96];
static pthread_once_t cpu_path_once = PTHREAD_ONCE_INIT;

/* OpenBLAS's path, "cpu-openblas-<version>-<core>": the configuration string starts
 * "OpenBLAS <version> ". */
static void cpu_path_init(void) {
    char version[32] = "unknown";
    const char *cfg = openblas_get_config(), *core = openblas_get_corename();
    if (!cfg || sscanf(cfg, "OpenBLAS %31s", version) != 1) strcpy(version, "unknown");
    snprintf(cpu_path, sizeof cpu_path, "cpu-openblas-%s-%s", version,
             core && *core ? core : "unknown");
    for (char *p = cpu_path; *p; p++)
        if (*p >= 'A' && *p <= 'Z') *p = (char)(*p - 'A' + 'a');
}

const char *qw_backend_cpu_path(void) {
    /* The fixed path's bits are a function of the shapes and operands alone (gemm_fixed.h,
     * expf_fixed.h): its path names no CPU, ISA or library. */
    if (qw_cpu_gemm_kind() == QW_CPU_GEMM_FIXED) return QS_NUMERICS_CPU_FIXED;
    pthread_once(&cpu_path_once, cpu_path_init);
    return cpu_path;
}

const char *qw_backend_cpu_blas_config(void) {
    const char *cfg = openblas_get_config();
    return cfg ? cfg : "unknown";
}
