/* How much rounding every linear's input activations to BF16 moves a component sweep's KL: the
 * CUDA path's arithmetic (docs/gpu.md: BF16 and W4A16 GEMMs take BF16 activations, and the
 * GPU's baseline rounds as its quantized linears do) emulated on the CPU, against the CPU's
 * own FP32 activations. For each linear kind k (q, k, v, o, gate, up, down), the NVFP4 W4A16
 * component job's mean KL against its baseline is measured twice:
 *   fp32: baseline unquantized, k's weights NVFP4                       (the CPU path)
 *   bf16: every linear's and lm_head's input rounded to BF16 (RNE) before its GEMM, in the
 *         baseline and in the job; k's weights NVFP4                    (the GPU path, emulated)
 * The rounding wraps the CPU table's linear and lm_head (ops.h), so everything else (the
 * fixed-order FP32 GEMM, attention, norms, the scores) is the CPU path's own.
 * and the table and one summary line are printed:
 *   bf16-act-kl: <n> components, largest |kl_bf16 - kl_fp32| <abs> (<rel> of kl_fp32)
 * tools/device-check.sh takes its CPU-vs-GPU KL bound from that line (docs/gpu.md).
 *
 * Usage: bench_bf16_act_kl MODEL TOKENS CTX CHUNKS  (MODEL: a checkpoint, or synthetic:SHAPE) */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "eval.h"
#include "format.h"
#include "model.h"
#include "model_internal.h"
#include "policy.h"
#include "threads.h"
#include "tokens.h"

static const char *kinds[QW_LINEAR_KINDS] = {"q", "k", "v", "o", "gate", "up", "down"};

/* The CPU table, and a copy whose linear and lm_head round their input to BF16 first. */
static const qw_ops *cpu_ops;
static qw_ops bf16_ops;
static float *rounded;
static size_t rounded_n;

/* x rounded to the nearest BF16, ties to even (finite x; the bits' low half cleared). */
static float round_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* x [rows x cols] rounded into the scratch, as a tensor. */
static qs_status round_input(const qw_tensor *x, qw_tensor *out, qs_error *err) {
    size_t n = (size_t)x->rows * (size_t)x->cols;
    if (n > rounded_n) {
        float *p = realloc(rounded, n * sizeof *p);
        if (!p) return qs_error_set(err, QS_ENOMEM, "bf16 activations: %zu floats", n);
        rounded = p, rounded_n = n;
    }
    for (size_t i = 0; i < n; i++)
        rounded[i] = round_bf16(x->data[i]);
    *out = (qw_tensor){rounded, x->rows, x->cols};
    return QS_OK;
}

static qs_status linear_bf16(qw_backend *b, qw_tensor *y, const qw_tensor *x, const qw_weight *w,
                             const qw_act_quant *act, float *xq, qs_error *err) {
    qw_tensor r;
    qs_status st = round_input(x, &r, err);
    return st ? st : cpu_ops->linear(b, y, &r, w, act, xq, err);
}

static qs_status lm_head_bf16(qw_backend *b, qw_tensor *logits, const qw_tensor *x,
                              const qw_weight *w, const qw_act_quant *act, float *xq,
                              qs_error *err) {
    qw_tensor r;
    qs_status st = round_input(x, &r, err);
    return st ? st : cpu_ops->lm_head(b, logits, &r, w, act, xq, err);
}

/* p: NVFP4 weights on kind k of every block (none when k < 0). */
static qs_status policy_of(qw_policy *p, int n_layers, int k, qs_error *err) {
    qs_status st = qw_policy_init(p, n_layers, err);
    for (int l = 0; !st && k >= 0 && l < n_layers; l++)
        qw_policy_linear(p, l, (qw_linear_kind)k)->weight = qk_format_by_name("nvfp4");
    return st;
}

/* Mean KL of component k (NVFP4 W4A16) with activations as bf16 says, into kl[k]. */
static qs_status sweep(qw_model *m, const qw_tokens *t, const qw_eval_options *opt, int bf16,
                       double kl[QW_LINEAR_KINDS], qs_error *err) {
    char path[] = "/tmp/qsweep-bf16-act-kl-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return qs_error_set(err, QS_EIO, "mkstemp %s", path);
    close(fd);
    int L = qw_model_config(m)->n_layers;
    qw_policy p = {0};
    qw_eval_metrics met = {0};
    m->rank.be.ops = bf16 ? &bf16_ops : cpu_ops;
    qs_status st = policy_of(&p, L, -1, err);
    if (!st) st = qw_model_apply_policy(m, &p, err);
    if (!st) st = qw_eval_baseline(m, t, opt, path, &met, err);
    qw_eval_metrics_free(&met);
    qw_policy_free(&p);
    for (int k = 0; !st && k < QW_LINEAR_KINDS; k++) {
        st = policy_of(&p, L, k, err);
        if (!st) st = qw_model_apply_policy(m, &p, err);
        if (!st) st = qw_eval_compare(m, t, opt, path, &met, err);
        if (!st) kl[k] = met.kl_mean;
        qw_eval_metrics_free(&met);
        qw_policy_free(&p);
    }
    unlink(path);
    m->rank.be.ops = cpu_ops;
    return st;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: bench_bf16_act_kl MODEL TOKENS CTX CHUNKS\n");
        return 2;
    }
    int ctx = atoi(argv[3]), chunks = atoi(argv[4]);
    qs_error err = {0};
    qw_checkpoint *ck = NULL;
    qw_model *m = NULL;
    qw_tokens t = {0};
    int synthetic = strncmp(argv[1], "synthetic:", 10) == 0;
    qs_status st =
        synthetic ? qw_model_create_synthetic(argv[1] + 10, ctx, qs_default_threads(), &m, &err)
                  : qw_checkpoint_open(argv[1], &ck, &err);
    if (!st && ck) st = qw_model_create(ck, ctx, qs_default_threads(), &m, &err);
    if (!st) st = qw_tokens_load(argv[2], &t, &err);
    if (!st) {
        cpu_ops = m->rank.be.ops;
        bf16_ops = *cpu_ops;
        bf16_ops.linear = linear_bf16;
        bf16_ops.lm_head = lm_head_bf16;
    }
    double kl[2][QW_LINEAR_KINDS] = {{0}};
    qw_eval_options opt = {.ctx = ctx, .max_chunks = (size_t)chunks, .bos_id = -1};
    if (!st) st = sweep(m, &t, &opt, 0, kl[0], &err);
    if (!st) st = sweep(m, &t, &opt, 1, kl[1], &err);
    if (st) {
        fprintf(stderr, "bench_bf16_act_kl: %s\n", err.msg);
    } else {
        double abs_max = 0, rel_max = 0;
        printf("%-6s %14s %14s %12s\n", "part", "kl_fp32", "kl_bf16", "difference");
        for (int k = 0; k < QW_LINEAR_KINDS; k++) {
            double d = fabs(kl[1][k] - kl[0][k]);
            printf("%-6s %14.8f %14.8f %12.3e\n", kinds[k], kl[0][k], kl[1][k], d);
            if (d > abs_max) abs_max = d;
            if (kl[0][k] > 0 && d / kl[0][k] > rel_max) rel_max = d / kl[0][k];
        }
        printf("bf16-act-kl: %d components, largest |kl_bf16 - kl_fp32| %.3e (%.3e of kl_fp32)\n",
               QW_LINEAR_KINDS, abs_max, rel_max);
    }
    qw_tokens_free(&t);
    qw_model_destroy(m);
    qw_checkpoint_close(ck);
    free(rounded);
    return st ? 1 : 0;
}
