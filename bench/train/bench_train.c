/* bench_train: training throughput per recipe, as a ratio to a GEMM baseline on the same GEMM
 * shapes measured in the same run.
 *
 * CPU mode (the default; targets at 1 thread: fp32 >= 0.85, bf16 >= 0.7, nvfp4 >= 0.5 of
 * cblas_sgemm):
 * Model: the tiny experiment's shape (d 128, 4 blocks, 4 heads, 2 KV heads, FFN 384, vocab 258,
 * ctx 128), batch B sequences. One step = forward + backward + AdamW over B*ctx tokens.
 * Work counted: the linears' GEMMs, 3 GEMMs x 2*N*in*out FLOPs per linear (fprop, dgrad, wgrad;
 * lm_head included), i.e. 6*N*(linear parameters). Attention's batched matmuls, norms and the
 * optimizer are not counted (they are small here: attention is ~8% of the linear FLOPs at
 * ctx 128, d 128) but their time is, so the ratio is what a recipe achieves end to end.
 * Baseline: the same 3 GEMMs of every linear, one cblas_sgemm call each (OpenBLAS with the
 * same thread count), FP32 in and out.
 * Usage: bench_train [--profile] [threads (1)] [batch (8)] [steps (6)]   (or --backend cpu [...]
 * the same). --profile: only fp32, bf16 and nvfp4, then milliseconds per step of each phase of
 * worker/train/tprofile.h (the GEMMs per linear kind and pass, operand preparation, attention,
 * norms, RoPE, SwiGLU, cross-entropy, optimizer) and their share of the step.
 *
 * CUDA mode (--backend cuda; target: a step's achieved FLOP/s >= 0.5 of the cuBLAS BF16 GEMM
 * rate): the same trainer (worker/train/trainer.h) on the CUDA backend of the ops
 * table (backend.h's registered table, as the worker registers its module's), the bf16 and
 * nvfp4 recipes, on the tiny shape (batch 8 x ctx 128, the CPU mode's) and on SmolLM2-135M's
 * (synthetic.h smollm2-135m, batch 8 x ctx 512, tied lm_head), random initialisation and
 * random tokens. Work counted: 6*N*(linear parameters) as above plus causal attention,
 * 6*B*T*T*H*E (the forward's QK^T and PV, 4*T*T*E per head and sequence, halved for the causal
 * mask, as bench_gpu_eval counts it, and twice that in the backward). Baseline: the same 3
 * GEMMs of every linear as cuBLAS BF16 GEMMs (bench/common/cublas_rate.h: cublasGemmEx, BF16 in,
 * FP32 accumulate and out), and as FP32 cublasSgemm, which the training ops call, for
 * reference. Each recipe: one warm-up step, then the mean of `steps` (3) steps. Prints
 * "summary:" lines for tools/device-check.sh, one per recipe and one with the first nvfp4
 * recipe's step time over bf16's and the path its linears' GEMMs ran (recipe_path.h; targets
 * 0.8 with native_fp4, 1.3 emulated in BF16). Without a GPU, or in a build without CUDA, it
 * says so and exits 0 (skipped).
 * Usage: bench_train --backend cuda [--shape NAME --batch B --ctx T] [--steps S]
 *                    [--recipes bf16,nvfp4] */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "cublas_rate.h"
