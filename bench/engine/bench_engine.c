/* SmolLM2-135M evaluation throughput on the CPU, and the forward pass's GEMM efficiency.
 *
 * For 1 thread and for all cores: tokens/s of full evaluation chunks (ctx tokens, forward +
 * logits; no I/O), the achieved GFLOP/s of the forward pass, and the GFLOP/s of cblas_sgemm
 * alone on the same sequence of GEMM shapes, timed in the same run: the ratio of the two is
 * the engine's efficiency against the GEMM ceiling it is built on (issue 3 target: >= 0.7).
 *
 * FLOPs counted per forward of T tokens (the GEMMs the engine executes):
 *   linears  2*T*(sum over linears of out*in), lm_head included;
 *   attention 2 * 2*T*T*E per head and block (Q K^T and P V over the full T x T square).
 * Elementwise work (norms, RoPE, softmax, SwiGLU) is not counted: it is the overhead.
 *
 * Usage: bench_engine [gguf] [ctx=512] [chunks=2]. Without the GGUF it says so and exits 0. */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "model.h"
#include "tokens.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct shape {
    int m, n, k, trans_b, lda, ldb, ldc;
} shape;

/* The GEMM shapes of one forward of T tokens, in execution order; returns the count and FLOPs. */
static int forward_shapes(const qw_config *c, int T, shape *s, double *flops) {
    int D = c->dim, F = c->hidden_dim, H = c->n_heads, G = c->n_kv_heads, E = c->head_dim, V = c->vocab_size;
    int n = 0;
    double fl = 0.0;
    const int outs[7] = {H * E, G * E, G * E, D, F, F, D}, ins[7] = {D, D, D, H * E, D, D, F};
    for (int l = 0; l < c->n_layers; l++) {
        for (int k = 0; k < 3; k++) s[n++] = (shape){T, outs[k], ins[k], 1, ins[k], ins[k], outs[k]};
        for (int h = 0; h < H; h++) {
            s[n++] = (shape){T, T, E, 1, H * E, G * E, T};
            s[n++] = (shape){T, E, T, 0, T, G * E, H * E};
        }
        for (int k = 3; k < 7; k++) s[n++] = (shape){T, outs[k], ins[k], 1, ins[k], ins[k], outs[k]};
    }
    s[n++] = (shape){T, V, D, 1, D, D, V};
    for (int i = 0; i < n; i++) fl += 2.0 * s[i].m * s[i].n * s[i].k;
    *flops = fl;
    return n;
}

static double time_sgemm(const shape *s, int n, float *A, float *B, float *C, int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        for (int i = 0; i < n; i++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, s[i].trans_b ? CblasTrans : CblasNoTrans, s[i].m, s[i].n, s[i].k,
                        1.0f, A, s[i].lda, B, s[i].ldb, 0.0f, C, s[i].ldc);
        double dt = now_s() - t0;
        best = dt < best ? dt : best;
    }
    return best;
}

