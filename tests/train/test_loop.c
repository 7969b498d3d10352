/* Optimizer and training loop:
 * - a tiny model overfits one 64-token sequence to loss < 0.05 under bf16 and nvfp4 (and with
 *   every block in NVFP4);
 * - an absurd learning rate is reported as diverged, with its step, and stops the run;
 * - training is bit-identical for 1 and 2 threads (nvfp4 with SR, accumulation, clipping);
 * - gradient accumulation of 2 micro-batches of 1 equals one batch of 2 (FP32 rounding);
 * - the learning-rate schedule, AdamW's update and the clipping norm follow their formulas;
 * - the CPU AdamW over an array gives adamw.h's one-parameter update bit for bit, and the
 *   squared gradient norm is its 64 range sums, each in element order, then in range order;
 * - the data order is a seeded permutation per epoch, resumable by (epoch, position). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include <cmocka.h>

#include "adamw.h"
#include "data.h"
#include "ops.h"
#include "optim.h"
#include "tmodel.h"
#include "trainer.h"
#include "small_config.h"

static qw_config tiny_config(int layers) {
    return small_config_of(64, 128, layers, 4, 2, 16, 64);
}

static qw_train_config default_train(int steps, float lr) {
    qw_train_config t = {0};
    t.steps = steps;
    t.accum = 1;
    t.sched.lr = lr;
    t.sched.min_lr = lr * 0.1f;
    t.sched.warmup = steps / 10;
    t.sched.decay = QW_DECAY_COSINE;
    t.adamw.beta1 = 0.9f;
    t.adamw.beta2 = 0.95f;
    t.adamw.eps = 1e-8f;
    t.adamw.weight_decay = 0.0f;
    t.clip = 1.0f;
    t.diverge_loss = 20.0;
    return t;
}

static void random_tokens(uint32_t *t, size_t n, uint32_t V, uint32_t seed) {
    uint64_t x = 0x9E3779B97F4A7C15ull * (seed + 1);
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        t[i] = (uint32_t)(x % V);
    }
}

/* Trains and returns the last step's loss; *diverged_step gets the step that diverged or 0. */
static double train(const char *recipe, qw_config c, int B, int T, const uint32_t *stream, size_t n,
                    qw_train_config tc, int threads, int *diverged_step, float *params_out,
                    qs_status *status) {
    qs_error err = {0};
    qw_tmodel *m = NULL;
    assert_int_equal(qw_tmodel_create(&c, B, T, threads, &m, &err), QS_OK);
    assert_int_equal(qw_tmodel_init_random(m, 42, 0.02f, &err), QS_OK);
    qw_recipe r;
    assert_int_equal(qw_recipe_by_name(recipe, &r, &err), QS_OK);
    assert_int_equal(qw_tmodel_set_recipe(m, &r, 1234, &err), QS_OK);
    qw_data d;
    assert_int_equal(qw_data_init(&d, stream, n, 0.0, T, 7, &err), QS_OK);
    qw_trainer tr;
    assert_int_equal(qw_trainer_create(&tr, m, &d, &tc, threads, &err), QS_OK);
    qw_step_metrics mt = {0};
    qs_status st = QS_OK;
    double last = NAN;
    while (tr.step < tc.steps) {
        st = qw_trainer_step(&tr, &mt, &err);
        if (st != QS_OK) break;
        last = mt.train_loss;
    }
    if (st != QS_OK) printf("%s: %s\n", recipe, err.msg);
    *diverged_step = tr.diverged ? tr.diverged_step : 0;
    if (status) *status = st;
    if (params_out) memcpy(params_out, qw_tmodel_params(m), qw_tmodel_n_params(m) * sizeof(float));
    qw_trainer_free(&tr);
    qw_data_free(&d);
    qw_tmodel_destroy(m);
    return last;
}

