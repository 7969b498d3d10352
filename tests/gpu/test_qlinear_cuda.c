/* The recipe-driven training linear on the GPU (worker/train/qlinear.h over the CUDA table) against
 * the same code over the CPU table, per named recipe (bf16, fp8, nvfp4
 * with 2D weights, RHT16 and stochastic rounding, mxfp4), on a quantized block and on a
 * high-precision one:
 * - every GEMM input (the quantization points) bit for bit: a hook records a hash of each
 *   input both sides make, and the lists must be equal;
 * - y, dx (overwritten and accumulated) and dW (+=) within 1e-5 of max |cpu| where the GEMM is
 *   FP32 (cuBLAS SGEMM sums in another order; the inputs are the same bits), 1e-4 where both
 *   inputs are BF16-exact and it runs on BF16 operands (bf16_exact.h: the same products, summed
 *   in FP32 on the tensor cores, whose additions may truncate instead of rounding: Fasi,
 *   Higham, Mikaitis and Pranesh, "Numerical behavior of NVIDIA tensor cores", PeerJ CS 2021).
 * Exits 77 (skipped) with a message when no CUDA device is visible. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bf16_exact.h"
#include "gpu_test_util.h"
#include "ops_cuda.h"
#include "qlinear.h"
#include "recipe.h"

static qw_backend gpu, cpu;
static uint64_t rs = 0x853c49e6748fea9bull;

static float urand(void) {
    rs ^= rs >> 12;
    rs ^= rs << 25;
    rs ^= rs >> 27;
    return (float)((double)((rs * 2685821657736338717ull) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* Hashes of the GEMM inputs in the order they were made. */
typedef struct hooklog {
    uint64_t h[16];
    int n;
} hooklog;

static void hook(void *user, int linear, qw_gemm_operand op, const float *src, int src_rows,
                 int src_cols, const float *in, int rows, int k) {
    (void)linear, (void)src, (void)src_rows, (void)src_cols;
    hooklog *l = user;
    uint64_t h = 1469598103934665603ull ^ (uint64_t)op;
    const unsigned char *b = (const unsigned char *)in;
    for (size_t i = 0; i < (size_t)rows * k * sizeof(float); i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    if (l->n < 16) l->h[l->n++] = h;
}

/* A managed buffer of n floats (host visible; the backend's own alloc gives device memory). */
static float *mbuf(size_t n) {
    float *p = qwt_managed(n * sizeof(float));
    assert_non_null(p);
    return p;
}

static double rel(const float *a, const float *ref, size_t n) {
    double md = 0, mr = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (!(d <= md)) md = d;
        if (fabs(ref[i]) > mr) mr = fabs(ref[i]);
    }
    return mr > 0 ? md / mr : md;
}

