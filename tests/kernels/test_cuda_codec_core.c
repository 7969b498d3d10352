/* kernels_cuda_codec_core (CPU): the __host__ __device__ functions of kernels/cuda/codec_core.h,
 * which the generic GPU quantizer runs, checked on the host against the CPU reference itself:
 * - qk_codec_decode_hd == qk_codec_decode for every code of every element codec;
 * - qk_codec_encode_hd == qk_codec_encode for edges and random FP32 bit patterns, RNE/RZ/SR;
 * - the generic kernel's algorithm (tensor amax, block amax by bits, per-element scale from the
 *   block amax, qk_fake_quant_element_hd), run here on the CPU, equals qk_fake_quant bit for
 *   bit (NaN payloads aside) for every format, rounding, MX rule, NVFP4 clamp, group size and a
 *   given tensor amax, on ragged shapes holding NaN, +-Inf, -0 and subnormals.
 * - the packed kernel's algorithm (quantize_lt.cu: block amax, qk_scale_for_hd, E2M1 codes by
 *   qk_codec_encode_hd, cuBLASLt layout by qk_lt_scale_offset), run here on the CPU, equals
 *   qk_quantize + qk_lt_pack byte for byte (nvfp4, nvfp4_2d, mxfp4; RNE/RZ/SR, rules, clamps,
 *   a given amax).
 * The device side then only adds the CUDA plumbing, which kernels_cuda_formats and
 * kernels_cuda_gemm (label gpu) check where a GPU exists. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "codec_core.h"
#include "cuda_test_util.h"
#include "cublaslt_layout.h"
#include "element.h"
#include "format.h"
#include "philox.h"
#include "quant.h"

static int same_value(float a, float b) {
    return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0;
}

static const qk_codec *const codecs[] = {&qk_codec_e2m1, &qk_codec_e4m3, &qk_codec_e5m2,
                                         &qk_codec_e2m3, &qk_codec_e3m2, &qk_codec_bf16,
                                         &qk_codec_fp16, &qk_codec_int8, &qk_codec_int4};

static void decode_hd_equals_codec_decode_for_every_code(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof codecs / sizeof codecs[0]; i++)
        for (uint32_t code = 0; code < (1u << codecs[i]->bits); code++)
            assert_true(
                same_value(qk_codec_decode_hd(codecs[i], code), qk_codec_decode(codecs[i], code)));
}

static void encode_hd_equals_codec_encode(void **state) {
    (void)state;
    static const float edges[] = {
        0.0f,   -0.0f,  0.25f,    0.75f, 1.25f,   2.5f,    5.0f,     6.0f,      7.5f,    28.0f,
        448.0f, 464.0f, 57344.0f, 1e9f,  3e-42f,  1e-30f,  0.5f,     127.5f,    -127.5f, 126.5f,
        7.5f,   -7.49f, 3.5f,     -2.5f, FLT_MAX, FLT_MIN, INFINITY, -INFINITY, NAN};
    static const qk_rounding rnd[] = {QK_ROUND_RNE, QK_ROUND_RZ, QK_ROUND_SR};
    for (size_t i = 0; i < sizeof codecs / sizeof codecs[0]; i++)
        for (size_t r = 0; r < 3; r++) {
            for (size_t e = 0; e < sizeof edges / sizeof edges[0]; e++)
                for (uint32_t rb = 0; rb < 4; rb++) {
                    uint32_t bits = rb * 0x55555555u;
                    assert_int_equal(qk_codec_encode_hd(codecs[i], edges[e], rnd[r], bits),
                                     qk_codec_encode(codecs[i], edges[e], rnd[r], bits));
                    assert_int_equal(qk_codec_encode_hd(codecs[i], -edges[e], rnd[r], bits),
                                     qk_codec_encode(codecs[i], -edges[e], rnd[r], bits));
                }
            for (uint64_t n = 0; n < (1u << 16); n++) {
                uint32_t u = qk_sr_bits(99, (uint32_t)i, (uint32_t)r, n);
                uint32_t rb = qk_sr_bits(98, (uint32_t)i, (uint32_t)r, n);
                /* exponents spread around each codec's range: scale a [1, 2) significand */
                float x;
                uint32_t pat = (u & 0x807FFFFFu) | ((uint32_t)(100 + (u >> 23) % 56) << 23);
                memcpy(&x, &pat, sizeof x);
                assert_int_equal(qk_codec_encode_hd(codecs[i], x, rnd[r], rb),
                                 qk_codec_encode(codecs[i], x, rnd[r], rb));
                memcpy(&x, &u, sizeof x); /* and raw bit patterns */
                assert_int_equal(qk_codec_encode_hd(codecs[i], x, rnd[r], rb),
                                 qk_codec_encode(codecs[i], x, rnd[r], rb));
            }
        }
}