static void overfit(const char *recipe) {
    qw_config c = tiny_config(3);
    uint32_t stream[65];
    random_tokens(stream, 65, 64, 5);
    qw_train_config tc = default_train(60, 1e-2f);
    int div = 0;
    double loss = train(recipe, c, 1, 64, stream, 65, tc, 2, &div, NULL, NULL);
    printf("%s %s: loss after %d steps on one 64-token sequence: %.4f\n",
           loss < 0.05 ? "OK" : "NOT OK", recipe, tc.steps, loss);
    assert_int_equal(div, 0);
    assert_true(loss < 0.05);
}

static void bf16_overfits_a_sequence(void **s) {
    (void)s;
    overfit("bf16");
}
static void nvfp4_overfits_a_sequence(void **s) {
    (void)s;
    overfit("nvfp4");
}
static void nvfp4_all_blocks_overfits_a_sequence(void **s) {
    (void)s;
    overfit("nvfp4-all-blocks");
}

static void absurd_lr_diverges_with_its_step(void **s) {
    (void)s;
    qw_config c = tiny_config(2);
    uint32_t stream[65 * 4];
    random_tokens(stream, sizeof stream / 4, 64, 9);
    qw_train_config tc = default_train(50, 1e4f);
    tc.sched.warmup = 0;
    tc.clip = 0;
    int div = 0;
    qs_status st;
    train("bf16", c, 1, 64, stream, sizeof stream / 4, tc, 2, &div, NULL, &st);
    printf("diverged at step %d\n", div);
    assert_int_equal(st, QS_ESTATE);
    assert_true(div >= 2 && div <= 50);
}

static void training_is_bit_identical_for_1_and_2_threads(void **s) {
    (void)s;
    qw_config c = tiny_config(2);
    uint32_t stream[1000];
    random_tokens(stream, 1000, 64, 3);
    qw_train_config tc = default_train(4, 3e-3f);
    tc.accum = 2;
    tc.clip = 0.5f;
    tc.adamw.weight_decay = 0.1f;
    size_t np;
    {
        qw_tmodel *m = NULL;
        assert_int_equal(qw_tmodel_create(&c, 2, 32, 1, &m, NULL), QS_OK);
        np = qw_tmodel_n_params(m);
        qw_tmodel_destroy(m);
    }
    float *p1 = malloc(np * 4), *p2 = malloc(np * 4);
    const char *recipes[] = {"nvfp4", "mxfp4", "bf16"};
    for (int i = 0; i < 3; i++) {
        int d1, d2;
        double l1 = train(recipes[i], c, 2, 32, stream, 1000, tc, 1, &d1, p1, NULL);
        double l2 = train(recipes[i], c, 2, 32, stream, 1000, tc, 2, &d2, p2, NULL);
        printf("%s: loss %.9g (1 thread) %.9g (2 threads)\n", recipes[i], l1, l2);
        assert_true(l1 == l2);
        assert_memory_equal(p1, p2, np * 4);
    }
    free(p1);
    free(p2);
}

static void accumulation_matches_a_bigger_batch(void **s) {
    (void)s;
    qw_config c = tiny_config(2);
    qs_error err = {0};
    qw_tmodel *a = NULL, *b = NULL;
    assert_int_equal(qw_tmodel_create(&c, 1, 16, 2, &a, &err), QS_OK);
    assert_int_equal(qw_tmodel_create(&c, 2, 16, 2, &b, &err), QS_OK);
    assert_int_equal(qw_tmodel_init_random(a, 5, 0.1f, &err), QS_OK);
    assert_int_equal(qw_tmodel_init_random(b, 5, 0.1f, &err), QS_OK);
    uint32_t in[32], tg[32];
    random_tokens(in, 32, 64, 1);
    random_tokens(tg, 32, 64, 2);
    double l, la = 0;
    assert_int_equal(qw_tmodel_zero_grad(a, &err), QS_OK);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(qw_tmodel_forward(a, in + 16 * k, tg + 16 * k, (uint32_t)k, &l, &err),
                         QS_OK);
        assert_int_equal(qw_tmodel_backward(a, 0.5f, &err), QS_OK);
        la += l / 2;
    }
    assert_int_equal(qw_tmodel_zero_grad(b, &err), QS_OK);
    assert_int_equal(qw_tmodel_forward(b, in, tg, 0, &l, &err), QS_OK);
    assert_int_equal(qw_tmodel_backward(b, 1.0f, &err), QS_OK);
    assert_true(fabs(l - la) < 1e-6 * l);
    const float *ga = qw_tmodel_grads(a), *gb = qw_tmodel_grads(b);
    double mx = 0, md = 0;
    for (size_t i = 0; i < qw_tmodel_n_params(a); i++) {
        mx = fabs(gb[i]) > mx ? fabs(gb[i]) : mx;
        md = fabs(ga[i] - gb[i]) > md ? fabs(ga[i] - gb[i]) : md;
    }
    printf("accumulated vs batched gradient: max diff %.3g of max %.3g\n", md, mx);
    assert_true(md <= 1e-5 * mx);
    qw_tmodel_destroy(a);
    qw_tmodel_destroy(b);
}

