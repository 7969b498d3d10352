/* The 16-point random Hadamard transform and the cuBLASLt 128x4 scale swizzle. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hadamard.h"
#include "philox.h"
#include "swizzle.h"
#include "testdata.h"

/* Forward then inverse returns the input within 1e-6, for any thread count, and the
 * transform preserves each tile's Euclidean norm (orthogonality). */
static void rht16_round_trip_is_within_1e6(void **state) {
    (void)state;
    const size_t rows = 37, k = 64, n = rows * k;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *z = malloc(n * sizeof *z);
    assert_non_null(x);
    assert_non_null(y);
    assert_non_null(z);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(qk_sr_bits(4, 0, 0, i) * 0x1p-32 * 2.0 - 1.0);
    memcpy(y, x, n * sizeof *x);
    memcpy(z, x, n * sizeof *x);
    qs_error err = {0};
    assert_int_equal(qk_rht16(y, rows, k, 1234, 0, 1, &err), QS_OK);
    assert_int_equal(qk_rht16(z, rows, k, 1234, 0, 4, &err), QS_OK);
    assert_memory_equal(y, z, n * sizeof *y);
    for (size_t t = 0; t < n / 16; t++) {
        double nx = 0, ny = 0;
        for (int j = 0; j < 16; j++) {
            nx += (double)x[t * 16 + j] * x[t * 16 + j];
            ny += (double)y[t * 16 + j] * y[t * 16 + j];
        }
        assert_true(fabs(nx - ny) <= 1e-6 * nx);
    }
    assert_true(memcmp(x, y, n * sizeof *x) != 0);
    assert_int_equal(qk_rht16(y, rows, k, 1234, 1, 2, &err), QS_OK);
    double worst = 0;
    for (size_t i = 0; i < n; i++)
        worst = fmax(worst, fabs((double)y[i] - x[i]));
    fprintf(stderr, "max round-trip error %.3g\n", worst);
    assert_true(worst <= 1e-6);
    free(x);
    free(y);
    free(z);
}

/* The rows of H (images of unit vectors) are orthonormal: H H^T = I, and each row is
 * +-1/4 with H16's sign pattern times the seeded sign of its input index. */
static void rht16_matrix_is_orthogonal_and_seeded(void **state) {
    (void)state;
    float h[16][16] = {{0}};
    for (int i = 0; i < 16; i++)
        h[i][i] = 1.0f;
    qs_error err = {0};
    assert_int_equal(qk_rht16(&h[0][0], 16, 16, 99, 0, 1, &err), QS_OK);
    float s[16];
    qk_rht16_signs(99, s);
    int neg = 0;
    for (int i = 0; i < 16; i++) {
        neg += s[i] < 0;
        for (int j = 0; j < 16; j++) {
            float sylvester = (__builtin_popcount((unsigned)(i & j)) & 1) ? -1.0f : 1.0f;
            assert_true(h[i][j] == 0.25f * s[i] * sylvester);
            double dot = 0;
            for (int c = 0; c < 16; c++)
                dot += (double)h[i][c] * h[j][c];
            assert_true(fabs(dot - (i == j ? 1.0 : 0.0)) < 1e-7);
        }
    }
    assert_true(neg > 0 && neg < 16); /* a real mix of signs for this seed */
    float s2[16];
    qk_rht16_signs(100, s2);
    assert_true(memcmp(s, s2, sizeof s) != 0);
    float x[20] = {0};
    assert_int_equal(qk_rht16(x, 1, 20, 1, 0, 1, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "k=20"));
}

/* Every row of scale_swizzle_128x4.tsv (R = 256, C = 8). */
static void swizzle_offsets_match_testdata(void **state) {
    (void)state;
    tsv_file t;
    assert_true(tsv_open(&t, "scale_swizzle_128x4.tsv"));
    int rows = 0;
    while (tsv_next(&t) == 3) {
        size_t r = strtoul(t.field[0], NULL, 10), c = strtoul(t.field[1], NULL, 10);
        size_t want = strtoul(t.field[2], NULL, 10);
        assert_int_equal(qk_swizzle_128x4_offset(r, c, 8), want);
        rows++;
    }
    tsv_close(&t);
    assert_true(rows >= 9);
}

/* A ragged scale matrix (200 x 5): padded to 256 x 8, every source byte lands once at its
 * formula offset, and the padding is 0. */
static void swizzle_pads_with_zeros_and_is_a_permutation(void **state) {
    (void)state;
    const size_t R = 200, C = 5;
    uint8_t *src = malloc(R * C);
    assert_non_null(src);
    for (size_t i = 0; i < R * C; i++)
        src[i] = (uint8_t)(1 + i % 251);
    size_t need = qk_swizzle_128x4_size(R, C);
    assert_int_equal(need, 256 * 8);
    uint8_t *dst = malloc(need), *hit = calloc(need, 1);
    assert_non_null(dst);
    assert_non_null(hit);
    qs_error err = {0};
    assert_int_equal(qk_swizzle_128x4(src, R, C, dst, need - 1, &err), QS_EINVAL);
    assert_int_equal(qk_swizzle_128x4(src, R, C, dst, need, &err), QS_OK);
    for (size_t r = 0; r < R; r++) {
        for (size_t c = 0; c < C; c++) {
            size_t off = qk_swizzle_128x4_offset(r, c, C);
            assert_true(off < need);
            assert_int_equal(hit[off], 0);
            hit[off] = 1;
            assert_int_equal(dst[off], src[r * C + c]);
        }
    }
    for (size_t i = 0; i < need; i++)
        if (!hit[i]) assert_int_equal(dst[i], 0);
    free(src);
    free(dst);
    free(hit);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rht16_round_trip_is_within_1e6),
        cmocka_unit_test(rht16_matrix_is_orthogonal_and_seeded),
        cmocka_unit_test(swizzle_offsets_match_testdata),
        cmocka_unit_test(swizzle_pads_with_zeros_and_is_a_permutation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
