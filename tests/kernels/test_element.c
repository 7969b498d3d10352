/* Element codecs against tests/kernels/data and the rules of docs/numerics.md sections 1-2. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "element.h"
#include "numerics.h"
#include "philox.h"
#include "testdata.h"

/* Every row of e2m1.tsv: RNE-saturating and round-toward-zero codes (CUDA 13 oracle). */
static void e2m1_matches_every_testdata_row(void **state) {
    (void)state;
    tsv_file t;
    assert_true(tsv_open(&t, "e2m1.tsv"));
    size_t rows = 0, bad = 0;
    while (tsv_next(&t) == 4) {
        float x = f32_of_hex(t.field[0]);
        uint32_t rne = (uint32_t)strtoul(t.field[2], NULL, 16);
        uint32_t rz = (uint32_t)strtoul(t.field[3], NULL, 16);
        uint32_t got_rne = qk_codec_encode(&qk_codec_e2m1, x, QK_ROUND_RNE, 0);
        uint32_t got_rz = qk_codec_encode(&qk_codec_e2m1, x, QK_ROUND_RZ, 0);
        if (got_rne != rne || got_rz != rz) {
            if (bad++ < 10)
                fprintf(stderr, "%s:%zu: x=%s rne %X want %X, rz %X want %X\n", t.path, t.lineno,
                        t.field[0], got_rne, rne, got_rz, rz);
        }
        /* the fast path gives the value of the RNE code */
        float fast = qk_e2m1_rne_value(x), ref = qk_codec_decode(&qk_codec_e2m1, rne);
        if (bits_of_f32(fast) != bits_of_f32(ref)) {
            if (bad++ < 10)
                fprintf(stderr, "%s:%zu: fast path %g, code %X decodes to %g\n", t.path, t.lineno,
                        (double)fast, rne, (double)ref);
        }
        rows++;
    }
    tsv_close(&t);
    assert_true(rows >= 4000);
    assert_int_equal(bad, 0);
}

/* Every row of e4m3.tsv: RNE with SATFINITE (CUDA 13 oracle). */
static void e4m3_matches_every_testdata_row(void **state) {
    (void)state;
    tsv_file t;
    assert_true(tsv_open(&t, "e4m3.tsv"));
    size_t rows = 0, bad = 0;
    while (tsv_next(&t) == 3) {
        float x = f32_of_hex(t.field[0]);
        uint32_t want = (uint32_t)strtoul(t.field[2], NULL, 16);
        uint32_t got = qk_codec_encode(&qk_codec_e4m3, x, QK_ROUND_RNE, 0);
        if (got != want && bad++ < 10)
            fprintf(stderr, "%s:%zu: x=%s got %02X want %02X\n", t.path, t.lineno, t.field[0], got,
                    want);
        rows++;
    }
    tsv_close(&t);
    assert_true(rows >= 4000);
    assert_int_equal(bad, 0);
}

/* Every row of e8m0_rceil.tsv: the MXFP4 RCEIL scale, and CUDA-style E8M0 RP of amax/6. */
static void mx_rceil_matches_every_testdata_row(void **state) {
    (void)state;
    tsv_file t;
    assert_true(tsv_open(&t, "e8m0_rceil.tsv"));
    size_t rows = 0;
    while (tsv_next(&t) == 3) {
        float amax = f32_of_hex(t.field[0]);
        unsigned want = (unsigned)strtoul(t.field[2], NULL, 16);
        unsigned got = qk_mx_scale_code(amax, QK_MX_RCEIL, &qk_codec_e2m1);
        if (got != want) fprintf(stderr, "%s:%zu: amax=%s\n", t.path, t.lineno, t.field[1]);
        assert_int_equal(got, want);
        rows++;
    }
    tsv_close(&t);
    assert_true(rows >= 15);
}