static void lr_schedule_follows_its_formula(void **s) {
    (void)s;
    qw_lr_schedule sc = {1.0f, 0.1f, 10, 110, QW_DECAY_COSINE};
    assert_true(fabsf(qw_lr_at(&sc, 0) - 0.1f) < 1e-7f);
    assert_true(fabsf(qw_lr_at(&sc, 9) - 1.0f) < 1e-7f);
    assert_true(fabsf(qw_lr_at(&sc, 10) - 1.0f) < 1e-7f);
    assert_true(fabsf(qw_lr_at(&sc, 109) - 0.1f) < 1e-6f);
    /* halfway through the decay: min + (max - min) / 2 */
    assert_true(fabsf(qw_lr_at(&sc, 10 + 99 / 2) -
                      (0.1f + 0.9f * 0.5f * (1.0f + cosf((float)M_PI * 49.0f / 99.0f)))) < 1e-6f);
    sc.decay = QW_DECAY_LINEAR;
    assert_true(fabsf(qw_lr_at(&sc, 10 + 33) - (1.0f - 0.9f * 33.0f / 99.0f)) < 1e-6f);
    sc.decay = QW_DECAY_CONSTANT;
    assert_true(qw_lr_at(&sc, 100) == 1.0f);
    qw_lr_decay d;
    assert_int_equal(qw_lr_decay_by_name("linear", &d, NULL), QS_OK);
    assert_int_equal(d, QW_DECAY_LINEAR);
    qs_error err;
    assert_int_equal(qw_lr_decay_by_name("step", &d, &err), QS_EINVAL);
}

/* AdamW against the formula of torch.optim.AdamW written out for one step (t = 1): with
 * m = (1-b1) g and v = (1-b2) g^2 the bias-corrected update is g / (|g| + eps), and the
 * decay p *= 1 - lr*wd applies to matrices only. */
static void adamw_first_step_follows_its_formula(void **s) {
    (void)s;
    qw_config c = tiny_config(1);
    qw_tmodel *m = NULL;
    qs_error err = {0};
    assert_int_equal(qw_tmodel_create(&c, 1, 4, 1, &m, NULL), QS_OK);
    assert_int_equal(qw_tmodel_init_random(m, 1, 0.1f, &err), QS_OK);
    size_t n = qw_tmodel_n_params(m);
    float *p0 = malloc(n * 4);
    memcpy(p0, qw_tmodel_params(m), n * 4);
    float *g = qw_tmodel_grads(m);
    for (size_t i = 0; i < n; i++)
        g[i] = (float)sin((double)i) * 1e-2f;
    double norm = qw_grad_global_norm(g, n, 1), ref = 0;
    for (size_t i = 0; i < n; i++)
        ref += (double)g[i] * g[i];
    assert_true(fabs(norm - sqrt(ref)) < 1e-12 * sqrt(ref) + 1e-15);
    assert_true(qw_grad_global_norm(g, n, 2) == norm);
    qw_adamw opt = {0.9f, 0.95f, 1e-8f, 0.1f};
    assert_int_equal(qw_adamw_step(m, &opt, 1e-3f, 0.5f, 1, &err), QS_OK);
    for (int t = 0; t < qw_tmodel_n_tensors(m); t++) {
        qw_tensor_view v;
        qw_tmodel_tensor(m, t, &v);
        for (int j = 0; j < v.rows * v.cols; j += 7) {
            double gg = 0.5 * g[v.offset + j], p = p0[v.offset + j];
            double wd = v.decay ? 0.1 : 0.0;
            double want = p - 1e-3 * wd * p - 1e-3 * gg / (fabs(gg) + 1e-8);
            assert_true(fabs(v.data[j] - want) < 1e-6);
        }
    }
    free(p0);
    qw_tmodel_destroy(m);
}

