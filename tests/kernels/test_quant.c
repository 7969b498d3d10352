/* The block quantizer: NVFP4 worked example, edge blocks, MX scale rules on a block, ragged
 * k, 2D scaling, packed storage, statistics, thread-count and fast-path bit identity. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "element.h"
#include "format.h"
#include "philox.h"
#include "quant.h"
#include "testdata.h"

static const qk_format *fmt(const char *name) {
    const qk_format *f = qk_format_by_name(name);
    assert_non_null(f);
    return f;
}

/* Deterministic test matrix: mostly N(0,1)-like values (sum of uniforms), a few outliers,
 * exact zeros, and (when specials) NaN, +-Inf, -0 and FP32 subnormals. */
static float *make_matrix(size_t rows, size_t k, uint64_t seed, int specials) {
    float *x = malloc(rows * k * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < rows * k; i++) {
        uint32_t r0 = qk_sr_bits(seed, 0, 0, 4 * i), r1 = qk_sr_bits(seed, 0, 0, 4 * i + 1);
        uint32_t r2 = qk_sr_bits(seed, 0, 0, 4 * i + 2), r3 = qk_sr_bits(seed, 0, 0, 4 * i + 3);
        float g = (float)((r0 * 0x1p-32 + r1 * 0x1p-32 + r2 * 0x1p-32) - 1.5) * 2.0f;
        if (r3 % 97 == 0) g *= 40.0f; /* outliers */
        if (r3 % 89 == 1) g = 0.0f;
        if (specials) {
            switch (r3 % 1009) {
            case 3:
                g = NAN;
                break;
            case 4:
                g = INFINITY;
                break;
            case 5:
                g = -INFINITY;
                break;
            case 6:
                g = -0.0f;
                break;
            case 7:
                g = 1e-42f;
                break;
            default:
                break;
            }
        }
        x[i] = g;
    }
    return x;
}

/* Every row of nvfp4_worked_example.tsv (TransformerEngine order, CUDA 13 oracle): scale
 * bytes and codes exactly, dequantized values to the file's 6 printed digits; both through
 * packed storage and through fake-quant (the fast path). */
