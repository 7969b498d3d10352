/* Which training GEMMs run with BF16 operands (worker/train/bf16_exact.h):
 * - the format table: MXFP4 and both MXFP6 (element x E8M0 power of two) are exact in BF16;
 *   MXFP8 (E4M3, E5M2: subnormals x 2^-127 fall below BF16's 2^-133), NVFP4 (FP32 tensor
 *   scale), FP8 per tensor, the integer formats and the identity are not;
 * - brute force: the numeric core's fake quantization of random tensors (magnitudes from 2^-149
 *   to 2^90, tiny blocks included, RNE and SR) gives values that all come back unchanged
 *   from qw_round_bf16 exactly for the formats the table calls exact, and for every GEMM input
 *   of every shipped recipe (made by qw_qlinear_prepare on the CPU: transpose, RHT, rounding or
 *   fake quantization) exactly when qw_operand_bf16_exact says so;
 * - the per-recipe GEMM paths, written out, and the counts qw_tmodel_gemm_paths gives are the
 *   calls a training step makes to gemm_abt_bf16 and gemm_abt (a counting CPU table);
 * - under gemm_fp32 ($QSWEEP_CUDA_GEMM=fp32) every linear GEMM calls gemm_abt and every GEMM
 *   kind records the path fp32;
 * - the gemm_path a training result names: the CPU's "cpu", on a GPU "bf16" or "fp32" by the
 *   count of FP32 linear GEMMs;
 * - the CPU's gemm_abt_bf16 is gemm_abt (the CPU training results do not change). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include <cmocka.h>

#include "bf16_exact.h"
#include "format.h"
#include "ops.h"
#include "qk_gemm_path.h"
#include "qlinear.h"
#include "quant.h"
#include "recipe.h"
#include "tmodel.h"
#include "small_config.h"

#define SEED 0xB16Full

/* The named recipes of recipe.c, in its order (checked against its own list below). */
static const char *const RECIPES[] = {
    "fp32",         "bf16",        "fp8",         "nvfp4",
    "nvfp4-no-rht", "nvfp4-no-sr", "nvfp4-no-2d", "nvfp4-all-blocks",
    "mxfp4"};
#define N_RECIPES (sizeof RECIPES / sizeof RECIPES[0])

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static uint64_t next(void) {
    rs ^= rs >> 12;
    rs ^= rs << 25;
    rs ^= rs >> 27;
    return rs * 2685821657736338717ull;
}

/* x[rows x cols], finite: each row's magnitudes spread 30 binades below a base 2^e, e uniform in
 * [-140, 90] (rows of tiny blocks, whose MX scales clamp at 2^-127, and of huge ones), every
 * fourth row instead uniform in (-1, 1) as activations are. ldexpf underflows gradually to
 * subnormals and 0. */
static void fill_wide(float *x, int rows, int cols) {
    for (int r = 0; r < rows; r++) {
        int base = (int)(next() % 231) - 140;
        for (int c = 0; c < cols; c++) {
            uint64_t u = next();
            float m = 1.0f + (float)(u >> 41) / 8388608.0f; /* [1, 2), 23 random bits */
            float s = (u >> 40) & 1 ? -1.0f : 1.0f;
            x[(size_t)r * cols + c] =
                r % 4 == 3 ? s * (m - 1.0f) : s * ldexpf(m, base - (int)((u >> 8) % 31));
        }
    }
}

/* Counts the finite values of x[n] that qw_round_bf16 changes, and the non-finite ones. */
static size_t not_bf16(const float *x, size_t n, size_t *nonfinite) {
    size_t bad = 0;
    *nonfinite = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) {
            (*nonfinite)++;
            continue;
        }
        float y = qw_round_bf16(x[i]);
        bad += memcmp(&x[i], &y, sizeof y) != 0;
    }
    return bad;
}

typedef struct format_row {
    const char *name;
    int exact;
} format_row;

