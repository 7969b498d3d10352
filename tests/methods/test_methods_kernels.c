/* The numerics of the methods against what the papers define: a block Hadamard rotation is
 * orthonormal and leaves X W^T unchanged, SmoothQuant's scales are the paper's formula and
 * leave X W^T unchanged, GPTQ with no correlation between inputs is round-to-nearest bit for
 * bit, GPTQ's layer error on its calibration data is never above RTN's, and MR-GPTQ's scale
 * search never does worse on a group than the amax rule. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "block_hadamard.h"
#include "format.h"
#include "gptq.h"
#include "group_scale.h"
#include "quant.h"
#include "scale_search.h"
#include "smooth.h"

/* xorshift64*: a fixed stream of uniform values in [-1, 1). */
static double uni(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return (double)((*s * 2685821657736338717ull) >> 11) * 0x1p-52 - 1.0;
}

static void fill(float *x, size_t n, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++)
        x[i] = (float)uni(&s);
}

/* y [t x n] = x [t x k] w^T [k x n], in double. */
static void matmul_t(const float *x, const float *w, size_t t, size_t k, size_t n, double *y) {
    for (size_t i = 0; i < t; i++)
        for (size_t r = 0; r < n; r++) {
            double a = 0.0;
            for (size_t j = 0; j < k; j++)
                a += (double)x[i * k + j] * w[r * k + j];
            y[i * n + r] = a;
        }
}

/* H applied to the rows of the identity is H itself: H H^T = I within 4 FP32 ulps and every
 * entry is +-1/sqrt(b), for every size the methods use. */
static void hadamard_is_orthonormal(void **state) {
    (void)state;
    const size_t sizes[] = {2, 16, 32, 128, 256};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        size_t b = sizes[si];
        float *h = calloc(b * b, sizeof *h);
        assert_non_null(h);
        for (size_t i = 0; i < b; i++)
            h[i * b + i] = 1.0f;
        qs_error err = {0};
        assert_int_equal(qk_block_hadamard(h, b, b, b, 1, &err), QS_OK);
        double inv = 1.0 / sqrt((double)b);
        for (size_t i = 0; i < b; i++) {
            for (size_t j = 0; j < b; j++) {
                int sign = __builtin_popcountll(i & j) & 1 ? -1 : 1;
                assert_true(fabs(h[i * b + j] - sign * inv) <= inv * 0x1p-23);
                double dot = 0.0;
                for (size_t m = 0; m < b; m++)
                    dot += (double)h[i * b + m] * h[j * b + m];
                assert_true(fabs(dot - (i == j)) <= 4 * 0x1p-24);
            }
        }
        free(h);
    }
}

/* (X H)(W H)^T == X W^T to FP32 rounding: |difference| <= (log2 b + 2) * 2^-23 * |x| |w| per
 * output (each rotated element carries log2 b additions and one scaling, relative to the
 * tile's norm, and the rotation keeps the norms). Tiles of 16, 32, 128 and all of k (256). */
static void rotation_leaves_the_product_unchanged(void **state) {
    (void)state;
    const size_t t = 24, k = 256, n = 40;
    float *x = malloc(t * k * sizeof *x), *w = malloc(n * k * sizeof *w);
    float *xr = malloc(t * k * sizeof *x), *wr = malloc(n * k * sizeof *w);
    double *y = malloc(t * n * sizeof *y), *yr = malloc(t * n * sizeof *y);
    assert_true(x && w && xr && wr && y && yr);
    fill(x, t * k, 1);
    fill(w, n * k, 2);
    x[5] = 40.0f; /* an outlier channel */
    matmul_t(x, w, t, k, n, y);
    const size_t sizes[] = {16, 32, 128, 256};
    for (size_t si = 0; si < 4; si++) {
        memcpy(xr, x, t * k * sizeof *x);
        memcpy(wr, w, n * k * sizeof *w);
        qs_error err = {0};
        assert_int_equal(qk_block_hadamard(xr, t, k, sizes[si], 0, &err), QS_OK);
        assert_int_equal(qk_block_hadamard(wr, n, k, sizes[si], 0, &err), QS_OK);
        matmul_t(xr, wr, t, k, n, yr);
        double bound_ulps = log2((double)sizes[si]) + 2;
        for (size_t i = 0; i < t; i++)
            for (size_t r = 0; r < n; r++) {
                double nx = 0, nw = 0;
                for (size_t j = 0; j < k; j++) {
                    nx += (double)x[i * k + j] * x[i * k + j];
                    nw += (double)w[r * k + j] * w[r * k + j];
                }
                double bound = bound_ulps * 0x1p-23 * sqrt(nx * nw);
                assert_true(fabs(yr[i * n + r] - y[i * n + r]) <= bound);
            }
    }
    free(x);
    free(w);
    free(xr);
    free(wr);
    free(y);
    free(yr);
}

