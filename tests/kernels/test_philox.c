/* Philox4x32-10 known answers and the stochastic-rounding streams built on it. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "element.h"
#include "format.h"
#include "philox.h"
#include "quant.h"

/* Random123's tests/kat_vectors, the three "philox4x32 10" lines (counter, key -> output);
 * cross-checked against TensorFlow's and other independent test suites that cite them. */
static void philox_matches_random123_known_answers(void **state) {
    (void)state;
    static const struct {
        uint32_t ctr[4], key[2], out[4];
    } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
         {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
         {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
        uint32_t out[4];
        qk_philox4x32_10(kat[i].ctr, kat[i].key, out);
        for (int j = 0; j < 4; j++)
            assert_int_equal(out[j], kat[i].out[j]);
    }
}

/* The SR stream layout of philox.h: element i uses word i&3 of the block at counter
 * {i>>2, 0, tensor, step} under key {lo(seed), hi(seed)}. */
static void sr_bits_follow_the_documented_counter_layout(void **state) {
    (void)state;
    uint64_t seed = 0x0123456789ABCDEFull;
    const uint32_t key[2] = {0x89ABCDEFu, 0x01234567u};
    for (uint64_t i = 0; i < 64; i++) {
        const uint32_t ctr[4] = {(uint32_t)(i >> 2), 0, 5, 9};
        uint32_t out[4];
        qk_philox4x32_10(ctr, key, out);
        assert_int_equal(qk_sr_bits(seed, 5, 9, i), out[i & 3]);
    }
}

/* qk_sr_words, on each path the CPU has and on the default one, gives qk_sr_bits's words: 1 to
 * 70 blocks (whole vectors of 16 and parts), starts whose block counters carry into the high
 * word (2^32 - 5) or sit in it, seeds with both key words set, the last tensor id before the
 * RHT's reserved one; nothing is written past the last block. */
static void sr_words_are_the_sr_bits_on_every_path(void **state) {
    (void)state;
    const char *paths[] = {"default", "portable", "avx512f"};
    const uint64_t starts[] = {0, 1, 4093, 0xFFFFFFFFull - 5, 0x7FFFFFFF0ull};
    const uint64_t seeds[] = {0, 0xFEDCBA9876543210ull};
    uint32_t out[4 * 70 + 1];
    int ran = 0;
    for (size_t pi = 0; pi < 3; pi++)
        for (size_t si = 0; si < 5; si++)
            for (size_t ki = 0; ki < 2; ki++)
                for (size_t nblk = 1; nblk <= 70; nblk += (nblk < 20 ? 1 : 17)) {
                    uint32_t tid = ki ? 0xFFFFFFFEu : 3, step = (uint32_t)(7 * nblk);
                    out[4 * nblk] = 0xA5A5A5A5u;
                    if (pi == 0)
                        qk_sr_words(seeds[ki], tid, step, starts[si], nblk, out);
                    else if (qk_sr_words_on(paths[pi], seeds[ki], tid, step, starts[si], nblk,
                                            out) != 0)
                        continue;
                    ran++;
                    for (size_t i = 0; i < 4 * nblk; i++)
                        if (out[i] != qk_sr_bits(seeds[ki], tid, step, 4 * starts[si] + i))
                            fail_msg("%s: block %llu + %zu word %zu: %08x, expected %08x",
                                     paths[pi], (unsigned long long)starts[si], i / 4, i & 3,
                                     out[i], qk_sr_bits(seeds[ki], tid, step, 4 * starts[si] + i));
                    assert_int_equal(out[4 * nblk], 0xA5A5A5A5u);
                }
    assert_true(ran >= 2 * 5 * 2 * 22); /* the default and portable paths at least */
    assert_int_equal(qk_sr_words_on("sse9", 0, 0, 0, 1, 1, out), -1);
}

/* x/s = 0.75 lies halfway between the E2M1 neighbours 0.5 and 1.0: over 10^5 draws the
 * mean is 0.75 +- 0.003 and only those two values appear. */
static void stochastic_rounding_is_unbiased(void **state) {
    (void)state;
    const size_t n = 100000;
    double sum = 0.0;
    size_t lo = 0, hi = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t code =
            qk_codec_encode(&qk_codec_e2m1, 0.75f, QK_ROUND_SR, qk_sr_bits(42, 1, 0, i));
        float v = qk_codec_decode(&qk_codec_e2m1, code);
        lo += v == 0.5f;
        hi += v == 1.0f;
        sum += v;
    }
    assert_int_equal(lo + hi, n);
    assert_true(fabs(sum / (double)n - 0.75) <= 0.003);
    /* a point a quarter of the way up: mean within the same tolerance of the input */
    sum = 0.0;
    for (size_t i = 0; i < n; i++)
        sum += qk_codec_decode(&qk_codec_e2m1, qk_codec_encode(&qk_codec_e2m1, 2.25f, QK_ROUND_SR,
                                                               qk_sr_bits(42, 2, 0, i)));
    assert_true(fabs(sum / (double)n - 2.25) <= 0.006);
}

/* Same (seed, tensor, step) -> the same bits through the whole NVFP4 SR path, for any thread
 * count; another step gives other bits. */