/* docs/numerics.md section 2.3, "Scale test vectors": biased E8M0 codes per rule. */
static void mx_scale_rules_match_spec_table(void **state) {
    (void)state;
    static const struct {
        float amax;
        unsigned floor_, ceil_, even, rceil;
    } rows[] = {
        {0.0f, 0, 0, 0, 0},
        {0.75f, 124, 125, 124, 124},
        {1.0f, 125, 125, 125, 125},
        {1.5f, 125, 126, 125, 125},
        {3.0f, 126, 127, 126, 126},
        {3.0001f, 126, 127, 126, 127},
        {6.0f, 127, 128, 127, 127},
        {6.1f, 127, 128, 127, 128},
        {7.0f, 127, 128, 128, 128},
        {8.0f, 128, 128, 128, 128},
        {12.0f, 128, 129, 128, 128},
        {1e38f, 251, 252, 251, 251},
        {INFINITY, 255, 255, 255, 255},
        {NAN, 255, 255, 255, 255},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const qk_codec *e = &qk_codec_e2m1;
        assert_int_equal(qk_mx_scale_code(rows[i].amax, QK_MX_FLOOR, e), rows[i].floor_);
        assert_int_equal(qk_mx_scale_code(rows[i].amax, QK_MX_CEIL, e), rows[i].ceil_);
        assert_int_equal(qk_mx_scale_code(rows[i].amax, QK_MX_EVEN, e), rows[i].even);
        assert_int_equal(qk_mx_scale_code(rows[i].amax, QK_MX_RCEIL, e), rows[i].rceil);
    }
}

/* docs/numerics.md 4.4: E8M0 conversion examples (sign ignored, RP and RZ, zero, NaN, Inf). */
static void e8m0_conversion_matches_cuda_examples(void **state) {
    (void)state;
    assert_int_equal(qk_e8m0_encode(1.5f, QK_E8M0_RP), 0x80);
    assert_int_equal(qk_e8m0_encode(0.75f, QK_E8M0_RP), 0x7F);
    assert_int_equal(qk_e8m0_encode(1.5f, QK_E8M0_RZ), 0x7F);
    assert_int_equal(qk_e8m0_encode(-2.0f, QK_E8M0_RP), 0x80);
    assert_int_equal(qk_e8m0_encode(0.0f, QK_E8M0_RP), 0x00);
    assert_int_equal(qk_e8m0_encode(NAN, QK_E8M0_RP), 0xFF);
    assert_int_equal(qk_e8m0_encode(INFINITY, QK_E8M0_RP), 0xFE);
    /* decode: 0 is 2^-127 (an FP32 subnormal, which must survive: no FTZ), 0xFF is NaN */
    assert_true(qk_e8m0_decode(0) == ldexpf(1.0f, -127));
    assert_true(qk_e8m0_decode(0) > 0.0f);
    assert_true(isnan(qk_e8m0_decode(0xFF)));
    assert_true(qk_e8m0_decode(127) == 1.0f);
}

