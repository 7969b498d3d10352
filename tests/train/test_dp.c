/* Data-parallel training (worker/train/trainer.h, worker/comm/comm.h):
 * - 2 CPU ranks with gradient accumulation 2 against 1 rank with accumulation 4 over the same
 *   samples (the ranks' shards interleave the one data order) and the same SR streams: the
 *   final loss to 1e-6 relative and the weights to 1e-6 relative in norm (||w2 - w1|| / ||w1||)
 *   under the fp32 recipe, the replicas equal bit for bit; printed with the measured figures.
 *   The gradient is summed in another order (rank by rank, then across ranks), and AdamW's
 *   m / sqrt(v) turns a rounding difference in a gradient near 0 into a step of up to lr, so
 *   single weights differ by more than their relative rounding (the largest is printed);
 * - one rank through qw_trainer_create_dp is bit-identical to qw_trainer_create;
 * - the CPU ranks' all-reduce sums (and maxes) in rank order: the same bits as a serial loop;
 * - a training job with data_parallel 2 (qw_train_job_run) against data_parallel 1 with twice
 *   the accumulation: final train and validation losses to 1e-6 relative.
 * Data: random tokens for the trainer; this repository's README.md through the bytes
 * tokenizer for the job. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include <cmocka.h>

#include "comm.h"
#include "data.h"
#include "optim.h"
#include "tmodel.h"
#include "train_job.h"
#include "trainer.h"
#include "small_config.h"
#include "train_fixture.h"
#include "train_run.h"

static qw_config small_config(void) {
    return small_config_of(64, 128, 2, 4, 2, 16, 64);
}

enum { B = 2, T = 32, STEPS = 6, NTOK = 8192 };

/* Trains `ranks` replicas with accumulation accum; returns the last loss, params into p. */
static double run(int ranks, int accum, const uint32_t *stream, float *p, int single) {
    fixture_run r = {.recipe = "fp32",
                     .cfg = small_config(),
                     .B = B,
                     .T = T,
                     .steps = STEPS,
                     .accum = accum,
                     .threads = 2,
                     .ranks = ranks,
                     .seed = 99,
                     .stream = stream,
                     .ntok = NTOK,
                     .single = single};
    fixture_outcome o;
    fixture_train(&r, p, &o);
    assert_int_equal(o.tokens_seen, (size_t)STEPS * ranks * accum * B * T);
    return o.loss[STEPS - 1];
}

static void two_ranks_match_one_rank_with_twice_the_accumulation(void **s) {
    (void)s;
    uint32_t *stream = fixture_tokens(NTOK, 64);
    assert_non_null(stream);
    qw_config c = small_config();
    size_t n = 0, bytes = 0;
    qw_tmodel_plan(&c, B, T, 2, &n, &bytes);
    float *p1 = malloc(n * 4), *p2 = malloc(n * 4);
    double l1 = run(1, 4, stream, p1, 0), l2 = run(2, 2, stream, p2, 0);
    double md = 0, mw = 0, dd = 0, ww = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)p1[i] - p2[i]);
        md = d > md ? d : md;
        mw = fabs(p1[i]) > mw ? fabs(p1[i]) : mw;
        dd += d * d;
        ww += (double)p1[i] * p1[i];
    }
    double lrel = fabs(l1 - l2) / fabs(l1), wrel = sqrt(dd / ww);
    printf("data_parallel 2 x accum 2 vs 1 x accum 4, %d steps: loss %.17g vs %.17g (rel %.2e); "
           "weights ||diff|| / ||w|| %.2e, max |diff| %.2e (max |w| %.3g)\n",
           STEPS, l2, l1, lrel, wrel, md, mw);
    assert_true(lrel <= 1e-6);
    assert_true(wrel <= 1e-6);
    free(p1);
    free(p2);
    free(stream);
}

static void one_rank_is_the_plain_trainer(void **s) {
    (void)s;
    uint32_t *stream = fixture_tokens(NTOK, 64);
    assert_non_null(stream);
    qw_config c = small_config();
    size_t n = 0, bytes = 0;
    qw_tmodel_plan(&c, B, T, 2, &n, &bytes);
    float *a = malloc(n * 4), *b = malloc(n * 4);
    double la = run(1, 2, stream, a, 1), lb = run(1, 2, stream, b, 0);
    assert_true(la == lb);
    assert_memory_equal(a, b, n * 4);
    free(a);
    free(b);
    free(stream);
}