/* Every format of the numeric core, its answer written out (bf16_exact.h gives the reasons). */
static const format_row FORMATS[] = {
    {"bf16", 0},       {"nvfp4", 0},        {"nvfp4_2d", 0},   {"mxfp4", 1},
    {"mxfp6_e2m3", 1}, {"mxfp6_e3m2", 1},   {"mxfp8_e4m3", 0}, {"mxfp8_e5m2", 0},
    {"fp8_e4m3", 0},   {"int8_channel", 0}, {"int4_group", 0},
};
#define N_FORMATS (sizeof FORMATS / sizeof FORMATS[0])

static void format_table_says_which_are_bf16_exact(void **s) {
    (void)s;
    assert_int_equal(qk_format_count(), N_FORMATS); /* a new format needs its row here */
    for (size_t i = 0; i < N_FORMATS; i++) {
        const qk_format *f = qk_format_by_name(FORMATS[i].name);
        assert_non_null(f);
        printf("  %-13s bf16-exact %d (expected %d)\n", FORMATS[i].name, qw_format_bf16_exact(f),
               FORMATS[i].exact);
        assert_int_equal(qw_format_bf16_exact(f), FORMATS[i].exact);
    }
    assert_int_equal(qw_format_bf16_exact(NULL), 0);
}

/* Fake-quantizes wide random tensors with every format (RNE, and SR where the format rounds)
 * and counts the finite values that are not BF16 numbers: none exactly for the exact formats. */
static void formats_agree_with_brute_force(void **s) {
    (void)s;
    enum { ROWS = 64, K = 256, TRIALS = 4 };
    float *x = malloc(sizeof(float) * ROWS * K);
    for (size_t i = 0; i < N_FORMATS; i++) {
        const qk_format *f = qk_format_by_name(FORMATS[i].name);
        size_t bad = 0, nonfinite = 0, n = 0;
        for (int t = 0; t < TRIALS; t++)
            for (int sr = 0; sr < (f->rule == QK_RULE_IDENTITY ? 1 : 2); sr++) {
                fill_wide(x, ROWS, K);
                qk_quant_options opt = {0};
                opt.rounding = sr ? QK_ROUND_SR : QK_ROUND_RNE;
                opt.seed = SEED;
                opt.tensor_id = (uint32_t)(i * 8 + t);
                opt.threads = 1;
                qs_error err = {0};
                if (qk_fake_quant(f, &opt, x, ROWS, K, NULL, &err) != QS_OK)
                    fail_msg("%s: %s", FORMATS[i].name, err.msg);
                size_t nf;
                bad += not_bf16(x, (size_t)ROWS * K, &nf);
                nonfinite += nf;
                n += (size_t)ROWS * K;
            }
        int says = qw_format_bf16_exact(f);
        int ok = says ? bad == 0 : bad > 0;
        printf("%s %-13s says %d: %zu of %zu values not BF16 (%zu non-finite)\n",
               ok ? "OK" : "NOT OK", FORMATS[i].name, says, bad, n, nonfinite);
        assert_true(ok);
        if (says) assert_int_equal(nonfinite, 0);
    }
    free(x);
}

/* The edge the table turns on, written out: under the smallest E8M0 scale 2^-127 (a block of
 * amax 2^-120 or less: RCEIL clamps there), E4M3's smallest subnormal 2^-9 decodes to 2^-136, an
 * FP32 subnormal below BF16's smallest (2^-133), while E2M1's 0.5 decodes to 2^-128, a BF16
 * subnormal. */
static void smallest_mx_scale_keeps_e2m1_not_e4m3_in_bf16(void **s) {
    (void)s;
    float x[32] = {0};
    x[0] = ldexpf(1.0f, -120);
    x[1] = ldexpf(1.0f, -136);
    assert_int_equal(qk_fake_quant(qk_format_by_name("mxfp8_e4m3"), NULL, x, 1, 32, NULL, NULL),
                     QS_OK);
    assert_true(x[1] == ldexpf(1.0f, -136));
    assert_true(qw_round_bf16(x[1]) != x[1]);
    float y[32] = {0};
    y[0] = ldexpf(1.0f, -128);
    assert_int_equal(qk_fake_quant(qk_format_by_name("mxfp4"), NULL, y, 1, 32, NULL, NULL), QS_OK);
    assert_true(y[0] == ldexpf(1.0f, -128));
    assert_true(qw_round_bf16(y[0]) == y[0]);
}