/* The 16 E2M1 codes decode to the table of docs/numerics.md 1.1 and re-encode to themselves. */
static void e2m1_all_codes_round_trip(void **state) {
    (void)state;
    static const float table[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                    -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
    for (uint32_t c = 0; c < 16; c++) {
        float v = qk_codec_decode(&qk_codec_e2m1, c);
        assert_true(bits_of_f32(v) == bits_of_f32(table[c]));
        for (int r = QK_ROUND_RNE; r <= QK_ROUND_SR; r++)
            assert_int_equal(qk_codec_encode(&qk_codec_e2m1, v, (qk_rounding)r, 0x12345678u), c);
        assert_true(bits_of_f32(qk_e2m1_rne_value(v)) == bits_of_f32(v));
    }
}

/* Decided behaviour (element.h): -0 keeps its sign, NaN of either sign gives +6 (code 0x7),
 * +-Inf saturate to +-6, in every rounding mode, and the fast path agrees. */
static void e2m1_special_inputs(void **state) {
    (void)state;
    for (int r = QK_ROUND_RNE; r <= QK_ROUND_SR; r++) {
        qk_rounding m = (qk_rounding)r;
        assert_int_equal(qk_codec_encode(&qk_codec_e2m1, -0.0f, m, 0xFFFFFFFFu), 0x8);
        assert_int_equal(qk_codec_encode(&qk_codec_e2m1, NAN, m, 0), 0x7);
        assert_int_equal(qk_codec_encode(&qk_codec_e2m1, -NAN, m, 0), 0x7);
        assert_int_equal(qk_codec_encode(&qk_codec_e2m1, INFINITY, m, 0), 0x7);
        assert_int_equal(qk_codec_encode(&qk_codec_e2m1, -INFINITY, m, 0), 0xF);
    }
    assert_true(bits_of_f32(qk_e2m1_rne_value(-0.0f)) == bits_of_f32(-0.0f));
    assert_true(bits_of_f32(qk_e2m1_rne_value(-0.1f)) == bits_of_f32(-0.0f));
    assert_true(qk_e2m1_rne_value(NAN) == 6.0f);
    assert_true(qk_e2m1_rne_value(-NAN) == 6.0f);
    assert_true(qk_e2m1_rne_value(INFINITY) == 6.0f);
    assert_true(qk_e2m1_rne_value(-INFINITY) == -6.0f);
}

/* E4M3 (docs/numerics.md 3.2): all 254 non-NaN codes round-trip; NaN codes are 0x7F/0xFF;
 * max 448, min subnormal 2^-9. */
static void e4m3_all_codes_round_trip(void **state) {
    (void)state;
    for (uint32_t c = 0; c < 256; c++) {
        float v = qk_codec_decode(&qk_codec_e4m3, c);
        if ((c & 0x7F) == 0x7F) {
            assert_true(isnan(v));
            continue;
        }
        assert_int_equal(qk_codec_encode(&qk_codec_e4m3, v, QK_ROUND_RNE, 0), c);
        assert_int_equal(qk_codec_encode(&qk_codec_e4m3, v, QK_ROUND_RZ, 0), c);
    }
    assert_true(qk_codec_decode(&qk_codec_e4m3, 0x7E) == 448.0f);
    assert_true(qk_codec_decode(&qk_codec_e4m3, 0x01) == ldexpf(1.0f, -9));
    assert_true(qk_codec_decode(&qk_codec_e4m3, 0x08) == ldexpf(1.0f, -6));
    assert_int_equal(qk_codec_encode(&qk_codec_e4m3, NAN, QK_ROUND_RNE, 0), 0x7F);
    assert_int_equal(qk_codec_encode(&qk_codec_e4m3, -INFINITY, QK_ROUND_RNE, 0), 0xFE);
}

/* FP16 against the compiler's IEEE binary16 conversion (RNE), on random finite inputs below
 * the overflow boundary (where qsweep saturates and IEEE gives Inf). */
static void fp16_matches_compiler_float16(void **state) {
    (void)state;
#ifndef __FLT16_MAX__
    skip(); /* this compiler has no _Float16 on this target */
#else
    size_t checked = 0;
    for (uint32_t i = 0; i < 2000000u; i++) {
        uint32_t u = qk_sr_bits(7, 1, 0, i);
        float x;
        memcpy(&x, &u, sizeof x);
        if (!(fabsf(x) < 65520.0f)) continue;
        _Float16 h = (_Float16)x;
        uint16_t want;
        memcpy(&want, &h, sizeof want);
        uint32_t got = qk_codec_encode(&qk_codec_fp16, x, QK_ROUND_RNE, 0);
        if (got != want) fprintf(stderr, "fp16: x=%08X got %04X want %04X\n", u, got, want);
        assert_int_equal(got, want);
        assert_true(bits_of_f32(qk_codec_decode(&qk_codec_fp16, got)) == bits_of_f32((float)h));
        checked++;
    }
    assert_true(checked > 100000);
    assert_int_equal(qk_codec_encode(&qk_codec_fp16, 1e6f, QK_ROUND_RNE, 0), 0x7BFF);
#endif
}

/* BF16 against the classic integer RNE (add 0x7FFF plus the kept LSB, truncate), on random
 * finite inputs that do not round past the largest finite value. */
static void bf16_matches_integer_rne(void **state) {
    (void)state;
    for (uint32_t i = 0; i < 2000000u; i++) {
        uint32_t u = qk_sr_bits(9, 2, 0, i);
        if ((u & 0x7F800000u) == 0x7F800000u) continue;
        if ((u & 0x7FFFFFFFu) >= 0x7F7F8000u) continue;
        uint32_t want = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
        float x;
        memcpy(&x, &u, sizeof x);
        uint32_t got = qk_codec_encode(&qk_codec_bf16, x, QK_ROUND_RNE, 0);
        if (got != want) fprintf(stderr, "bf16: x=%08X got %04X want %04X\n", u, got, want);
        assert_int_equal(got, want);
        assert_int_equal(qk_codec_encode(&qk_codec_bf16, x, QK_ROUND_RZ, 0), u >> 16);
    }
}

/* FP6 and E5M2 grid facts (OCP MX v1.0 Table for E2M3/E3M2; OCP FP8 E5M2). */
static void fp6_and_e5m2_extremes(void **state) {
    (void)state;
    assert_true(qk_codec_decode(&qk_codec_e2m3, 0x1F) == 7.5f);
    assert_true(qk_codec_decode(&qk_codec_e2m3, 0x01) == 0.125f);
    assert_true(qk_codec_decode(&qk_codec_e3m2, 0x1F) == 28.0f);
    assert_true(qk_codec_decode(&qk_codec_e3m2, 0x01) == 0.0625f);
    assert_true(qk_codec_decode(&qk_codec_e5m2, 0x7B) == 57344.0f);
    assert_true(isinf(qk_codec_decode(&qk_codec_e5m2, 0x7C)));
    assert_int_equal(qk_codec_encode(&qk_codec_e2m3, 100.0f, QK_ROUND_RNE, 0), 0x1F);
    assert_int_equal(qk_codec_encode(&qk_codec_e3m2, -100.0f, QK_ROUND_RNE, 0), 0x3F);
    assert_int_equal(qk_codec_encode(&qk_codec_e3m2, NAN, QK_ROUND_RNE, 0), 0x1F);
    assert_int_equal(qk_codec_encode(&qk_codec_e5m2, INFINITY, QK_ROUND_RNE, 0), 0x7B);
    for (uint32_t c = 0; c < 64; c++) { /* every FP6 code round-trips */
        assert_int_equal(
            qk_codec_encode(&qk_codec_e2m3, qk_codec_decode(&qk_codec_e2m3, c), QK_ROUND_RNE, 0),
            c);
        assert_int_equal(
            qk_codec_encode(&qk_codec_e3m2, qk_codec_decode(&qk_codec_e3m2, c), QK_ROUND_RNE, 0),
            c);
    }
}

/* Symmetric integers: RNE ties to even, saturation at +-int_max, two's complement codes. */
static void int_codecs_round_and_saturate(void **state) {
    (void)state;
    assert_int_equal(qk_codec_encode(&qk_codec_int8, 2.5f, QK_ROUND_RNE, 0), 2);
    assert_int_equal(qk_codec_encode(&qk_codec_int8, 3.5f, QK_ROUND_RNE, 0), 4);
    assert_int_equal(qk_codec_encode(&qk_codec_int8, -2.5f, QK_ROUND_RNE, 0), 0xFE);
    assert_int_equal(qk_codec_encode(&qk_codec_int8, 300.0f, QK_ROUND_RNE, 0), 127);
    assert_int_equal(qk_codec_encode(&qk_codec_int8, -300.0f, QK_ROUND_RNE, 0), 0x81);
    assert_int_equal(qk_codec_encode(&qk_codec_int4, -9.0f, QK_ROUND_RNE, 0), 0x9);
    assert_int_equal(qk_codec_encode(&qk_codec_int4, 2.9f, QK_ROUND_RZ, 0), 2);
    assert_true(qk_codec_decode(&qk_codec_int4, 0x9) == -7.0f);
    assert_true(qk_codec_decode(&qk_codec_int8, 0x81) == -127.0f);
    assert_int_equal(qk_codec_encode(&qk_codec_int8, NAN, QK_ROUND_RNE, 0), 0);
}

/* The fast E2M1 path equals the reference on the decision-table edges and their neighbours
 * (the full 2^32 sweep is the "exhaustive" test). */
static void e2m1_fast_path_matches_reference_near_thresholds(void **state) {
    (void)state;
    static const float edges[] = {0.0f,  0.25f, 0.5f,   0.75f,  1.0f,  1.25f,   1.5f,
                                  1.75f, 2.0f,  2.5f,   3.0f,   3.5f,  4.0f,    5.0f,
                                  6.0f,  7.0f,  1e-45f, 1e-38f, 3e38f, INFINITY};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
        uint32_t b = bits_of_f32(edges[i]);
        for (int d = -3; d <= 3; d++) {
            for (int sign = 0; sign < 2; sign++) {
                uint32_t u = (uint32_t)((int64_t)b + d) | (sign ? 0x80000000u : 0);
                float x;
                memcpy(&x, &u, sizeof x);
                float ref = qk_codec_decode(&qk_codec_e2m1,
                                            qk_codec_encode(&qk_codec_e2m1, x, QK_ROUND_RNE, 0));
                assert_true(bits_of_f32(qk_e2m1_rne_value(x)) == bits_of_f32(ref));
            }
        }
    }
}

