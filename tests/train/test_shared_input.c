/* The X input a group of linears shares (worker/train/qlinear.h qw_shared_input):
 * - training with sharing (the default) gives the bits of training without it
 *   (qw_tmodel_set_shared_inputs 0): the final weights and every step's loss, for every recipe,
 *   1 and 2 threads, gradient accumulation 2, data parallel 2, on both CPU GEMMs (the
 *   fixed-order one, whose operands go in their own layout, and cblas_sgemm on staged copies);
 * - each group's input is made once per micro-batch: q, k, v share ln1's and gate, up share
 *   ln2's, fprop's Xq and wgrad's (X^T)q, so 4 preparations and 6 reads of one per block and
 *   micro-batch wherever the block's X inputs are rounded (every recipe but fp32), none with
 *   sharing off; on the fixed GEMM a linear whose dgrad and wgrad both take dY in BF16 rounds
 *   it once (wgrad reads dgrad's), none with sharing off;
 * - linears whose specs differ do not share: the same X under block 0's BF16 spec and block 1's
 *   NVFP4 spec, one group id, is made twice and each GEMM's output is the unshared one's.
 * Data: random tokens. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "comm.h"
#include "data.h"
#include "gemm_cpu.h"
#include "qlinear.h"
#include "tmodel.h"
#include "trainer.h"
#include "small_config.h"
#include "train_fixture.h"
#include "train_run.h"

enum { B = 2, T = 32, STEPS = 3, NTOK = 8192, SEED = 77 };

/* dim 64, FFN 128, 2 blocks: nvfp4 quantizes block 0, keeps block 1 in BF16 */
static qw_config small_config(void) {
    return small_config_of(64, 128, 2, 4, 2, 16, 64);
}

static const char *const recipes[] = {
    "fp32",         "bf16",        "fp8",         "nvfp4",
    "nvfp4-no-rht", "nvfp4-no-sr", "nvfp4-no-2d", "nvfp4-all-blocks",
    "mxfp4"};
#define N_RECIPES (sizeof recipes / sizeof recipes[0])

/* Trains `ranks` replicas of nt threads each under recipe name, sharing on or off: every step's
 * loss into loss[STEPS], rank 0's final parameters into p. */
static void set_share(qw_tmodel *m, void *ctx) {
    qw_tmodel_set_shared_inputs(m, *(const int *)ctx);
}

static void run(const char *name, int nt, int ranks, int accum, int share, const uint32_t *stream,
                double *loss, float *p) {
    fixture_run r = {.recipe = name,
                     .cfg = small_config(),
                     .B = B,
                     .T = T,
                     .steps = STEPS,
                     .accum = accum,
                     .threads = nt,
                     .ranks = ranks,
                     .seed = SEED,
                     .stream = stream,
                     .ntok = NTOK,
                     .setup = set_share,
                     .ctx = &share};
    fixture_outcome o;
    fixture_train(&r, p, &o);
    memcpy(loss, o.loss, STEPS * sizeof *loss);
}

static void shared_training_is_unshared_bit_for_bit(void **s) {
    (void)s;
    uint32_t *stream = fixture_tokens(NTOK, 64);
    assert_non_null(stream);
    qw_config c = small_config();
    size_t n = 0, model_bytes = 0;
    qw_tmodel_plan(&c, B, T, 2, &n, &model_bytes);
    float *pa = malloc(n * sizeof *pa), *pb = malloc(n * sizeof *pb);
    assert_non_null(pa);
    assert_non_null(pb);
    static const int runs[][3] = {{1, 1, 2}, {2, 1, 2}, {2, 2, 2}}; /* threads, ranks, accum */
    static const qw_cpu_gemm gemms[] = {QW_CPU_GEMM_FIXED, QW_CPU_GEMM_OPENBLAS};
    for (size_t gi = 0; gi < 2; gi++) {
        qw_cpu_gemm_force(gemms[gi]);
        for (size_t ri = 0; ri < N_RECIPES; ri++)
            for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
                const int *u = runs[k];
                double la[STEPS], lb[STEPS];
                run(recipes[ri], u[0], u[1], u[2], 1, stream, la, pa);
                run(recipes[ri], u[0], u[1], u[2], 0, stream, lb, pb);
                size_t bad = 0;
                for (size_t i = 0; i < n; i++)
                    bad += memcmp(&pa[i], &pb[i], sizeof *pa) != 0;
                int loss_same = !memcmp(la, lb, sizeof la);
                printf("%s %-8s %-16s threads %d ranks %d accum %d: %zu of %zu weights differ, "
                       "losses %s (last %.17g)\n",
                       bad || !loss_same ? "NOT OK" : "OK", gi ? "openblas" : "fixed", recipes[ri],
                       u[0], u[1], u[2], bad, n, loss_same ? "equal" : "DIFFER", la[STEPS - 1]);
                assert_int_equal(bad, 0);
                assert_true(loss_same);
            }
    }
    qw_cpu_gemm_force(QW_CPU_GEMM_FIXED);
    free(pa);
    free(pb);
    free(stream);
}