/* A size that is not a power of two, or a k that the tile does not divide, is refused. */
static void hadamard_refuses_sizes_it_cannot_tile(void **state) {
    (void)state;
    float x[96] = {0};
    qs_error err = {0};
    assert_int_equal(qk_block_hadamard(x, 1, 96, 64, 1, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "k=96"));
    assert_int_equal(qk_block_hadamard(x, 1, 96, 48, 1, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "power of two"));
    assert_int_equal(qk_block_hadamard(x, 1, 96, 32, 1, &err), QS_OK);
}

/* s_j = max|X_j|^alpha / max|W_j|^(1-alpha): max|X| (4, 1, 9), max|W| (1, 4, 1) at alpha 0.5
 * give (2, 0.5, 3); at alpha 1 they give max|X|. */
static void smoothquant_scales_are_the_papers_formula(void **state) {
    (void)state;
    const float act[3] = {4.0f, 1.0f, 9.0f};
    const float w[6] = {1.0f, -4.0f, 0.5f, -0.5f, 2.0f, -1.0f}; /* [2 x 3] */
    float s[3];
    qs_error err = {0};
    assert_int_equal(qk_smooth_scales(act, w, 2, 3, 0.5, s, &err), QS_OK);
    assert_float_equal(s[0], 2.0f, 0.0f);
    assert_float_equal(s[1], 0.5f, 0.0f);
    assert_float_equal(s[2], 3.0f, 0.0f);
    assert_int_equal(qk_smooth_scales(act, w, 2, 3, 1.0, s, &err), QS_OK);
    assert_float_equal(s[2], 9.0f, 0.0f);
    assert_int_equal(qk_smooth_scales(act, w, 2, 3, 1.5, s, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "alpha"));
}

/* X diag(s)^-1 times (W diag(s))^T is X W^T within 2 FP32 roundings per term. */
static void smoothquant_leaves_the_product_unchanged(void **state) {
    (void)state;
    const size_t t = 8, k = 64, n = 16;
    float x[8 * 64], w[16 * 64], a[64], s[64];
    double y[8 * 16], ys[8 * 16];
    fill(x, t * k, 3);
    fill(w, n * k, 4);
    x[7] = 30.0f;
    for (size_t j = 0; j < k; j++) {
        a[j] = 0.0f;
        for (size_t i = 0; i < t; i++)
            a[j] = fmaxf(a[j], fabsf(x[i * k + j]));
    }
    qs_error err = {0};
    assert_int_equal(qk_smooth_scales(a, w, n, k, 0.5, s, &err), QS_OK);
    matmul_t(x, w, t, k, n, y);
    qk_smooth_apply(x, t, k, s, 1);
    qk_smooth_apply(w, n, k, s, 0);
    matmul_t(x, w, t, k, n, ys);
    for (size_t i = 0; i < t * n; i++)
        assert_true(fabs(ys[i] - y[i]) <= 64 * 2 * 0x1p-24 * 30.0);
}

/* Correlated calibration inputs x [t x k]: mixtures of a few directions, some channels large. */
static void calibration(float *x, size_t t, size_t k, uint64_t seed) {
    uint64_t s = seed * 0x2545F4914F6CDD1Dull + 7;
    float base[8][512];
    for (int d = 0; d < 8; d++)
        for (size_t j = 0; j < k; j++)
            base[d][j] = (float)uni(&s);
    for (size_t i = 0; i < t; i++)
        for (size_t j = 0; j < k; j++) {
            double v = 0.1 * uni(&s);
            for (int d = 0; d < 8; d++)
                v += base[d][j] * uni(&s);
            if (j % 37 == 3) v *= 8.0;
            x[i * k + j] = (float)v;
        }
}

/* With a diagonal Hessian no column's error reaches another, so GPTQ is round-to-nearest: the
 * same bits as qk_fake_quant, for every format, act_order on and off (the frozen scales are
 * then each block's own). */
