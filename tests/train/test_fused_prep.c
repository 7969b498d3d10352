/* The CPU's fused operand preparation gives the separate passes' bits:
 * - qk_rht_from (transpose or copy, the RHT and the tensor amax in one pass) against the
 *   transpose or copy followed by qk_rht, and its amax against the largest finite |value|,
 *   for d 16 and 32, both layouts, row counts that are not a multiple of 16, NaN and +-Inf,
 *   1 and 2 threads;
 * - a quantized linear's forward and backward (y, dx, dW) with the fused passes (the default:
 *   rht_from for the RHT'd inputs, fake_quant_into for the inputs used in their own layout)
 *   against qw_qlinear_env.unfused_prep, for every recipe, on every ISA path of the fixed-order
 *   GEMM the CPU has (forced in turn), 1 and 2 threads, with a gradient holding +-Inf and NaN;
 * - the stochastic-rounding fast path (Philox words made 64 blocks at a time, the decision in
 *   single precision) against the reference quantizer, rows starting inside a span of words. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include <cmocka.h>

#include "../lib/floats.h"

#include "gemm_cpu.h"
#include "gemm_fixed.h"
#include "hadamard.h"
#include "ops.h"
#include "qlinear.h"
#include "quant.h"
#include "recipe.h"

#define SEED 0xF05Eull

/* The largest finite |x[i]|, 0 when none: what the quantizer's tensor amax is. */
static float finite_amax(const float *x, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++)
        if (isfinite(x[i]) && fabsf(x[i]) > m) m = fabsf(x[i]);
    return m;
}

static void rht_from_is_transpose_then_rht(void **s) {
    (void)s;
    static const size_t shapes[][2] = {{40, 64}, {16, 32}, {7, 96}, {33, 160}}; /* rows, k */
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int d = 16; d <= 32; d += 16)
            for (int tr = 0; tr <= 1; tr++)
                for (int nt = 1; nt <= 2; nt++)
                    for (int special = 0; special <= 1; special++) {
                        size_t rows = shapes[i][0], k = shapes[i][1], n = rows * k;
                        if (k % (size_t)d) continue;
                        float *src = malloc(n * sizeof *src), *a = malloc(n * sizeof *a),
                              *b = malloc(n * sizeof *b);
                        assert_non_null(src);
                        assert_non_null(a);
                        assert_non_null(b);
                        qwt_fill(src, n, (uint32_t)(i * 8 + d + tr), 3.0f);
                        if (special) { /* Inf and NaN never enter the amax */
                            src[n / 3] = INFINITY;
                            src[n / 2] = -INFINITY;
                            src[n - 1] = NAN;
                            src[1] = 1e30f;
                        }
                        /* the separate passes: a [rows x k] from src [k x rows]^T or src */
                        for (size_t r = 0; r < rows; r++)
                            for (size_t c = 0; c < k; c++)
                                a[r * k + c] = tr ? src[c * rows + r] : src[r * k + c];
                        assert_int_equal(qk_rht(a, rows, k, d, SEED, 0, 1, NULL), QS_OK);
                        float amax = -1.0f;
                        assert_int_equal(qk_rht_from(b, src, rows, k, tr, d, SEED, nt, &amax, NULL),
                                         QS_OK);
                        size_t bad = qwt_differing(a, b, n);
                        float want = finite_amax(a, n);
                        printf("%s rht_from d %d rows %2zu k %3zu transpose %d threads %d%s: %zu "
                               "differ, amax %a (want %a)\n",
                               bad || memcmp(&amax, &want, sizeof amax) ? "NOT OK" : "OK", d, rows,
                               k, tr, nt, special ? " inf/nan" : "", bad, amax, want);
                        assert_int_equal(bad, 0);
                        assert_memory_equal(&amax, &want, sizeof amax);
                        free(src), free(a), free(b);
                    }
    qs_error err = {0};
    float x[32], y[32];
    qwt_fill(x, 32, 1, 1.0f);
    assert_int_equal(qk_rht_from(y, x, 1, 24, 0, 16, SEED, 1, NULL, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "k=24"));
    assert_int_equal(qk_rht_from(x, x, 2, 16, 0, 16, SEED, 1, NULL, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "overlap"));
}

/* One linear's fprop, dgrad and wgrad under recipe `name` with the fused passes and without:
 * elements that differ, summed over y, dx and dW. */