static void recipe_case(const char *name, int layer) {
    qs_error err = {0};
    qw_recipe r;
    assert_int_equal(qw_recipe_by_name(name, &r, &err), QS_OK);
    int N = 64, in = 128, out = 96, L = 4, lin = layer * 7 + 2;
    double tol[QW_N_LINEAR_GEMMS];
    for (int g = 0; g < QW_N_LINEAR_GEMMS; g++)
        tol[g] = qw_recipe_gemm_bf16(&r, layer, L, (qw_linear_gemm)g) ? 1e-4 : 1e-5;
    size_t sc = qw_qlinear_scratch_floats(N, in, out);
    float *x = mbuf((size_t)N * in), *W = mbuf((size_t)out * in), *dy = mbuf((size_t)N * out);
    for (size_t i = 0; i < (size_t)N * in; i++)
        x[i] = urand() * 2.0f;
    for (size_t i = 0; i < (size_t)out * in; i++)
        W[i] = urand() * 0.1f;
    for (size_t i = 0; i < (size_t)N * out; i++)
        dy[i] = urand() * 0.01f;
    float *ga = mbuf(sc), *gb = mbuf(sc), *ca = malloc(sc * 4), *cb = malloc(sc * 4);
    hooklog hc = {{0}, 0}, hg = {{0}, 0};
    qw_qlinear_env ec = {&cpu, &r, L, 42, 7, ca, cb, hook, &hc, NULL, NULL, 0, NULL, 0, NULL, -1};
    qw_qlinear_env eg = {&gpu, &r, L, 42, 7, ga, gb, hook, &hg, NULL, NULL, 0, NULL, 0, NULL, -1};
    float *yc = malloc((size_t)N * out * 4), *yg = mbuf((size_t)N * out);
    assert_int_equal(qw_qlinear_forward(&ec, layer, lin, yc, x, W, N, in, out, &err), QS_OK);
    qs_status st = qw_qlinear_forward(&eg, layer, lin, yg, x, W, N, in, out, &err);
    if (st != QS_OK) fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(st, QS_OK);
    double ry = rel(yg, yc, (size_t)N * out);
    for (int acc = 0; acc < 2; acc++) {
        float *dxc = malloc((size_t)N * in * 4), *dxg = mbuf((size_t)N * in);
        float *dWc = malloc((size_t)out * in * 4), *dWg = mbuf((size_t)out * in);
        for (size_t i = 0; i < (size_t)N * in; i++)
            dxc[i] = dxg[i] = urand();
        for (size_t i = 0; i < (size_t)out * in; i++)
            dWc[i] = dWg[i] = urand() * 0.001f;
        assert_int_equal(
            qw_qlinear_backward(&ec, layer, lin, dxc, acc, dWc, dy, x, W, N, in, out, &err), QS_OK);
        st = qw_qlinear_backward(&eg, layer, lin, dxg, acc, dWg, dy, x, W, N, in, out, &err);
        if (st != QS_OK) fprintf(stderr, "%s\n", err.msg);
        assert_int_equal(st, QS_OK);
        double rdx = rel(dxg, dxc, (size_t)N * in), rdw = rel(dWg, dWc, (size_t)out * in);
        printf("  %-12s layer %d: y %.2g dx%s %.2g dW %.2g (tol %.0e %.0e %.0e), %d GEMM inputs\n",
               name, layer, ry, acc ? "(+=)" : "", rdx, rdw, tol[QW_GEMM_FPROP], tol[QW_GEMM_DGRAD],
               tol[QW_GEMM_WGRAD], hc.n);
        assert_true(rdx <= tol[QW_GEMM_DGRAD]);
        assert_true(rdw <= tol[QW_GEMM_WGRAD]);
        free(dxc);
        free(dWc);
        qwt_managed_free(dxg);
        qwt_managed_free(dWg);
    }
    assert_true(ry <= tol[QW_GEMM_FPROP]);
    assert_int_equal(hg.n, hc.n);
    for (int i = 0; i < hc.n; i++)
        assert_true(hg.h[i] == hc.h[i]); /* the quantization points, bit for bit */
    free(yc);
    free(ca);
    free(cb);
    float *bufs[] = {x, W, dy, ga, gb, yg};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        qwt_managed_free(bufs[i]);
}

static void recipes_match_the_cpu_reference(void **state) {
    (void)state;
    const char *names[] = {"fp32", "bf16", "fp8", "nvfp4", "nvfp4-no-2d", "mxfp4"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        recipe_case(names[i], 1); /* a quantized block */
        recipe_case(names[i], 3); /* the last block: high precision (bf16_last = 1) */
    }
}

static int setup(void **state) {
    (void)state;
    if (qw_backend_cpu_init(&cpu, 1, 1, NULL) != QS_OK) return -1;
    return qwt_cuda_up(&gpu, QW_CUDA_GEMM_FP32);
}

static int teardown(void **state) {
    (void)state;
    qw_backend_cuda_release(&gpu);
    return 0;
}

int main(void) {
    if (qwt_cuda_skip("gpu_qlinear")) return 77;
    const struct CMUnitTest tests[] = {cmocka_unit_test(recipes_match_the_cpu_reference)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