static void gptq_with_a_diagonal_hessian_is_rtn(void **state) {
    (void)state;
    const size_t rows = 32, k = 256;
    float *w = malloc(rows * k * sizeof *w), *q = malloc(rows * k * sizeof *q);
    float *r = malloc(rows * k * sizeof *r);
    double *h = calloc(k * k, sizeof *h);
    assert_true(w && q && r && h);
    fill(w, rows * k, 5);
    for (size_t j = 0; j < k; j++)
        h[j * k + j] = 1.0 + (double)(j % 7);
    for (size_t fi = 0; fi < qk_format_count(); fi++) {
        const qk_format *f = qk_format_at(fi);
        if (f->rule == QK_RULE_IDENTITY) continue;
        for (int ao = 0; ao < 2; ao++) {
            qk_quant_options o = {0};
            qs_error err = {0};
            memcpy(q, w, rows * k * sizeof *w);
            qk_gptq_options g = {.act_order = ao};
            assert_int_equal(qk_gptq(f, &o, q, rows, k, h, &g, &err), QS_OK);
            assert_int_equal(qk_fake_quant_into(f, &o, w, r, rows, k, NULL, &err), QS_OK);
            if (memcmp(q, r, rows * k * sizeof *q))
                fail_msg("%s act_order %d: GPTQ with a diagonal Hessian differs from RTN",
                         qk_format_name(f), ao);
        }
    }
    free(w);
    free(q);
    free(r);
    free(h);
}

/* The property GPTQ is built on: its layer error ||X W^T - X Q^T||^2 on the calibration data is
 * never above RTN's, over random layers (3 seeds, two shapes) and every format. */
static void gptq_layer_error_is_never_worse_than_rtn(void **state) {
    (void)state;
    const size_t shapes[2][3] = {{24, 128, 256}, {16, 256, 384}}; /* rows, k, tokens */
    for (int si = 0; si < 2; si++) {
        size_t rows = shapes[si][0], k = shapes[si][1], t = shapes[si][2];
        float *w = malloc(rows * k * sizeof *w), *q = malloc(rows * k * sizeof *q);
        float *r = malloc(rows * k * sizeof *r), *x = malloc(t * k * sizeof *x);
        double *h = calloc(k * k, sizeof *h);
        assert_true(w && q && r && x && h);
        for (uint64_t seed = 1; seed <= 3; seed++) {
            fill(w, rows * k, 100 + seed);
            calibration(x, t, k, seed);
            memset(h, 0, k * k * sizeof *h);
            qk_gptq_hessian_add(h, k, x, t, 0);
            for (size_t fi = 0; fi < qk_format_count(); fi++) {
                const qk_format *f = qk_format_at(fi);
                if (f->rule == QK_RULE_IDENTITY) continue;
                qk_quant_options o = {0};
                qs_error err = {0};
                memcpy(q, w, rows * k * sizeof *w);
                assert_int_equal(qk_gptq(f, &o, q, rows, k, h, NULL, &err), QS_OK);
                assert_int_equal(qk_fake_quant_into(f, &o, w, r, rows, k, NULL, &err), QS_OK);
                double eg = qk_gptq_layer_error(x, t, w, q, rows, k);
                double er = qk_gptq_layer_error(x, t, w, r, rows, k);
                if (!(eg <= er))
                    fail_msg("%s seed %d shape %d: GPTQ error %g above RTN's %g", qk_format_name(f),
                             (int)seed, si, eg, er);
            }
        }
        free(w);
        free(q);
        free(r);
        free(x);
        free(h);
    }
}

/* MR-GPTQ's scale search starts from the amax rule (candidate 0) and keeps a candidate only when
 * it lowers the group's error, so on every group (every 16-row block for a 2D format) its error
 * is never above the amax rule's; over 4 seeds, groups with outliers and without, and every
 * block format. On FP4 it must also move some scale, or the search would be the rule again. */
