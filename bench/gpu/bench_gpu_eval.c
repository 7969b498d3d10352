/* Eval throughput of the CUDA backend (worker/engine/ops_cuda.h) on one GPU: tokens/s and
 * achieved TFLOP/s of a Llama forward over the ops table, as a ratio of cuBLAS BF16 GEMM
 * (cublasGemmEx, BF16 in, FP32 accumulate: cuBLASLt's kernels) on the same GEMM shapes,
 * measured in the same run.
 *
 * What is timed: one decoder block in the forward pass's order (rmsnorm, q/k/v, rope,
 * attention, o, residual, rmsnorm, gate/up, swiglu, down, residual) over T tokens with random
 * weights of the shape's sizes, repeated n_layers times (each block's weights are far larger
 * than L2, so one block's weights stand for every block's), then the final norm and lm_head
 * over the scored half (T/2 rows, as the evaluation runs it). The model's FLOPs: 2*T*in*out per
 * linear, 2*(T/2)*D*V for lm_head, 2*T*T*H*E for causal attention (half of the full QK^T and
 * PV). The baseline: the same linears and lm_head as BF16 GEMMs alone
 * (bench/common/cublas_rate.h).
 *
 * Shapes: SmolLM2-135M from the GGUF's config (QSWEEP_SMOLLM2 or the fetch cache; skipped with
 * a message when absent) at ctx 512, and synthetic llama2-7b (synthetic.h) at ctx 2048. Every
 * GEMM path of the backend (fp32, bf16, lt), and lt again with the block linears in NVFP4 W4A4
 * (native FP4 on 10.x, emulated on Hopper). Prints "summary:" lines for tools/device-check.sh.
 * Exits 77 when no CUDA device is visible. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "cublas_rate.h"
#include "quant.h"
#include "ops.h"
#include "ops_cuda.h"
#include "synthetic.h"
#include "weights.h"

#define REPS 3

static uint64_t rng = 88172645463325252ull;

static float urand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* A random BF16 master [rows x cols] (stored form) of scale s. */
static qw_weight bf16_weight(int64_t rows, int64_t cols, float s, uint16_t **keep) {
    size_t n = (size_t)rows * (size_t)cols;
    uint16_t *w = malloc(n * 2);
    for (size_t i = 0; i < n; i++) {
        float f = urand() * s;
        uint32_t u;
        memcpy(&u, &f, 4);
        w[i] = (uint16_t)(u >> 16);
    }
    *keep = w;
    qw_stored_tensor v = {QW_DT_BF16, (const uint8_t *)w, rows, cols, (size_t)cols * 2, 0};
    return qw_weight_from_view(&v);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Linear shapes (out, in) of one block, then lm_head. */
static void shapes(const qw_config *c, int sh[8][2]) {
    int D = c->dim, F = c->hidden_dim, HE = c->n_heads * c->head_dim,
        GE = c->n_kv_heads * c->head_dim;
    int s[8][2] = {{HE, D}, {GE, D}, {GE, D}, {D, HE}, {F, D}, {F, D}, {D, F}, {c->vocab_size, D}};
    memcpy(sh, s, sizeof s);
}

/* Milliseconds of the block's linears (n_layers times) and lm_head (T/2 rows) as plain BF16
 * GEMMs, the baseline (cublas_rate.h), and their FLOPs; a negative value on a CUDA error. */
static double baseline_ms(const qw_config *c, int T, double *flops) {
    int sh[8][2];
    shapes(c, sh);
    qb_linear *lin = malloc(((size_t)c->n_layers * 7 + 1) * sizeof *lin);
    if (!lin) return -1.0;
    int n = 0;
    *flops = 0;
    for (int l = 0; l < c->n_layers + 1; l++)
        for (int i = 0; i < 8; i++) {
            if ((l < c->n_layers) != (i < 7)) continue;
            lin[n] = (qb_linear){sh[i][1], sh[i][0], i == 7 ? T / 2 : T};
            *flops += 2.0 * lin[n].rows * sh[i][0] * sh[i][1];
            n++;
        }
    char why[256] = "";
    double ms = -1.0;
    if (qb_cublas_tflops(lin, n, QB_PASS_FORWARD, QB_GEMM_BF16, REPS, &ms, why, sizeof why) < 0)
        fprintf(stderr, "bench: baseline: %s\n", why);
    free(lin);
    return ms;
}

/* One forward-shaped run over backend b; returns ms (best of REPS) and the model's FLOPs. fp4:
 * the block's seven linears NVFP4 W4A4 (weights packed once here, activations quantized by the
 * backend), lm_head unquantized. */
static int eval_ms(qw_backend *b, const qw_config *c, int T, int fp4, double *ms_out,
                   double *flops) {
    int D = c->dim, F = c->hidden_dim, H = c->n_heads, G = c->n_kv_heads, E = c->head_dim,
        V = c->vocab_size;
    int sh[8][2];
    shapes(c, sh);
    uint16_t *keep[8];
    qw_weight w[8];
    float s = 0.02f;
    for (int i = 0; i < 8; i++)
        w[i] = bf16_weight(sh[i][0], sh[i][1], s, &keep[i]);
    qk_packed packed[7];
    memset(packed, 0, sizeof packed);
    const qk_format *nv = qk_format_by_name("nvfp4");
    qw_act_quant a4 = {nv, {0}, NULL}, *act = fp4 ? &a4 : NULL;
    qs_error qerr = {0};
    for (int i = 0; fp4 && i < 7; i++) {
        size_t n = (size_t)sh[i][0] * sh[i][1];
        float *f = malloc(n * sizeof(float));
        if (!f || qw_weight_rows_f32(&w[i], 0, sh[i][0], f, &qerr) != QS_OK ||
            qk_packed_init(&packed[i], nv, NULL, (size_t)sh[i][0], (size_t)sh[i][1], &qerr) !=
                QS_OK ||
            qk_quantize(nv, NULL, f, (size_t)sh[i][0], (size_t)sh[i][1], &packed[i], &qerr) !=
                QS_OK) {
            fprintf(stderr, "bench: packing linear %d: %s\n", i, qerr.msg);
            free(f);
            return -1;
        }
        free(f);
        w[i] = qw_weight_from_packed(&packed[i]);
    }
    float *norm = malloc((size_t)D * sizeof(float));
    for (int i = 0; i < D; i++)
        norm[i] = 1.0f;
    const qw_ops *o = b->ops;
    size_t big = (size_t)T * (size_t)(F > H * E ? F : H * E);
    float *x = o->alloc(b, (size_t)T * D * 4), *xb = o->alloc(b, (size_t)T * D * 4),
          *q = o->alloc(b, (size_t)T * H * E * 4), *k = o->alloc(b, (size_t)T * G * E * 4),
          *v = o->alloc(b, (size_t)T * G * E * 4), *att = o->alloc(b, (size_t)T * H * E * 4),
          *hb = o->alloc(b, (size_t)T * F * 4), *hb2 = o->alloc(b, (size_t)T * F * 4),
          *yb = o->alloc(b, (size_t)T * D * 4), *lg = o->alloc(b, (size_t)T / 2 * V * 4),
          *actq = o->alloc(b, big * 4);
    /* cudaMalloc'd buffers are not host-writable: x goes up through the table's upload, and the
     * RoPE tables stay on the host (the rope op keeps a device copy, ops.h) */
    float *cs = malloc((size_t)T * E / 2 * 4), *sn = malloc((size_t)T * E / 2 * 4),
          *xh = malloc((size_t)T * D * 4);
    if (!x || !xb || !q || !k || !v || !att || !hb || !hb2 || !yb || !lg || !actq || !cs || !sn ||
        !xh) {
        fprintf(stderr, "bench: out of memory\n");
        return -1;
    }
    qw_rope_tables(c, T, cs, sn);
    for (size_t i = 0; i < (size_t)T * D; i++)
        xh[i] = urand();
    qs_error uerr = {0};
    if (o->upload(b, x, xh, (size_t)T * D * 4, &uerr) != QS_OK) {
        fprintf(stderr, "bench: upload: %s\n", uerr.msg);
        return -1;
    }
    free(xh);
    qw_tensor txb = {xb, T, D}, tq = {q, T, H * E}, tk = {k, T, G * E}, tv = {v, T, G * E},
              ta = {att, T, H * E}, th = {hb, T, F}, th2 = {hb2, T, F}, ty = {yb, T, D},
              txbr = {xb, T / 2, D}, tl = {lg, T / 2, V};
    qs_error err = {0};
    double best = 1e30;
    for (int rep = 0; rep < REPS + 1; rep++) {
        double t0 = now_ms();
        for (int l = 0; l < c->n_layers; l++) {
            o->rmsnorm(b, xb, NULL, x, norm, T, D, c->norm_eps, &err);
            o->linear(b, &tq, &txb, &w[0], act, actq, &err);
            o->linear(b, &tk, &txb, &w[1], act, actq, &err);
            o->linear(b, &tv, &txb, &w[2], act, actq, &err);
            o->rope(b, q, cs, sn, 1, T, H, E, &err);
            o->rope(b, k, cs, sn, 1, T, G, E, &err);
            o->attention(b, &ta, &tq, &tk, &tv, NULL, H, G, E);
            o->linear(b, &ty, &ta, &w[3], act, actq, &err);
            o->add(b, x, x, yb, (size_t)T * D, &err);
            o->rmsnorm(b, xb, NULL, x, norm, T, D, c->norm_eps, &err);
            o->linear(b, &th, &txb, &w[4], act, actq, &err);
            o->linear(b, &th2, &txb, &w[5], act, actq, &err);
            o->swiglu(b, hb, hb, hb2, (size_t)T * F, &err);
            o->linear(b, &ty, &th, &w[6], act, actq, &err);
            o->add(b, x, x, yb, (size_t)T * D, &err);
        }
        o->rmsnorm(b, xb, NULL, x + (size_t)T / 2 * D, norm, T / 2, D, c->norm_eps, &err);
        o->lm_head(b, &tl, &txbr, &w[7], NULL, NULL, &err);
        double ms = now_ms() - t0;
        if (rep > 0 && ms < best) best = ms; /* rep 0 uploads the weights */
    }
    if (qw_backend_cuda_check(b, &err) != QS_OK || err.msg[0]) {
        fprintf(stderr, "bench: %s\n", err.msg);
        return -1;
    }
    double f = 0;
    for (int i = 0; i < 7; i++)
        f += 2.0 * T * sh[i][0] * sh[i][1] * c->n_layers;
    f += 2.0 * (T / 2) * (double)D * V + 2.0 * T * (double)T * H * E * c->n_layers;
    *ms_out = best;
    *flops = f;
    float *bufs[] = {x, xb, q, k, v, att, hb, hb2, yb, lg, actq};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        o->free(b, bufs[i]);
    free(cs);
    free(sn);
    for (int i = 0; i < 8; i++)
        free(keep[i]);
    for (int i = 0; i < 7; i++)
        qk_packed_release(&packed[i]);
    free(norm);
    return 0;
}

static int run_shape(const char *name, const qw_config *c, int T) {
    double fb, msb = baseline_ms(c, T, &fb);
    if (msb < 0) return -1;
    double tb = fb / msb / 1e9;
    printf("%s ctx %d: cuBLAS BF16 GEMMs of the same shapes %.2f ms, %.1f TFLOP/s\n", name, T, msb,
           tb);
    /* fp32, bf16, cuBLASLt unquantized, cuBLASLt with NVFP4 W4A4 block linears. */
    static const struct {
        qw_cuda_gemm gemm;
        int fp4;
    } runs[] = {
        {QW_CUDA_GEMM_FP32, 0}, {QW_CUDA_GEMM_BF16, 0}, {QW_CUDA_GEMM_LT, 0}, {QW_CUDA_GEMM_LT, 1}};
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        qw_backend b;
        qs_error err = {0};
        qs_status st = qw_backend_cuda_init(&b, 0, runs[r].gemm, &err);
        if (st == QS_EUNSUPPORTED) {
            printf("summary: eval %s gemm lt: skipped: %s\n", name, err.msg);
            continue;
        }
        if (st != QS_OK) {
            fprintf(stderr, "bench: %s\n", err.msg);
            return -1;
        }
        double ms, f;
        if (eval_ms(&b, c, T, runs[r].fp4, &ms, &f) != 0) {
            qw_backend_cuda_release(&b);
            return -1;
        }
        double tf = f / ms / 1e9;
        printf("summary: eval %s ctx %d gemm %s%s: %.0f tokens/s, %.1f TFLOP/s = %.2f x cuBLAS "
               "BF16 GEMM (%.1f TFLOP/s)\n",
               name, T, qw_backend_gemm_path(&b), runs[r].fp4 ? " (NVFP4 W4A4 blocks)" : "",
               T / (ms / 1e3), tf, tf / tb, tb);
        qw_backend_cuda_release(&b);
    }
    return 0;
}

