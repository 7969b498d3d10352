/* The 16-point random Hadamard transform, the fused transpose-RHT pass and the cuBLASLt
 * 128x4 scale swizzle. */
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

/* The bits of v, so that NaNs compare by payload and -0 differs from +0. */
static uint32_t bits_of(float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u;
}

/* qk_rht_from on each path the CPU has (and the default) equals the transpose or copy
 * followed by qk_rht, bit for bit but for a NaN's sign and payload (which NaN a sum of two
 * keeps is the compiler's operand order; the quantizer reads every NaN alike), and its amax is
 * the largest finite |result|: d 16 and 32, both layouts, row counts below, at and past 16 and
 * not a multiple of it, inputs with NaN, +-Inf, -0, FP32 subnormals and huge values (sums
 * that overflow), 1 and 3 threads. */
static void rht_from_is_transpose_then_rht_on_every_path(void **state) {
    (void)state;
    const char *paths[] = {"default", "portable", "avx512f"};
    const size_t shapes[][2] = {{1, 32}, {5, 64}, {16, 96}, {33, 128}, {47, 64}};
    int ran = 0;
    for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++) {
        size_t rows = shapes[sh][0], k = shapes[sh][1], n = rows * k;
        float *x = malloc(n * sizeof *x), *want = malloc(n * sizeof *x),
              *got = malloc(n * sizeof *x);
        assert_non_null(x);
        assert_non_null(want);
        assert_non_null(got);
        for (size_t i = 0; i < n; i++) {
            uint32_t r = qk_sr_bits(9, (uint32_t)sh, 0, i);
            float v = (float)(r * 0x1p-32 * 2.0 - 1.0);
            static const float special[] = {NAN, INFINITY, -INFINITY, -0.0f, 1e-42f, 3e38f};
            x[i] = r % 61 < 6 ? special[r % 61] : v;
        }
        for (int tr = 0; tr < 2; tr++)
            for (int d = 16; d <= 32; d += 16) {
                /* the separate passes: want [rows x k] = x^T (x read as [k x rows]) or x */
                for (size_t r = 0; r < rows; r++)
                    for (size_t c = 0; c < k; c++)
                        want[r * k + c] = tr ? x[c * rows + r] : x[r * k + c];
                qs_error err = {0};
                assert_int_equal(qk_rht(want, rows, k, d, 77, 0, 1, &err), QS_OK);
                uint32_t m = 0;
                for (size_t i = 0; i < n; i++) {
                    uint32_t b = bits_of(want[i]) & 0x7FFFFFFFu;
                    m = b < 0x7F800000u && b > m ? b : m;
                }
                for (size_t pi = 0; pi < 3; pi++)
                    for (int nt = 1; nt <= 3; nt += 2) {
                        float amax = -1.0f;
                        memset(got, 0xFF, n * sizeof *got);
                        qs_status st =
                            pi == 0 ? qk_rht_from(got, x, rows, k, tr, d, 77, nt, &amax, &err)
                                    : qk_rht_from_on(paths[pi], got, x, rows, k, tr, d, 77, nt,
                                                     &amax, &err);
                        if (pi == 2 && st == QS_EINVAL) continue; /* no AVX-512F here */
                        assert_int_equal(st, QS_OK);
                        ran++;
                        for (size_t i = 0; i < n; i++)
                            if (bits_of(got[i]) != bits_of(want[i]) &&
                                !(isnan(got[i]) && isnan(want[i])))
                                fail_msg("%s rows %zu k %zu transpose %d d %d: element %zu: %a, "
                                         "expected %a",
                                         paths[pi], rows, k, tr, d, i, (double)got[i],
                                         (double)want[i]);
                        assert_int_equal(bits_of(amax), m);
                    }
            }
        free(x);
        free(want);
        free(got);
    }
    assert_true(ran >= 5 * 2 * 2 * 2 * 2); /* the default and portable paths at least */
    qs_error err = {0};
    float a[32], b[32];
    assert_int_equal(qk_rht_from_on("sse9", a, b, 1, 32, 0, 16, 1, 1, NULL, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "sse9"));
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
        cmocka_unit_test(rht_from_is_transpose_then_rht_on_every_path),
        cmocka_unit_test(swizzle_offsets_match_testdata),
        cmocka_unit_test(swizzle_pads_with_zeros_and_is_a_permutation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
