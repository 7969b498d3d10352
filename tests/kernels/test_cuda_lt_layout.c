/* The host side of the cuBLASLt FP4 GEMM (kernels/cublaslt_layout.h), tested on the CPU: the
 * operand layout against docs/numerics.md 4.3 (the offset formula written out here again, not
 * taken from swizzle.c), the spec's NVFP4 worked example (3.5) packed byte for byte, the
 * repacked scales equal to qk_swizzle_128x4 of the CPU reference's scales for shapes that are
 * not multiples of 128 / 4 with zero padding, the alpha folding against the spec's per-tensor
 * scale definition (3.3 steps 2-3, 7), exact BF16 dequantization, and the CPU GEMM over the
 * buffers against a double GEMM of the CPU reference's dequantized tensors. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cublaslt_layout.h"
#include "philox.h"
#include "quant.h"
#include "swizzle.h"

/* docs/numerics.md 4.3, verbatim: byte offset of S[r][c] for a matrix of C columns. */
static size_t spec_offset(size_t r, size_t c, size_t C) {
    size_t Cp = (C + 3) / 4 * 4;
    return ((r / 128) * (Cp / 4) + (c / 4)) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + (c % 4);
}

static float *random_matrix(size_t rows, size_t k, uint64_t seed) {
    float *x = malloc(rows * k * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < rows * k; i++) {
        uint32_t a = qk_sr_bits(seed, 1, 0, 2 * i), b = qk_sr_bits(seed, 1, 0, 2 * i + 1);
        float g = (float)(a * 0x1p-32 * 2.0 - 1.0);
        if (b % 53 == 0) g *= 40.0f; /* outliers: blocks of very different scales */
        if ((b >> 8) % 71 == 0) g *= 1e-3f;
        x[i] = g;
    }
    return x;
}

/* One operand quantized on the CPU and repacked into the cuBLASLt layout. */
typedef struct lt_operand {
    qk_packed p;
    qk_lt_layout l;
    uint8_t *codes, *scales;
} lt_operand;

static void lt_operand_make(lt_operand *o, const char *fmt_name, const float *x, size_t rows,
                            size_t k) {
    const qk_format *fmt = qk_format_by_name(fmt_name);
    assert_non_null(fmt);
    qs_error err = {0};
    assert_int_equal(qk_packed_init(&o->p, fmt, NULL, rows, k, &err), QS_OK);
    assert_int_equal(qk_quantize(fmt, NULL, x, rows, k, &o->p, &err), QS_OK);
    assert_int_equal(qk_lt_layout_init(fmt, rows, k, &o->l, &err), QS_OK);
    o->codes = malloc(o->l.codes_bytes);
    o->scales = malloc(o->l.scale_bytes);
    assert_non_null(o->codes);
    assert_non_null(o->scales);
    memset(o->codes, 0xAB, o->l.codes_bytes); /* garbage: the padding must be written as 0 */
    memset(o->scales, 0xAB, o->l.scale_bytes);
    assert_int_equal(
        qk_lt_pack(&o->p, &o->l, o->codes, o->l.codes_bytes, o->scales, o->l.scale_bytes, &err),
        QS_OK);
}

static void lt_operand_free(lt_operand *o) {
    qk_packed_release(&o->p);
    free(o->codes);
    free(o->scales);
}

