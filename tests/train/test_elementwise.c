/* The CPU training backwards of the elementwise layers (ops.h qw_train_swiglu_backward,
 * qw_train_rmsnorm_backward) against the same formulas one element and one row at a time, bit
 * for bit: the FP64 reference's bodies (ref64/ops_impl.h) instantiated in FP32 with the engine's
 * fixed exponential. The SwiGLU backward's 16-lane path (AVX-512F CPUs) and the RMSNorm
 * backward's rows whose dot products advance side by side (QW_NORM_ROWS) are speed only. Sizes
 * with and without a tail of the vector and of the row group, 1 and 2 threads, and values where
 * e^-g overflows, underflows or is exactly 1. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <cblas.h>
#include <omp.h>

#include "../lib/floats.h"
#include "gemm_cpu.h"
#include "ops.h"
#include "ops64.h"

/* e^x as the engine's SwiGLU backward takes it: qw_cpu_exp_shift_n of x, shift 0. */
static float fixed_exp(float x) {
    float y;
    qw_cpu_exp_shift_n(&y, &x, 1, 0.0f);
    return y;
}

/* The reference ops' bodies in FP32, ref32_<op>. */
#define QW_TRAIN_NAME_F32(x) ref32_##x
QW_TRAIN_OPS_DECLARE(float, QW_TRAIN_NAME_F32)
#define R float
#define QW_OPS_NAME QW_TRAIN_NAME_F32
#define EXP fixed_exp
#define GEMM cblas_sgemm
#include "ops_impl.h"
#undef R

static void swiglu_backward_is_its_formula_bit_for_bit(void **st) {
    (void)st;
    static const size_t sizes[] = {1, 15, 16, 1024, 1040, 3000};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (int nt = 1; nt <= 2; nt++) {
            size_t n = sizes[si];
            float *g = malloc(n * 4), *u = malloc(n * 4), *dh = malloc(n * 4);
            float *dg = malloc(n * 4), *du = malloc(n * 4), *wg = malloc(n * 4),
                  *wu = malloc(n * 4);
            qwt_fill(g, n, 11, 12.0f);
            qwt_fill(u, n, 12, 2.0f);
            qwt_fill(dh, n, 13, 0.5f);
            /* e^-g of +-Inf scale, 0 and 1 */
            g[0] = -100.0f;
            if (n > 1) g[1] = 100.0f;
            if (n > 2) g[2] = 0.0f;
            ref32_swiglu_backward(wg, wu, dh, g, u, n, 1);
            qw_train_swiglu_backward(dg, du, dh, g, u, n, nt);
            size_t bad = qwt_differing(dg, wg, n) + qwt_differing(du, wu, n);
            printf("%s swiglu backward n %4zu threads %d: %zu elements differ\n",
                   bad ? "NOT OK" : "OK", n, nt, bad);
            assert_int_equal(bad, 0);
            assert_true(isfinite(dg[0]) && dg[0] == dg[0]);
            free(g), free(u), free(dh), free(dg), free(du), free(wg), free(wu);
        }
}

static void rmsnorm_backward_is_its_formula_bit_for_bit(void **st) {
    (void)st;
    static const int shapes[][2] = {
        {1, 8}, {QW_NORM_ROWS, 64}, {QW_NORM_ROWS * 3 + 1, 128}, {37, 200}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int nt = 1; nt <= 2; nt++) {
            int N = shapes[si][0], D = shapes[si][1];
            size_t n = (size_t)N * D;
            float *x = malloc(n * 4), *dout = malloc(n * 4), *w = malloc((size_t)D * 4);
            float *rstd = malloc((size_t)N * 4), *dx = malloc(n * 4), *wx = malloc(n * 4);
            float *dw = malloc((size_t)D * 4), *ww = malloc((size_t)D * 4);
            qwt_fill(x, n, 21, 3.0f);
            qwt_fill(dout, n, 22, 0.2f);
            qwt_fill(w, (size_t)D, 23, 1.5f);
            qwt_fill(rstd, (size_t)N, 24, 1.0f);
            qwt_fill(dx, n, 25, 0.1f); /* accumulated into */
            memcpy(wx, dx, n * 4);
            qwt_fill(dw, (size_t)D, 26, 0.1f);
            memcpy(ww, dw, (size_t)D * 4);
            ref32_rmsnorm_backward(wx, ww, dout, x, w, rstd, N, D, 1);
            qw_train_rmsnorm_backward(dx, dw, dout, x, w, rstd, N, D, nt);
            size_t bad = qwt_differing(dx, wx, n) + qwt_differing(dw, ww, (size_t)D);
            printf("%s rmsnorm backward N %2d D %3d threads %d: %zu elements differ\n",
                   bad ? "NOT OK" : "OK", N, D, nt, bad);
            assert_int_equal(bad, 0);
            free(x), free(dout), free(w), free(rstd), free(dx), free(wx), free(dw), free(ww);
        }
}

int main(void) {
    qw_cpu_gemm_force(QW_CPU_GEMM_FIXED); /* the fixed exponential */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(swiglu_backward_is_its_formula_bit_for_bit),
        cmocka_unit_test(rmsnorm_backward_is_its_formula_bit_for_bit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