static void nvfp4_matches_worked_example(void **state) {
    (void)state;
    tsv_file t;
    assert_true(tsv_open(&t, "nvfp4_worked_example.tsv"));
    float x[2][16], deq[2][16];
    unsigned sb[2], codes[2][16];
    int nrows = 0;
    while (tsv_next(&t) == 5) {
        int r = atoi(t.field[0]);
        assert_true(r >= 0 && r < 2);
        char *s = t.field[1], *save = NULL;
        int i = 0;
        for (char *tok = strtok_r(s, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
            x[r][i++] = strtof(tok, NULL);
        assert_int_equal(i, 16);
        sb[r] = (unsigned)strtoul(t.field[2], NULL, 16);
        i = 0;
        for (char *tok = strtok_r(t.field[3], ",", &save); tok; tok = strtok_r(NULL, ",", &save))
            codes[r][i++] = (unsigned)strtoul(tok, NULL, 16);
        assert_int_equal(i, 16);
        i = 0;
        for (char *tok = strtok_r(t.field[4], ",", &save); tok; tok = strtok_r(NULL, ",", &save))
            deq[r][i++] = strtof(tok, NULL);
        assert_int_equal(i, 16);
        nrows++;
    }
    tsv_close(&t);
    assert_int_equal(nrows, 2);

    qk_packed p;
    qs_error err = {0};
    assert_int_equal(qk_packed_init(&p, fmt("nvfp4"), NULL, 2, 16, &err), QS_OK);
    assert_int_equal(qk_quantize(fmt("nvfp4"), NULL, &x[0][0], 2, 16, &p, &err), QS_OK);
    /* S_dec = 1/S_enc with S_enc = 2688/10 = 268.799988 (the file's header) */
    assert_true(fabsf(p.tensor_scale - 0.00372023834f) <= 1e-10f);
    assert_true(p.tensor_amax == 10.0f);
    float y[2][16];
    assert_int_equal(qk_dequantize(&p, &y[0][0], 0, &err), QS_OK);
    float z[2][16];
    memcpy(z, x, sizeof z);
    assert_int_equal(qk_fake_quant(fmt("nvfp4"), NULL, &z[0][0], 2, 16, NULL, &err), QS_OK);
    for (int r = 0; r < 2; r++) {
        assert_int_equal(p.scales[r], sb[r]);
        for (int i = 0; i < 16; i++) {
            unsigned byte = p.codes[r * p.row_bytes + i / 2];
            unsigned code = (i & 1) ? byte >> 4 : byte & 0xF; /* even index in the low nibble */
            assert_int_equal(code, codes[r][i]);
            assert_true(fabsf(y[r][i] - deq[r][i]) <= 5e-6f * fmaxf(1.0f, fabsf(deq[r][i])));
            assert_memory_equal(&y[r][i], &z[r][i], sizeof(float));
        }
    }
    /* the packing rule spelled out: codes 7, C of row 0 share byte 0 as 0xC7 */
    assert_int_equal(p.codes[0], 0xC7);
    qk_packed_release(&p);
}

/* An all-zero block beside a normal one: zeros come back exactly (sign too), no NaN value
 * and no NaN scale byte anywhere (NVFP4: 0x7F/0xFF; MX: 0xFF). */
static void zero_block_beside_normal_block(void **state) {
    (void)state;
    const char *names[] = {"nvfp4",      "nvfp4_2d", "mxfp4",        "mxfp6_e2m3",
                           "mxfp8_e4m3", "fp8_e4m3", "int8_channel", "int4_group"};
    for (size_t f = 0; f < sizeof names / sizeof names[0]; f++) {
        float x[64];
        for (int i = 0; i < 32; i++)
            x[i] = (i & 1) ? -0.0f : 0.0f;
        for (int i = 32; i < 64; i++)
            x[i] = (float)(i - 40) * 0.37f;
        qk_packed p;
        qs_error err = {0};
        assert_int_equal(qk_packed_init(&p, fmt(names[f]), NULL, 1, 64, &err), QS_OK);
        assert_int_equal(qk_quantize(fmt(names[f]), NULL, x, 1, 64, &p, &err), QS_OK);
        float y[64];
        assert_int_equal(qk_dequantize(&p, y, 1, &err), QS_OK);
        for (int i = 0; i < 64; i++)
            assert_false(isnan(y[i]));
        /* minifloats keep the sign of zero; integer codes have one zero, +0 */
        for (int i = 0; i < 32; i++) {
            if (p.fmt->elem->kind == QK_CODEC_INT)
                assert_true(y[i] == 0.0f && !signbit(y[i]));
            else
                assert_memory_equal(&y[i], &x[i], sizeof(float));
        }
        for (size_t b = 0; p.scales && b < p.blocks_per_row; b++) {
            if (p.fmt->storage == QK_STORE_E4M3) assert_int_not_equal(p.scales[b] & 0x7F, 0x7F);
            assert_int_not_equal(p.scales[b], 0xFF);
        }
        qk_packed_release(&p);
    }
}

/* docs/numerics.md 3.3 edge behaviour: with amax_t = 1000, a block of amax 0.001 has
 * 0.001 * (2688/1000) / 6 below 2^-10, so its E4M3 scale is 0x00 and the whole block
 * dequantizes to exactly 0 (no NaN); the statistics count it as one underflowed block. */
static void nvfp4_block_whose_scale_underflows(void **state) {
    (void)state;
    float x[32] = {1000.0f, -3.0f};
    for (int i = 16; i < 32; i++)
        x[i] = (i & 1) ? -0.001f : 0.0005f;
    qk_packed p;
    qs_error err = {0};
    assert_int_equal(qk_packed_init(&p, fmt("nvfp4"), NULL, 1, 32, &err), QS_OK);
    assert_int_equal(qk_quantize(fmt("nvfp4"), NULL, x, 1, 32, &p, &err), QS_OK);
    assert_int_equal(p.scales[0], 0x7E);
    assert_int_equal(p.scales[1], 0x00);
    float y[32];
    assert_int_equal(qk_dequantize(&p, y, 1, &err), QS_OK);
    for (int i = 16; i < 32; i++)
        assert_true(y[i] == 0.0f && !isnan(y[i]));
    qk_quant_stats st;
    float z[32];
    memcpy(z, x, sizeof z);
    assert_int_equal(qk_fake_quant(fmt("nvfp4"), NULL, z, 1, 32, &st, &err), QS_OK);
    assert_memory_equal(y, z, sizeof y);
    assert_int_equal(st.n_blocks, 2);
    assert_int_equal(st.n_underflow_blocks, 1);
    qk_packed_release(&p);
    /* torchao's clamp raises the scale to 2^-6 (E4M3 0x08, its smallest normal); the
     * elements, 0.001 * 2^6 * 2688/1000 = 0.17 < 0.25 at most, still round to 0 */
    qk_quant_options o = {.nvfp4_clamp = QK_NVFP4_CLAMP_TORCHAO};
    assert_int_equal(qk_packed_init(&p, fmt("nvfp4"), &o, 1, 32, &err), QS_OK);
    assert_int_equal(qk_quantize(fmt("nvfp4"), &o, x, 1, 32, &p, &err), QS_OK);
    assert_int_equal(p.scales[0], 0x7E);
    assert_int_equal(p.scales[1], 0x08);
    qk_packed_release(&p);
}

/* All-zero tensor: S_enc = 1 (TE); every scale is 0x00 and the result is exactly zero.
 * ModelOpt's zero-to-one rule stores scale 1.0 (0x38) instead. */
static void nvfp4_all_zero_tensor(void **state) {
    (void)state;
    float x[48] = {0};
    qk_packed p;
    qs_error err = {0};
    assert_int_equal(qk_packed_init(&p, fmt("nvfp4"), NULL, 1, 48, &err), QS_OK);
    assert_int_equal(qk_quantize(fmt("nvfp4"), NULL, x, 1, 48, &p, &err), QS_OK);
    assert_true(p.tensor_scale == 1.0f);
    for (int b = 0; b < 3; b++)
        assert_int_equal(p.scales[b], 0x00);
    qk_packed_release(&p);
    qk_quant_options o = {.nvfp4_clamp = QK_NVFP4_CLAMP_ZERO_TO_ONE};
    assert_int_equal(qk_packed_init(&p, fmt("nvfp4"), &o, 1, 48, &err), QS_OK);
    assert_int_equal(qk_quantize(fmt("nvfp4"), &o, x, 1, 48, &p, &err), QS_OK);
    for (int b = 0; b < 3; b++)
        assert_int_equal(p.scales[b], 0x38);
    float y[48];
    assert_int_equal(qk_dequantize(&p, y, 1, &err), QS_OK);
    for (int i = 0; i < 48; i++)
        assert_true(y[i] == 0.0f);
    qk_packed_release(&p);
}

/* The MXFP4 block [7.9, 0.1, 0, ...]: FLOOR gives X = 2^0 (E8M0 127) and clips 7.9 to 6
 * (one clipped element); RCEIL gives X = 2^1 (128) and 7.9/2 = 3.95 rounds to 4, so 8.
 * 0.1 underflows to 0 under both (0.1 < 0.25 and 0.05 < 0.25). docs/numerics.md 2.2-2.3. */
static void mxfp4_block_under_floor_and_rceil(void **state) {
    (void)state;
    static const struct {
        qk_mx_scale_rule rule;
        unsigned scale;
        float y0;
        size_t clipped;
    } cases[] = {{QK_MX_FLOOR, 127, 6.0f, 1}, {QK_MX_RCEIL, 128, 8.0f, 0}};
    for (size_t c = 0; c < 2; c++) {
        float x[32] = {7.9f, 0.1f};
        qk_quant_options o = {.mx_rule = cases[c].rule};
        qk_packed p;
        qs_error err = {0};
        assert_int_equal(qk_packed_init(&p, fmt("mxfp4"), &o, 1, 32, &err), QS_OK);
        assert_int_equal(qk_quantize(fmt("mxfp4"), &o, x, 1, 32, &p, &err), QS_OK);
        assert_int_equal(p.scales[0], cases[c].scale);
        float y[32];
        assert_int_equal(qk_dequantize(&p, y, 1, &err), QS_OK);
        assert_true(y[0] == cases[c].y0);
        for (int i = 1; i < 32; i++)
            assert_true(y[i] == 0.0f);
        qk_quant_stats st;
        assert_int_equal(qk_fake_quant(fmt("mxfp4"), &o, x, 1, 32, &st, &err), QS_OK);
        assert_memory_equal(x, y, sizeof y);
        assert_int_equal(st.n_clipped, cases[c].clipped);
        qk_packed_release(&p);
    }
}

/* MX blocks holding Inf or NaN get the NaN scale 0xFF and decode to NaN (the OCP way);
 * the neighbouring block is unaffected. */
static void mx_nonfinite_block_is_nan(void **state) {
    (void)state;
    float x[64];
    for (int i = 0; i < 64; i++)
        x[i] = 0.25f * (float)i;
    x[5] = INFINITY;
    qs_error err = {0};
    qk_packed p;
    assert_int_equal(qk_packed_init(&p, fmt("mxfp4"), NULL, 1, 64, &err), QS_OK);
    assert_int_equal(qk_quantize(fmt("mxfp4"), NULL, x, 1, 64, &p, &err), QS_OK);
    assert_int_equal(p.scales[0], 0xFF);
    assert_int_not_equal(p.scales[1], 0xFF);
    float y[64];
    assert_int_equal(qk_dequantize(&p, y, 1, &err), QS_OK);
    for (int i = 0; i < 32; i++)
        assert_true(isnan(y[i]));
    for (int i = 32; i < 64; i++)
        assert_false(isnan(y[i]));
    qk_packed_release(&p);
}

/* k = 172 (10 full NVFP4 blocks and a ragged 12) and k = 1: the ragged block is quantized as
 * if padded with zeros that never enter amax, so it equals the same data padded to a full
 * block by hand. */
static void ragged_k_172_and_1(void **state) {
    (void)state;
    const size_t rows = 5;
    const size_t ks[] = {172, 1};
    const char *names[] = {"nvfp4", "mxfp4", "nvfp4_2d", "int4_group"};
    for (size_t f = 0; f < 4; f++) {
        for (size_t ki = 0; ki < 2; ki++) {
            size_t k = ks[ki], kp = (k + 127) / 128 * 128;
            float *x = make_matrix(rows, k, 11 + ki, 0);
            float *xp = calloc(rows * kp, sizeof *xp);
            assert_non_null(xp);
            for (size_t r = 0; r < rows; r++)
                memcpy(xp + r * kp, x + r * k, k * sizeof *x);
            qs_error err = {0};
            assert_int_equal(qk_fake_quant(fmt(names[f]), NULL, x, rows, k, NULL, &err), QS_OK);
            assert_int_equal(qk_fake_quant(fmt(names[f]), NULL, xp, rows, kp, NULL, &err), QS_OK);
            for (size_t r = 0; r < rows; r++)
                assert_memory_equal(x + r * k, xp + r * kp, k * sizeof *x);
            free(x);
            free(xp);
        }
    }
    /* k = 1 NVFP4: the element alone sets both amaxes; it comes back within E4M3 precision */
    float v = -0.3f;
    qs_error err = {0};
    assert_int_equal(qk_fake_quant(fmt("nvfp4"), NULL, &v, 1, 1, NULL, &err), QS_OK);
    assert_true(fabsf(v + 0.3f) <= 0.3f * 1e-6f);
}

/* NVFP4 2D (16x16) scaling: dequant(q2D(W))^T == dequant(q2D(W^T)) bit for bit, ragged
 * edges included, while 1D scaling differs (arXiv 2509.25149 section 4.3). */
static void nvfp4_2d_scaling_commutes_with_transpose(void **state) {
    (void)state;
    const size_t R = 40, K = 56;
    float *w = make_matrix(R, K, 5, 0);
    float *wt = malloc(R * K * sizeof *wt), *a = malloc(R * K * sizeof *a);
    assert_non_null(wt);
    assert_non_null(a);
    for (size_t r = 0; r < R; r++)
        for (size_t c = 0; c < K; c++)
            wt[c * R + r] = w[r * K + c];
    for (int twod = 1; twod >= 0; twod--) {
        const qk_format *f = fmt(twod ? "nvfp4_2d" : "nvfp4");
        float *q = malloc(R * K * sizeof *q), *qt = malloc(R * K * sizeof *qt);
        assert_non_null(q);
        assert_non_null(qt);
        memcpy(q, w, R * K * sizeof *q);
        memcpy(qt, wt, R * K * sizeof *qt);
        qs_error err = {0};
        assert_int_equal(qk_fake_quant(f, NULL, q, R, K, NULL, &err), QS_OK);
        assert_int_equal(qk_fake_quant(f, NULL, qt, K, R, NULL, &err), QS_OK);
        size_t diff = 0;
        for (size_t r = 0; r < R; r++)
            for (size_t c = 0; c < K; c++)
                diff += bits_of_f32(q[r * K + c]) != bits_of_f32(qt[c * R + r]);
        if (twod)
            assert_int_equal(diff, 0);
        else
            assert_true(diff > 0);
        free(q);
        free(qt);
    }
    /* 2D packed storage repeats each 16x16 block's scale in its 16 rows */
    qk_packed p;
    qs_error err = {0};
    assert_int_equal(qk_packed_init(&p, fmt("nvfp4_2d"), NULL, R, K, &err), QS_OK);
    assert_int_equal(qk_quantize(fmt("nvfp4_2d"), NULL, w, R, K, &p, &err), QS_OK);
    for (size_t r = 0; r < R; r++)
        for (size_t b = 0; b < p.blocks_per_row; b++)
            assert_int_equal(p.scales[r * p.blocks_per_row + b],
                             p.scales[(r / 16 * 16) * p.blocks_per_row + b]);
    qk_packed_release(&p);
    free(w);
    free(wt);
    free(a);
}

/* dequantize(quantize(x)) == fake_quant(x), bit for bit, for every format and rounding,
 * with NaN, Inf, -0 and subnormal inputs in the tensor. */
static void packed_path_equals_fake_quant_for_every_format(void **state) {
    (void)state;
    const size_t rows = 33, k = 200;
    float *x = make_matrix(rows, k, 3, 1);
    float *y = malloc(rows * k * sizeof *y), *z = malloc(rows * k * sizeof *z);
    assert_non_null(y);
    assert_non_null(z);
    for (size_t fi = 0; fi < qk_format_count(); fi++) {
        const qk_format *f = qk_format_at(fi);
        if (f->rule == QK_RULE_IDENTITY) continue;
        for (int rnd = QK_ROUND_RNE; rnd <= QK_ROUND_SR; rnd++) {
            qk_quant_options o = {.rounding = (qk_rounding)rnd, .seed = 9, .tensor_id = 2};
            qk_packed p;
            qs_error err = {0};
            assert_int_equal(qk_packed_init(&p, f, &o, rows, k, &err), QS_OK);
            assert_int_equal(qk_quantize(f, &o, x, rows, k, &p, &err), QS_OK);
            assert_int_equal(qk_dequantize(&p, y, 0, &err), QS_OK);
            memcpy(z, x, rows * k * sizeof *z);
            assert_int_equal(qk_fake_quant(f, &o, z, rows, k, NULL, &err), QS_OK);
            if (memcmp(y, z, rows * k * sizeof *y) != 0)
                fail_msg("%s rounding %d: packed path and fake-quant differ", f->name, rnd);
            qk_packed_release(&p);
        }
    }
    free(x);
    free(y);
    free(z);
}

/* qk_fake_quant_into (out of place) equals qk_fake_quant on a copy, bit for bit, values and
 * statistics, for every format and rounding, with and without statistics (the batched path
 * and the per-block paths), specials in the data; x is left unchanged; a NULL y is refused. */
static void out_of_place_equals_in_place_for_every_format(void **state) {
    (void)state;
    const size_t rows = 9, k = 600;
    float *x = make_matrix(rows, k, 12, 1);
    float *keep = malloc(rows * k * sizeof *x), *a = malloc(rows * k * sizeof *x),
          *b = malloc(rows * k * sizeof *x);
    assert_non_null(keep);
    assert_non_null(a);
    assert_non_null(b);
    memcpy(keep, x, rows * k * sizeof *x);
    for (size_t fi = 0; fi < qk_format_count(); fi++) {
        const qk_format *f = qk_format_at(fi);
        for (int rnd = QK_ROUND_RNE; rnd <= QK_ROUND_SR; rnd++) {
            for (int with_stats = 0; with_stats < 2; with_stats++) {
                qk_quant_options o = {.rounding = (qk_rounding)rnd, .seed = 3, .threads = 2};
                qk_quant_stats sa, sb;
                qs_error err = {0};
                memcpy(a, x, rows * k * sizeof *x);
                memset(b, 0xA5, rows * k * sizeof *b);
                assert_int_equal(qk_fake_quant(f, &o, a, rows, k, with_stats ? &sa : NULL, &err),
                                 QS_OK);
                assert_int_equal(
                    qk_fake_quant_into(f, &o, x, b, rows, k, with_stats ? &sb : NULL, &err), QS_OK);
                if (memcmp(a, b, rows * k * sizeof *a) != 0)
                    fail_msg("%s rounding %d stats %d: out of place differs", f->name, rnd,
                             with_stats);
                if (with_stats) assert_memory_equal(&sa, &sb, sizeof sa);
                assert_memory_equal(x, keep, rows * k * sizeof *x);
            }
        }
    }
    qs_error err = {0};
    assert_int_equal(qk_fake_quant_into(fmt("nvfp4"), NULL, x, NULL, rows, k, NULL, &err),
                     QS_EINVAL);
    free(x);
    free(keep);
    free(a);
    free(b);
}

/* 1, 2 and 4 threads give identical bits and identical statistics for every format and
 * rounding mode (rows not a multiple of 16 or of the thread count). */
static void results_are_identical_for_1_2_4_threads(void **state) {
    (void)state;
    const size_t rows = 75, k = 96;
    float *x = make_matrix(rows, k, 8, 1);
    float *ref = malloc(rows * k * sizeof *ref), *y = malloc(rows * k * sizeof *y);
    assert_non_null(ref);
    assert_non_null(y);
    for (size_t fi = 0; fi < qk_format_count(); fi++) {
        const qk_format *f = qk_format_at(fi);
        for (int rnd = QK_ROUND_RNE; rnd <= QK_ROUND_SR; rnd++) {
            qk_quant_stats s1, sn;
            const int threads[] = {1, 2, 4};
            for (int t = 0; t < 3; t++) {
                qk_quant_options o = {
                    .rounding = (qk_rounding)rnd, .seed = 1, .threads = threads[t]};
                qs_error err = {0};
                float *dst = t == 0 ? ref : y;
                memcpy(dst, x, rows * k * sizeof *x);
                assert_int_equal(qk_fake_quant(f, &o, dst, rows, k, t == 0 ? &s1 : &sn, &err),
                                 QS_OK);
                if (t == 0) continue;
                if (memcmp(ref, y, rows * k * sizeof *y) != 0)
                    fail_msg("%s rounding %d: %d threads differ from 1", f->name, rnd, threads[t]);
                assert_memory_equal(&s1, &sn, sizeof s1);
            }
        }
    }
    free(x);
    free(ref);
    free(y);
}

/* The fast path (NVFP4 1D, every MX format under each scale rule, FP8 per tensor; RNE, and
 * SR for NVFP4/MXFP4) is bit-identical to the scalar reference, values and statistics,
 * specials included, at several overall scales. */
static void fast_path_matches_reference(void **state) {
    (void)state;
    const size_t rows = 67, k = 250;
    float *x = make_matrix(rows, k, 21, 1);
    float *a = malloc(rows * k * sizeof *a), *b = malloc(rows * k * sizeof *b);
    assert_non_null(a);
    assert_non_null(b);
    const char *names[] = {"nvfp4",      "mxfp4",      "mxfp6_e2m3", "mxfp6_e3m2",
                           "mxfp8_e4m3", "mxfp8_e5m2", "fp8_e4m3"};
    for (size_t f = 0; f < sizeof names / sizeof names[0]; f++) {
        int is_mx = strncmp(names[f], "mx", 2) == 0;
        int sr_too = strcmp(names[f], "nvfp4") == 0 || strcmp(names[f], "mxfp4") == 0;
        for (int rule = QK_MX_RCEIL; rule <= (is_mx ? QK_MX_EVEN : QK_MX_RCEIL); rule++) {
            for (int scale_exp = -30; scale_exp <= 30 + 90 * sr_too; scale_exp += 30) {
                /* past 30 the loop runs again with SR: scale_exp - 90 = -30, 0, 30 */
                int sr = scale_exp > 30;
                qk_quant_options o = {.mx_rule = (qk_mx_scale_rule)rule,
                                      .rounding = sr ? QK_ROUND_SR : QK_ROUND_RNE,
                                      .seed = 5,
                                      .tensor_id = 6};
                if (sr) scale_exp -= 90;
                qk_quant_stats sa, sb;
                qs_error err = {0};
                for (size_t i = 0; i < rows * k; i++)
                    a[i] = ldexpf(x[i], scale_exp);
                memcpy(b, a, rows * k * sizeof *a);
                o.reference_only = 1;
                assert_int_equal(qk_fake_quant(fmt(names[f]), &o, a, rows, k, &sa, &err), QS_OK);
                o.reference_only = 0;
                assert_int_equal(qk_fake_quant(fmt(names[f]), &o, b, rows, k, &sb, &err), QS_OK);
                if (memcmp(a, b, rows * k * sizeof *a) != 0)
                    fail_msg("%s rule %d scale 2^%d: fast path differs", names[f], rule, scale_exp);
                assert_memory_equal(&sa, &sb, sizeof sa);
                if (sr) scale_exp += 90;
            }
        }
    }
    free(x);
    free(a);
    free(b);
}

/* RNE fake-quant without statistics of NVFP4 and the MX formats takes the batched path (16
 * blocks at a time, then the per-block fast path for the rest of the row), nvfp4_2d its
 * tile path: bit-identical to the scalar reference for k below, at and above a batch (256
 * and 512), ragged k and row counts, every NVFP4 clamp option and given tensor amax, every
 * MX format and scale rule, specials in the
 * data (MX blocks holding Inf or NaN are NaN), overall scales 2^-60 .. 2^60, and 1, 2 and 3
 * threads. */
static void batched_path_matches_reference(void **state) {
    (void)state;
    const size_t shapes[][2] = {{3, 255}, {5, 256}, {7, 700}, {2, 4096 + 48}, {33, 512}};
    const char *mx[] = {"mxfp4", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp8_e4m3", "mxfp8_e5m2"};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        size_t rows = shapes[s][0], k = shapes[s][1], n = rows * k;
        float *x = make_matrix(rows, k, 40 + s, 1);
        float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
        assert_non_null(a);
        assert_non_null(b);
        /* cfg < 12: nvfp4 (cfg < 6) or nvfp4_2d with clamp (cfg % 6) / 2, amax given when
         * cfg is odd; then MX format (cfg - 12) / 4 under scale rule (cfg - 12) % 4 */
        for (int cfg = 0; cfg < 12 + 5 * 4; cfg++) {
            const char *name = cfg < 6 ? "nvfp4" : cfg < 12 ? "nvfp4_2d" : mx[(cfg - 12) / 4];
            for (int e = -60; e <= 60; e += 40) {
                for (size_t i = 0; i < n; i++)
                    a[i] = ldexpf(x[i], e);
                memcpy(b, a, n * sizeof *a);
                qk_quant_options o = {.threads = 1 + (int)((s + (size_t)cfg) % 3)};
                if (cfg < 12) {
                    o.nvfp4_clamp = (qk_nvfp4_clamp)((cfg % 6) / 2);
                    o.tensor_amax_given = cfg & 1;
                    o.tensor_amax = ldexpf(3.0f, e);
                } else {
                    o.mx_rule = (qk_mx_scale_rule)((cfg - 12) % 4);
                }
                qs_error err = {0};
                o.reference_only = 1;
                assert_int_equal(qk_fake_quant(fmt(name), &o, a, rows, k, NULL, &err), QS_OK);
                o.reference_only = 0;
                assert_int_equal(qk_fake_quant(fmt(name), &o, b, rows, k, NULL, &err), QS_OK);
                for (size_t i = 0; i < n; i++)
                    if (bits_of_f32(a[i]) != bits_of_f32(b[i]) && !(isnan(a[i]) && isnan(b[i])))
                        fail_msg("%s k %zu cfg %d scale 2^%d: element %zu: %a vs %a", name, k, cfg,
                                 e, i, (double)a[i], (double)b[i]);
            }
        }
        free(x);
        free(a);
        free(b);
    }
}

/* SR fake-quant without statistics of NVFP4 and MXFP4 takes the batched path (up to 16 blocks
 * at a time, their Philox words drawn together): bit-identical to the scalar reference for the
 * training shapes' row lengths (64, 128, 384, 1024), ragged ones (17, 250: rows starting
 * inside a Philox block) and one past a batch (4096 + 48), specials in the data, overall
 * scales 2^-60 .. 2^60, given and computed tensor amax, fixed seeds with both key words set,
 * several tensor ids and steps, and 1, 2 and 3 threads. */
static void batched_sr_path_matches_reference(void **state) {
    (void)state;
    const size_t shapes[][2] = {{9, 64}, {6, 128}, {5, 384},      {3, 1024},
                                {7, 17}, {5, 250}, {2, 4096 + 48}};
    const char *names[] = {"nvfp4", "mxfp4"};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        size_t rows = shapes[s][0], k = shapes[s][1], n = rows * k;
        float *x = make_matrix(rows, k, 70 + s, 1);
        float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
        assert_non_null(a);
        assert_non_null(b);
        for (int cfg = 0; cfg < 4; cfg++) {
            const char *name = names[cfg / 2];
            for (int e = -60; e <= 60; e += 40) {
                for (size_t i = 0; i < n; i++)
                    a[i] = ldexpf(x[i], e);
                memcpy(b, a, n * sizeof *a);
                qk_quant_options o = {.rounding = QK_ROUND_SR,
                                      .seed = 0x9E3779B97F4A7C15ull + (uint64_t)cfg,
                                      .tensor_id = (uint32_t)(3 * s + 1),
                                      .step = (uint32_t)(e + 61),
                                      .threads = 1 + (int)((s + (size_t)cfg) % 3)};
                if (cfg == 1) {
                    o.tensor_amax_given = 1;
                    o.tensor_amax = ldexpf(3.0f, e);
                }
                qs_error err = {0};
                o.reference_only = 1;
                assert_int_equal(qk_fake_quant(fmt(name), &o, a, rows, k, NULL, &err), QS_OK);
                o.reference_only = 0;
                assert_int_equal(qk_fake_quant(fmt(name), &o, b, rows, k, NULL, &err), QS_OK);
                for (size_t i = 0; i < n; i++)
                    if (bits_of_f32(a[i]) != bits_of_f32(b[i]) && !(isnan(a[i]) && isnan(b[i])))
                        fail_msg("%s SR k %zu cfg %d scale 2^%d: element %zu: %a vs %a", name, k,
                                 cfg, e, i, (double)a[i], (double)b[i]);
            }
        }
        free(x);
        free(a);
        free(b);
    }
}

/* Statistics against a direct computation from the input and the fake-quant output. */
static void statistics_match_direct_computation(void **state) {
    (void)state;
    const size_t rows = 20, k = 64;
    float *x = make_matrix(rows, k, 2, 0);
    float *y = malloc(rows * k * sizeof *y);
    assert_non_null(y);
    memcpy(y, x, rows * k * sizeof *y);
    qk_quant_stats st;
    qk_quant_options o = {.mx_rule = QK_MX_FLOOR};
    qs_error err = {0};
    assert_int_equal(qk_fake_quant(fmt("mxfp4"), &o, y, rows, k, &st, &err), QS_OK);
    double se = 0, sg = 0;
    for (size_t i = 0; i < rows * k; i++) {
        se += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
        sg += (double)x[i] * x[i];
    }
    double mse = se / (double)(rows * k), sig = sg / (double)(rows * k);
    assert_true(fabs(st.mse - mse) <= 1e-12 * sig);
    assert_true(fabs(st.signal_power - sig) <= 1e-12 * sig);
    assert_true(fabs(st.sqnr_db - 10.0 * log10(sig / mse)) < 1e-9);
    assert_int_equal(st.n_elements, rows * k);
    assert_int_equal(st.n_blocks, rows * 2);
    assert_true(st.sqnr_db > 10.0 && st.sqnr_db < 30.0); /* MXFP4 on Gaussian data: ~15-20 dB */
    /* bf16 (identity): no error at all */
    memcpy(y, x, rows * k * sizeof *y);
    assert_int_equal(qk_fake_quant(fmt("bf16"), NULL, y, rows, k, &st, &err), QS_OK);
    assert_memory_equal(x, y, rows * k * sizeof *y);
    assert_true(st.mse == 0.0 && isinf(st.sqnr_db));
    free(x);
    free(y);
}

/* Bad calls are refused with a message naming the field. */
static void invalid_calls_are_refused_with_a_message(void **state) {
    (void)state;
    float x[16] = {1};
    qs_error err = {0};
    assert_int_equal(qk_fake_quant(fmt("nvfp4"), NULL, x, 0, 16, NULL, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "rows=0"));
    qk_quant_options o = {.mx_rule = QK_MX_FLOOR};
    assert_int_equal(qk_fake_quant(fmt("nvfp4"), &o, x, 1, 16, NULL, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "mx_rule"));
    qk_quant_options o2 = {.rounding = (qk_rounding)7};
    assert_int_equal(qk_fake_quant(fmt("mxfp4"), &o2, x, 1, 16, NULL, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "rounding"));
    qk_quant_options o3 = {.group_size = 64};
    assert_int_equal(qk_fake_quant(fmt("int8_channel"), &o3, x, 1, 16, NULL, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "group_size"));
    assert_int_equal(qk_fake_quant(fmt("int4_group"), &o3, x, 1, 16, NULL, &err), QS_OK);
    qk_packed p;
    assert_int_equal(qk_packed_init(&p, fmt("bf16"), NULL, 1, 16, &err), QS_EUNSUPPORTED);
    assert_int_equal(qk_packed_init(&p, fmt("nvfp4"), NULL, 1, 16, &err), QS_OK);
    assert_int_equal(qk_quantize(fmt("mxfp4"), NULL, x, 1, 16, &p, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "nvfp4"));
    qk_packed_release(&p);
    assert_null(qk_format_by_name("nvfp5"));
    for (size_t i = 0; i < qk_format_count(); i++)
        assert_ptr_equal(qk_format_by_name(qk_format_name(qk_format_at(i))), qk_format_at(i));
}

/* INT4 group-wise: one FP32 scale amax/7 per 128-element group (or the option's size);
 * INT8 per channel: one per row. Values come back as code * scale. */
static void integer_formats_use_absmax_scales(void **state) {
    (void)state;
    float x[2 * 256];
    for (int i = 0; i < 512; i++)
        x[i] = (float)((i * 37) % 101 - 50) / 8.0f;
    qk_packed p;
    qs_error err = {0};
    assert_int_equal(qk_packed_init(&p, fmt("int4_group"), NULL, 2, 256, &err), QS_OK);
    assert_int_equal(p.blocks_per_row, 2);
    assert_int_equal(qk_quantize(fmt("int4_group"), NULL, x, 2, 256, &p, &err), QS_OK);
    for (int r = 0; r < 2; r++) {
        for (int g = 0; g < 2; g++) {
            float amax = 0;
            for (int i = 0; i < 128; i++)
                amax = fmaxf(amax, fabsf(x[r * 256 + g * 128 + i]));
            assert_true(p.scales_f32[r * 2 + g] == amax / 7.0f);
        }
    }
    qk_packed_release(&p);
    qk_quant_options o = {.group_size = 32};
    assert_int_equal(qk_packed_init(&p, fmt("int4_group"), &o, 2, 256, &err), QS_OK);
    assert_int_equal(p.blocks_per_row, 8);
    qk_packed_release(&p);
    assert_int_equal(qk_packed_init(&p, fmt("int8_channel"), NULL, 2, 256, &err), QS_OK);
    assert_int_equal(p.blocks_per_row, 1);
    assert_int_equal(qk_quantize(fmt("int8_channel"), NULL, x, 2, 256, &p, &err), QS_OK);
    float y[512];
    assert_int_equal(qk_dequantize(&p, y, 1, &err), QS_OK);
    for (int i = 0; i < 512; i++) {
        float s = p.scales_f32[i / 256];
        assert_true(fabsf(y[i] - x[i]) <= 0.5f * s * 1.0001f);
    }
    qk_packed_release(&p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(nvfp4_matches_worked_example),
        cmocka_unit_test(zero_block_beside_normal_block),
        cmocka_unit_test(nvfp4_block_whose_scale_underflows),
        cmocka_unit_test(nvfp4_all_zero_tensor),
        cmocka_unit_test(mxfp4_block_under_floor_and_rceil),
        cmocka_unit_test(mx_nonfinite_block_is_nan),
        cmocka_unit_test(ragged_k_172_and_1),
        cmocka_unit_test(nvfp4_2d_scaling_commutes_with_transpose),
        cmocka_unit_test(packed_path_equals_fake_quant_for_every_format),
        cmocka_unit_test(results_are_identical_for_1_2_4_threads),
        cmocka_unit_test(out_of_place_equals_in_place_for_every_format),
        cmocka_unit_test(fast_path_matches_reference),
        cmocka_unit_test(batched_path_matches_reference),
        cmocka_unit_test(batched_sr_path_matches_reference),
        cmocka_unit_test(statistics_match_direct_computation),
        cmocka_unit_test(invalid_calls_are_refused_with_a_message),
        cmocka_unit_test(integer_formats_use_absmax_scales),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
