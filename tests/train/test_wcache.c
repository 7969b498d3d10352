/* The quantized weights kept from one optimizer step to the next (worker/train/wcache.h):
 * - training with the cache (the default) gives the bits of training without it
 *   (qw_tmodel_set_weight_cache 0): the final weights and every step's loss, for every recipe,
 *   1 and 2 threads, gradient accumulation 2 and 3, data parallel 2, on both CPU GEMMs (the
 *   fixed-order one, whose operands go in their own layout, and cblas_sgemm on staged copies);
 * - the cache's bytes: 4 per element of each quantized weight, 8 where dgrad's input is not
 *   fprop's transposed (1D blocks: nvfp4-no-2d, mxfp4), none without quantized weights;
 * - a weight change drops what was kept: after qw_tmodel_put and after an optimizer step the
 *   cached model's loss is the uncached one's; a write through the parameter pointer that
 *   nobody announces is not seen (the cache is really read) until qw_tmodel_weights_changed.
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
#include "optim.h"
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
    "nvfp4", "nvfp4-no-rht", "nvfp4-no-sr", "nvfp4-no-2d", "nvfp4-all-blocks",
    "mxfp4", "fp8",          "bf16"};
#define N_RECIPES (sizeof recipes / sizeof recipes[0])

/* Trains `ranks` replicas of nt threads each under recipe name, the cache on or off: every
 * step's loss into loss[STEPS], rank 0's final parameters into p; *bytes the cache's size. */
static void set_cache(qw_tmodel *m, void *ctx) {
    qw_tmodel_set_weight_cache(m, *(const int *)ctx);
}

static void run(const char *name, int nt, int ranks, int accum, int cache, const uint32_t *stream,
                double *loss, float *p, size_t *bytes) {
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
                     .setup = set_cache,
                     .ctx = &cache};
    fixture_outcome o;
    fixture_train(&r, p, &o);
    memcpy(loss, o.loss, STEPS * sizeof *loss);
    *bytes = o.cache_bytes;
}

/* What the cache should hold under recipe name: 4 bytes per element of every quantized block
 * linear's weight, twice that where dgrad's input has 1D blocks along another axis. */
static size_t expected_bytes(const char *name) {
    qw_config c = small_config();
    qw_recipe r;
    assert_int_equal(qw_recipe_by_name(name, &r, NULL), QS_OK);
    if (!r.fmt) return 0;
    int D = c.dim, F = c.hidden_dim, HE = c.n_heads * c.head_dim, GE = c.n_kv_heads * c.head_dim;
    size_t per_block = (size_t)HE * D + 2 * (size_t)GE * D + (size_t)D * HE + 3 * (size_t)F * D;
    int blocks = c.n_layers - r.bf16_first - r.bf16_last;
    int copies = r.w2d || !strcmp(name, "fp8") ? 1 : 2;
    return (size_t)blocks * per_block * 4 * (size_t)copies;
}

static void cached_training_is_uncached_bit_for_bit(void **s) {
    (void)s;
    uint32_t *stream = fixture_tokens(NTOK, 64);
    assert_non_null(stream);
    qw_config c = small_config();
    size_t n = 0, model_bytes = 0;
    qw_tmodel_plan(&c, B, T, 2, &n, &model_bytes);
    float *pa = malloc(n * sizeof *pa), *pb = malloc(n * sizeof *pb);
    assert_non_null(pa);
    assert_non_null(pb);
    static const int runs[][3] = {{1, 1, 2}, {2, 1, 3}, {2, 2, 2}}; /* threads, ranks, accum */
    static const qw_cpu_gemm gemms[] = {QW_CPU_GEMM_FIXED, QW_CPU_GEMM_OPENBLAS};
    for (size_t gi = 0; gi < 2; gi++) {
        qw_cpu_gemm_force(gemms[gi]);
        for (size_t ri = 0; ri < N_RECIPES; ri++)
            for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
                const int *u = runs[k];
                double la[STEPS], lb[STEPS];
                size_t ba = 0, bb = 0;
                run(recipes[ri], u[0], u[1], u[2], 1, stream, la, pa, &ba);
                run(recipes[ri], u[0], u[1], u[2], 0, stream, lb, pb, &bb);
                size_t bad = 0;
                for (size_t i = 0; i < n; i++)
                    bad += memcmp(&pa[i], &pb[i], sizeof *pa) != 0;
                int loss_same = !memcmp(la, lb, sizeof la);
                printf("%s %-8s %-16s threads %d ranks %d accum %d: %zu of %zu weights differ, "
                       "losses %s (last %.17g), cache %zu bytes (expected %zu)\n",
                       bad || !loss_same || ba != expected_bytes(recipes[ri]) ? "NOT OK" : "OK",
                       gi ? "openblas" : "fixed", recipes[ri], u[0], u[1], u[2], bad, n,
                       loss_same ? "equal" : "DIFFER", la[STEPS - 1], ba,
                       expected_bytes(recipes[ri]));
                assert_int_equal(bad, 0);
                assert_true(loss_same);
                assert_int_equal(ba, expected_bytes(recipes[ri]));
            }
    }
    qw_cpu_gemm_force(QW_CPU_GEMM_FIXED);
    free(pa);
    free(pb);
    free(stream);
}