/* The fast E4M3 cast (non-negative inputs) equals the reference at every E4M3 value, every
 * midpoint between neighbours, one FP32 ulp either side of both, and on 2^22 samples. */
static void e4m3_fast_cast_matches_reference(void **state) {
    (void)state;
    size_t n = 0;
    for (uint32_t c = 0; c < 0x7F; c++) {
        float lo = qk_codec_decode(&qk_codec_e4m3, c);
        float hi = c < 0x7E ? qk_codec_decode(&qk_codec_e4m3, c + 1) : 480.0f;
        float pts[2] = {lo, (lo + hi) * 0.5f}; /* the midpoint is exact in FP32 */
        for (int j = 0; j < 2; j++) {
            for (int d = -1; d <= 1; d++) {
                uint32_t u = (uint32_t)((int64_t)bits_of_f32(pts[j]) + d);
                if (u & 0x80000000u) continue;
                float v;
                memcpy(&v, &u, sizeof v);
                assert_int_equal(qk_e4m3_rne_nonneg(v),
                                 qk_codec_encode(&qk_codec_e4m3, v, QK_ROUND_RNE, 0));
                n++;
            }
        }
    }
    for (uint32_t i = 0; i < (1u << 22); i++, n++) {
        uint32_t u = qk_sr_bits(5, 5, 5, i) & 0x7FFFFFFFu;
        if (u > 0x7F800000u) continue;
        float v;
        memcpy(&v, &u, sizeof v);
        assert_int_equal(qk_e4m3_rne_nonneg(v),
                         qk_codec_encode(&qk_codec_e4m3, v, QK_ROUND_RNE, 0));
    }
    assert_int_equal(qk_e4m3_rne_nonneg(INFINITY), 0x7E);
    assert_true(n > 1000);
}