/* Sizes: K padded to 4 blocks of scales (64 NVFP4, 128 MXFP4), scales to 128-row tiles. */
static void layout_pads_k_to_four_scale_blocks_and_rows_to_128(void **state) {
    (void)state;
    qk_lt_layout l;
    qs_error err = {0};
    assert_int_equal(qk_lt_layout_init(qk_format_by_name("nvfp4"), 33, 48, &l, &err), QS_OK);
    assert_int_equal(l.mode, QK_LT_SCALE_VEC16_UE4M3);
    assert_int_equal(l.vec, 16);
    assert_int_equal(l.k_pad, 64);
    assert_int_equal(l.ld_bytes, 32);
    assert_int_equal(l.codes_bytes, 33 * 32);
    assert_int_equal(l.scale_cols, 3);
    assert_int_equal(l.scale_bytes, 128 * 4);
    assert_int_equal(qk_lt_layout_init(qk_format_by_name("nvfp4_2d"), 200, 4096, &l, &err), QS_OK);
    assert_int_equal(l.k_pad, 4096);
    assert_int_equal(l.scale_cols, 256);
    assert_int_equal(l.scale_bytes, 256 * 256);
    assert_int_equal(qk_lt_layout_init(qk_format_by_name("mxfp4"), 130, 200, &l, &err), QS_OK);
    assert_int_equal(l.mode, QK_LT_SCALE_VEC32_UE8M0);
    assert_int_equal(l.vec, 32);
    assert_int_equal(l.k_pad, 256);
    assert_int_equal(l.ld_bytes, 128);
    assert_int_equal(l.scale_cols, 7);
    assert_int_equal(l.scale_bytes, 256 * 8);
}

static void layout_refuses_formats_without_a_block_scaled_fp4_gemm(void **state) {
    (void)state;
    static const char *const names[] = {"bf16",       "fp8_e4m3",   "mxfp8_e4m3",   "mxfp6_e2m3",
                                        "mxfp6_e3m2", "mxfp8_e5m2", "int8_channel", "int4_group"};
    qk_lt_layout l;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        qs_error err = {0};
        assert_int_equal(qk_lt_layout_init(qk_format_by_name(names[i]), 16, 64, &l, &err),
                         QS_EUNSUPPORTED);
        assert_non_null(strstr(err.msg, names[i]));
    }
    qs_error err = {0};
    assert_int_equal(qk_lt_layout_init(qk_format_by_name("nvfp4"), 0, 64, &l, &err), QS_EINVAL);
    assert_int_equal(qk_lt_layout_init(qk_format_by_name("nvfp4"), 4, 0, &l, &err), QS_EINVAL);
    assert_int_equal(qk_lt_layout_init(NULL, 4, 4, &l, &err), QS_EINVAL);
}

/* docs/numerics.md 3.5: amax_t = 10, block A then block B in one row of k = 32. */
static void spec_worked_example_packs_byte_for_byte(void **state) {
    (void)state;
    const float x[32] = {10,    -3.3f,  0.7f,  0.24f,   1.26f, 2.6f,    -5.1f, 0,
                         7.5f,  -9.9f,  4.4f,  0.01f,   6,     -1.75f,  3.5f,  0.3f,
                         0.05f, -0.05f, 0.02f, 0.0125f, 0.03f, -0.001f, 0,     0,
                         0,     0,      0,     0,       0,     0,       0,     0.0375f};
    lt_operand o;
    lt_operand_make(&o, "nvfp4", x, 1, 32);
    /* codes A: 7 C 1 0 2 3 D 0 6 F 5 0 6 A 4 0; B: 7 F 4 3 6 8 0 0 0 0 0 0 0 0 0 6; the even
     * element in the low nibble (docs/numerics.md 1.1) */
    const uint8_t want_codes[16] = {0xC7, 0x01, 0x32, 0x0D, 0xF6, 0x05, 0xA6, 0x04,
                                    0xF7, 0x34, 0x86, 0x00, 0x00, 0x00, 0x00, 0x60};
    assert_int_equal(o.l.ld_bytes, 32);
    assert_memory_equal(o.codes, want_codes, 16);
    for (size_t i = 16; i < 32; i++)
        assert_int_equal(o.codes[i], 0); /* k 32..63: padding */
    /* scales: sb_A = 0x7E (448), sb_B = 0x41 (2.25) at S[0][0], S[0][1]; 510 zero bytes */
    assert_int_equal(o.l.scale_bytes, 512);
    assert_int_equal(o.scales[0], 0x7E);
    assert_int_equal(o.scales[1], 0x41);
    for (size_t i = 2; i < 512; i++)
        assert_int_equal(o.scales[i], 0);
    /* S_dec = 1/S_enc = 0.00372023834 (spec), alpha of this tensor with itself = S_dec^2 */
    assert_true(fabs(o.p.tensor_scale - 0.00372023834) < 1e-11);
    float alpha;
    qs_error err = {0};
    assert_int_equal(qk_lt_fold_alpha(1.0f, o.p.tensor_scale, 0, o.p.tensor_scale, 0, &alpha, &err),
                     QS_OK);
    assert_true(alpha == o.p.tensor_scale * o.p.tensor_scale);
    /* dequantized values of the spec: element * S_dec */
    const float want_a[16] = {10,     -3.333f, 0.8333f, 0, 1.667f, 2.5f,    -5,     0,
                              6.667f, -10,     5,       0, 6.667f, -1.667f, 3.333f, 0};
    for (size_t c = 0; c < 16; c++)
        assert_true(fabsf(qk_lt_element(&o.l, o.codes, o.scales, 0, c) * o.p.tensor_scale -
                          want_a[c]) < 1e-3f);
    assert_true(qk_lt_element(&o.l, o.codes, o.scales, 0, 0) == 6.0f * 448.0f);
    assert_true(qk_lt_element(&o.l, o.codes, o.scales, 0, 16) == 6.0f * 2.25f);
    assert_true(signbit(qk_lt_element(&o.l, o.codes, o.scales, 0, 21))); /* -0.001 -> -0 */
    lt_operand_free(&o);
}