/* The list of recipe.c (its error message for an unknown name) is RECIPES. */
static void recipe_list_is_the_shipped_one(void **s) {
    (void)s;
    qw_recipe r;
    qs_error err = {0};
    assert_int_equal(qw_recipe_by_name("?", &r, &err), QS_EINVAL);
    char want[256] = "(known: ";
    for (size_t i = 0; i < N_RECIPES; i++) {
        strcat(want, RECIPES[i]);
        strcat(want, i + 1 < N_RECIPES ? ", " : ")");
    }
    assert_non_null(strstr(err.msg, want));
}

/* Every GEMM input of every shipped recipe, in a quantized block, the BF16 last block and
 * lm_head, made as the GEMMs see it (qw_qlinear_prepare on the CPU), round-trips through BF16
 * exactly when qw_operand_bf16_exact says so. */
static void recipe_operands_agree_with_brute_force(void **s) {
    (void)s;
    enum { ROWS = 64, COLS = 96, L = 3, TRIALS = 3 };
    qw_backend cpu;
    assert_int_equal(qw_backend_cpu_init(&cpu, 1, 1, NULL), QS_OK);
    float *src = malloc(sizeof(float) * ROWS * COLS), *dst = malloc(sizeof(float) * ROWS * COLS);
    for (size_t ri = 0; ri < N_RECIPES; ri++) {
        qw_recipe r;
        assert_int_equal(qw_recipe_by_name(RECIPES[ri], &r, NULL), QS_OK);
        qw_qlinear_env env = {0};
        env.be = &cpu;
        env.recipe = &r;
        env.n_layers = L;
        env.seed = SEED;
        int checked = 0, exact = 0;
        for (int layer = -1; layer < L; layer++)
            for (int op = 0; op < QW_N_OPERANDS; op++) {
                qw_operand_spec spec;
                qw_recipe_operand(&r, layer, L, (qw_gemm_operand)op, &spec);
                int transpose = op == QW_DGRAD_W || op == QW_WGRAD_DY || op == QW_WGRAD_X;
                size_t bad = 0, nonfinite = 0;
                for (int t = 0; t < TRIALS; t++) {
                    env.step = (uint32_t)t;
                    fill_wide(src, ROWS, COLS);
                    qs_error err = {0};
                    if (qw_qlinear_prepare(&env, &spec, 1 + layer, (qw_gemm_operand)op, dst, src,
                                           ROWS, COLS, transpose, &err) != QS_OK)
                        fail_msg("%s %s: %s", RECIPES[ri], qw_gemm_operand_name(op), err.msg);
                    size_t nf;
                    bad += not_bf16(dst, (size_t)ROWS * COLS, &nf);
                    nonfinite += nf;
                }
                int says = qw_operand_bf16_exact(&spec);
                int ok = says ? bad == 0 && nonfinite == 0 : bad > 0;
                if (!ok)
                    printf("NOT OK %s block %d %s: says %d, %zu values not BF16\n", RECIPES[ri],
                           layer, qw_gemm_operand_name(op), says, bad);
                assert_true(ok);
                checked++;
                exact += says;
            }
        printf("OK %-16s %d GEMM inputs: %d BF16-exact (no value changed), %d not (each with "
               "values BF16 changes)\n",
               RECIPES[ri], checked, exact, checked - exact);
    }
    free(src);
    free(dst);
    qw_backend_release(&cpu);
}

/* Per recipe, on 3 blocks: which GEMMs of a quantized block (0), the last block (2) and lm_head
 * run BF16 (fprop, dgrad, wgrad), and the micro-step's counts of qw_tmodel_gemm_paths. */
typedef struct path_row {
    const char *recipe;
    int block0[3], block2[3], head[3];
    int n_bf16, n_fp32;
} path_row;