/* The arithmetic decoders the CUDA kernels use (numerics.h) equal the codec decoders. */
static void device_decoders_match_codec_decoders(void **state) {
    (void)state;
    for (uint32_t c = 0; c < 16; c++)
        assert_true(bits_of_f32(qk_e2m1_value(c)) ==
                    bits_of_f32(qk_codec_decode(&qk_codec_e2m1, c)));
    for (uint32_t c = 0; c <= 0x7E; c++)
        assert_true(bits_of_f32(qk_e4m3_value_nonneg(c)) ==
                    bits_of_f32(qk_codec_decode(&qk_codec_e4m3, c)));
    for (int e = -127; e <= 127; e++)
        assert_true(qk_pow2f(e) == ldexpf(1.0f, e));
}

/* qk_minifloat_rne_value (the fast path of every non-E2M1 minifloat) equals the reference
 * decode(encode()) on every code, the midpoints between neighbouring codes, one ulp either
 * side, specials, and 2^20 samples per codec (all 2^32 under the "exhaustive" label). */
static void minifloat_fast_value_matches_reference(void **state) {
    (void)state;
    const qk_codec *codecs[] = {&qk_codec_e2m1, &qk_codec_e4m3, &qk_codec_e5m2,
                                &qk_codec_e2m3, &qk_codec_e3m2, &qk_codec_fp16};
    for (size_t ci = 0; ci < sizeof codecs / sizeof codecs[0]; ci++) {
        const qk_codec *c = codecs[ci];
        const float nanv = qk_codec_decode(c, c->nan_code);
        size_t bad = 0;
        for (uint32_t i = 0; i < (1u << 20) + (2u << c->bits) + 16; i++) {
            float x;
            if (i < (2u << c->bits)) { /* codes and midpoints, both signs */
                uint32_t code = i >> 1;
                float lo = qk_codec_decode(c, code), hi = qk_codec_decode(c, code + 1);
                x = (i & 1) ? lo + (hi - lo) * 0.5f : lo;
            } else if (i < (2u << c->bits) + 16) {
                const float sp[] = {NAN,    -NAN,    INFINITY, -INFINITY, 0.0f,   -0.0f,
                                    1e-45f, -1e-45f, FLT_MAX,  -FLT_MAX,  1e-38f, 3e38f,
                                    0.5f,   1.0f,    2.0f,     1e30f};
                x = sp[i - (2u << c->bits)];
            } else {
                uint32_t u = qk_sr_bits(77, (uint32_t)ci, 0, i);
                memcpy(&x, &u, sizeof x);
            }
            for (int d = -1; d <= 1; d++) {
                uint32_t u = (uint32_t)((int64_t)bits_of_f32(x) + d);
                float y;
                memcpy(&y, &u, sizeof y);
                float ref = qk_codec_decode(c, qk_codec_encode(c, y, QK_ROUND_RNE, 0));
                float fast = qk_minifloat_rne_value(y, c->man_bits, 1 - c->bias, c->emax + 1,
                                                    c->max_value, nanv);
                if (bits_of_f32(ref) != bits_of_f32(fast) && !(isnan(ref) && isnan(fast)) &&
                    bad++ < 5)
                    fprintf(stderr, "%s: x=%08X ref %a fast %a\n", c->name, u, (double)ref,
                            (double)fast);
            }
        }
        assert_int_equal(bad, 0);
    }
}