/* The generic device algorithm of fake_quant_generic.cu, on the host. */
static void generic_fake_quant_host(const qk_format *fmt, const qk_quant_options *opt, float *x,
                                    size_t rows, size_t k) {
    size_t block = fmt->block == 0                              ? k
                   : (fmt->group_option && opt->group_size > 0) ? (size_t)opt->group_size
                                                                : (size_t)fmt->block;
    size_t nblk = (k + block - 1) / block, brows = (size_t)fmt->block_rows;
    size_t ngroups = (rows + brows - 1) / brows;
    qk_format f = *fmt;
    qk_codec elem = *fmt->elem;
    uint32_t tbits = 0;
    for (size_t i = 0; i < rows * k; i++) {
        uint32_t b = qk_bits_of(x[i]) & 0x7FFFFFFFu;
        if (b < 0x7F800000u && b > tbits) tbits = b;
    }
    float s_enc = 1.0f, s_dec = 1.0f;
    if (f.tensor_scale)
        qk_tensor_scales_hd(&f, &elem,
                            opt->tensor_amax_given ? opt->tensor_amax : qk_float_of(tbits), &s_enc,
                            &s_dec);
    float *amax = calloc(ngroups * nblk, sizeof *amax);
    assert_non_null(amax);
    for (size_t w = 0; w < ngroups * nblk; w++) {
        size_t g = w / nblk, b = w % nblk, r0 = g * brows, c0 = b * block;
        size_t h = rows - r0 < brows ? rows - r0 : brows, n = k - c0 < block ? k - c0 : block;
        uint32_t m = 0, nonfinite = 0;
        for (size_t i = 0; i < h * n; i++) {
            uint32_t bits = qk_bits_of(x[(r0 + i / n) * k + c0 + i % n]) & 0x7FFFFFFFu;
            if (bits >= 0x7F800000u)
                nonfinite = 1;
            else if (bits > m)
                m = bits;
        }
        amax[w] = (f.rule == QK_RULE_MX && nonfinite) ? NAN : qk_float_of(m);
    }
    for (size_t i = 0; i < rows * k; i++) {
        size_t r = i / k, c = i % k;
        float a = f.rule == QK_RULE_TENSOR ? 0.0f : amax[(r / brows) * nblk + c / block];
        qk_block_scale_hd bs =
            qk_scale_for_hd(&f, &elem, opt->mx_rule, opt->nvfp4_clamp, s_enc, s_dec, a);
        uint32_t rb = opt->rounding == QK_ROUND_SR
                          ? qk_sr_bits_core(opt->seed, opt->tensor_id, opt->step, i)
                          : 0;
        x[i] = qk_fake_quant_element_hd(&f, &elem, &bs, s_dec, x[i], opt->rounding, rb);
    }
    free(amax);
}

static void check_case(const qk_format *fmt, const qk_quant_options *opt, size_t rows, size_t k,
                       uint64_t seed) {
    float *a = qkt_random_matrix(rows, k, seed, 3.0f, 300.0f, QKT_SPECIALS),
          *b = malloc(rows * k * sizeof *b);
    assert_non_null(b);
    memcpy(b, a, rows * k * sizeof *a);
    qs_error err = {0};
    assert_int_equal(qk_fake_quant(fmt, opt, a, rows, k, NULL, &err), QS_OK);
    generic_fake_quant_host(fmt, opt, b, rows, k);
    for (size_t i = 0; i < rows * k; i++)
        if (!same_value(a[i], b[i]))
            fail_msg("%s rounding %d rule %d clamp %d group %d: element %zu: cpu %a, generic %a",
                     fmt->name, (int)opt->rounding, (int)opt->mx_rule, (int)opt->nvfp4_clamp,
                     opt->group_size, i, (double)a[i], (double)b[i]);
    free(a);
    free(b);
}

