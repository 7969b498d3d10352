/* The vector exp (worker/engine/exp_vec.h) against the C library's exp(), bit for bit, on every
 * path this CPU has: the inputs the scoring gives it (a float logit less the row's maximum, a
 * float log-probability), doubles spread over exp's whole range, and the edges of its main
 * range where the vector paths hand a lane to exp(); and the scores built on it against the
 * loop of exp() calls they replace. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "exp_vec.h"
#include "ops.h"

enum { N = 1 << 21 };

static uint64_t next(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

/* x[N]: scoring inputs, uniform doubles over [-760, 720), edges. */
static void inputs(double *x) {
    uint64_t s = 88172645463325252ull;
    for (int i = 0; i < N; i++) {
        double u = (double)(next(&s) >> 11) * 0x1p-53;
        if (i % 3 == 0) { /* (double)logit - max: floats apart by up to ~60 */
            float mx = (float)(u * 40.0 - 10.0), l = mx - (float)((next(&s) >> 40) * 0x1p-24 * 60);
            x[i] = (double)l - mx;
        } else if (i % 3 == 1) { /* a float log-probability */
            x[i] = (double)(float)(-u * 90.0);
        } else {
            x[i] = u * 1480.0 - 760.0;
        }
    }
    const double edge[] = {0.0, -0.0, 0x1p-54, -0x1p-54, 0x1.fffffffffffffp-55, 512.0, -512.0,
                           0x1.fffffffffffffp8, -0x1.fffffffffffffp8, -745.13, -745.14, 709.78,
                           709.79, INFINITY, -INFINITY, NAN, 1e-300, -1e-300, 0x1p-1074};
    memcpy(x, edge, sizeof edge);
}

static void every_path_gives_the_c_library_exp_bit_for_bit(void **state) {
    (void)state;
    double *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    assert_non_null(x);
    assert_non_null(y);
    inputs(x);
    const char *paths[] = {"libm", "avx2+fma", "avx512f"};
    int ran = 0;
    for (int p = 0; p < 3; p++) {
        if (qw_exp_vec_on(paths[p], x, y, N) != 0) {
            printf("%s: not on this CPU\n", paths[p]);
            continue;
        }
        ran++;
        long bad = 0;
        for (int i = 0; i < N; i++) {
            double e = exp(x[i]);
            if (memcmp(&e, &y[i], sizeof e) != 0 && bad++ < 3)
                printf("%s: exp(%a) = %a, got %a\n", paths[p], x[i], e, y[i]);
        }
        printf("%s: %d inputs, %ld differ\n", paths[p], N, bad);
        assert_int_equal(bad, 0);
    }
    assert_true(ran >= 1);
    /* every path and the chosen one in place (x == y), over a length that is no multiple of a
     * vector */
    for (int p = 0; p < 4; p++) {
        memcpy(y, x, 1001 * sizeof *y);
        if (p == 3)
            qw_exp_vec(y, y, 1001);
        else if (qw_exp_vec_on(paths[p], y, y, 1001) != 0)
            continue;
        for (int i = 0; i < 1001; i++) {
            double e = exp(x[i]);
            assert_memory_equal(&e, &y[i], sizeof e);
        }
    }
    printf("qw_exp_vec takes %s\n", qw_exp_vec_path());
    assert_int_equal(qw_exp_vec_on("sse9", x, y, 1), -1);
    free(x);
    free(y);
}

/* The scores of ops.h qw_score_rows_forward (NLL, KL, both argmaxes) against the loop they had
 * with one exp() call per entry: the same bits, rows of a length no multiple of a block. */
static void scores_keep_the_bits_of_one_exp_call_per_entry(void **state) {
    (void)state;
    enum { R = 5, V = 1283 };
    float *l = malloc(sizeof(float) * R * V), *lp = malloc(sizeof(float) * R * V);
    assert_non_null(l);
    assert_non_null(lp);
    uint64_t s = 2463534242ull;
    for (int i = 0; i < R * V; i++) {
        double u = (double)(next(&s) >> 11) * 0x1p-53;
        l[i] = (float)(u * 30.0 - 12.0);
        lp[i] = (float)(u * 25.0 - 11.0 + 3.0 * sin(i)); /* another distribution */
    }
    for (int r = 0; r < R; r++) /* the baseline's log-probabilities */
        (void)qw_logsoftmax_row(lp + (size_t)r * V, V, lp + (size_t)r * V);
    uint32_t tg[R] = {0, 17, 1282, 640, 5};
    double nll[R], kl[R];
    int32_t am[R], ram[R];
    qs_error err = {0};
    assert_int_equal(qw_score_rows_forward(l, R, V, tg, lp, nll, kl, am, ram, 2, &err), QS_OK);
    for (int r = 0; r < R; r++) {
        const float *x = l + (size_t)r * V, *p = lp + (size_t)r * V;
        float mx = x[0];
        for (int i = 1; i < V; i++)
            mx = x[i] > mx ? x[i] : mx;
        double sum = 0.0;
        for (int i = 0; i < V; i++)
            sum += exp((double)x[i] - mx);
        double lse = (double)mx + log(sum), d = 0.0, want_nll = lse - (double)x[tg[r]];
        int a = 0, b = 0;
        for (int i = 0; i < V; i++) {
            float q = (float)((double)x[i] - lse);
            d += exp((double)p[i]) * ((double)p[i] - (double)q);
            if (x[i] > x[a]) a = i;
            if (p[i] > p[b]) b = i;
        }
        printf("row %d: nll %.17g kl %.17g argmax %d/%d\n", r, nll[r], kl[r], am[r], ram[r]);
        assert_memory_equal(&nll[r], &want_nll, sizeof(double));
        assert_memory_equal(&kl[r], &d, sizeof(double));
        assert_int_equal(am[r], a);
        assert_int_equal(ram[r], b);
    }
    free(l);
    free(lp);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_path_gives_the_c_library_exp_bit_for_bit),
        cmocka_unit_test(scores_keep_the_bits_of_one_exp_call_per_entry),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