static size_t linear_differs(qw_backend *be, const char *name, int N, int in, int out,
                             int special) {
    qw_recipe r;
    assert_int_equal(qw_recipe_by_name(name, &r, NULL), QS_OK);
    size_t nb = qw_qlinear_scratch_floats(N, in, out);
    float *x = malloc((size_t)N * in * sizeof *x), *W = malloc((size_t)out * in * sizeof *W),
          *dy = malloc((size_t)N * out * sizeof *dy), *ba = malloc(nb * sizeof *ba),
          *bb = malloc(nb * sizeof *bb);
    float *res[2][3];
    size_t len[3] = {(size_t)N * out, (size_t)N * in, (size_t)out * in};
    qwt_fill(x, (size_t)N * in, 11, 2.0f);
    qwt_fill(W, (size_t)out * in, 12, 0.3f);
    qwt_fill(dy, (size_t)N * out, 13, 0.01f);
    if (special) {
        dy[5] = INFINITY;
        dy[(size_t)N * out / 2] = NAN;
        dy[(size_t)N * out - 3] = -INFINITY;
    }
    for (int u = 0; u <= 1; u++) {
        qw_qlinear_env env = {0};
        env.be = be;
        env.recipe = &r;
        env.n_layers = 2; /* block 0 quantized, block 1 the high-precision last one */
        env.seed = SEED;
        env.step = 3;
        env.buf_a = ba;
        env.buf_b = bb;
        env.unfused_prep = u;
        for (int j = 0; j < 3; j++) {
            res[u][j] = malloc(len[j] * sizeof(float));
            assert_non_null(res[u][j]);
        }
        qwt_fill(res[u][2], len[2], 14, 0.5f); /* dW accumulates */
        assert_int_equal(qw_qlinear_forward(&env, 0, 2, res[u][0], x, W, N, in, out, NULL), QS_OK);
        assert_int_equal(
            qw_qlinear_backward(&env, 0, 2, res[u][1], 0, res[u][2], dy, x, W, N, in, out, NULL),
            QS_OK);
    }
    size_t bad = 0;
    for (int j = 0; j < 3; j++) {
        bad += qwt_differing(res[0][j], res[1][j], len[j]);
        free(res[0][j]), free(res[1][j]);
    }
    free(x), free(W), free(dy), free(ba), free(bb);
    return bad;
}

static void fused_linear_is_unfused_bit_for_bit(void **s) {
    (void)s;
    qw_cpu_gemm_force(QW_CPU_GEMM_FIXED);
    static const char *recipes[] = {
        "nvfp4", "nvfp4-no-rht", "nvfp4-no-sr", "nvfp4-no-2d", "nvfp4-all-blocks",
        "mxfp4", "bf16",         "fp8"};
    static const int shapes[][3] = {{64, 48, 32}, {96, 40, 56}, {32, 128, 80}}; /* N, in, out */
    static const qw_gemm_isa isas[] = {QW_GEMM_ISA_SCALAR, QW_GEMM_ISA_AVX2, QW_GEMM_ISA_AVX512};
    for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++) {
        if (!qw_gemm_fixed_isa_supported(isas[i])) continue;
        assert_int_equal(qw_gemm_fixed_force_isa(isas[i], NULL), QS_OK);
        for (int nt = 1; nt <= 2; nt++) {
            qw_backend be;
            assert_int_equal(qw_backend_cpu_init(&be, nt, 1, NULL), QS_OK);
            for (size_t rc = 0; rc < sizeof recipes / sizeof recipes[0]; rc++)
                for (size_t j = 0; j < sizeof shapes / sizeof shapes[0]; j++)
                    for (int special = 0; special <= 1; special++) {
                        const int *sh = shapes[j];
                        size_t bad = linear_differs(&be, recipes[rc], sh[0], sh[1], sh[2], special);
                        printf("%s %-6s threads %d %-16s N %3d in %3d out %3d%s: %zu differ\n",
                               bad ? "NOT OK" : "OK", qw_gemm_isa_name(isas[i]), nt, recipes[rc],
                               sh[0], sh[1], sh[2], special ? " inf/nan" : "", bad);
                        assert_int_equal(bad, 0);
                    }
            qw_backend_release(&be);
        }
    }
    assert_int_equal(qw_gemm_fixed_force_isa(QW_GEMM_ISA_AUTO, NULL), QS_OK);
}

static void sr_fast_path_is_the_reference(void **s) {
    (void)s;
    /* k = 16 * odd and 32 * odd: rows start at stream indices that are not a multiple of the
     * 256-word span; 1056 takes several refills within one row */
    static const size_t shapes[][2] = {{5, 48}, {300, 48}, {9, 96}, {3, 1056}};
    const char *fmts[] = {"nvfp4", "mxfp4"};
    for (size_t f = 0; f < 2; f++)
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            size_t rows = shapes[i][0], k = shapes[i][1], n = rows * k;
            if (k % (f ? 32 : 16)) continue;
            const qk_format *fmt = qk_format_by_name(fmts[f]);
            assert_non_null(fmt);
            float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
            assert_non_null(a);
            assert_non_null(b);
            qwt_fill(a, n, (uint32_t)(i + 40 * f), 1.5f);
            memcpy(b, a, n * sizeof *a);
            qk_quant_options o = {.rounding = QK_ROUND_SR, .seed = SEED, .tensor_id = 9, .step = 7};
            o.reference_only = 1;
            assert_int_equal(qk_fake_quant(fmt, &o, a, rows, k, NULL, NULL), QS_OK);
            o.reference_only = 0;
            assert_int_equal(qk_fake_quant(fmt, &o, b, rows, k, NULL, NULL), QS_OK);
            size_t bad = qwt_differing(a, b, n);
            printf("%s SR %s %zu x %zu: %zu differ\n", bad ? "NOT OK" : "OK", fmts[f], rows, k,
                   bad);
            assert_int_equal(bad, 0);
            free(a), free(b);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rht_from_is_transpose_then_rht),
        cmocka_unit_test(fused_linear_is_unfused_bit_for_bit),
        cmocka_unit_test(sr_fast_path_is_the_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