/* The shape under test and its index, for one_variant. */
typedef struct {
    size_t rows, k, s;
} shape_ctx;

static void one_variant(void *ctx, const qk_format *fmt, const qk_quant_options *o, qkt_variant v,
                        const char *label) {
    (void)label;
    const shape_ctx *c = ctx;
    check_case(fmt, o, c->rows, c->k, 40 + 10 * (uint64_t)v + c->s);
}

static void generic_algorithm_equals_fake_quant_for_every_format(void **state) {
    (void)state;
    static const size_t shapes[][2] = {{33, 172}, {17, 48}, {5, 1001}, {40, 256}};
    static const qk_rounding rnd[] = {QK_ROUND_RNE, QK_ROUND_RZ, QK_ROUND_SR};
    for (size_t f = 0; f < qk_format_count(); f++) {
        const qk_format *fmt = qk_format_at(f);
        if (fmt->rule == QK_RULE_IDENTITY) continue;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (size_t r = 0; r < 3; r++) {
                qk_quant_options o = {0};
                o.rounding = rnd[r];
                o.seed = 0xABCDEF0123ull;
                o.tensor_id = 5;
                o.step = 9;
                o.threads = 1;
                shape_ctx c = {shapes[s][0], shapes[s][1], s};
                qkt_for_each_variant(fmt, &o, one_variant, &c);
            }
    }
}

/* The algorithm of quantize_lt.cu's kernel, on the host: codes and scales into layout l. */
static void packed_lt_host(const qk_format *fmt, const qk_quant_options *opt, const float *x,
                           size_t rows, size_t k, const qk_lt_layout *l, uint8_t *codes,
                           uint8_t *scales) {
    qk_format f = *fmt;
    qk_codec elem = *fmt->elem;
    size_t B = l->vec, brows = (size_t)fmt->block_rows;
    float s_enc = 1.0f, s_dec = 1.0f;
    if (f.rule == QK_RULE_NVFP4) {
        uint32_t tbits = 0;
        for (size_t i = 0; i < rows * k; i++) {
            uint32_t b = qk_bits_of(x[i]) & 0x7FFFFFFFu;
            if (b < 0x7F800000u && b > tbits) tbits = b;
        }
        qk_nvfp4_global_scales_core(opt->tensor_amax_given ? opt->tensor_amax : qk_float_of(tbits),
                                    &s_enc, &s_dec);
    }
    memset(codes, 0xAB, l->codes_bytes);
    memset(scales, 0, l->scale_bytes); /* the kernel's memset covers only padding rows */
    for (size_t r0 = 0; r0 < rows; r0 += brows) {
        size_t h = rows - r0 < brows ? rows - r0 : brows;
        for (size_t blk = 0; blk < l->k_pad / B; blk++) {
            size_t c0 = blk * B;
            int pad = c0 >= k;
            uint32_t m = 0, any = 0;
            for (size_t r = r0; r < r0 + h; r++)
                for (size_t c = c0; c < c0 + B && c < k; c++) {
                    uint32_t b = qk_bits_of(x[r * k + c]) & 0x7FFFFFFFu;
                    if (b < 0x7F800000u && b > m) m = b;
                    if (b > any) any = b;
                }
            uint8_t code_s = 0;
            float enc = 1.0f;
            if (!pad) {
                float amax = (f.rule == QK_RULE_MX && any >= 0x7F800000u) ? NAN : qk_float_of(m);
                qk_block_scale_hd bs =
                    qk_scale_for_hd(&f, &elem, opt->mx_rule, opt->nvfp4_clamp, s_enc, s_dec, amax);
                code_s = (uint8_t)bs.code;
                enc = bs.enc;
            }
            for (size_t r = r0; r < r0 + h; r++) {
                for (size_t c = c0; c < c0 + B; c += 2) {
                    uint32_t lo = 0, hi = 0;
                    if (!pad && c < k) {
                        size_t i = r * k + c;
                        uint32_t rb = opt->rounding == QK_ROUND_SR
                                          ? qk_sr_bits_core(opt->seed, opt->tensor_id, opt->step, i)
                                          : 0;
                        lo = qk_codec_encode_hd(&elem, x[i] * enc, opt->rounding, rb);
                    }
                    if (!pad && c + 1 < k) {
                        size_t i = r * k + c + 1;
                        uint32_t rb = opt->rounding == QK_ROUND_SR
                                          ? qk_sr_bits_core(opt->seed, opt->tensor_id, opt->step, i)
                                          : 0;
                        hi = qk_codec_encode_hd(&elem, x[i] * enc, opt->rounding, rb);
                    }
                    codes[r * l->ld_bytes + c / 2] = (uint8_t)(lo | (hi << 4));
                }
                scales[qk_lt_scale_offset(r, blk, l->scale_cols)] = code_s;
            }
        }
    }
}

