/* The backward pass is the derivative of the forward:
 * - every parameter's gradient of the mean cross-entropy matches PyTorch autograd on
 *   transformers' LlamaForCausalLM (tools/train_grad_goldens.py, FP64) within 1e-5 relative,
 *   max |ours - golden| / max |golden| per tensor, for the MHA, GQA and tied checkpoints, with
 *   the FP32 model and the fp32 recipe (no rounding);
 * - the FP64 build of the same model code passes a central-difference check on a 2-block toy
 *   model (GQA, Llama 3.1 RoPE scaling, untied and tied), within 1e-7 of the tensor's largest
 *   gradient: with h = 1e-5 the truncation error is ~h^2 = 1e-10 and the rounding ~1e-16/h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include <cmocka.h>

#include "tmodel64.h"
#include "small_config.h"

#define GOLDEN_TOL 1e-5
#define FD_TOL 1e-7

typedef struct grad_golden {
    uint32_t B, T, n;
    double loss;
    uint32_t *tokens; /* [B x (T+1)] */
    char **names;
    uint32_t *rows, *cols;
    float **grads;
} grad_golden;

static void read_exact(FILE *f, void *p, size_t n, const char *path) {
    if (fread(p, 1, n, f) != n) fail_msg("%s: truncated", path);
}

static void golden_read(const char *path, grad_golden *g) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("%s: cannot open", path);
    char magic[8];
    uint32_t hdr[4];
    read_exact(f, magic, 8, path);
    if (memcmp(magic, "QSWGRAD\0", 8)) fail_msg("%s: bad magic", path);
    read_exact(f, hdr, sizeof hdr, path);
    if (hdr[0] != 1) fail_msg("%s: version %u", path, hdr[0]);
    g->B = hdr[1];
    g->T = hdr[2];
    g->n = hdr[3];
    read_exact(f, &g->loss, 8, path);
    size_t nt = (size_t)g->B * (g->T + 1);
    g->tokens = malloc(nt * 4);
    read_exact(f, g->tokens, nt * 4, path);
    g->names = calloc(g->n, sizeof *g->names);
    g->rows = calloc(g->n, 4);
    g->cols = calloc(g->n, 4);
    g->grads = calloc(g->n, sizeof *g->grads);
    for (uint32_t i = 0; i < g->n; i++) {
        uint32_t len, rc[2];
        read_exact(f, &len, 4, path);
        g->names[i] = calloc(len + 1, 1);
        read_exact(f, g->names[i], len, path);
        read_exact(f, rc, 8, path);
        g->rows[i] = rc[0];
        g->cols[i] = rc[1];
        g->grads[i] = malloc((size_t)rc[0] * rc[1] * 4);
        read_exact(f, g->grads[i], (size_t)rc[0] * rc[1] * 4, path);
    }
    fclose(f);
}

static void golden_free(grad_golden *g) {
    for (uint32_t i = 0; i < g->n; i++) {
        free(g->names[i]);
        free(g->grads[i]);
    }
    free(g->names);
    free(g->rows);
    free(g->cols);
    free(g->grads);
    free(g->tokens);
}