/* Preparations and reads of the shared input, and wgrad GEMMs that read dgrad's BF16 dY, in
 * `micro` forwards and backwards of a fresh model under recipe name, sharing on or off. */
static void count(const char *name, int share, int micro, const uint32_t *stream,
                  unsigned long *made, unsigned long *reused, unsigned long *dy_reused) {
    qs_error err = {0};
    qw_config c = small_config();
    qw_recipe r;
    qw_tmodel *m;
    assert_int_equal(qw_recipe_by_name(name, &r, &err), QS_OK);
    assert_int_equal(qw_tmodel_create(&c, B, T, 1, &m, &err), QS_OK);
    assert_int_equal(qw_tmodel_set_recipe(m, &r, SEED, &err), QS_OK);
    assert_int_equal(qw_tmodel_init_random(m, 3, 0.05f, &err), QS_OK);
    qw_tmodel_set_shared_inputs(m, share);
    for (int i = 0; i < micro; i++) {
        double l;
        const uint32_t *x = stream + (size_t)i * B * T;
        if (qw_tmodel_forward(m, x, x + 1, (uint32_t)i, &l, &err) != QS_OK) fail_msg("%s", err.msg);
        if (qw_tmodel_backward(m, 1.0f, &err) != QS_OK) fail_msg("%s", err.msg);
    }
    qw_tmodel_shared_input_counts(m, made, reused, dy_reused);
    qw_tmodel_destroy(m);
}

static void each_group_prepares_its_input_once_per_micro_batch(void **s) {
    (void)s;
    uint32_t *stream = fixture_tokens(NTOK, 64);
    assert_non_null(stream);
    qw_config c = small_config();
    enum { MICRO = 2 };
    static const qw_cpu_gemm gemms[] = {QW_CPU_GEMM_FIXED, QW_CPU_GEMM_OPENBLAS};
    for (size_t gi = 0; gi < 2; gi++) {
        qw_cpu_gemm_force(gemms[gi]);
        for (size_t ri = 0; ri < N_RECIPES; ri++) {
            int rounded = strcmp(recipes[ri], "fp32") != 0;
            /* per block and micro-batch: fprop and wgrad of q (k, v read q's) and of gate (up
             * reads gate's) */
            unsigned long want_made = rounded ? 4ul * c.n_layers * MICRO : 0;
            unsigned long want_reused = rounded ? 6ul * c.n_layers * MICRO : 0;
            /* on the fixed GEMM (operands in their own layout), every linear whose dgrad and
             * wgrad both take dY in BF16 rounds it once: 7 a block, 1 for lm_head */
            unsigned long want_dy = 0;
            qw_recipe r;
            assert_int_equal(qw_recipe_by_name(recipes[ri], &r, NULL), QS_OK);
            for (int layer = -1; layer < c.n_layers && gemms[gi] == QW_CPU_GEMM_FIXED; layer++) {
                qw_operand_spec d, w;
                qw_recipe_operand(&r, layer, c.n_layers, QW_DGRAD_DY, &d);
                qw_recipe_operand(&r, layer, c.n_layers, QW_WGRAD_DY, &w);
                if (d.mode == QW_MODE_BF16 && w.mode == QW_MODE_BF16)
                    want_dy += (layer < 0 ? 1ul : 7ul) * MICRO;
            }
            unsigned long made, reused, dy, off_made, off_reused, off_dy;
            count(recipes[ri], 1, MICRO, stream, &made, &reused, &dy);
            count(recipes[ri], 0, MICRO, stream, &off_made, &off_reused, &off_dy);
            int ok = made == want_made && reused == want_reused && dy == want_dy && !off_made &&
                     !off_reused && !off_dy;
            printf("%s %-8s %-16s %d micro-batches: made %lu (expected %lu), read again %lu "
                   "(expected %lu), dY read again %lu (expected %lu); sharing off: %lu, %lu, %lu\n",
                   ok ? "OK" : "NOT OK", gi ? "openblas" : "fixed", recipes[ri], MICRO, made,
                   want_made, reused, want_reused, dy, want_dy, off_made, off_reused, off_dy);
            assert_true(ok);
        }
    }
    qw_cpu_gemm_force(QW_CPU_GEMM_FIXED);
    free(stream);
}

