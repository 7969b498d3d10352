/* bench_train: training throughput per recipe, as a ratio to cblas_sgemm on the same GEMM shapes
 * measured in the same run (targets: bf16 >= 0.5, nvfp4 >= 0.3).
 *
 * Model: the tiny experiment's shape (d 128, 4 blocks, 4 heads, 2 KV heads, FFN 384, vocab 258,
 * ctx 128), batch B sequences. One step = forward + backward + AdamW over B*ctx tokens.
 * Work counted: the linears' GEMMs, 3 GEMMs x 2*N*in*out FLOPs per linear (fprop, dgrad, wgrad;
 * lm_head included), i.e. 6*N*(linear parameters). Attention's batched matmuls, norms and the
 * optimizer are not counted (they are small here: attention is ~8% of the linear FLOPs at
 * ctx 128, d 128) but their time is, so the ratio is what a recipe achieves end to end.
 * Baseline: the same 3 GEMMs of every linear, one cblas_sgemm call each (OpenBLAS with the
 * same thread count), FP32 in and out.
 * Usage: bench_train [threads (1)] [batch (8)] [steps (6)] */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "data.h"
#include "tmodel.h"
#include "trainer.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct shape {
    int in, out;
} shape;

static double baseline_gflops(const shape *sh, int n_sh, int N, int nt, int reps) {
    size_t mx = 0;
    for (int i = 0; i < n_sh; i++) {
        size_t a = (size_t)N * sh[i].in, b = (size_t)N * sh[i].out,
               c = (size_t)sh[i].in * sh[i].out;
        mx = a > mx ? a : mx;
        mx = b > mx ? b : mx;
        mx = c > mx ? c : mx;
    }
    float *A = malloc(mx * 4), *Bm = malloc(mx * 4), *C = malloc(mx * 4);
    for (size_t i = 0; i < mx; i++) {
        A[i] = (float)((i * 7) % 13) * 0.1f;
        Bm[i] = (float)((i * 5) % 11) * 0.1f;
    }
    openblas_set_num_threads(nt);
    double flops = 0, t0 = now_s();
    for (int r = 0; r < reps; r++)
        for (int i = 0; i < n_sh; i++) {
            int in = sh[i].in, out = sh[i].out;
            /* fprop y = x W^T, dgrad dx = dy W, wgrad dW = dy^T x */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, out, in, 1, A, in, Bm, in, 0, C,
                        out);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, in, out, 1, A, out, Bm, in, 0,
                        C, in);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, N, 1, A, out, Bm, in, 1,
                        C, in);
            flops += 6.0 * N * in * out;
        }
    double dt = now_s() - t0;
    openblas_set_num_threads(1);
    free(A);
    free(Bm);
    free(C);
    return flops / dt * 1e-9;
}

int main(int argc, char **argv) {
    int nt = argc > 1 ? atoi(argv[1]) : 1, B = argc > 2 ? atoi(argv[2]) : 8,
        steps = argc > 3 ? atoi(argv[3]) : 6;
    qw_config c = {0};
    c.dim = 128;
    c.hidden_dim = 384;
    c.n_layers = 4;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = 32;
    c.vocab_size = 258;
    c.max_seq_len = 128;
    c.norm_eps = 1e-5f;
    c.rope_theta = 10000.0f;
    int T = 128, N = B * T;
    int HE = c.n_heads * c.head_dim, GE = c.n_kv_heads * c.head_dim;
    shape sh[8 * 7 + 1];
    int n_sh = 0;
    for (int l = 0; l < c.n_layers; l++) {
        shape blk[7] = {{c.dim, HE},          {c.dim, GE},           {c.dim, GE},
                        {HE, c.dim},          {c.dim, c.hidden_dim}, {c.dim, c.hidden_dim},
                        {c.hidden_dim, c.dim}};
        for (int k = 0; k < 7; k++)
            sh[n_sh++] = blk[k];
    }
    sh[n_sh++] = (shape){c.dim, c.vocab_size};
    double lin_flops = 0;
    for (int i = 0; i < n_sh; i++)
        lin_flops += 6.0 * N * sh[i].in * sh[i].out;
    size_t ntok = (size_t)N * (steps + 2) + 1;
    uint32_t *stream = malloc(ntok * 4);
    for (size_t i = 0; i < ntok; i++)
        stream[i] = (uint32_t)((i * 2654435761u) >> 7) % 258u;
    double base = baseline_gflops(sh, n_sh, N, nt, 3);
    printf("bench_train: d %d, %d blocks, FFN %d, vocab %d, batch %d x ctx %d, %d threads\n", c.dim,
           c.n_layers, c.hidden_dim, c.vocab_size, B, T, nt);
    printf("baseline cblas_sgemm on the same GEMM shapes: %.2f GFLOP/s\n", base);
    printf("%-18s %12s %10s %10s\n", "recipe", "tokens/s", "GFLOP/s", "ratio");
    const char *recipes[] = {"fp32",         "bf16",        "fp8",         "nvfp4",
                             "nvfp4-no-rht", "nvfp4-no-sr", "nvfp4-no-2d", "mxfp4"};
    for (size_t ri = 0; ri < sizeof recipes / sizeof recipes[0]; ri++) {
        qs_error err = {0};
        qw_tmodel *m = NULL;
        if (qw_tmodel_create(&c, B, T, nt, &m, &err) != QS_OK) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        qw_tmodel_init_random(m, 1, 0.02f, &err);
        qw_recipe r;
        qw_recipe_by_name(recipes[ri], &r, &err);
        qw_tmodel_set_recipe(m, &r, 1, &err);
        qw_data d;
        qw_data_init(&d, stream, ntok, 0.0, T, 1, &err);
        qw_train_config tc = {0};
        tc.steps = steps + 1;
        tc.accum = 1;
        tc.sched = (qw_lr_schedule){1e-3f, 1e-4f, 0, 0, QW_DECAY_COSINE};
        tc.adamw = (qw_adamw){0.9f, 0.95f, 1e-8f, 0.1f};
        tc.clip = 1.0f;
        tc.diverge_loss = 1e9;
        qw_trainer tr;
        qw_trainer_create(&tr, m, &d, &tc, nt, &err);
        qw_trainer_step(&tr, NULL, &err); /* warm-up */
        double t0 = now_s();
        for (int s = 0; s < steps; s++)
            if (qw_trainer_step(&tr, NULL, &err) != QS_OK) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
            }
        double dt = (now_s() - t0) / steps;
        double gf = lin_flops / dt * 1e-9;
        printf("%-18s %12.0f %10.2f %10.3f\n", recipes[ri], N / dt, gf, gf / base);
        qw_trainer_free(&tr);
        qw_data_free(&d);
        qw_tmodel_destroy(m);
    }
    free(stream);
    return 0;
}