/* Values that reach the update: ordinary, zero of each sign, subnormal, huge, Inf, NaN. */
static float odd_value(uint32_t *x, size_t i) {
    static const float special[] = {0.0f,   -0.0f,    1e-40f,    -3e-39f, 3e38f,
                                    -3e38f, INFINITY, -INFINITY, NAN};
    *x ^= *x << 13, *x ^= *x >> 17, *x ^= *x << 5;
    if (i % 37 == 5) return special[(i / 37) % (sizeof special / sizeof special[0])];
    return ((float)(*x >> 8) / 16777216.0f - 0.5f) * (float)(1 << (*x % 12));
}

static void adamw_over_an_array_gives_the_update_bits(void **s) {
    (void)s;
    enum { n = 3 * 4096 + 53 }; /* several shares, a tail shorter than a vector */
    float *p[2], *m[2], *v[2], *g = malloc(n * 4);
    float *p0 = malloc(n * 4), *m0 = malloc(n * 4), *v0 = malloc(n * 4);
    uint32_t x = 2463534242u;
    for (size_t i = 0; i < n; i++) {
        g[i] = odd_value(&x, i);
        p0[i] = odd_value(&x, i + 11);
        m0[i] = odd_value(&x, i + 23) * 1e-2f;
        v0[i] = fabsf(odd_value(&x, i + 29)) * 1e-4f;
    }
    qw_adamw_hp h = {
        3e-3f, 0.1f, 0.9f, 0.95f, 1e-8f, 1.0f - 0.9f * 0.9f * 0.9f, 1.0f - 0.95f * 0.95f * 0.95f,
        0.37f};
    for (int nt = 1; nt <= 2; nt++) {
        p[0] = malloc(n * 4), m[0] = malloc(n * 4), v[0] = malloc(n * 4);
        memcpy(p[0], p0, n * 4), memcpy(m[0], m0, n * 4), memcpy(v[0], v0, n * 4);
        qw_train_adamw(p[0], g, m[0], v[0], n, h.lr, h.wd, h.b1, h.b2, h.eps, h.c1, h.c2,
                       h.grad_scale, nt);
        p[1] = malloc(n * 4), m[1] = malloc(n * 4), v[1] = malloc(n * 4);
        memcpy(p[1], p0, n * 4), memcpy(m[1], m0, n * 4), memcpy(v[1], v0, n * 4);
        for (size_t j = 0; j < n; j++)
            qw_adamw_update(&p[1][j], &m[1][j], &v[1][j], g[j], &h);
        assert_memory_equal(p[0], p[1], n * 4);
        assert_memory_equal(m[0], m[1], n * 4);
        assert_memory_equal(v[0], v[1], n * 4);
        for (int k = 0; k < 2; k++)
            free(p[k]), free(m[k]), free(v[k]);
    }
    free(g), free(p0), free(m0), free(v0);
}

static void sumsq_is_its_range_sums_in_order(void **s) {
    (void)s;
    const size_t sizes[] = {1, 63, 64, 65, 1000, 4099 * 7};
    uint32_t x = 88172645u;
    for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
        size_t n = sizes[t];
        float *g = malloc(n * 4);
        for (size_t i = 0; i < n; i++) {
            g[i] = odd_value(&x, i);
            if (!isfinite(g[i])) g[i] = 1.5f;
        }
        double want = 0.0;
        for (size_t r = 0; r < 64; r++) {
            double part = 0.0;
            for (size_t i = n * r / 64; i < n * (r + 1) / 64; i++)
                part += (double)g[i] * g[i];
            want += part;
        }
        for (int nt = 1; nt <= 3; nt++) {
            double got = qw_train_sumsq(g, n, nt);
            assert_memory_equal(&got, &want, sizeof got);
        }
        free(g);
    }
}

