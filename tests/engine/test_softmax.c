/* The CPU softmax's row maximum and row statistics (worker/engine/gemm_cpu.h):
 * - qw_cpu_row_max is the scan m = x[0]; m = x[j] > m ? x[j] : m, bit for bit (its 16-lane path
 *   on AVX-512F CPUs included): every length up to 70 and a long row, with the maximum at every
 *   position, zero maxima of both signs in both orders, NaNs first and later, infinities;
 * - qw_cpu_causal_softmax's stats are each row's scan maximum and 1 / the sum of its
 *   exponentials, and the rows are the same with stats asked for or not. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../lib/floats.h"

#include "gemm_cpu.h"

static float scan_max(const float *x, size_t n) {
    float m = x[0];
    for (size_t j = 1; j < n; j++)
        m = x[j] > m ? x[j] : m;
    return m;
}

static int same_bits(float a, float b) {
    return memcmp(&a, &b, sizeof a) == 0;
}

static void row_max_is_the_scan_bit_for_bit(void **st) {
    (void)st;
    enum { LONG = 1000 };
    float x[LONG];
    int checked = 0;
    for (size_t n = 1; n <= LONG; n = n < 70 ? n + 1 : LONG) {
        for (int kind = 0; kind < 8; kind++)
            for (size_t at = 0; at < n; at += n < 40 ? 1 : 7) {
                qwt_fill(x, n, (uint32_t)(n * 131 + at * 7 + (size_t)kind), 3.0f);
                switch (kind) {
                case 0:
                    x[at] = 10.0f;
                    break; /* the maximum at `at` */
                case 1:    /* a zero maximum: -0 first, +0 at `at` */
                    for (size_t j = 0; j < n; j++)
                        x[j] = -fabsf(x[j]) - 1.0f;
                    x[at / 2] = -0.0f;
                    x[at] = 0.0f;
                    break;
                case 2: /* the same, +0 first */
                    for (size_t j = 0; j < n; j++)
                        x[j] = -fabsf(x[j]) - 1.0f;
                    x[at] = -0.0f;
                    x[at / 2] = 0.0f;
                    break;
                case 3:
                    x[at] = NAN;
                    break; /* a NaN anywhere (first: it stays) */
                case 4:
                    x[at] = -NAN;
                    break;
                case 5:
                    x[at] = INFINITY;
                    break;
                case 6: /* all -inf but one */
                    for (size_t j = 0; j < n; j++)
                        x[j] = -INFINITY;
                    x[at] = -5.0f;
                    break;
                default: /* equal maxima */
                    x[at] = 3.5f;
                    x[n - 1] = 3.5f;
                    break;
                }
                float want = scan_max(x, n), got = qw_cpu_row_max(x, n);
                if (!same_bits(want, got))
                    fail_msg("n %zu kind %d at %zu: %a, the scan %a (signs %d, %d)", n, kind, at,
                             (double)got, (double)want, signbit(got) != 0, signbit(want) != 0);
                checked++;
            }
        if (n == LONG) break;
    }
    printf("ok row max: %d rows the scan's bits\n", checked);
    assert_true(checked > 1000);
}

static void causal_softmax_stats_are_the_rows_max_and_inverse_sum(void **st) {
    (void)st;
    enum { ROWS = 21, T0 = 37, NCOLS = T0 + ROWS };
    float S[ROWS * NCOLS], S2[ROWS * NCOLS], stats[2 * ROWS];
    qwt_fill(S, ROWS * NCOLS, 5, 6.0f);
    memcpy(S2, S, sizeof S);
    float e[NCOLS];
    qw_cpu_causal_softmax(S, ROWS, NCOLS, T0, stats);
    qw_cpu_causal_softmax(S2, ROWS, NCOLS, T0, NULL);
    assert_memory_equal(S, S2, sizeof S);
    qwt_fill(S2, ROWS * NCOLS, 5, 6.0f); /* the scores again */
    for (int r = 0; r < ROWS; r++) {
        size_t keep = (size_t)T0 + (size_t)r + 1;
        const float *row = S2 + (size_t)r * NCOLS;
        float mx = scan_max(row, keep);
        memcpy(e, row, keep * sizeof *e);
        float inv = 1.0f / qw_cpu_exp_shift_sum(e, keep, mx);
        assert_true(same_bits(stats[2 * r], mx));
        assert_true(same_bits(stats[2 * r + 1], inv));
        for (size_t j = 0; j < keep; j++)
            assert_true(same_bits(S[(size_t)r * NCOLS + j], e[j] * inv));
        for (size_t j = keep; j < NCOLS; j++)
            assert_true(S[(size_t)r * NCOLS + j] == 0.0f);
    }
}

int main(void) {
    qw_cpu_gemm_force(QW_CPU_GEMM_FIXED);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(row_max_is_the_scan_bit_for_bit),
        cmocka_unit_test(causal_softmax_stats_are_the_rows_max_and_inverse_sum),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
