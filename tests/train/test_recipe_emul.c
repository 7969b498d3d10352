/* The scale-folded BF16 emulation (worker/train/recipe_emul.h) against the fake-quantized FP32
 * GEMM qlinear.c runs:
 * - bit for bit, summed in the same k order, where the tensor scales are powers of two (a
 *   tensor whose amax is 2688 x 2^-9 for NVFP4, 448 x 2^-7 for FP8; MXFP4 always), for nvfp4,
 *   nvfp4_2d, mxfp4 and fp8_e4m3 under RNE and SR;
 * - within (2K + 8) 2^-24 sum_k |Aq Bq| for arbitrary tensor scales, inputs spread over 2^+-20;
 * - for fprop, dgrad and wgrad of a quantized block under the nvfp4, mxfp4 and fp8 recipes: the
 *   packed operands (transpose, RHT, quantization with the recipe's SR streams) dequantize to
 *   qw_qlinear_prepare's GEMM inputs bit for bit, and the emulated GEMM is within the bound of
 *   the CPU backend's gemm_abt of those inputs (OpenBLAS, another summation order). */
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
#include "hadamard.h"
#include "ops.h"
#include "qlinear.h"
#include "quant.h"
#include "recipe.h"
#include "recipe_emul.h"

static uint64_t rs = 0x243F6A8885A308D3ull;
static uint64_t next(void) {
    rs ^= rs >> 12;
    rs ^= rs << 25;
    rs ^= rs >> 27;
    return rs * 2685821657736338717ull;
}
/* uniform in (-1, 1) */
static float unit(void) {
    return (float)((double)(next() >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* C_ref[M x N] = sum_k Aq[m,k] Bq[n,k] in FP32, k in order 0..K-1 (the emulation's order), and
 * mag[M x N] = sum_k |Aq Bq| in double. */
static void ref_gemm(float *C, double *mag, const float *A, const float *B, size_t M, size_t N,
                     size_t K) {
    for (size_t m = 0; m < M; m++)
        for (size_t j = 0; j < N; j++) {
            float acc = 0.0f;
            double s = 0.0;
            for (size_t k = 0; k < K; k++) {
                float p = A[m * K + k] * B[j * K + k];
                acc += p;
                s += fabs((double)A[m * K + k] * B[j * K + k]);
            }
            C[m * N + j] = acc;
            if (mag) mag[m * N + j] = s;
        }
}

/* Quantizes x [rows x k] both ways: packed p and fake-quant q; checks they agree bit for bit. */
static void both_ways(const qk_format *f, const qk_quant_options *opt, const float *x, size_t rows,
                      size_t k, qk_packed *p, float *q) {
    qs_error err = {0};
    assert_int_equal(qk_packed_init(p, f, opt, rows, k, &err), QS_OK);
    if (qk_quantize(f, opt, x, rows, k, p, &err) != QS_OK) fail_msg("%s", err.msg);
    assert_int_equal(qk_fake_quant_into(f, opt, x, q, rows, k, NULL, &err), QS_OK);
    float *d = malloc(rows * k * sizeof *d);
    assert_int_equal(qk_dequantize(p, d, 1, &err), QS_OK);
    assert_memory_equal(d, q, rows * k * sizeof *d);
    free(d);
}

static const char *const FORMATS[] = {"nvfp4", "nvfp4_2d", "mxfp4", "fp8_e4m3"};

static void power_of_two_scales_bit_identical(void **s) {
    (void)s;
    enum { M = 32, N = 48, K = 256 };
    float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * N * K);
    float *aq = malloc(sizeof(float) * M * K), *bq = malloc(sizeof(float) * N * K);
    float *ce = malloc(sizeof(float) * M * N), *cr = malloc(sizeof(float) * M * N);
    for (size_t fi = 0; fi < sizeof FORMATS / sizeof FORMATS[0]; fi++)
        for (int sr = 0; sr < 2; sr++) {
            const qk_format *f = qk_format_by_name(FORMATS[fi]);
            assert_non_null(f);
            int fp8 = !strcmp(FORMATS[fi], "fp8_e4m3");
            float amax = fp8 ? 448.0f / 128.0f : 2688.0f / 512.0f; /* S_dec 2^-7, 2^-9 */
            for (size_t i = 0; i < (size_t)M * K; i++)
                a[i] = unit();
            for (size_t i = 0; i < (size_t)N * K; i++)
                b[i] = unit() * 0.75f;
            a[5] = amax;
            b[(size_t)7 * K + 3] = -amax;
            qk_quant_options opt = {0};
            opt.rounding = sr ? QK_ROUND_SR : QK_ROUND_RNE;
            opt.seed = 11;
            opt.threads = 1;
            qk_packed pa = {0}, pb = {0};
            opt.tensor_id = 1;
            both_ways(f, &opt, a, M, K, &pa, aq);
            opt.tensor_id = 2;
            both_ways(f, &opt, b, N, K, &pb, bq);
            int e;
            assert_float_equal(frexpf(pa.tensor_scale, &e), 0.5f, 0.0f); /* powers of two */
            assert_float_equal(frexpf(pb.tensor_scale, &e), 0.5f, 0.0f);
            qs_error err = {0};
            if (qw_emul_gemm_abt(ce, &pa, &pb, 0.0f, &err) != QS_OK) fail_msg("%s", err.msg);
            ref_gemm(cr, NULL, aq, bq, M, N, K);
            size_t differ = 0;
            for (size_t i = 0; i < (size_t)M * N; i++)
                differ += memcmp(&ce[i], &cr[i], 4) != 0;
            printf("  %-9s %s: S_A %g S_B %g, %zu of %d outputs differ in any bit\n", FORMATS[fi],
                   sr ? "SR " : "RNE", (double)pa.tensor_scale, (double)pb.tensor_scale, differ,
                   M * N);
            assert_int_equal(differ, 0);
            qk_packed_release(&pa);
            qk_packed_release(&pb);
        }
    free(a), free(b), free(aq), free(bq), free(ce), free(cr);
}

/* Within the bound for arbitrary tensor scales; rows spread over 2^-20 .. 2^20. */
static void arbitrary_scales_within_bound(void **s) {
    (void)s;
    enum { M = 24, N = 40, K = 512 };
    float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * N * K);
    float *aq = malloc(sizeof(float) * M * K), *bq = malloc(sizeof(float) * N * K);
    float *ce = malloc(sizeof(float) * M * N), *cr = malloc(sizeof(float) * M * N);
    double *mag = malloc(sizeof(double) * M * N);
    for (size_t fi = 0; fi < sizeof FORMATS / sizeof FORMATS[0]; fi++) {
        const qk_format *f = qk_format_by_name(FORMATS[fi]);
        for (size_t i = 0; i < (size_t)M * K; i++)
            a[i] = ldexpf(unit(), (int)((i / K) % 41) - 20) * 1.37f;
        for (size_t i = 0; i < (size_t)N * K; i++)
            b[i] = unit() * 0.01234f;
        qk_quant_options opt = {0};
        opt.threads = 1;
        qk_packed pa = {0}, pb = {0};
        opt.tensor_id = 1;
        both_ways(f, &opt, a, M, K, &pa, aq);
        opt.tensor_id = 2;
        both_ways(f, &opt, b, N, K, &pb, bq);
        qs_error err = {0};
        if (qw_emul_gemm_abt(ce, &pa, &pb, 0.0f, &err) != QS_OK) fail_msg("%s", err.msg);
        ref_gemm(cr, mag, aq, bq, M, N, K);
        double worst = 0.0;
        size_t differ = 0;
        for (size_t i = 0; i < (size_t)M * N; i++) {
            double bound = (2.0 * K + 8.0) * ldexp(1.0, -24) * mag[i];
            double d = fabs((double)ce[i] - cr[i]);
            differ += d != 0.0;
            if (bound > 0 && d / bound > worst) worst = d / bound;
            if (d > bound)
                fail_msg("%s output %zu: emulated %.9g, fake-quant %.9g, bound %.3g", FORMATS[fi],
                         i, (double)ce[i], (double)cr[i], bound);
        }
        printf("  %-9s S_A %.9g S_B %.9g: %zu of %d outputs differ, worst %.3g of the bound\n",
               FORMATS[fi], (double)pa.tensor_scale, (double)pb.tensor_scale, differ, M * N, worst);
        qk_packed_release(&pa);
        qk_packed_release(&pb);
    }
    free(a), free(b), free(aq), free(bq), free(ce), free(cr), free(mag);
}

/* The packed form of GEMM input op as qlinear makes it: transpose, RHT, quantize with the
 * recipe's stream. */
static void packed_operand(const qw_qlinear_env *env, const qw_operand_spec *spec, int linear,
                           qw_gemm_operand op, const float *src, int rows, int cols, int transpose,
                           qk_packed *p) {
    int r = transpose ? cols : rows, k = transpose ? rows : cols;
    float *z = malloc(sizeof(float) * rows * cols);
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++)
            z[transpose ? (size_t)j * rows + i : (size_t)i * cols + j] = src[(size_t)i * cols + j];
    qs_error err = {0};
    if (spec->rht)
        assert_int_equal(qk_rht(z, (size_t)r, (size_t)k, spec->rht_dim, env->seed, 0, 1, &err),
                         QS_OK);
    qk_quant_options opt = {0};
    opt.rounding = spec->rounding;
    opt.seed = env->seed;
    opt.tensor_id = (uint32_t)linear * QW_N_OPERANDS + (uint32_t)op;
    opt.step = env->step;
    opt.threads = 1;
    assert_int_equal(qk_packed_init(p, spec->fmt, &opt, (size_t)r, (size_t)k, &err), QS_OK);
    if (qk_quantize(spec->fmt, &opt, z, (size_t)r, (size_t)k, p, &err) != QS_OK)
        fail_msg("%s", err.msg);
    free(z);
}

static void recipe_gemms_match_qlinear(void **s) {
    (void)s;
    enum { NT = 32, IN = 64, OUT = 48, L = 3, LINEAR = 4 };
    static const char *const recipes[] = {"nvfp4", "nvfp4-no-2d", "mxfp4", "fp8"};
    qw_backend cpu;
    assert_int_equal(qw_backend_cpu_init(&cpu, 1, 1, NULL), QS_OK);
    float *x = malloc(sizeof(float) * NT * IN), *w = malloc(sizeof(float) * OUT * IN);
    float *dy = malloc(sizeof(float) * NT * OUT);
    size_t big = (size_t)IN * OUT > (size_t)NT * IN ? (size_t)IN * OUT : (size_t)NT * IN;
    float *qa = malloc(sizeof(float) * big), *qb = malloc(sizeof(float) * big);
    float *deq = malloc(sizeof(float) * big);
    float *ce = malloc(sizeof(float) * big), *cr = malloc(sizeof(float) * big);
    double *mag = malloc(sizeof(double) * big);
    for (size_t i = 0; i < (size_t)NT * IN; i++)
        x[i] = unit() * 3.0f;
    for (size_t i = 0; i < (size_t)OUT * IN; i++)
        w[i] = unit() * 0.05f;
    for (size_t i = 0; i < (size_t)NT * OUT; i++)
        dy[i] = unit() * 1e-3f;
    /* per GEMM: inputs (operand, source, rows, cols, transpose) and the output shape */
    struct in {
        qw_gemm_operand op;
        const float *src;
        int rows, cols, t;
    };
    const struct {
        struct in a, b;
        int M, N, K;
    } gemms[QW_N_LINEAR_GEMMS] = {
        {{QW_FPROP_X, x, NT, IN, 0}, {QW_FPROP_W, w, OUT, IN, 0}, NT, OUT, IN},
        {{QW_DGRAD_DY, dy, NT, OUT, 0}, {QW_DGRAD_W, w, OUT, IN, 1}, NT, IN, OUT},
        {{QW_WGRAD_DY, dy, NT, OUT, 1}, {QW_WGRAD_X, x, NT, IN, 1}, OUT, IN, NT},
    };
    for (size_t ri = 0; ri < sizeof recipes / sizeof recipes[0]; ri++) {
        qw_recipe r;
        assert_int_equal(qw_recipe_by_name(recipes[ri], &r, NULL), QS_OK);
        qw_qlinear_env env = {0};
        env.be = &cpu;
        env.recipe = &r;
        env.n_layers = L;
        env.seed = 0x5EEDull;
        env.step = 3;
        for (int g = 0; g < QW_N_LINEAR_GEMMS; g++) {
            const struct in *ins[2] = {&gemms[g].a, &gemms[g].b};
            float *prepared[2] = {qa, qb};
            qk_packed pk[2] = {{0}, {0}};
            for (int i = 0; i < 2; i++) {
                qw_operand_spec spec;
                qw_recipe_operand(&r, 0, L, ins[i]->op, &spec);
                assert_int_equal(spec.mode, QW_MODE_QUANT);
                qs_error err = {0};
                if (qw_qlinear_prepare(&env, &spec, LINEAR, ins[i]->op, prepared[i], ins[i]->src,
                                       ins[i]->rows, ins[i]->cols, ins[i]->t, &err) != QS_OK)
                    fail_msg("%s", err.msg);
                packed_operand(&env, &spec, LINEAR, ins[i]->op, ins[i]->src, ins[i]->rows,
                               ins[i]->cols, ins[i]->t, &pk[i]);
                assert_int_equal(qk_dequantize(&pk[i], deq, 1, &err), QS_OK);
                assert_memory_equal(deq, prepared[i], pk[i].rows * pk[i].k * sizeof(float));
            }
            int M = gemms[g].M, N = gemms[g].N, K = gemms[g].K;
            qs_error err = {0};
            assert_int_equal(cpu.ops->gemm_abt(&cpu, cr, qa, qb, M, N, K, 0.0f, &err), QS_OK);
            if (qw_emul_gemm_abt(ce, &pk[0], &pk[1], 0.0f, &err) != QS_OK) fail_msg("%s", err.msg);
            ref_gemm(deq, mag, qa, qb, (size_t)M, (size_t)N, (size_t)K);
            double worst = 0.0;
            for (size_t i = 0; i < (size_t)M * N; i++) {
                double bound = (2.0 * K + 8.0) * ldexp(1.0, -24) * mag[i];
                double d = fabs((double)ce[i] - cr[i]);
                if (bound > 0 && d / bound > worst) worst = d / bound;
                if (d > bound)
                    fail_msg("%s %s output %zu: emulated %.9g, gemm_abt %.9g, bound %.3g",
                             recipes[ri], qw_linear_gemm_name((qw_linear_gemm)g), i, (double)ce[i],
                             (double)cr[i], bound);
            }
            printf("  %-12s %s: %d x %d x %d, operands equal, worst %.3g of the bound\n",
                   recipes[ri], qw_linear_gemm_name((qw_linear_gemm)g), M, N, K, worst);
            qk_packed_release(&pk[0]);
            qk_packed_release(&pk[1]);
        }
    }
    free(x), free(w), free(dy), free(qa), free(qb), free(deq), free(ce), free(cr), free(mag);
    qw_backend_release(&cpu);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(power_of_two_scales_bit_identical),
        cmocka_unit_test(arbitrary_scales_within_bound),
        cmocka_unit_test(recipe_gemms_match_qlinear),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