static void scale_search_is_never_worse_than_the_amax_rule(void **state) {
    (void)state;
    const size_t rows = 32, cols = 32;
    float x[32 * 32];
    qk_group_scale amax[32], found[32];
    for (size_t fi = 0; fi < qk_format_count(); fi++) {
        const qk_format *f = qk_format_at(fi);
        if (f->rule == QK_RULE_IDENTITY || f->rule == QK_RULE_TENSOR) continue;
        qk_quant_options o = {0};
        const size_t gc = qk_group_cols(f, &o, cols), unit = f->block_rows > 1 ? 16 : 1;
        int moved = 0;
        for (uint64_t seed = 1; seed <= 4; seed++) {
            fill(x, rows * cols, 300 + seed);
            if (seed % 2 == 0)
                for (size_t r = 0; r < rows; r++)
                    x[r * cols + (r * 7) % gc] *= 8.0f; /* one outlier a row */
            for (size_t c0 = 0; c0 < cols; c0 += gc) {
                qs_error err = {0};
                float sa = 0.0f, ss = 0.0f;
                assert_int_equal(
                    qk_group_scales(f, &o, x + c0, rows, gc, cols, 8.0f, amax, &sa, &err), QS_OK);
                assert_int_equal(
                    qk_scale_search(f, &o, x + c0, rows, gc, cols, 8.0f, found, &ss, &err), QS_OK);
                assert_true(sa == ss);
                for (size_t r0 = 0; r0 < rows; r0 += unit) {
                    double ea = 0.0, es = 0.0;
                    for (size_t r = r0; r < r0 + unit; r++) {
                        ea += qk_scale_search_error(f, &o, &amax[r], sa, x + r * cols + c0, gc);
                        es += qk_scale_search_error(f, &o, &found[r], ss, x + r * cols + c0, gc);
                        moved |= found[r].dec != amax[r].dec;
                    }
                    if (!(es <= ea))
                        fail_msg("%s seed %d group %zu rows %zu: searched error %g above the "
                                 "amax rule's %g",
                                 qk_format_name(f), (int)seed, c0 / gc, r0, es, ea);
                }
            }
        }
        if (!moved && f->elem == &qk_codec_e2m1) /* an 8-bit element may keep every amax */
            fail_msg("%s: the search never left the amax rule", qk_format_name(f));
    }
}

/* With a diagonal Hessian GPTQ quantizes each group alone, so GPTQ with the scale search is the
 * searched scales applied to the unquantized weights, bit for bit (NVFP4, MXFP4, INT4). */
static void gptq_with_scale_search_and_a_diagonal_hessian_uses_the_searched_scales(void **state) {
    (void)state;
    const size_t rows = 16, k = 128;
    float w[16 * 128], q[16 * 128], r[16 * 128];
    double *h = calloc(k * k, sizeof *h);
    assert_non_null(h);
    fill(w, rows * k, 11);
    for (size_t j = 0; j < k; j++)
        h[j * k + j] = 1.0 + (double)(j % 5);
    const char *names[] = {"nvfp4", "mxfp4", "int4_group"};
    for (int n = 0; n < 3; n++) {
        const qk_format *f = qk_format_by_name(names[n]);
        qk_quant_options o = {0};
        qs_error err = {0};
        float amax = 0.0f;
        for (size_t i = 0; i < rows * k; i++)
            amax = fmaxf(amax, fabsf(w[i]));
        const size_t gc = qk_group_cols(f, &o, k);
        for (size_t c0 = 0; c0 < k; c0 += gc) {
            qk_group_scale sc[16];
            float sd = 1.0f;
            assert_int_equal(qk_scale_search(f, &o, w + c0, rows, gc, k, amax, sc, &sd, &err),
                             QS_OK);
            for (size_t i = 0; i < rows; i++)
                for (size_t j = c0; j < c0 + gc; j++)
                    r[i * k + j] = qk_group_scale_apply(f, &o, &sc[i], sd, w[i * k + j]);
        }
        memcpy(q, w, sizeof q);
        qk_gptq_options g = {.scale_search = 1};
        assert_int_equal(qk_gptq(f, &o, q, rows, k, h, &g, &err), QS_OK);
        if (memcmp(q, r, sizeof q)) fail_msg("%s: GPTQ's searched scales differ", names[n]);
    }
    free(h);
}

/* Stochastic rounding has no frozen scale to reuse: GPTQ refuses it by name. */
static void gptq_refuses_stochastic_rounding(void **state) {
    (void)state;
    float w[16 * 16];
    double h[16 * 16] = {0};
    fill(w, 256, 9);
    for (int j = 0; j < 16; j++)
        h[j * 16 + j] = 1.0;
    qk_quant_options o = {.rounding = QK_ROUND_SR};
    qs_error err = {0};
    assert_int_equal(qk_gptq(qk_format_by_name("nvfp4"), &o, w, 16, 16, h, NULL, &err),
                     QS_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "stochastic"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(hadamard_is_orthonormal),
        cmocka_unit_test(rotation_leaves_the_product_unchanged),
        cmocka_unit_test(hadamard_refuses_sizes_it_cannot_tile),
        cmocka_unit_test(smoothquant_scales_are_the_papers_formula),
        cmocka_unit_test(smoothquant_leaves_the_product_unchanged),
        cmocka_unit_test(gptq_with_a_diagonal_hessian_is_rtn),
        cmocka_unit_test(gptq_layer_error_is_never_worse_than_rtn),
        cmocka_unit_test(gptq_refuses_stochastic_rounding),
        cmocka_unit_test(scale_search_is_never_worse_than_the_amax_rule),
        cmocka_unit_test(gptq_with_scale_search_and_a_diagonal_hessian_uses_the_searched_scales),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