/* For every shape and format: the scale buffer equals qk_swizzle_128x4 of the CPU scales and
 * the spec's offset formula, every padding byte is 0, every code is the CPU's, padding codes 0,
 * and each element times the tensor scale is the CPU dequantized value bit for bit. */
static void packed_buffers_equal_the_cpu_reference_for_ragged_shapes(void **state) {
    (void)state;
    static const char *const fmts[] = {"nvfp4", "nvfp4_2d", "mxfp4"};
    static const size_t shapes[][2] = {{1, 16},    {33, 48},  {128, 64}, {130, 100},
                                       {257, 200}, {5, 1000}, {17, 33}};
    for (size_t f = 0; f < 3; f++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            size_t rows = shapes[s][0], k = shapes[s][1];
            float *x = random_matrix(rows, k, 100 + s);
            lt_operand o;
            lt_operand_make(&o, fmts[f], x, rows, k);
            size_t C = o.l.scale_cols;
            qs_error err = {0};
            uint8_t *sw = malloc(o.l.scale_bytes);
            uint8_t *by_spec = calloc(1, o.l.scale_bytes);
            assert_non_null(sw);
            assert_non_null(by_spec);
            assert_int_equal(qk_swizzle_128x4(o.p.scales, rows, C, sw, o.l.scale_bytes, &err),
                             QS_OK);
            assert_memory_equal(o.scales, sw, o.l.scale_bytes);
            for (size_t r = 0; r < rows; r++)
                for (size_t c = 0; c < C; c++)
                    by_spec[spec_offset(r, c, C)] = o.p.scales[r * C + c];
            assert_memory_equal(o.scales, by_spec, o.l.scale_bytes);
            /* padding: exactly scale_bytes - rows*C bytes are not a scale, all 0 */
            size_t nonzero = 0;
            for (size_t i = 0; i < o.l.scale_bytes; i++)
                nonzero += o.scales[i] != 0;
            size_t nonzero_src = 0;
            for (size_t i = 0; i < rows * C; i++)
                nonzero_src += o.p.scales[i] != 0;
            assert_int_equal(nonzero, nonzero_src);
            float *y = malloc(rows * k * sizeof *y);
            assert_non_null(y);
            assert_int_equal(qk_dequantize(&o.p, y, 1, &err), QS_OK);
            for (size_t r = 0; r < rows; r++) {
                for (size_t c = 0; c < o.l.k_pad; c++) {
                    uint8_t b = o.codes[r * o.l.ld_bytes + c / 2];
                    unsigned code = (c & 1) ? b >> 4 : b & 0xFu;
                    float e = qk_lt_element(&o.l, o.codes, o.scales, r, c);
                    if (c >= k) {
                        assert_int_equal(code, 0);
                        assert_true(e == 0.0f);
                        continue;
                    }
                    uint8_t pb = o.p.codes[r * o.p.row_bytes + c / 2];
                    assert_int_equal(code, (c & 1) ? pb >> 4 : pb & 0xFu);
                    float v = e * o.p.tensor_scale;
                    assert_memory_equal(&v, &y[r * k + c], sizeof v);
                }
            }
            free(y);
            free(sw);
            free(by_spec);
            lt_operand_free(&o);
            free(x);
        }
}