/* Loss of one forward of model m on the first B*T tokens of stream. */
static double loss_of(qw_tmodel *m, const uint32_t *stream) {
    qs_error err = {0};
    double l = 0.0;
    if (qw_tmodel_forward(m, stream, stream + 1, 9, &l, &err) != QS_OK) fail_msg("%s", err.msg);
    return l;
}

static void a_weight_change_drops_the_kept_weights(void **s) {
    (void)s;
    qs_error err = {0};
    uint32_t *stream = fixture_tokens(NTOK, 64);
    assert_non_null(stream);
    qw_config c = small_config();
    qw_recipe r;
    assert_int_equal(qw_recipe_by_name("nvfp4-all-blocks", &r, &err), QS_OK);
    qw_tmodel *m[2];
    for (int i = 0; i < 2; i++) {
        assert_int_equal(qw_tmodel_create(&c, B, T, 1, &m[i], &err), QS_OK);
        assert_int_equal(qw_tmodel_set_recipe(m[i], &r, SEED, &err), QS_OK);
        assert_int_equal(qw_tmodel_init_random(m[i], 3, 0.05f, &err), QS_OK);
    }
    qw_tmodel_set_weight_cache(m[1], 0);
    qw_tmodel *cached = m[0], *plain = m[1];
    size_t n = qw_tmodel_n_params(cached);
    float *p = malloc(n * sizeof *p);
    assert_non_null(p);
    double a = loss_of(cached, stream), b = loss_of(plain, stream);
    printf("%s fresh weights: cached %.17g, uncached %.17g\n", a == b ? "OK" : "NOT OK", a, b);
    assert_true(a == b);

    /* new weights through qw_tmodel_put */
    assert_int_equal(qw_tmodel_fetch(cached, QW_TMODEL_PARAMS, p, &err), QS_OK);
    for (size_t i = 0; i < n; i++)
        p[i] *= 1.5f;
    for (int i = 0; i < 2; i++)
        assert_int_equal(qw_tmodel_put(m[i], QW_TMODEL_PARAMS, p, &err), QS_OK);
    a = loss_of(cached, stream), b = loss_of(plain, stream);
    printf("%s after qw_tmodel_put: cached %.17g, uncached %.17g\n", a == b ? "OK" : "NOT OK", a,
           b);
    assert_true(a == b);

    /* an optimizer step */
    qw_adamw opt = {0.9f, 0.95f, 1e-8f, 0.1f};
    for (int i = 0; i < 2; i++) {
        double l;
        assert_int_equal(qw_tmodel_zero_grad(m[i], &err), QS_OK);
        assert_int_equal(qw_tmodel_forward(m[i], stream, stream + 1, 1, &l, &err), QS_OK);
        assert_int_equal(qw_tmodel_backward(m[i], 1.0f, &err), QS_OK);
        assert_int_equal(qw_adamw_step(m[i], &opt, 1e-2f, 1.0f, 1, &err), QS_OK);
    }
    a = loss_of(cached, stream), b = loss_of(plain, stream);
    printf("%s after an AdamW step: cached %.17g, uncached %.17g\n", a == b ? "OK" : "NOT OK", a,
           b);
    assert_true(a == b);

    /* an unannounced write through the parameter pointer: the kept weights are still read */
    for (int i = 0; i < 2; i++) {
        assert_int_equal(qw_tmodel_fetch(m[i], QW_TMODEL_PARAMS, p, &err), QS_OK);
        for (size_t j = 0; j < n; j++)
            p[j] *= 0.5f;
        qw_backend *be = qw_tmodel_backend(m[i]);
        assert_int_equal(be->ops->upload(be, qw_tmodel_params(m[i]), p, n * sizeof *p, &err),
                         QS_OK);
    }
    a = loss_of(cached, stream), b = loss_of(plain, stream);
    printf("%s unannounced write: cached %.17g (the old weights'), uncached %.17g\n",
           a != b ? "OK" : "NOT OK", a, b);
    assert_true(a != b);
    qw_tmodel_weights_changed(cached);
    a = loss_of(cached, stream);
    printf("%s after qw_tmodel_weights_changed: cached %.17g, uncached %.17g\n",
           a == b ? "OK" : "NOT OK", a, b);
    assert_true(a == b);
    free(p);
    for (int i = 0; i < 2; i++)
        qw_tmodel_destroy(m[i]);
    free(stream);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cached_training_is_uncached_bit_for_bit),
        cmocka_unit_test(a_weight_change_drops_the_kept_weights),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