int main(int argc, char **argv) {
    char def[1024];
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && *xdg)
        snprintf(def, sizeof def, "%s/qsweep/models/SmolLM2-135M-Instruct.Q4_1.gguf", xdg);
    else
        snprintf(def, sizeof def, "%s/.cache/qsweep/models/SmolLM2-135M-Instruct.Q4_1.gguf", home ? home : "");
    const char *gguf = argc > 1 ? argv[1] : def;
    int ctx = argc > 2 ? atoi(argv[2]) : 512;
    int chunks = argc > 3 ? atoi(argv[3]) : 2;
    if (ctx < 2 || chunks < 1) {
        fprintf(stderr, "usage: bench_engine [gguf] [ctx>=2] [chunks>=1]\n");
        return 2;
    }
    if (access(gguf, R_OK) != 0) {
        printf("bench_engine: %s absent (tools/fetch_smollm2.sh fetches it); nothing measured\n", gguf);
        return 0;
    }
    char tokpath[1024];
    snprintf(tokpath, sizeof tokpath, "%s/gpl3.smollm2.tokens", QW_ENGINE_DATA);
    qs_error err = {0};
    qw_checkpoint *ck;
    qw_tokens toks;
    qw_model *m;
    double t0 = now_s();
    if (qw_checkpoint_open(gguf, &ck, &err) != QS_OK || qw_model_create(ck, ctx, 0, &m, &err) != QS_OK ||
        qw_tokens_load(tokpath, &toks, &err) != QS_OK) {
        fprintf(stderr, "bench_engine: %s\n", err.msg);
        return 1;
    }
    double t_load = now_s() - t0;
    if (toks.n < (size_t)ctx * chunks) {
        fprintf(stderr, "bench_engine: %zu tokens, fewer than %d chunks of %d\n", toks.n, chunks, ctx);
        return 1;
    }
    const qw_config *c = qw_model_config(m);
    int max_shapes = c->n_layers * (7 + 2 * c->n_heads) + 1;
    shape *sh = malloc((size_t)max_shapes * sizeof *sh);
    double flops;
    int ns = forward_shapes(c, ctx, sh, &flops);
    size_t big = (size_t)ctx * (size_t)(c->vocab_size > c->hidden_dim ? c->vocab_size : c->hidden_dim);
    size_t wbig = (size_t)c->vocab_size * c->dim;
    if ((size_t)c->hidden_dim * c->dim > wbig) wbig = (size_t)c->hidden_dim * c->dim;
    float *A = calloc((size_t)ctx * (c->hidden_dim > ctx ? c->hidden_dim : ctx) * (size_t)c->n_heads, sizeof(float));
    float *B = calloc(wbig > big ? wbig : big, sizeof(float));
    float *C = calloc(big, sizeof(float));
    if (!sh || !A || !B || !C) {
        fprintf(stderr, "bench_engine: out of memory\n");
        return 1;
    }
    printf("SmolLM2-135M (%s): %d layers, dim %d, ffn %d, heads %d/%d, vocab %d; load %.2f s\n", gguf, c->n_layers,
           c->dim, c->hidden_dim, c->n_heads, c->n_kv_heads, c->vocab_size, t_load);
    printf("ctx %d, %d chunks per measurement, %.1f GFLOP per forward (%d GEMMs)\n\n", ctx, chunks, flops * 1e-9, ns);
    printf("%-8s %12s %14s %14s %14s %8s\n", "threads", "tokens/s", "s/chunk", "engine GF/s", "sgemm GF/s", "ratio");
    int all = omp_get_num_procs();
    int thread_counts[2] = {1, all};
    for (int ti = 0; ti < (all > 1 ? 2 : 1); ti++) {
        int th = thread_counts[ti];
        if (qw_model_set_threads(m, th, &err) != QS_OK) {
            fprintf(stderr, "bench_engine: %s\n", err.msg);
            return 1;
        }
        const float *logits;
        qw_model_forward(m, toks.ids, ctx, &logits, &err); /* warm-up */
        double best = 1e30, total = 0.0;
        for (int ch = 0; ch < chunks; ch++) {
            double s0 = now_s();
            if (qw_model_forward(m, toks.ids + (size_t)ch * ctx, ctx, &logits, &err) != QS_OK) {
                fprintf(stderr, "bench_engine: %s\n", err.msg);
                return 1;
            }
            double dt = now_s() - s0;
            total += dt;
            best = dt < best ? dt : best;
        }
        /* The ceiling: OpenBLAS's own threading on the same shapes (the model runs it single-
         * threaded under its OpenMP team, so give it the threads back for this pass). */
        openblas_set_num_threads(th);
        double t_gemm = time_sgemm(sh, ns, A, B, C, chunks);
        openblas_set_num_threads(1);
        double gf_engine = flops / best * 1e-9, gf_gemm = flops / t_gemm * 1e-9;
        printf("%-8d %12.1f %14.3f %14.2f %14.2f %8.3f\n", th, ctx * chunks / total, total / chunks, gf_engine, gf_gemm,
               gf_engine / gf_gemm);
    }
    printf("\n(tokens/s: mean over the chunks; GFLOP/s: best chunk against the best sgemm pass)\n");
    free(sh);
    free(A);
    free(B);
    free(C);
    qw_tokens_free(&toks);
    qw_model_destroy(m);
    qw_checkpoint_close(ck);
    return 0;
}