static void check_model(const char *name, int threads) {
    char dir[1024], gpath[1024];
    snprintf(dir, sizeof dir, "%s/%s", QW_ENGINE_DATA, name);
    snprintf(gpath, sizeof gpath, "%s/%s.grads", QW_TRAIN_DATA, name);
    grad_golden g;
    golden_read(gpath, &g);
    qs_error err = {0};
    qw_checkpoint *ck = NULL;
    if (qw_checkpoint_open(dir, &ck, &err) != QS_OK) fail_msg("%s", err.msg);
    qw_tmodel *m = NULL;
    if (qw_tmodel_create(qw_checkpoint_config(ck), (int)g.B, (int)g.T, threads, &m, &err) != QS_OK)
        fail_msg("%s", err.msg);
    if (qw_tmodel_load(m, ck, &err) != QS_OK) fail_msg("%s", err.msg);
    size_t N = (size_t)g.B * g.T;
    uint32_t *in = malloc(N * 4), *tg = malloc(N * 4);
    for (uint32_t b = 0; b < g.B; b++)
        for (uint32_t t = 0; t < g.T; t++) {
            in[b * g.T + t] = g.tokens[b * (g.T + 1) + t];
            tg[b * g.T + t] = g.tokens[b * (g.T + 1) + t + 1];
        }
    double loss = 0;
    assert_int_equal(qw_tmodel_zero_grad(m, &err), QS_OK);
    if (qw_tmodel_forward(m, in, tg, 0, &loss, &err) != QS_OK) fail_msg("%s", err.msg);
    if (qw_tmodel_backward(m, 1.0f, &err) != QS_OK) fail_msg("%s", err.msg);
    double lrel = fabs(loss - g.loss) / fabs(g.loss);
    printf("%s %s: loss %.9f, golden %.9f, relative error %.2g\n",
           lrel <= GOLDEN_TOL ? "OK" : "NOT OK", name, loss, g.loss, lrel);
    int bad = lrel > GOLDEN_TOL;
    assert_int_equal(qw_tmodel_n_tensors(m), (int)g.n);
    for (uint32_t i = 0; i < g.n; i++) {
        qw_tensor_view v;
        int found = 0;
        for (int j = 0; j < qw_tmodel_n_tensors(m); j++) {
            qw_tmodel_tensor(m, j, &v);
            if (!strcmp(v.name, g.names[i])) {
                found = 1;
                break;
            }
        }
        if (!found) fail_msg("%s: golden tensor %s not in the model", name, g.names[i]);
        assert_int_equal(v.rows, (int)g.rows[i]);
        assert_int_equal(v.cols, (int)g.cols[i]);
        size_t n = (size_t)v.rows * v.cols;
        double maxref = 0, maxd = 0;
        for (size_t k = 0; k < n; k++) {
            double r = g.grads[i][k], d = fabs((double)v.grad[k] - r);
            maxref = fabs(r) > maxref ? fabs(r) : maxref;
            maxd = d > maxd ? d : maxd;
        }
        double rel = maxref > 0 ? maxd / maxref : maxd;
        int ok = rel <= GOLDEN_TOL && maxref > 0;
        printf("%s %s %s: max |grad| %.3g, relative error %.2g\n", ok ? "OK" : "NOT OK", name,
               v.name, maxref, rel);
        bad += !ok;
    }
    free(in);
    free(tg);
    qw_tmodel_destroy(m);
    qw_checkpoint_close(ck);
    golden_free(&g);
    assert_int_equal(bad, 0);
}

static void llama2_mha_grads_match_pytorch(void **s) {
    (void)s;
    check_model("llama2_mha", 1);
}
static void llama3_gqa_grads_match_pytorch(void **s) {
    (void)s;
    check_model("llama3_gqa", 2);
}
static void llama32_tied_grads_match_pytorch(void **s) {
    (void)s;
    check_model("llama32_tied", 2);
}

/* A 2-block toy: GQA 4/2 heads, head_dim 8, Llama 3.1 RoPE scaling, vocabulary 40. */
static qw_config toy_config(int tied) {
    qw_config c = small_config_of(32, 48, 2, 4, 2, 8, 40);
    c.tied_embeddings = tied;
    c.rope_factor = 8.0f;
    c.rope_low_freq_factor = 1.0f;
    c.rope_high_freq_factor = 4.0f;
    c.rope_original_max_pos = 4;
    return c;
}

static void finite_differences(int tied) {
    qw_config c = toy_config(tied);
    enum { B = 2, T = 6 };
    qs_error err = {0};
    qw_tmodel64 *m = NULL;
    if (qw_tmodel64_create(&c, B, T, 2, &m, &err) != QS_OK) fail_msg("%s", err.msg);
    qw_tmodel64_init_random(m, 7, 0.3f);
    /* norm weights away from 1 so their gradients are not special */
    for (int i = 0; i < qw_tmodel64_n_tensors(m); i++) {
        qw_tensor_view64 v;
        qw_tmodel64_tensor(m, i, &v);
        if (v.cols == 1)
            for (int k = 0; k < v.rows; k++)
                v.data[k] = 1.0 + 0.1 * sin(3.0 * k + i);
    }
    uint32_t in[B * T], tg[B * T];
    for (int i = 0; i < B * T; i++) {
        in[i] = (uint32_t)((i * 7 + 3) % c.vocab_size);
        tg[i] = (uint32_t)((i * 11 + 5) % c.vocab_size);
    }
    in[5] = in[2]; /* a repeated token: embedding rows that add */
    double loss;
    qw_tmodel64_zero_grad(m);
    if (qw_tmodel64_forward(m, in, tg, 0, &loss, &err) != QS_OK) fail_msg("%s", err.msg);
    if (qw_tmodel64_backward(m, 1.0, &err) != QS_OK) fail_msg("%s", err.msg);
    int bad = 0;
    const double h = 1e-5;
    for (int i = 0; i < qw_tmodel64_n_tensors(m); i++) {
        qw_tensor_view64 v;
        qw_tmodel64_tensor(m, i, &v);
        size_t n = (size_t)v.rows * v.cols;
        double gmax = 0;
        for (size_t k = 0; k < n; k++)
            gmax = fabs(v.grad[k]) > gmax ? fabs(v.grad[k]) : gmax;
        double worst = 0;
        for (int s = 0; s < 8; s++) {
            size_t k = (size_t)(((uint64_t)s * 2654435761u + (uint64_t)i * 40503u) % n);
            if (s == 0 && i == 0) k = (size_t)in[2] * v.cols + 3; /* the repeated token's row */
            double x0 = v.data[k], lp, lm;
            v.data[k] = x0 + h;
            if (qw_tmodel64_forward(m, in, tg, 0, &lp, &err) != QS_OK) fail_msg("%s", err.msg);
            v.data[k] = x0 - h;
            if (qw_tmodel64_forward(m, in, tg, 0, &lm, &err) != QS_OK) fail_msg("%s", err.msg);
            v.data[k] = x0;
            double fd = (lp - lm) / (2 * h), d = fabs(fd - v.grad[k]) / gmax;
            worst = d > worst ? d : worst;
        }
        int ok = worst <= FD_TOL && gmax > 0;
        printf("%s %s %s: max |grad| %.3g, worst |fd - grad| / max |grad| %.2g\n",
               ok ? "OK" : "NOT OK", tied ? "tied" : "untied", v.name, gmax, worst);
        bad += !ok;
    }
    qw_tmodel64_destroy(m);
    assert_int_equal(bad, 0);
}