/* docs/numerics.md 4.5: e2m1 x UE4M3 and e2m1 x UE8M0 are exact in BF16, for every code pair
 * (UE8M0 up to 252, the largest scale qk_mx_scale_code gives E2M1: no block decodes to Inf). */
static void dequantized_elements_are_exact_in_bf16(void **state) {
    (void)state;
    qk_lt_layout nv, mx;
    qs_error err = {0};
    assert_int_equal(qk_lt_layout_init(qk_format_by_name("nvfp4"), 1, 16, &nv, &err), QS_OK);
    assert_int_equal(qk_lt_layout_init(qk_format_by_name("mxfp4"), 1, 32, &mx, &err), QS_OK);
    uint8_t codes[64] = {0}, scales[512] = {0};
    for (unsigned sc = 0; sc <= 252; sc++)
        for (unsigned code = 0; code < 16; code++) {
            codes[0] = (uint8_t)code;
            scales[0] = (uint8_t)sc;
            for (int m = 0; m < 2; m++) {
                const qk_lt_layout *l = m ? &mx : &nv;
                if (!m && sc > 0x7E) continue; /* UE4M3: 0x7F is NaN, never written */
                float e = qk_lt_element(l, codes, scales, 0, 0);
                uint32_t bits;
                memcpy(&bits, &e, sizeof bits);
                assert_int_equal(bits & 0xFFFFu, 0);
                assert_int_equal(qk_lt_element_bf16(l, codes, scales, 0, 0), bits >> 16);
                assert_true(isfinite(e));
            }
        }
    scales[0] = 0xFF; /* E8M0 NaN scale: the block is NaN */
    codes[0] = 2;
    assert_true(isnan(qk_lt_element(&mx, codes, scales, 0, 0)));
}

/* alpha = S_dec_A * S_dec_B with S_dec = 1 / S_enc, S_enc = 2688 / amax_t (docs/numerics.md 3.3,
 * TE), computed here from the spec's formula, for the scales qk_quantize stored. */