static void cpu_allreduce_is_rank_order(void **s) {
    (void)s;
    enum { R = 3, C = 1000 };
    float *buf[R], want_sum[C], want_max[C];
    qs_error err = {0};
    for (int r = 0; r < R; r++)
        buf[r] = malloc(C * sizeof(float));
    for (int pass = 0; pass < 2; pass++) {
        for (int r = 0; r < R; r++)
            for (int i = 0; i < C; i++)
                buf[r][i] = (float)sin(0.1 * i + r) * (float)(1 << (r * 7)) + 1e-3f * (float)r;
        for (int i = 0; i < C; i++) {
            float sm = buf[0][i], mx = buf[0][i];
            for (int r = 1; r < R; r++) {
                sm += buf[r][i];
                mx = buf[r][i] > mx ? buf[r][i] : mx;
            }
            want_sum[i] = sm;
            want_max[i] = mx;
        }
        qw_group g;
        assert_int_equal(qw_group_cpu(&g, R, 2, &err), QS_OK);
        assert_int_equal(qw_group_allreduce(&g, buf, C, pass ? QW_GROUP_MAX : QW_GROUP_SUM, &err),
                         QS_OK);
        for (int r = 0; r < R; r++)
            assert_memory_equal(buf[r], pass ? want_max : want_sum, sizeof want_sum);
        qw_group_destroy(&g);
    }
    qw_group g;
    assert_int_equal(qw_group_cpu(&g, 0, 1, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "0 CPU ranks"));
    for (int r = 0; r < R; r++)
        free(buf[r]);
}

typedef struct finals {
    double train, val;
} finals;

static void on_metric(void *u, const char *name, int64_t step, double v) {
    finals *f = u;
    if (step >= 0) return;
    if (!strcmp(name, "final_train_loss")) f->train = v;
    if (!strcmp(name, "final_val_loss")) f->val = v;
}

static finals job(int dp, int accum, const uint32_t *ids, size_t n) {
    qs_error err = {0};
    qw_train_spec t;
    memset(&t, 0, sizeof t);
    assert_int_equal(qw_train_shape_by_name("micro", &t.shape, &err), QS_OK);
    assert_int_equal(qw_recipe_by_name("fp32", &t.recipe, &err), QS_OK);
    t.train = fixture_train_config(4, accum);
    t.batch = 2;
    t.ctx = 32;
    t.seed = 1;
    t.val_fraction = 0.05;
    t.threads = 2;
    t.data_parallel = dp;
    finals f = {0, 0};
    qw_train_hooks h = {NULL, on_metric, NULL, &f};
    qw_train_outcome o;
    if (qw_train_job_run(&t, ids, n, &h, &o, &err) != QS_OK) fail_msg("%s", err.msg);
    return f;
}

static void a_job_with_data_parallel_2_matches_one_rank(void **s) {
    (void)s;
    qs_error err = {0};
    uint32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(qw_bytes_tokenize_file(QW_SOURCE_DIR "/README.md", &ids, &n, &err), QS_OK);
    finals a = job(1, 2, ids, n), b = job(2, 1, ids, n);
    double dt = fabs(a.train - b.train) / a.train, dv = fabs(a.val - b.val) / a.val;
    printf("job data_parallel 2 vs 1 x accum 2: train %.17g vs %.17g (rel %.2e), val %.17g vs "
           "%.17g (rel %.2e)\n",
           b.train, a.train, dt, b.val, a.val, dv);
    assert_true(dt <= 1e-6);
    assert_true(dv <= 1e-6);
    free(ids);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(two_ranks_match_one_rank_with_twice_the_accumulation),
        cmocka_unit_test(one_rank_is_the_plain_trainer),
        cmocka_unit_test(cpu_allreduce_is_rank_order),
        cmocka_unit_test(a_job_with_data_parallel_2_matches_one_rank),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