static void fp64_gradients_match_central_differences(void **s) {
    (void)s;
    finite_differences(0);
}
static void fp64_tied_gradients_match_central_differences(void **s) {
    (void)s;
    finite_differences(1);
}

/* The FP32 and FP64 builds are the same code: on the toy model their gradients agree to FP32
 * accuracy (1e-5 of each tensor's largest gradient). */
static void fp32_and_fp64_builds_agree(void **s) {
    (void)s;
    qw_config c = toy_config(0);
    enum { B = 2, T = 16 };
    qs_error err = {0};
    qw_tmodel *m = NULL;
    qw_tmodel64 *d = NULL;
    assert_int_equal(qw_tmodel_create(&c, B, T, 2, &m, &err), QS_OK);
    assert_int_equal(qw_tmodel64_create(&c, B, T, 2, &d, &err), QS_OK);
    assert_int_equal(qw_tmodel_init_random(m, 9, 0.3f, &err), QS_OK);
    qw_tmodel64_init_random(d, 9, 0.3f);
    uint32_t in[B * T], tg[B * T];
    for (int i = 0; i < B * T; i++) {
        in[i] = (uint32_t)((i * 13 + 1) % c.vocab_size);
        tg[i] = (uint32_t)((i * 17 + 2) % c.vocab_size);
    }
    double l32, l64;
    assert_int_equal(qw_tmodel_zero_grad(m, &err), QS_OK);
    qw_tmodel64_zero_grad(d);
    assert_int_equal(qw_tmodel_forward(m, in, tg, 0, &l32, &err), QS_OK);
    assert_int_equal(qw_tmodel_backward(m, 1.0f, &err), QS_OK);
    assert_int_equal(qw_tmodel64_forward(d, in, tg, 0, &l64, &err), QS_OK);
    assert_int_equal(qw_tmodel64_backward(d, 1.0, &err), QS_OK);
    assert_true(fabs(l32 - l64) <= 1e-5 * l64);
    for (int i = 0; i < qw_tmodel_n_tensors(m); i++) {
        qw_tensor_view a;
        qw_tensor_view64 b;
        qw_tmodel_tensor(m, i, &a);
        qw_tmodel64_tensor(d, i, &b);
        size_t n = (size_t)a.rows * a.cols;
        double gmax = 0, dmax = 0;
        for (size_t k = 0; k < n; k++) {
            gmax = fabs(b.grad[k]) > gmax ? fabs(b.grad[k]) : gmax;
            double e = fabs(a.grad[k] - b.grad[k]);
            dmax = e > dmax ? e : dmax;
        }
        if (!(dmax <= 1e-5 * gmax)) fail_msg("%s: FP32 vs FP64 %.3g of %.3g", a.name, dmax, gmax);
    }
    qw_tmodel_destroy(m);
    qw_tmodel64_destroy(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(llama2_mha_grads_match_pytorch),
        cmocka_unit_test(llama3_gqa_grads_match_pytorch),
        cmocka_unit_test(llama32_tied_grads_match_pytorch),
        cmocka_unit_test(fp64_gradients_match_central_differences),
        cmocka_unit_test(fp64_tied_gradients_match_central_differences),
        cmocka_unit_test(fp32_and_fp64_builds_agree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