/* qk_e2m1_sr_value (the SR fast path) equals the reference codec's SR decision on the grid
 * points, the midpoints (fraction exactly 1/2: the boundary is rbits = 2^31), quarter points,
 * specials and 2^20 random inputs, each with edge and random rbits. */
static void e2m1_sr_fast_value_matches_reference(void **state) {
    (void)state;
    static const uint32_t edge_bits[] = {0u,          1u,          0x3FFFFFFFu, 0x40000000u,
                                         0x7FFFFFFFu, 0x80000000u, 0xBFFFFFFFu, 0xC0000000u,
                                         0xFFFFFFFEu, 0xFFFFFFFFu};
    size_t bad = 0;
    for (uint32_t i = 0; i < (1u << 20) + 64; i++) {
        float x;
        if (i < 48) { /* 0, 0.125, ..., 5.875 */
            x = 0.125f * (float)i;
        } else if (i < 64) {
            const float sp[] = {NAN,     -NAN,   INFINITY,    -INFINITY, -0.0f, 1e-45f,
                                -1e-45f, 6.0f,   7.0f,        7.99f,     8.0f,  -5.5f,
                                1e30f,   3e-39f, 1.99999988f, 3.9999998f};
            x = sp[i - 48];
        } else {
            uint32_t u = qk_sr_bits(3, 3, 3, i);
            memcpy(&x, &u, sizeof x);
        }
        for (size_t j = 0; j <= sizeof edge_bits / sizeof edge_bits[0]; j++) {
            uint32_t rb =
                j < sizeof edge_bits / sizeof edge_bits[0] ? edge_bits[j] : qk_sr_bits(4, 4, 4, i);
            float ref = qk_codec_decode(&qk_codec_e2m1,
                                        qk_codec_encode(&qk_codec_e2m1, x, QK_ROUND_SR, rb));
            float fast = qk_e2m1_sr_value(x, rb);
            if (bits_of_f32(ref) != bits_of_f32(fast) && bad++ < 5)
                fprintf(stderr, "x=%a rbits=%08X ref %a fast %a\n", (double)x, rb, (double)ref,
                        (double)fast);
        }
    }
    assert_int_equal(bad, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(e2m1_matches_every_testdata_row),
        cmocka_unit_test(e4m3_matches_every_testdata_row),
        cmocka_unit_test(mx_rceil_matches_every_testdata_row),
        cmocka_unit_test(mx_scale_rules_match_spec_table),
        cmocka_unit_test(e8m0_conversion_matches_cuda_examples),
        cmocka_unit_test(e2m1_all_codes_round_trip),
        cmocka_unit_test(e2m1_special_inputs),
        cmocka_unit_test(e4m3_all_codes_round_trip),
        cmocka_unit_test(fp16_matches_compiler_float16),
        cmocka_unit_test(bf16_matches_integer_rne),
        cmocka_unit_test(fp6_and_e5m2_extremes),
        cmocka_unit_test(int_codecs_round_and_saturate),
        cmocka_unit_test(e2m1_fast_path_matches_reference_near_thresholds),
        cmocka_unit_test(e4m3_fast_cast_matches_reference),
        cmocka_unit_test(device_decoders_match_codec_decoders),
        cmocka_unit_test(minifloat_fast_value_matches_reference),
        cmocka_unit_test(e2m1_sr_fast_value_matches_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