static void data_order_is_a_seeded_permutation(void **s) {
    (void)s;
    enum { n = 16 * 40 + 1 };
    uint32_t stream[n];
    for (int i = 0; i < n; i++)
        stream[i] = (uint32_t)i;
    qs_error err = {0};
    qw_data d, e;
    assert_int_equal(qw_data_init(&d, stream, n, 0.25, 16, 11, &err), QS_OK);
    assert_int_equal(d.n_train, (size_t)(n * 0.75));
    assert_int_equal(d.n_windows, (d.n_train - 1) / 16);
    assert_true(d.n_val_windows >= 1);
    /* one epoch visits every window once; inputs and targets are shifted by one */
    int *seen = calloc(d.n_windows, sizeof *seen);
    uint32_t in[16], tg[16];
    for (size_t w = 0; w < d.n_windows; w++) {
        qw_data_next(&d, 1, in, tg);
        assert_int_equal(in[0] % 16, 0);
        for (int t = 0; t < 16; t++)
            assert_int_equal(tg[t], in[t] + 1);
        assert_true(in[15] + 1 < d.n_train);
        seen[in[0] / 16]++;
    }
    for (size_t w = 0; w < d.n_windows; w++)
        assert_int_equal(seen[w], 1);
    free(seen);
    /* the order is not the identity, and a seek to (epoch, pos) resumes it */
    assert_int_equal(qw_data_init(&e, stream, n, 0.25, 16, 11, &err), QS_OK);
    int moved = 0;
    for (size_t w = 0; w < d.n_windows; w++)
        moved += e.order[w] != w;
    assert_true(moved > 0);
    uint32_t a[16 * 3], b[16 * 3], ta[16 * 3], tb[16 * 3];
    qw_data_next(&d, 3, a, ta); /* epoch 1 */
    assert_int_equal(d.epoch, 1);
    assert_int_equal(qw_data_seek(&e, 1, 0, &err), QS_OK);
    qw_data_next(&e, 3, b, tb);
    assert_memory_equal(a, b, sizeof a);
    /* validation windows come from the held-out part */
    uint32_t vin[32], vtg[32];
    assert_int_equal(qw_data_val(&d, 0, 2, vin, vtg, &err), QS_OK);
    assert_int_equal(vin[0], d.n_train);
    assert_int_equal(vin[16], d.n_train + 16);
    assert_int_equal(vtg[31], d.n_train + 32);
    qw_data_free(&d);
    qw_data_free(&e);
    /* a different seed, a different order */
    assert_int_equal(qw_data_init(&d, stream, n, 0.25, 16, 12, &err), QS_OK);
    assert_int_equal(qw_data_init(&e, stream, n, 0.25, 16, 11, &err), QS_OK);
    assert_true(memcmp(d.order, e.order, d.n_windows * 4) != 0);
    qw_data_free(&d);
    qw_data_free(&e);
    /* too little data is refused with the counts */
    assert_int_equal(qw_data_init(&d, stream, 20, 0.5, 16, 1, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "10 training tokens"));
    assert_int_equal(qw_data_init(&d, stream, n, 1.5, 16, 1, &err), QS_EINVAL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bf16_overfits_a_sequence),
        cmocka_unit_test(nvfp4_overfits_a_sequence),
        cmocka_unit_test(nvfp4_all_blocks_overfits_a_sequence),
        cmocka_unit_test(absurd_lr_diverges_with_its_step),
        cmocka_unit_test(training_is_bit_identical_for_1_and_2_threads),
        cmocka_unit_test(accumulation_matches_a_bigger_batch),
        cmocka_unit_test(lr_schedule_follows_its_formula),
        cmocka_unit_test(adamw_first_step_follows_its_formula),
        cmocka_unit_test(adamw_over_an_array_gives_the_update_bits),
        cmocka_unit_test(sumsq_is_its_range_sums_in_order),
        cmocka_unit_test(data_order_is_a_seeded_permutation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