static const path_row PATHS[] = {
    /* FP32 inputs everywhere, lm_head included (the test-only recipe) */
    {"fp32", {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, 0, 66},
    {"bf16", {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, 66, 0},
    /* FP8 per-tensor scales in every block; lm_head BF16 */
    {"fp8", {0, 0, 0}, {0, 0, 0}, {1, 1, 1}, 3, 63},
    /* NVFP4 blocks 0 and 1 (the tensor scale), block 2 and lm_head BF16: 24 = 3 (7 + 1) */
    {"nvfp4", {0, 0, 0}, {1, 1, 1}, {1, 1, 1}, 24, 42},
    {"nvfp4-no-rht", {0, 0, 0}, {1, 1, 1}, {1, 1, 1}, 24, 42},
    {"nvfp4-no-sr", {0, 0, 0}, {1, 1, 1}, {1, 1, 1}, 24, 42},
    {"nvfp4-no-2d", {0, 0, 0}, {1, 1, 1}, {1, 1, 1}, 24, 42},
    {"nvfp4-all-blocks", {0, 0, 0}, {0, 0, 0}, {1, 1, 1}, 3, 63},
    /* MXFP4: every value element x 2^s */
    {"mxfp4", {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, 66, 0},
};

static qw_config small_config(void) {
    return small_config_of(32, 64, 3, 2, 1, 16, 48);
}

/* A CPU table whose GEMM entries count their calls (gemm_tt by its bf16 promise; linear_bwd: a
 * dgrad when dx is given and a wgrad, both FP32). */
static int calls_bf16, calls_fp32;
static qw_ops counting;

static qs_status count_bf16(qw_backend *b, float *C, const float *A, const float *Bm, int M,
                            int Ncol, int K, float beta, qs_error *err) {
    calls_bf16++;
    return qw_ops_cpu()->gemm_abt_bf16(b, C, A, Bm, M, Ncol, K, beta, err);
}
static qs_status count_fp32(qw_backend *b, float *C, const float *A, const float *Bm, int M,
                            int Ncol, int K, float beta, qs_error *err) {
    calls_fp32++;
    return qw_ops_cpu()->gemm_abt(b, C, A, Bm, M, Ncol, K, beta, err);
}
static qs_status count_tt(qw_backend *b, int bf16, float *C, int ta, const float *A, int lda,
                          int tb, const float *Bm, int ldb, int M, int Ncol, int K, float beta,
                          qs_error *err) {
    if (M > 0 && bf16) /* not the M 0 call that asks whether the entry runs */
        calls_bf16++;
    else if (M > 0)
        calls_fp32++;
    return qw_ops_cpu()->gemm_tt(b, bf16, C, ta, A, lda, tb, Bm, ldb, M, Ncol, K, beta, err);
}
static qs_status count_linear_bwd(qw_backend *b, float *dx, int acc, float *dW, const float *dy,
                                  const float *x, const float *W, int N, int in, int out,
                                  qs_error *err) {
    calls_fp32 += dx ? 2 : 1;
    return qw_ops_cpu()->linear_bwd(b, dx, acc, dW, dy, x, W, N, in, out, err);
}

static void recipe_gemm_paths_are_the_table_and_the_calls(void **s) {
    (void)s;
    qw_config c = small_config();
    enum { B = 2, T = 16 };
    assert_int_equal(sizeof PATHS / sizeof PATHS[0], N_RECIPES);
    counting = *qw_ops_cpu();
    counting.gemm_abt_bf16 = count_bf16;
    counting.gemm_abt = count_fp32;
    counting.linear_bwd = count_linear_bwd;
    counting.gemm_tt = count_tt;
    qw_backend be;
    assert_int_equal(qw_backend_cpu_init(&be, 1, c.hidden_dim, NULL), QS_OK);
    const qw_ops *cpu_ops = be.ops;
    be.ops = &counting;
    for (size_t i = 0; i < N_RECIPES; i++) {
        const path_row *p = &PATHS[i];
        qw_recipe r;
        qs_error err = {0};
        assert_int_equal(qw_recipe_by_name(p->recipe, &r, &err), QS_OK);
        for (int g = 0; g < QW_N_LINEAR_GEMMS; g++) {
            assert_int_equal(qw_recipe_gemm_bf16(&r, 0, c.n_layers, g), p->block0[g]);
            assert_int_equal(qw_recipe_gemm_bf16(&r, 2, c.n_layers, g), p->block2[g]);
            assert_int_equal(qw_recipe_gemm_bf16(&r, -1, c.n_layers, g), p->head[g]);
        }
        qw_tmodel *m = NULL;
        assert_int_equal(qw_tmodel_create_on(&c, B, T, &be, &m, &err), QS_OK);
        assert_int_equal(qw_tmodel_init_random(m, 3, 0.2f, &err), QS_OK);
        assert_int_equal(qw_tmodel_set_recipe(m, &r, SEED, &err), QS_OK);
        int nb, nf;
        qw_tmodel_gemm_paths(m, &nb, &nf);
        uint32_t in[B * T], tg[B * T];
        for (int k = 0; k < B * T; k++) {
            in[k] = (uint32_t)(k * 5 % c.vocab_size);
            tg[k] = (uint32_t)((k * 7 + 1) % c.vocab_size);
        }
        calls_bf16 = calls_fp32 = 0;
        double loss;
        assert_int_equal(qw_tmodel_zero_grad(m, &err), QS_OK);
        if (qw_tmodel_forward(m, in, tg, 0, &loss, &err) != QS_OK) fail_msg("%s", err.msg);
        if (qw_tmodel_backward(m, 1.0f, &err) != QS_OK) fail_msg("%s", err.msg);
        int ok = nb == p->n_bf16 && nf == p->n_fp32 && calls_bf16 == nb && calls_fp32 == nf;
        printf("%s %-16s BF16 GEMMs %d (table %d, called %d), FP32 %d (table %d, called %d)\n",
               ok ? "OK" : "NOT OK", p->recipe, nb, p->n_bf16, calls_bf16, nf, p->n_fp32,
               calls_fp32);
        assert_true(ok);
        qw_tmodel_destroy(m);
    }
    be.ops = cpu_ops;
    qw_backend_release(&be);
}

/* $QSWEEP_CUDA_GEMM=fp32 (qw_tmodel_set_gemm_fp32, set by train_job.c for a CUDA backend of
 * that request): every linear GEMM of a step calls gemm_abt, none gemm_abt_bf16, the counts say
 * 0 BF16 and 3 (7 L + 1) FP32, and the path recorded per GEMM kind is fp32 alone, for every
 * recipe; the CPU's losses keep their bits (its two entries are one GEMM). */
static void gemm_fp32_runs_every_linear_gemm_fp32(void **s) {
    (void)s;
    qw_config c = small_config();
    enum { B = 2, T = 16 };
    counting = *qw_ops_cpu();
    counting.gemm_abt_bf16 = count_bf16;
    counting.gemm_abt = count_fp32;
    counting.linear_bwd = count_linear_bwd;
    counting.gemm_tt = count_tt;
    qw_backend be;
    assert_int_equal(qw_backend_cpu_init(&be, 1, c.hidden_dim, NULL), QS_OK);
    const qw_ops *cpu_ops = be.ops;
    be.ops = &counting;
    uint32_t in[B * T], tg[B * T];
    for (int k = 0; k < B * T; k++) {
        in[k] = (uint32_t)(k * 5 % c.vocab_size);
        tg[k] = (uint32_t)((k * 7 + 1) % c.vocab_size);
    }
    const int all = 3 * (7 * c.n_layers + 1);
    for (size_t i = 0; i < N_RECIPES; i++) {
        qw_recipe r;
        qs_error err = {0};
        assert_int_equal(qw_recipe_by_name(PATHS[i].recipe, &r, &err), QS_OK);
        double loss[2];
        unsigned ran[2][QW_N_LINEAR_GEMMS];
        int nb[2], nf[2], cb[2], cf[2];
        for (int fp32 = 0; fp32 < 2; fp32++) {
            qw_tmodel *m = NULL;
            assert_int_equal(qw_tmodel_create_on(&c, B, T, &be, &m, &err), QS_OK);
            assert_int_equal(qw_tmodel_init_random(m, 3, 0.2f, &err), QS_OK);
            assert_int_equal(qw_tmodel_set_recipe(m, &r, SEED, &err), QS_OK);
            qw_tmodel_set_gemm_fp32(m, fp32);
            qw_tmodel_gemm_paths(m, &nb[fp32], &nf[fp32]);
            calls_bf16 = calls_fp32 = 0;
            assert_int_equal(qw_tmodel_zero_grad(m, &err), QS_OK);
            if (qw_tmodel_forward(m, in, tg, 0, &loss[fp32], &err) != QS_OK ||
                qw_tmodel_backward(m, 1.0f, &err) != QS_OK)
                fail_msg("%s", err.msg);
            cb[fp32] = calls_bf16, cf[fp32] = calls_fp32;
            qw_tmodel_gemm_ran(m, ran[fp32]);
            qw_tmodel_destroy(m);
        }
        int kinds_fp32 = 1, kinds_bf16 = 0;
        for (int g = 0; g < QW_N_LINEAR_GEMMS; g++) {
            kinds_fp32 &= ran[1][g] == 1u << QK_GEMM_PATH_FP32;
            kinds_bf16 |= (ran[0][g] >> QK_GEMM_PATH_BF16) & 1;
        }
        int ok = nb[1] == 0 && nf[1] == all && cb[1] == 0 && cf[1] == all && kinds_fp32 &&
                 kinds_bf16 == (PATHS[i].n_bf16 > 0) && nb[0] == PATHS[i].n_bf16 &&
                 loss[0] == loss[1];
        printf("%s %-16s gemm_fp32: BF16 GEMMs %d (called %d), FP32 %d (called %d) of %d, "
               "every kind fp32 %s; without: BF16 %d, a kind bf16 %s; loss %s\n",
               ok ? "OK" : "NOT OK", PATHS[i].recipe, nb[1], cb[1], nf[1], cf[1], all,
               kinds_fp32 ? "yes" : "NO", nb[0], kinds_bf16 ? "yes" : "no",
               loss[0] == loss[1] ? "equal" : "DIFFERS");
        assert_true(ok);
    }
    be.ops = cpu_ops;
    qw_backend_release(&be);
}

/* What a training result names: the CPU backend's "cpu" whatever the recipe; on a GPU "bf16"
 * when no linear GEMM runs FP32, else "fp32". */
static void train_gemm_path_is_the_cpus_or_the_linears(void **s) {
    (void)s;
    static const struct {
        const char *backend;
        int n_fp32;
        const char *path;
        int linears;
    } rows[] = {
        {"cpu", 0, "cpu", 0},
        {"cpu", 42, "cpu", 0},
        {"none", 3, "none", 0},
        {"fp32", 0, "bf16", 1}, /* a CUDA backend: bf16, mxfp4 */
        {"bf16", 0, "bf16", 1},
        {"bf16", 42, "fp32", 1}, /* nvfp4: its quantized blocks */
        {"emulated_bf16", 66, "fp32", 1},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        int linears = -1;
        assert_string_equal(qw_train_gemm_path(rows[i].backend, rows[i].n_fp32, &linears),
                            rows[i].path);
        assert_int_equal(linears, rows[i].linears);
    }
}

/* The CPU entry is gemm_abt itself: the CPU's training results keep their bits. */
static void cpu_gemm_abt_bf16_is_gemm_abt(void **s) {
    (void)s;
    assert_ptr_equal(qw_ops_cpu()->gemm_abt_bf16, qw_ops_cpu()->gemm_abt);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(format_table_says_which_are_bf16_exact),
        cmocka_unit_test(formats_agree_with_brute_force),
        cmocka_unit_test(smallest_mx_scale_keeps_e2m1_not_e4m3_in_bf16),
        cmocka_unit_test(recipe_list_is_the_shipped_one),
        cmocka_unit_test(recipe_operands_agree_with_brute_force),
        cmocka_unit_test(recipe_gemm_paths_are_the_table_and_the_calls),
        cmocka_unit_test(gemm_fp32_runs_every_linear_gemm_fp32),
        cmocka_unit_test(train_gemm_path_is_the_cpus_or_the_linears),
        cmocka_unit_test(cpu_gemm_abt_bf16_is_gemm_abt),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