/* y[N x out] of linear `linear` of block `layer` over x through env. */
static void forward(qw_qlinear_env *env, int layer, int linear, float *y, const float *x,
                    const float *W, int N, int in, int out) {
    qs_error err = {0};
    if (qw_qlinear_forward(env, layer, linear, y, x, W, N, in, out, &err) != QS_OK)
        fail_msg("%s", err.msg);
}

static void linears_whose_specs_differ_do_not_share(void **s) {
    (void)s;
    enum { N = 32, IN = 64, OUT = 48 };
    qs_error err = {0};
    qw_backend be;
    assert_int_equal(qw_backend_cpu_init(&be, 1, IN, &err), QS_OK);
    qw_recipe r;
    assert_int_equal(qw_recipe_by_name("nvfp4", &r, &err), QS_OK);
    r.bf16_first = 1; /* block 0 BF16, block 1 NVFP4, block 2 (the last) BF16 */
    r.bf16_last = 1;
    size_t sf = qw_qlinear_scratch_floats(N, IN, OUT);
    float *x = malloc(N * IN * sizeof *x), *W = malloc(OUT * IN * sizeof *W);
    float *ya = malloc(N * OUT * sizeof *ya), *yb = malloc(N * OUT * sizeof *yb);
    float *ba = malloc(sf * sizeof *ba), *bb = malloc(sf * sizeof *bb);
    float *sbuf = malloc(N * IN * sizeof *sbuf);
    assert_true(x && W && ya && yb && ba && bb && sbuf);
    uint64_t z = 12345;
    for (int i = 0; i < N * IN; i++) {
        z = z * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((int64_t)(z >> 33) % 2001 - 1000) / 250.0f;
    }
    for (int i = 0; i < OUT * IN; i++)
        W[i] = (float)((i * 37) % 101 - 50) / 200.0f;
    qw_shared_input sh = {.buf = sbuf, .cap = (size_t)N * IN};
    qw_qlinear_env env = {.be = &be,
                          .recipe = &r,
                          .n_layers = 3,
                          .seed = SEED,
                          .step = 1,
                          .buf_a = ba,
                          .buf_b = bb,
                          .shared = &sh,
                          .group = 0};
    qw_qlinear_env plain = env;
    plain.shared = NULL;
    plain.group = -1;
    int layers[] = {0, 1, 1};
    size_t bad = 0;
    for (int i = 0; i < 3; i++) {
        forward(&env, layers[i], i, ya, x, W, N, IN, OUT);
        forward(&plain, layers[i], i, yb, x, W, N, IN, OUT);
        bad += memcmp(ya, yb, (size_t)N * OUT * sizeof *ya) != 0;
    }
    /* block 0's BF16 X, then block 1's NVFP4 X (the spec differs), then block 1's again */
    int ok = !bad && sh.made == 2 && sh.reused == 1;
    printf("%s one X under BF16, NVFP4, NVFP4 in one group: made %lu (expected 2), read again "
           "%lu (expected 1), %zu of 3 outputs differ from the unshared ones\n",
           ok ? "OK" : "NOT OK", sh.made, sh.reused, bad);
    assert_true(ok);
    free(x);
    free(W);
    free(ya);
    free(yb);
    free(ba);
    free(bb);
    free(sbuf);
    qw_backend_release(&be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(shared_training_is_unshared_bit_for_bit),
        cmocka_unit_test(each_group_prepares_its_input_once_per_micro_batch),
        cmocka_unit_test(linears_whose_specs_differ_do_not_share),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
