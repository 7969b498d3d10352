/* The CPU training backwards of the elementwise layers (ops.h qw_train_swiglu_backward,
 * qw_train_rmsnorm_backward) against their formulas written out one element and one row at a
 * time, bit for bit: the SwiGLU backward's 16-lane path (AVX-512F CPUs) and the RMSNorm
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

#include "gemm_cpu.h"
#include "ops.h"

/* x[n] in [-a, a) from a 32-bit LCG of seed. */
static void fill(float *x, size_t n, uint32_t seed, float a) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = a * ((float)(seed >> 8) / 8388608.0f - 1.0f);
    }
}

static size_t differing(const float *a, const float *b, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += memcmp(&a[i], &b[i], sizeof a[i]) != 0;
    return bad;
}

/* s = 1/(1+e^-g), du = dh (g s), dg = dh u (s (1 + g (1 - s))), e^-g by the engine's exp. */
static void swiglu_backward_written_out(float *dg, float *du, const float *dh, const float *g,
                                        const float *u, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float e = -g[i];
        qw_cpu_exp_shift_n(&e, &e, 1, 0.0f);
        float s = 1.0f / (1.0f + e);
        du[i] = dh[i] * (g[i] * s);
        dg[i] = dh[i] * u[i] * (s * (1.0f + g[i] * (1.0f - s)));
    }
}

static void swiglu_backward_is_its_formula_bit_for_bit(void **st) {
    (void)st;
    static const size_t sizes[] = {1, 15, 16, 1024, 1040, 3000};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (int nt = 1; nt <= 2; nt++) {
            size_t n = sizes[si];
            float *g = malloc(n * 4), *u = malloc(n * 4), *dh = malloc(n * 4);
            float *dg = malloc(n * 4), *du = malloc(n * 4), *wg = malloc(n * 4),
                  *wu = malloc(n * 4);
            fill(g, n, 11, 12.0f);
            fill(u, n, 12, 2.0f);
            fill(dh, n, 13, 0.5f);
            /* e^-g of +-Inf scale, 0 and 1 */
            g[0] = -100.0f;
            if (n > 1) g[1] = 100.0f;
            if (n > 2) g[2] = 0.0f;
            swiglu_backward_written_out(wg, wu, dh, g, u, n);
            qw_train_swiglu_backward(dg, du, dh, g, u, n, nt);
            size_t bad = differing(dg, wg, n) + differing(du, wu, n);
            printf("%s swiglu backward n %4zu threads %d: %zu elements differ\n",
                   bad ? "NOT OK" : "OK", n, nt, bad);
            assert_int_equal(bad, 0);
            assert_true(isfinite(dg[0]) && dg[0] == dg[0]);
            free(g), free(u), free(dh), free(dg), free(du), free(wg), free(wu);
        }
}

/* Per row t: dot = sum_i (double)w_i dy_ti x_ti in i order; c = dot r^3 / D;
 * dx_ti += r w_i dy_ti - x_ti c; dw_i += sum_t dy_ti (x_ti r_t) in t order. */
static void rmsnorm_backward_written_out(float *dx, float *dw, const float *dout, const float *x,
                                         const float *w, const float *rstd, int N, int D) {
    for (int t = 0; t < N; t++) {
        const float *xr = x + (size_t)t * D, *g = dout + (size_t)t * D;
        float r = rstd[t];
        double dot = 0.0;
        for (int i = 0; i < D; i++)
            dot += (double)w[i] * g[i] * xr[i];
        float c = (float)(dot * (double)r * r * r / D);
        for (int i = 0; i < D; i++)
            dx[(size_t)t * D + i] += r * w[i] * g[i] - xr[i] * c;
    }
    for (int i = 0; i < D; i++) {
        float s = 0.0f;
        for (int t = 0; t < N; t++)
            s += dout[(size_t)t * D + i] * (x[(size_t)t * D + i] * rstd[t]);
        dw[i] += s;
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
            fill(x, n, 21, 3.0f);
            fill(dout, n, 22, 0.2f);
            fill(w, (size_t)D, 23, 1.5f);
            fill(rstd, (size_t)N, 24, 1.0f);
            fill(dx, n, 25, 0.1f); /* accumulated into */
            memcpy(wx, dx, n * 4);
            fill(dw, (size_t)D, 26, 0.1f);
            memcpy(ww, dw, (size_t)D * 4);
            rmsnorm_backward_written_out(wx, ww, dout, x, w, rstd, N, D);
            qw_train_rmsnorm_backward(dx, dw, dout, x, w, rstd, N, D, nt);
            size_t bad = differing(dx, wx, n) + differing(dw, ww, (size_t)D);
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