int main(void) {
    if (qw_cuda_available() == 0) {
        printf("bench_gpu_eval: no CUDA device visible: skipped\n");
        return 77;
    }
    int rc = 0;
    const char *p = getenv("QSWEEP_SMOLLM2");
    char path[1024];
    if (!p || !*p) {
        const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
        if (xdg && *xdg)
            snprintf(path, sizeof path, "%s/qsweep/models/SmolLM2-135M-Instruct.Q4_1.gguf", xdg);
        else
            snprintf(path, sizeof path, "%s/.cache/qsweep/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                     home ? home : "");
        p = path;
    }
    qw_checkpoint *ck = NULL;
    qs_error err = {0};
    if (access(p, R_OK) == 0 && qw_checkpoint_open(p, &ck, &err) == QS_OK) {
        qw_config c = *qw_checkpoint_config(ck);
        qw_checkpoint_close(ck);
        rc |= run_shape("smollm2-135m", &c, 512);
    } else {
        printf("summary: eval smollm2-135m: skipped: %s absent (tools/fetch_smollm2.sh)\n", p);
    }
    const qw_synthetic_shape *s = qw_synthetic_shape_by_name("llama2-7b");
    if (!s) {
        fprintf(stderr, "bench: no llama2-7b shape\n");
        return 1;
    }
    rc |= run_shape("llama2-7b", &s->cfg, 2048);
    return rc ? 1 : 0;
}