static void packed_case(const char *name, const qk_quant_options *opt, size_t rows, size_t k,
                        uint64_t seed) {
    const qk_format *fmt = qk_format_by_name(name);
    float *x = qkt_random_matrix(rows, k, seed, 3.0f, 300.0f, QKT_SPECIALS);
    qk_lt_layout l;
    qk_packed p;
    qs_error err = {0};
    assert_int_equal(qk_lt_layout_init(fmt, rows, k, &l, &err), QS_OK);
    assert_int_equal(qk_packed_init(&p, fmt, opt, rows, k, &err), QS_OK);
    assert_int_equal(qk_quantize(fmt, opt, x, rows, k, &p, &err), QS_OK);
    uint8_t *c1 = malloc(l.codes_bytes), *s1 = malloc(l.scale_bytes);
    uint8_t *c2 = malloc(l.codes_bytes), *s2 = malloc(l.scale_bytes);
    assert_non_null(c1);
    assert_non_null(s1);
    assert_non_null(c2);
    assert_non_null(s2);
    assert_int_equal(qk_lt_pack(&p, &l, c1, l.codes_bytes, s1, l.scale_bytes, &err), QS_OK);
    packed_lt_host(fmt, opt, x, rows, k, &l, c2, s2);
    if (memcmp(c1, c2, l.codes_bytes) || memcmp(s1, s2, l.scale_bytes))
        fail_msg("%s rounding %d rule %d clamp %d amax_given %d [%zu x %zu]: bytes differ", name,
                 (int)opt->rounding, (int)opt->mx_rule, (int)opt->nvfp4_clamp,
                 opt->tensor_amax_given, rows, k);
    qk_packed_release(&p);
    free(c1);
    free(s1);
    free(c2);
    free(s2);
    free(x);
}

static void packed_algorithm_equals_quantize_and_lt_pack(void **state) {
    (void)state;
    static const char *const names[] = {"nvfp4", "nvfp4_2d", "mxfp4"};
    static const size_t shapes[][2] = {{1, 16}, {33, 48}, {130, 100}, {17, 1001}, {40, 256}};
    static const qk_rounding rnd[] = {QK_ROUND_RNE, QK_ROUND_RZ, QK_ROUND_SR};
    for (size_t f = 0; f < 3; f++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (size_t r = 0; r < 3; r++) {
                qk_quant_options o = {0};
                o.rounding = rnd[r];
                o.seed = 77;
                o.tensor_id = 2;
                o.step = 1;
                packed_case(names[f], &o, shapes[s][0], shapes[s][1], 90 + s);
                if (f == 2)
                    for (int rule = QK_MX_FLOOR; rule <= QK_MX_EVEN; rule++) {
                        o.mx_rule = (qk_mx_scale_rule)rule;
                        packed_case(names[f], &o, shapes[s][0], shapes[s][1], 95 + s);
                    }
                o.mx_rule = QK_MX_RCEIL;
                if (f < 2) {
                    for (int c = QK_NVFP4_CLAMP_TORCHAO; c <= QK_NVFP4_CLAMP_ZERO_TO_ONE; c++) {
                        o.nvfp4_clamp = (qk_nvfp4_clamp)c;
                        packed_case(names[f], &o, shapes[s][0], shapes[s][1], 99 + s);
                    }
                    o.nvfp4_clamp = QK_NVFP4_CLAMP_NONE;
                    o.tensor_amax_given = 1;
                    o.tensor_amax = 2.5f;
                    packed_case(names[f], &o, shapes[s][0], shapes[s][1], 103 + s);
                }
            }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(decode_hd_equals_codec_decode_for_every_code),
        cmocka_unit_test(encode_hd_equals_codec_encode),
        cmocka_unit_test(generic_algorithm_equals_fake_quant_for_every_format),
        cmocka_unit_test(packed_algorithm_equals_quantize_and_lt_pack),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