static void alpha_folds_the_spec_tensor_scales(void **state) {
    (void)state;
    static const float amaxes[] = {10.0f, 1.0f, 0.28f, 3e-3f, 448.0f, 1e5f, 0.2069f};
    const qk_format *nv = qk_format_by_name("nvfp4");
    for (size_t i = 0; i < sizeof amaxes / sizeof amaxes[0]; i++)
        for (size_t j = 0; j < sizeof amaxes / sizeof amaxes[0]; j++) {
            float xa[16] = {amaxes[i], -0.5f * amaxes[i]}, xb[16] = {0.25f * amaxes[j], amaxes[j]};
            qk_packed pa, pb;
            qs_error err = {0};
            assert_int_equal(qk_packed_init(&pa, nv, NULL, 1, 16, &err), QS_OK);
            assert_int_equal(qk_packed_init(&pb, nv, NULL, 1, 16, &err), QS_OK);
            assert_int_equal(qk_quantize(nv, NULL, xa, 1, 16, &pa, &err), QS_OK);
            assert_int_equal(qk_quantize(nv, NULL, xb, 1, 16, &pb, &err), QS_OK);
            volatile float enc_a = 2688.0f / amaxes[i], enc_b = 2688.0f / amaxes[j];
            volatile float dec_a = 1.0f / enc_a, dec_b = 1.0f / enc_b;
            assert_true(pa.tensor_scale == dec_a);
            assert_true(pb.tensor_scale == dec_b);
            float alpha;
            assert_int_equal(qk_lt_fold_alpha(1.0f, pa.tensor_scale, pa.tensor_scale_exp2,
                                              pb.tensor_scale, pb.tensor_scale_exp2, &alpha, &err),
                             QS_OK);
            volatile float want = dec_a * dec_b;
            assert_true(alpha == want);
            /* with a user alpha: one rounding of the exact triple product */
            assert_int_equal(qk_lt_fold_alpha(0.125f, dec_a, 0, dec_b, -3, &alpha, &err), QS_OK);
            assert_true(alpha == (float)((double)dec_a * (double)dec_b / 64.0));
            qk_packed_release(&pa);
            qk_packed_release(&pb);
        }
    /* MXFP4 and BF16 have no tensor scale: alpha unchanged */
    float alpha;
    qs_error err = {0};
    assert_int_equal(qk_lt_fold_alpha(0.7f, 1.0f, 0, 1.0f, 0, &alpha, &err), QS_OK);
    assert_true(alpha == 0.7f);
    /* an all-zero tensor has S_enc = 1 (TE): alpha from scale 1 */
    assert_int_equal(qk_lt_fold_alpha(1.0f, 1.0f, 0, 0.5f, 0, &alpha, &err), QS_OK);
    assert_true(alpha == 0.5f);
}

static void alpha_refuses_what_fp32_cannot_carry(void **state) {
    (void)state;
    float alpha = 42.0f;
    qs_error err = {0};
    assert_int_equal(qk_lt_fold_alpha(1.0f, -1.0f, 0, 1.0f, 0, &alpha, &err), QS_EINVAL);
    assert_int_equal(qk_lt_fold_alpha(1.0f, NAN, 0, 1.0f, 0, &alpha, &err), QS_EINVAL);
    assert_int_equal(qk_lt_fold_alpha(1.0f, INFINITY, 0, 1.0f, 0, &alpha, &err), QS_EINVAL);
    assert_int_equal(qk_lt_fold_alpha(NAN, 1.0f, 0, 1.0f, 0, &alpha, &err), QS_EINVAL);
    assert_int_equal(qk_lt_fold_alpha(1.0f, 1.0f, 1, 1.0f, 0, &alpha, &err), QS_EINVAL);
    assert_int_equal(qk_lt_fold_alpha(1.0f, 1.0f, 0, 1.0f, -253, &alpha, &err), QS_EINVAL);
    assert_int_equal(qk_lt_fold_alpha(4.0f, FLT_MAX, 0, 1.0f, 0, &alpha, &err), QS_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "not an FP32 normal"));
    assert_int_equal(qk_lt_fold_alpha(1.0f, 1e-25f, 0, 1e-25f, 0, &alpha, &err), QS_EUNSUPPORTED);
    assert_int_equal(qk_lt_fold_alpha(1.0f, 0.5f, -120, 0.5f, -10, &alpha, &err), QS_EUNSUPPORTED);
    assert_true(alpha == 42.0f); /* unchanged on error */
    assert_int_equal(qk_lt_fold_alpha(1.0f, 0.0f, 0, 1e-30f, 0, &alpha, &err), QS_OK);
    assert_true(alpha == 0.0f);
    /* a tiny tensor under QK_TINY_EXACT: the exponent brings the product back into range */
    assert_int_equal(qk_lt_fold_alpha(1.0f, 0x1p-10f, -100, 0x1p+5f, 0, &alpha, &err), QS_OK);
    assert_true(alpha == 0x1p-105f);
}

/* The GEMM over the buffers (what cuBLASLt computes), with alpha folded, equals a double GEMM
 * of the CPU reference's dequantized x and W within FP32 rounding of the dequantized values. */