static void stochastic_rounding_is_reproducible(void **state) {
    (void)state;
    const size_t rows = 64, k = 80, n = rows * k;
    float *x = malloc(n * sizeof *x), *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    assert_non_null(x);
    assert_non_null(a);
    assert_non_null(b);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((int)(qk_sr_bits(1, 0, 0, i) % 2001) - 1000) / 97.0f;
    const qk_format *f = qk_format_by_name("nvfp4");
    qk_quant_options o = {.rounding = QK_ROUND_SR, .seed = 77, .tensor_id = 3, .step = 11};
    qs_error err = {0};
    memcpy(a, x, n * sizeof *x);
    o.threads = 1;
    assert_int_equal(qk_fake_quant(f, &o, a, rows, k, NULL, &err), QS_OK);
    memcpy(b, x, n * sizeof *x);
    o.threads = 4;
    assert_int_equal(qk_fake_quant(f, &o, b, rows, k, NULL, &err), QS_OK);
    assert_memory_equal(a, b, n * sizeof *a);
    memcpy(b, x, n * sizeof *x);
    o.step = 12;
    assert_int_equal(qk_fake_quant(f, &o, b, rows, k, NULL, &err), QS_OK);
    assert_true(memcmp(a, b, n * sizeof *a) != 0);
    free(x);
    free(a);
    free(b);
}

/* Inside the block quantizer, element (r, c) of a [rows x k] tensor rounds with the bits
 * qk_sr_bits(seed, tensor, step, r*k + c): an MXFP4 block with amax 6 has scale 2^0 (RCEIL),
 * so 0.75 is rounded as it stands. k = 37 makes rows start mid Philox block. */
static void block_quantizer_draws_the_documented_sr_bits(void **state) {
    (void)state;
    const size_t rows = 9, k = 37;
    float x[9 * 37];
    for (size_t i = 0; i < rows * k; i++)
        x[i] = (i % k % 32 == 0) ? 6.0f : 0.75f;
    qk_quant_options o = {
        .rounding = QK_ROUND_SR, .seed = 0xABCDEF0123ull, .tensor_id = 4, .step = 8};
    qs_error err = {0};
    assert_int_equal(qk_fake_quant(qk_format_by_name("mxfp4"), &o, x, rows, k, NULL, &err), QS_OK);
    for (size_t r = 0; r < rows; r++) {
        for (size_t c = 1; c < k; c++) {
            if (c % 32 == 0) continue; /* the 6.0 that sets each block's scale */
            uint32_t bits = qk_sr_bits(o.seed, o.tensor_id, o.step, r * k + c);
            float want = qk_codec_decode(&qk_codec_e2m1,
                                         qk_codec_encode(&qk_codec_e2m1, 0.75f, QK_ROUND_SR, bits));
            assert_true(x[r * k + c] == want);
        }
    }
}

static double pearson(const double *u, const double *v, size_t n) {
    double mu = 0, mv = 0;
    for (size_t i = 0; i < n; i++) {
        mu += u[i];
        mv += v[i];
    }
    mu /= (double)n;
    mv /= (double)n;
    double suv = 0, suu = 0, svv = 0;
    for (size_t i = 0; i < n; i++) {
        suv += (u[i] - mu) * (v[i] - mv);
        suu += (u[i] - mu) * (u[i] - mu);
        svv += (v[i] - mv) * (v[i] - mv);
    }
    return suv / sqrt(suu * svv);
}

/* Two tensors under the same seed and step draw uncorrelated bits (|r| < 0.01 over 10^5),
 * and so do their rounding decisions. */
static void stochastic_rounding_streams_are_uncorrelated_across_tensors(void **state) {
    (void)state;
    const size_t n = 100000;
    double *u = malloc(n * sizeof *u), *v = malloc(n * sizeof *v);
    double *du = malloc(n * sizeof *du), *dv = malloc(n * sizeof *dv);
    assert_non_null(u);
    assert_non_null(v);
    assert_non_null(du);
    assert_non_null(dv);
    for (size_t i = 0; i < n; i++) {
        uint32_t ru = qk_sr_bits(2024, 0, 7, i), rv = qk_sr_bits(2024, 1, 7, i);
        u[i] = ru * 0x1p-32;
        v[i] = rv * 0x1p-32;
        du[i] = qk_codec_decode(&qk_codec_e2m1,
                                qk_codec_encode(&qk_codec_e2m1, 0.75f, QK_ROUND_SR, ru));
        dv[i] = qk_codec_decode(&qk_codec_e2m1,
                                qk_codec_encode(&qk_codec_e2m1, 0.75f, QK_ROUND_SR, rv));
    }
    double r_bits = pearson(u, v, n), r_dec = pearson(du, dv, n);
    fprintf(stderr, "r(bits) = %.5f, r(rounding) = %.5f\n", r_bits, r_dec);
    assert_true(fabs(r_bits) < 0.01);
    assert_true(fabs(r_dec) < 0.01);
    free(u);
    free(v);
    free(du);
    free(dv);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(philox_matches_random123_known_answers),
        cmocka_unit_test(sr_bits_follow_the_documented_counter_layout),
        cmocka_unit_test(sr_words_are_the_sr_bits_on_every_path),
        cmocka_unit_test(stochastic_rounding_is_unbiased),
        cmocka_unit_test(stochastic_rounding_is_reproducible),
        cmocka_unit_test(block_quantizer_draws_the_documented_sr_bits),
        cmocka_unit_test(stochastic_rounding_streams_are_uncorrelated_across_tensors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
