/* kernels_cuda_codec_core (CPU): the __host__ __device__ functions of kernels/cuda/codec_core.h,
 * which the generic GPU quantizer runs, checked on the host against the CPU reference itself:
 * - qk_codec_decode_hd == qk_codec_decode for every code of every element codec;
 * - qk_codec_encode_hd == qk_codec_encode for edges and random FP32 bit patterns, RNE/RZ/SR;
 * - the generic kernel's algorithm (tensor amax, block amax by bits, per-element scale from the
 *   block amax, qk_fake_quant_element_hd), run here on the CPU, equals qk_fake_quant bit for
 *   bit (NaN payloads aside) for every format, rounding, MX rule, NVFP4 clamp, group size and a
 *   given tensor amax, on ragged shapes holding NaN, +-Inf, -0 and subnormals.
 * The device side then only adds the CUDA plumbing, which kernels_cuda_formats (label gpu)
 * checks where a GPU exists. */
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

static float *make_matrix(size_t rows, size_t k, uint64_t seed) {
    float *x = malloc(rows * k * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < rows * k; i++) {
        uint32_t a = qk_sr_bits(seed, 0, 0, 2 * i), b = qk_sr_bits(seed, 0, 0, 2 * i + 1);
        float g = (float)(a * 0x1p-32 * 2.0 - 1.0) * ((b % 97 == 0) ? 300.0f : 3.0f);
        switch (b % 997) {
        case 1:
            g = NAN;
            break;
        case 2:
            g = INFINITY;
            break;
        case 3:
            g = -INFINITY;
            break;
        case 4:
            g = -0.0f;
            break;
        case 5:
            g = 3e-42f;
            break;
        default:
            break;
        }
        if ((b >> 16) % 61 == 0) g *= 1e-30f;
        x[i] = g;
    }
    return x;
}

static void check_case(const qk_format *fmt, const qk_quant_options *opt, size_t rows, size_t k,
                       uint64_t seed) {
    float *a = make_matrix(rows, k, seed), *b = malloc(rows * k * sizeof *b);
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
                check_case(fmt, &o, shapes[s][0], shapes[s][1], 40 + s);
                if (fmt->rule == QK_RULE_MX)
                    for (int rule = QK_MX_FLOOR; rule <= QK_MX_EVEN; rule++) {
                        o.mx_rule = (qk_mx_scale_rule)rule;
                        check_case(fmt, &o, shapes[s][0], shapes[s][1], 50 + s);
                    }
                o.mx_rule = QK_MX_RCEIL;
                if (fmt->rule == QK_RULE_NVFP4)
                    for (int c = QK_NVFP4_CLAMP_TORCHAO; c <= QK_NVFP4_CLAMP_ZERO_TO_ONE; c++) {
                        o.nvfp4_clamp = (qk_nvfp4_clamp)c;
                        check_case(fmt, &o, shapes[s][0], shapes[s][1], 60 + s);
                    }
                o.nvfp4_clamp = QK_NVFP4_CLAMP_NONE;
                if (fmt->group_option) {
                    o.group_size = 32;
                    check_case(fmt, &o, shapes[s][0], shapes[s][1], 70 + s);
                    o.group_size = 0;
                }
                if (fmt->tensor_scale) {
                    o.tensor_amax_given = 1;
                    o.tensor_amax = 2.5f; /* elements above it saturate */
                    check_case(fmt, &o, shapes[s][0], shapes[s][1], 80 + s);
                }
            }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(decode_hd_equals_codec_decode_for_every_code),
        cmocka_unit_test(encode_hd_equals_codec_encode),
        cmocka_unit_test(generic_algorithm_equals_fake_quant_for_every_format),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