static void linear_ref_equals_gemm_of_cpu_dequantized_tensors(void **state) {
    (void)state;
    static const char *const fmts[] = {"nvfp4", "nvfp4_2d", "mxfp4"};
    const size_t T = 7, out = 33, in = 100;
    for (size_t f = 0; f < 3; f++) {
        float *x = random_matrix(T, in, 7), *w = random_matrix(out, in, 8);
        lt_operand ox, ow;
        lt_operand_make(&ox, fmts[f], x, T, in);
        lt_operand_make(&ow, fmts[f], w, out, in);
        float alpha;
        qs_error err = {0};
        assert_int_equal(
            qk_lt_fold_alpha(1.0f, ox.p.tensor_scale, 0, ow.p.tensor_scale, 0, &alpha, &err),
            QS_OK);
        float *y = malloc(T * (out + 3) * sizeof *y), *dx = malloc(T * in * sizeof *dx),
              *dw = malloc(out * in * sizeof *dw);
        assert_non_null(y);
        assert_non_null(dx);
        assert_non_null(dw);
        assert_int_equal(qk_lt_linear_ref(&ox.l, ox.codes, ox.scales, &ow.l, ow.codes, ow.scales,
                                          alpha, y, out + 3, &err),
                         QS_OK);
        assert_int_equal(qk_dequantize(&ox.p, dx, 1, &err), QS_OK);
        assert_int_equal(qk_dequantize(&ow.p, dw, 1, &err), QS_OK);
        double worst = 0.0;
        for (size_t t = 0; t < T; t++)
            for (size_t o = 0; o < out; o++) {
                double ref = 0.0, mag = 0.0;
                for (size_t c = 0; c < in; c++) {
                    ref += (double)dx[t * in + c] * dw[o * in + c];
                    mag += fabs((double)dx[t * in + c] * dw[o * in + c]);
                }
                double e = fabs((double)y[t * (out + 3) + o] - ref) / (mag > 0 ? mag : 1.0);
                worst = e > worst ? e : worst;
            }
        assert_true(worst < 4e-7); /* a few FP32 ulps of each dequantized product */
        assert_int_equal(qk_lt_linear_ref(&ox.l, ox.codes, ox.scales, &ow.l, ow.codes, ow.scales,
                                          alpha, y, out - 1, &err),
                         QS_EINVAL);
        free(y);
        free(dx);
        free(dw);
        lt_operand_free(&ox);
        lt_operand_free(&ow);
        free(x);
        free(w);
    }
}

/* A tiny tensor under QK_TINY_EXACT (quant.h): its decode scale is tensor_scale *
 * 2^tensor_scale_exp2, not an FP32 normal number alone; folded with exp2 into alpha, the GEMM
 * over the buffers equals the double GEMM of the CPU's dequantized tensors (the CPU applies
 * 2^exp2 per element, with one more rounding: within 1e-6 of sum |x w|). */