#include "data.h"
#include "synthetic.h"
#include "recipe_path.h"
#include "tmodel.h"
#include "trainer.h"
#if QW_BENCH_TRAIN_CUDA
#include "backend_cuda.h"
#endif

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double baseline_gflops(const qb_linear *sh, int n_sh, int N, int nt, int reps) {
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

/* The linears of c over N rows in a step's order, per block q, k, v, o, gate, up, down, then
 * lm_head, into sh[c->n_layers * 7 + 1]; returns their count. */
static int linear_shapes(const qw_config *c, int N, qb_linear *sh) {
    int HE = c->n_heads * c->head_dim, GE = c->n_kv_heads * c->head_dim, n = 0;
    for (int l = 0; l < c->n_layers; l++) {
        qb_linear blk[7] = {{c->dim, HE, N},
                            {c->dim, GE, N},
                            {c->dim, GE, N},
                            {HE, c->dim, N},
                            {c->dim, c->hidden_dim, N},
                            {c->dim, c->hidden_dim, N},
                            {c->hidden_dim, c->dim, N}};
        for (int k = 0; k < 7; k++)
            sh[n++] = blk[k];
    }
    sh[n++] = (qb_linear){c->dim, c->vocab_size, N};
    return n;
}

/* Seconds per optimizer step of recipe on a model of c (batch B x ctx T, Llama initialisation of
 * std init_std, seed 1) on backend be, or on a CPU backend of its own with nt threads when be is
 * NULL: one warm-up step, then the mean of `steps` steps over a deterministic token stream;
 * with prof, the model's profile of those steps (tprofile.h), per step. Returns -1 after
 * printing the error. */
static double step_seconds(const qw_config *c, float init_std, qw_backend *be, int nt, int B, int T,
                           const char *recipe, int steps, char *path, size_t path_cap,
                           qw_tprofile *prof) {
    int N = B * T;
    size_t ntok = (size_t)N * (steps + 2) + 1;
    uint32_t *stream = malloc(ntok * 4);
    if (!stream) {
        fprintf(stderr, "bench_train: %zu tokens: out of memory\n", ntok);
        return -1;
    }
    for (size_t i = 0; i < ntok; i++)
        stream[i] = (uint32_t)((i * 2654435761u) >> 7) % (uint32_t)c->vocab_size;
    qs_error err = {0};
    qw_tmodel *m = NULL;
    qw_recipe r;
    qw_data d = {0};
    qw_trainer tr = {0};
    int have_d = 0, have_tr = 0;
    double dt = -1;
    qs_status st =
        be ? qw_tmodel_create_on(c, B, T, be, &m, &err) : qw_tmodel_create(c, B, T, nt, &m, &err);
    if (st == QS_OK) st = qw_tmodel_init_random(m, 1, init_std, &err);
    if (st == QS_OK) st = qw_recipe_by_name(recipe, &r, &err);
    if (st == QS_OK) st = qw_tmodel_set_recipe(m, &r, 1, &err);
    if (st == QS_OK) {
        st = qw_data_init(&d, stream, ntok, 0.0, T, 1, &err);
        have_d = st == QS_OK;
    }
    qw_train_config tc = {0};
    tc.steps = steps + 1;
    tc.accum = 1;
    tc.sched = (qw_lr_schedule){1e-3f, 1e-4f, 0, 0, QW_DECAY_COSINE};
    tc.adamw = (qw_adamw){0.9f, 0.95f, 1e-8f, 0.1f};
    tc.clip = 1.0f;
    tc.diverge_loss = 1e9;
    if (st == QS_OK) {
        st = qw_trainer_create(&tr, m, &d, &tc, nt, &err);
        have_tr = st == QS_OK;
    }
    if (st == QS_OK) st = qw_trainer_step(&tr, NULL, &err); /* warm-up */
    if (st == QS_OK) qw_tprofile_reset(qw_tmodel_profile(m));
    double t0 = now_s();
    for (int s = 0; s < steps && st == QS_OK; s++)
        st = qw_trainer_step(&tr, NULL, &err);
    /* a step returns once its loss is on the host; its optimizer update may still run on a
     * device: a 4-byte fetch of the parameters waits for it */
    float p0;
    if (st == QS_OK) {
        qw_backend *mb = qw_tmodel_backend(m);
        st = mb->ops->fetch(mb, &p0, qw_tmodel_params(m), sizeof p0, &err);
    }
    if (st == QS_OK) {
        dt = (now_s() - t0) / steps;
        if (prof) {
            *prof = *qw_tmodel_profile(m);
            for (int i = 0; i < QW_TPHASES; i++)
                prof->s[i] /= steps;
        }
        /* the paths the linears' GEMMs ran (recipe_path.h: native_fp4, emulated_bf16, ...) */
        unsigned ran[QW_N_LINEAR_GEMMS], all = 0;
        qw_tmodel_gemm_ran(m, ran);
        for (int g = 0; g < QW_N_LINEAR_GEMMS; g++)
            all |= ran[g];
        if (path) snprintf(path, path_cap, "%s", qw_train_ran_path(all));
    } else
        fprintf(stderr, "bench_train: %s: %s\n", recipe, err.msg);
    if (have_tr) qw_trainer_free(&tr);
    if (have_d) qw_data_free(&d);
    qw_tmodel_destroy(m);
    free(stream);
    return dt;
}

/* The CPU mode's profiled recipes (--profile), the targets' three. */
static const char *const profiled[3] = {"fp32", "bf16", "nvfp4"};

/* --profile: milliseconds per step of each phase for the recipes of prof[] (profiled order),
 * rows where a recipe spent time; the GEMMs' sum, what no phase holds (the trainer's batch
 * reads, loss sums, clock reads) and the step. */
static void print_profile(const qw_tprofile *prof, const double *step) {
    printf("\nprofile (worker/train/tprofile.h): milliseconds per step\n%-20s", "phase");
    for (int r = 0; r < 3; r++)
        printf(" %10s %6s", profiled[r], "share");
    printf("\n");
    double gemm[3] = {0, 0, 0}, sum[3] = {0, 0, 0};
    for (int i = 0; i < QW_TPHASES; i++) {
        int any = 0;
        for (int r = 0; r < 3; r++) {
            any |= prof[r].s[i] > 0;
            sum[r] += prof[r].s[i];
            if (i < QW_TPHASE_PREP_COPY) gemm[r] += prof[r].s[i];
        }
        if (!any) continue;
        printf("%-20s", qw_tphase_name((qw_tphase)i));
        for (int r = 0; r < 3; r++)
            printf(" %10.3f %5.1f%%", prof[r].s[i] * 1e3, 100.0 * prof[r].s[i] / step[r]);
        printf("\n");
    }
    const char *labels[3] = {"(all GEMMs)", "(other)", "(step)"};
    for (int k = 0; k < 3; k++) {
        printf("%-20s", labels[k]);
        for (int r = 0; r < 3; r++) {
            double v = k == 0 ? gemm[r] : k == 1 ? step[r] - sum[r] : step[r];
            printf(" %10.3f %5.1f%%", v * 1e3, 100.0 * v / step[r]);
        }
        printf("\n");
    }
}

/* The CPU mode (the header's first part); with profile only the recipes of profiled[], and
 * their per-phase table. */
static int cpu_main(int nt, int B, int steps, int profile) {
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
    qb_linear sh[4 * 7 + 1];
    int n_sh = linear_shapes(&c, N, sh);
    double lin_flops = 0;
    for (int i = 0; i < n_sh; i++)
        lin_flops += 6.0 * N * sh[i].in * sh[i].out;
    double base = baseline_gflops(sh, n_sh, N, nt, 3);
    printf("bench_train: d %d, %d blocks, FFN %d, vocab %d, batch %d x ctx %d, %d threads\n", c.dim,
           c.n_layers, c.hidden_dim, c.vocab_size, B, T, nt);
    printf("baseline cblas_sgemm on the same GEMM shapes: %.2f GFLOP/s\n", base);
    printf("%-18s %12s %10s %10s\n", "recipe", "tokens/s", "GFLOP/s", "ratio");
    const char *all[] = {"fp32",         "bf16",        "fp8",         "nvfp4",
                         "nvfp4-no-rht", "nvfp4-no-sr", "nvfp4-no-2d", "mxfp4"};
    const char *const *recipes = profile ? profiled : all;
    size_t n_rec = profile ? 3 : sizeof all / sizeof all[0];
    qw_tprofile prof[3];
    double step[3];
    for (size_t ri = 0; ri < n_rec; ri++) {
        double dt = step_seconds(&c, 0.02f, NULL, nt, B, T, recipes[ri], steps, NULL, 0,
                                 profile ? &prof[ri] : NULL);
        if (dt < 0) return 1;
        double gf = lin_flops / dt * 1e-9;
        printf("%-18s %12.0f %10.2f %10.3f\n", recipes[ri], N / dt, gf, gf / base);
        if (profile) step[ri] = dt;
    }
    if (profile) print_profile(prof, step);
    return 0;
}

/* The CUDA mode's target: a step's FLOP/s as a ratio of the cuBLAS BF16 GEMM rate. */
#define BT_CUDA_TARGET 0.5

/* One CUDA run: a shape at batch B x ctx T. */
typedef struct bt_run {
    const char *shape;
    int B, T;
} bt_run;

#if QW_BENCH_TRAIN_CUDA
/* Runs every recipe of recipes[n_rec] on run r on CUDA device 0 (the header's second part).
 * Returns 0, or 1 after printing the error. */
static int cuda_run(const bt_run *r, const char *const *recipes, int n_rec, int steps) {
    const qw_synthetic_shape *ss = qw_synthetic_shape_by_name(r->shape);
    if (!ss) {
        fprintf(stderr, "bench_train: unknown shape \"%s\" (synthetic.h names)\n", r->shape);
        return 1;
    }
    const qw_config *c = &ss->cfg;
    int B = r->B, T = r->T, N = B * T;
    if (T > c->max_seq_len) {
        fprintf(stderr, "bench_train: ctx %d > %s's max_position_embeddings %d\n", T, r->shape,
                c->max_seq_len);
        return 1;
    }
    qb_linear *sh = malloc(((size_t)c->n_layers * 7 + 1) * sizeof *sh);
    if (!sh) return 1;
    int n_sh = linear_shapes(c, N, sh);
    double lin_params = 0;
    for (int i = 0; i < n_sh; i++)
        lin_params += (double)sh[i].in * sh[i].out;
    double lin_flops = 6.0 * N * lin_params,
           att_flops = 6.0 * B * (double)T * T * c->n_heads * c->head_dim * c->n_layers;
    char why[256] = "";
    double bf16 =
        qb_cublas_tflops(sh, n_sh, QB_PASS_TRAINING, QB_GEMM_BF16, 3, NULL, why, sizeof why);
    double fp32 = bf16 > 0 ? qb_cublas_tflops(sh, n_sh, QB_PASS_TRAINING, QB_GEMM_FP32, 3, NULL,
                                              why, sizeof why)
                           : -1;
    free(sh);
    if (bf16 <= 0 || fp32 <= 0) {
        fprintf(stderr, "bench_train: baseline: %s\n", why);
        return 1;
    }
    qw_backend be;
    qs_error err = {0};
    qw_backend_choice bc = {QW_BACKEND_CUDA, 1, 1, 0, 0};
    if (qw_backend_open(&be, &bc, &err) != QS_OK) {
        fprintf(stderr, "bench_train: CUDA backend: %s\n", err.msg);
        return 1;
    }
    printf("%s: d %d, %d blocks, FFN %d, vocab %d, batch %d x ctx %d (%d tokens/step), "
           "%.1fM linear parameters, backend gemm_path %s\n",
           r->shape, c->dim, c->n_layers, c->hidden_dim, c->vocab_size, B, T, N, lin_params / 1e6,
           qw_backend_gemm_path_name(&be));
    printf("  work per step: linears %.3f TFLOP, causal attention %.3f TFLOP\n", lin_flops * 1e-12,
           att_flops * 1e-12);
    printf("  baseline on the step's linear GEMM shapes: cuBLAS BF16 %.1f TFLOP/s, FP32 "
           "cublasSgemm %.1f TFLOP/s\n",
           bf16, fp32);
    int rc = 0;
    double bf16_dt = -1, fp4_dt = -1;
    char fp4_name[32] = "", fp4_path[32] = "";
    for (int i = 0; i < n_rec && rc == 0; i++) {
        char path[32] = "";
        double dt =
            step_seconds(c, ss->init_std, &be, 1, B, T, recipes[i], steps, path, sizeof path, NULL);
        if (dt < 0) {
            rc = 1;
            break;
        }
        if (!strcmp(recipes[i], "bf16")) bf16_dt = dt;
        if (!strncmp(recipes[i], "nvfp4", 5) && fp4_dt < 0) {
            fp4_dt = dt;
            snprintf(fp4_name, sizeof fp4_name, "%s", recipes[i]);
            snprintf(fp4_path, sizeof fp4_path, "%s", path);
        }
        double tf = (lin_flops + att_flops) / dt * 1e-12, ratio = tf / bf16;
        printf("summary: train %s B%d ctx %d recipe %s: %.0f tokens/s, %.1f ms/step, %.2f "
               "TFLOP/s = %.3f x cuBLAS BF16 GEMM (%.1f TFLOP/s), %.2f x cublasSgemm (%.1f); "
               "target %.1f: %s\n",
               r->shape, B, T, recipes[i], N / dt, dt * 1e3, tf, ratio, bf16, tf / fp32, fp32,
               BT_CUDA_TARGET, ratio >= BT_CUDA_TARGET ? "met" : "missed");
    }
    /* the NVFP4 recipe's step time over the BF16 recipe's, both measured above (targets: 0.8
       where its GEMMs run native_fp4, 1.3 where they are emulated in BF16) */
    if (rc == 0 && bf16_dt > 0 && fp4_dt > 0) {
        double target = !strcmp(fp4_path, "native_fp4") ? 0.8 : 1.3, q = fp4_dt / bf16_dt;
        printf("summary: train %s B%d ctx %d recipe %s / bf16 step time: %.3f (%.1f / %.1f ms, "
               "its GEMMs %s); target <= %.1f: %s\n",
               r->shape, B, T, fp4_name, q, fp4_dt * 1e3, bf16_dt * 1e3, fp4_path, target,
               q <= target ? "met" : "missed");
    }
    qw_backend_close(&be);
    return rc;
}
#endif

static int usage(void) {
    fprintf(stderr, "usage: bench_train [--profile] [threads] [batch] [steps]\n"
                    "       bench_train --backend cpu [--profile] [threads] [batch] [steps]\n"
                    "       bench_train --backend cuda [--shape NAME --batch B --ctx T] "
                    "[--steps S] [--recipes bf16,nvfp4]\n");
    return 2;
}

/* The CUDA mode's options (argv after "--backend cuda"). */
static int cuda_main(int argc, char **argv) {
    bt_run runs[2] = {{"tiny", 8, 128}, {"smollm2-135m", 8, 512}}, one = {NULL, 8, 0};
    int steps = 3, n_rec = 0;
    char recbuf[256] = "bf16,nvfp4";
    const char *recipes[16];
    for (int i = 0; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return usage();
        if (!strcmp(argv[i], "--shape"))
            one.shape = v;
        else if (!strcmp(argv[i], "--batch"))
            one.B = atoi(v);
        else if (!strcmp(argv[i], "--ctx"))
            one.T = atoi(v);
        else if (!strcmp(argv[i], "--steps"))
            steps = atoi(v);
        else if (!strcmp(argv[i], "--recipes"))
            snprintf(recbuf, sizeof recbuf, "%s", v);
        else
            return usage();
        i++;
    }
    for (char *t = strtok(recbuf, ","); t && n_rec < 16; t = strtok(NULL, ","))
        recipes[n_rec++] = t;
    if (steps < 1 || one.B < 1 || one.T < 0 || n_rec == 0) return usage();
#if !QW_BENCH_TRAIN_CUDA
    (void)runs;
    (void)recipes;
    printf("bench_train --backend cuda: this build has no CUDA backend (configured without "
           "nvcc): skipped\n");
    printf("summary: train: skipped: build without CUDA\n");
    return 0;
#else
    char dev[256];
    if (!qb_cuda_device(dev, sizeof dev)) {
        printf("bench_train --backend cuda: no CUDA device visible (%s): skipped\n", dev);
        printf("summary: train: skipped: no CUDA device visible\n");
        return 0;
    }
    printf("bench_train --backend cuda: %s; target: a step's FLOP/s >= %.1f x cuBLAS BF16 GEMM\n",
           dev, BT_CUDA_TARGET);
    /* the trainer opens its backend through backend.h, whose CUDA backend is the registered
     * table, as the worker registers its module's */
    qw_backend_set_cuda(qw_backend_cuda_table());
    if (one.shape) {
        if (one.T == 0) one.T = strcmp(one.shape, "tiny") ? 512 : 128;
        return cuda_run(&one, recipes, n_rec, steps);
    }
    int rc = 0;
    for (int i = 0; i < 2; i++)
        rc |= cuda_run(&runs[i], recipes, n_rec, steps);
    return rc;
#endif
}

int main(int argc, char **argv) {
    int a = 1, profile = 0;
    if (argc > 2 && !strcmp(argv[1], "--backend")) {
        if (!strcmp(argv[2], "cuda")) return cuda_main(argc - 3, argv + 3);
        if (strcmp(argv[2], "cpu")) return usage();
        a = 3;
    }
    if (argc > a && !strcmp(argv[a], "--profile")) {
        profile = 1;
        a++;
    }
    if (argc > a && argv[a][0] == '-') return usage();
    int nt = argc > a ? atoi(argv[a]) : 1, B = argc > a + 1 ? atoi(argv[a + 1]) : 8,
        steps = argc > a + 2 ? atoi(argv[a + 2]) : 6;
    return cpu_main(nt, B, steps, profile);
}