static void alpha_folds_the_exponent_of_tiny_tensors(void **state) {
    (void)state;
    const size_t T = 3, out = 5, in = 64;
    float *x = random_matrix(T, in, 17), *w = random_matrix(out, in, 18);
    for (size_t i = 0; i < T * in; i++)
        x[i] *= 0x1p-120f; /* amax_t ~ 2^-114: tiny */
    /* W large, so that S_dec_x * S_dec_w (~2^-130 * 2^94) is an FP32 normal alpha; a tiny x
     * with an ordinary W has no FP32 alpha (alpha_refuses_what_fp32_cannot_carry) */
    for (size_t i = 0; i < out * in; i++)
        w[i] *= 0x1p100f;
    const qk_format *nv = qk_format_by_name("nvfp4");
    qk_quant_options o = {0};
    o.tiny_amax = QK_TINY_EXACT;
    qk_packed px;
    qs_error err = {0};
    assert_int_equal(qk_packed_init(&px, nv, &o, T, in, &err), QS_OK);
    assert_int_equal(qk_quantize(nv, &o, x, T, in, &px, &err), QS_OK);
    assert_true(px.tensor_scale_exp2 < 0);
    lt_operand ow;
    lt_operand_make(&ow, "nvfp4", w, out, in);
    qk_lt_layout lx;
    assert_int_equal(qk_lt_layout_init(nv, T, in, &lx, &err), QS_OK);
    uint8_t *xc = malloc(lx.codes_bytes), *xs = malloc(lx.scale_bytes);
    assert_non_null(xc);
    assert_non_null(xs);
    assert_int_equal(qk_lt_pack(&px, &lx, xc, lx.codes_bytes, xs, lx.scale_bytes, &err), QS_OK);
    float alpha;
    if (qk_lt_fold_alpha(1.0f, px.tensor_scale, px.tensor_scale_exp2, ow.p.tensor_scale,
                         ow.p.tensor_scale_exp2, &alpha, &err) != QS_OK)
        fail_msg("%s", err.msg);
    float y[3 * 5], dx[3 * 64], dw[5 * 64];
    assert_int_equal(qk_lt_linear_ref(&lx, xc, xs, &ow.l, ow.codes, ow.scales, alpha, y, out, &err),
                     QS_OK);
    assert_int_equal(qk_dequantize(&px, dx, 1, &err), QS_OK);
    assert_int_equal(qk_dequantize(&ow.p, dw, 1, &err), QS_OK);
    for (size_t t = 0; t < T; t++)
        for (size_t c = 0; c < out; c++) {
            double ref = 0, mag = 0;
            for (size_t i = 0; i < in; i++) {
                ref += (double)dx[t * in + i] * dw[c * in + i];
                mag += fabs((double)dx[t * in + i] * dw[c * in + i]);
            }
            assert_true(mag > 0);
            assert_true(fabs(y[t * out + c] - ref) <= 1e-6 * mag);
        }
    free(xc);
    free(xs);
    qk_packed_release(&px);
    lt_operand_free(&ow);
    free(x);
    free(w);
}

static void pack_refuses_mismatched_layouts_and_short_buffers(void **state) {
    (void)state;
    float x[64 * 3];
    for (size_t i = 0; i < 64 * 3; i++)
        x[i] = (float)i - 90.0f;
    lt_operand o;
    lt_operand_make(&o, "nvfp4", x, 3, 64);
    qk_lt_layout other;
    qs_error err = {0};
    assert_int_equal(qk_lt_layout_init(qk_format_by_name("mxfp4"), 3, 64, &other, &err), QS_OK);
    assert_int_equal(
        qk_lt_pack(&o.p, &other, o.codes, o.l.codes_bytes, o.scales, o.l.scale_bytes, &err),
        QS_EINVAL);
    assert_non_null(strstr(err.msg, "does not match"));
    assert_int_equal(
        qk_lt_pack(&o.p, &o.l, o.codes, o.l.codes_bytes - 1, o.scales, o.l.scale_bytes, &err),
        QS_EINVAL);
    assert_int_equal(
        qk_lt_pack(&o.p, &o.l, o.codes, o.l.codes_bytes, o.scales, o.l.scale_bytes - 1, &err),
        QS_EINVAL);
    assert_int_equal(qk_lt_pack(&o.p, &o.l, NULL, 0, o.scales, o.l.scale_bytes, &err), QS_EINVAL);
    lt_operand_free(&o);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(layout_pads_k_to_four_scale_blocks_and_rows_to_128),
        cmocka_unit_test(layout_refuses_formats_without_a_block_scaled_fp4_gemm),
        cmocka_unit_test(spec_worked_example_packs_byte_for_byte),
        cmocka_unit_test(packed_buffers_equal_the_cpu_reference_for_ragged_shapes),
        cmocka_unit_test(dequantized_elements_are_exact_in_bf16),
        cmocka_unit_test(alpha_folds_the_spec_tensor_scales),
        cmocka_unit_test(alpha_refuses_what_fp32_cannot_carry),
        cmocka_unit_test(linear_ref_equals_gemm_of_cpu_dequantized_tensors),
        cmocka_unit_test(alpha_folds_the_exponent_of_tiny_tensors),
        cmocka_unit_test(pack_refuses_mismatched_layouts_and_short_buffers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
