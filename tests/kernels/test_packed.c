/* The packed path (qk_quantize) and the chunked one (qk_quantize_rows): codes, block scales
 * and tensor scales bit-identical to the scalar reference, for every format the numeric core
 * packs, every rounding and option, NaN/Inf/-0/subnormal inputs, ragged and odd k, several
 * overall scales, any thread count; the chunked path over chunks of any size and order equal
 * to the one-shot call; and the chunked path's refusals. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "format.h"
#include "philox.h"
#include "quant.h"

/* Deterministic [rows x k] matrix: N(0,1)-like values, outliers, zeros, and (specials) NaN,
 * +-Inf, -0 and FP32 subnormals, all times 2^scale_exp. */
static float *make_matrix(size_t rows, size_t k, uint64_t seed, int specials, int scale_exp) {
    float *x = malloc(rows * k * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < rows * k; i++) {
        uint32_t r0 = qk_sr_bits(seed, 0, 0, 4 * i), r1 = qk_sr_bits(seed, 0, 0, 4 * i + 1);
        uint32_t r2 = qk_sr_bits(seed, 0, 0, 4 * i + 2), r3 = qk_sr_bits(seed, 0, 0, 4 * i + 3);
        float g = (float)((r0 * 0x1p-32 + r1 * 0x1p-32 + r2 * 0x1p-32) - 1.5) * 2.0f;
        if (r3 % 97 == 0) g *= 40.0f;
        if (r3 % 89 == 1) g = 0.0f;
        if (r3 % 83 == 2) g = -g * 0x1p-20f; /* tiny values that round to (-)0 */
        g = ldexpf(g, scale_exp);
        if (specials) {
            switch (r3 % 499) {
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
            case 8:
                g = -3e-39f;
                break;
            default:
                break;
            }
        }
        x[i] = g;
    }
    return x;
}

/* Packed tensors a and b hold the same bits: shape, codes, block scales, tensor scale. */
static void assert_packed_equal(const qk_packed *a, const qk_packed *b, const char *what) {
    assert_int_equal(a->rows, b->rows);
    assert_int_equal(a->k, b->k);
    assert_int_equal(a->blocks_per_row, b->blocks_per_row);
    for (size_t i = 0; i < a->rows * a->row_bytes; i++)
        if (a->codes[i] != b->codes[i])
            fail_msg("%s: code byte %zu (row %zu): %02x vs %02x", what, i, i / a->row_bytes,
                     a->codes[i], b->codes[i]);
    size_t ns = a->rows * a->blocks_per_row;
    assert_true((a->scales == NULL) == (b->scales == NULL));
    assert_true((a->scales_f32 == NULL) == (b->scales_f32 == NULL));
    if (a->scales)
        for (size_t i = 0; i < ns; i++)
            if (a->scales[i] != b->scales[i])
                fail_msg("%s: scale %zu: %02x vs %02x", what, i, a->scales[i], b->scales[i]);
    if (a->scales_f32 && memcmp(a->scales_f32, b->scales_f32, ns * sizeof(float)) != 0)
        fail_msg("%s: FP32 block scales differ", what);
    if (memcmp(&a->tensor_scale, &b->tensor_scale, sizeof(float)) != 0 ||
        memcmp(&a->tensor_amax, &b->tensor_amax, sizeof(float)) != 0 ||
        a->tensor_scale_exp2 != b->tensor_scale_exp2)
        fail_msg("%s: tensor scales differ: %a/%a/%d vs %a/%a/%d", what, (double)a->tensor_scale,
                 (double)a->tensor_amax, a->tensor_scale_exp2, (double)b->tensor_scale,
                 (double)b->tensor_amax, b->tensor_scale_exp2);
}

/* Option sets to try on a format: every rounding, and the format's own options (MX rules,
 * NVFP4 clamps, tiny-amax choice, INT4 group sizes). Returns how many it wrote (<= 16). */
static int option_sets(const qk_format *f, qk_quant_options *o) {
    int n = 0;
    for (int rnd = QK_ROUND_RNE; rnd <= QK_ROUND_SR; rnd++)
        o[n++] =
            (qk_quant_options){.rounding = (qk_rounding)rnd, .seed = 77, .tensor_id = 5, .step = 3};
    if (f->rule == QK_RULE_MX)
        for (int r = QK_MX_FLOOR; r <= QK_MX_EVEN; r++)
            o[n++] = (qk_quant_options){.mx_rule = (qk_mx_scale_rule)r};
    if (f->rule == QK_RULE_NVFP4)
        for (int c = QK_NVFP4_CLAMP_TORCHAO; c <= QK_NVFP4_CLAMP_ZERO_TO_ONE; c++)
            o[n++] = (qk_quant_options){.nvfp4_clamp = (qk_nvfp4_clamp)c};
    if (f->tensor_scale) {
        o[n++] = (qk_quant_options){.tiny_amax = QK_TINY_EXACT};
        o[n++] = (qk_quant_options){.tensor_amax_given = 1, .tensor_amax = 1.5f};
    }
    if (f->group_option) {
        o[n++] = (qk_quant_options){.group_size = 32};
        o[n++] = (qk_quant_options){.group_size = 48, .rounding = QK_ROUND_SR, .seed = 4};
    }
    return n;
}

/* qk_quantize's fast paths against reference_only: the same codes, scales and tensor scales
 * for every packed format and option set, shapes with k below, at and above a 16-block batch,
 * ragged and odd k, rows not a multiple of 16, overall scales 2^-130 (tiny tensors) to 2^60,
 * specials in the data, 1 and 3 threads. */
static void packed_fast_path_matches_reference(void **state) {
    (void)state;
    const size_t shapes[][2] = {{3, 255}, {17, 256}, {5, 701}, {2, 4096 + 48}, {33, 31}, {1, 1}};
    const int scales[] = {-130, -60, 0, 60};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        size_t rows = shapes[s][0], k = shapes[s][1];
        for (size_t si = 0; si < sizeof scales / sizeof scales[0]; si++) {
            float *x = make_matrix(rows, k, 100 + s, si != 0, scales[si]);
            for (size_t fi = 0; fi < qk_format_count(); fi++) {
                const qk_format *f = qk_format_at(fi);
                if (f->rule == QK_RULE_IDENTITY) continue;
                qk_quant_options os[16];
                int no = option_sets(f, os);
                for (int oi = 0; oi < no; oi++) {
                    qk_quant_options o = os[oi];
                    o.threads = 1 + 2 * (int)((s + si + (size_t)oi) % 2);
                    qk_packed ref, fast;
                    qs_error err = {0};
                    assert_int_equal(qk_packed_init(&ref, f, &o, rows, k, &err), QS_OK);
                    assert_int_equal(qk_packed_init(&fast, f, &o, rows, k, &err), QS_OK);
                    memset(fast.storage_, 0xA5, fast.row_bytes * rows); /* every byte written */
                    o.reference_only = 1;
                    assert_int_equal(qk_quantize(f, &o, x, rows, k, &ref, &err), QS_OK);
                    o.reference_only = 0;
                    assert_int_equal(qk_quantize(f, &o, x, rows, k, &fast, &err), QS_OK);
                    char what[160];
                    snprintf(what, sizeof what, "%s options %d [%zu x %zu] scale 2^%d", f->name, oi,
                             rows, k, scales[si]);
                    assert_packed_equal(&ref, &fast, what);
                    qk_packed_release(&ref);
                    qk_packed_release(&fast);
                }
            }
            free(x);
        }
    }
}

/* qk_quantize_rows over chunks equals one qk_quantize of the whole tensor (own amax), bit for
 * bit, for every packed format and option set: the tensor amax from qk_joint_amax over the
 * chunks (first pass), then the chunks quantized in reverse order (second pass), with chunk
 * heights 1, 16, 48 and 7 (not a multiple of 16: refused for nvfp4_2d, which gets 16s
 * instead) and a short last chunk; SR streams indexed by the global element. Also through the
 * reference path (reference_only). */
static void chunked_case(int scale_exp) {
    const size_t rows = 83, k = 200;
    const size_t heights[] = {1, 16, 48, 7};
    float *x = make_matrix(rows, k, 9, 1, scale_exp);
    for (size_t fi = 0; fi < qk_format_count(); fi++) {
        const qk_format *f = qk_format_at(fi);
        if (f->rule == QK_RULE_IDENTITY) continue;
        qk_quant_options os[16];
        int no = option_sets(f, os);
        for (int oi = 0; oi < no; oi++)
            for (int refonly = 0; refonly < 2; refonly++)
                for (size_t hi = 0; hi < sizeof heights / sizeof heights[0]; hi++) {
                    qk_quant_options o = os[oi];
                    o.reference_only = refonly;
                    size_t h = heights[hi];
                    if (f->block_rows > 1 && h % (size_t)f->block_rows) h = 16;
                    qk_packed one, chunked;
                    qs_error err = {0};
                    assert_int_equal(qk_packed_init(&one, f, &o, rows, k, &err), QS_OK);
                    assert_int_equal(qk_quantize(f, &o, x, rows, k, &one, &err), QS_OK);
                    if (scale_exp < -120 && o.tiny_amax == QK_TINY_EXACT) /* really tiny */
                        assert_true(one.tensor_scale_exp2 < 0);
                    assert_int_equal(qk_packed_init(&chunked, f, &o, rows, k, &err), QS_OK);
                    qk_quant_options oc = o;
                    if (f->tensor_scale && !o.tensor_amax_given) {
                        size_t nch = (rows + h - 1) / h;
                        const float **ptr = malloc(nch * sizeof *ptr);
                        size_t *len = malloc(nch * sizeof *len);
                        assert_non_null(ptr);
                        assert_non_null(len);
                        for (size_t c = 0; c < nch; c++) {
                            ptr[c] = x + c * h * k;
                            len[c] = (rows - c * h < h ? rows - c * h : h) * k;
                        }
                        oc.tensor_amax_given = 1;
                        assert_int_equal(qk_joint_amax(ptr, len, nch, 2, &oc.tensor_amax, &err),
                                         QS_OK);
                        free(ptr);
                        free(len);
                    }
                    size_t nch = (rows + h - 1) / h;
                    for (size_t c = nch; c-- > 0;) {
                        size_t r0 = c * h, n = rows - r0 < h ? rows - r0 : h;
                        /* the chunk in a buffer of its own, as a caller converting it has */
                        float *chunk = malloc(n * k * sizeof *chunk);
                        assert_non_null(chunk);
                        memcpy(chunk, x + r0 * k, n * k * sizeof *chunk);
                        assert_int_equal(qk_quantize_rows(f, &oc, chunk, r0, n, &chunked, &err),
                                         QS_OK);
                        free(chunk);
                    }
                    char what[160];
                    snprintf(what, sizeof what, "%s options %d reference %d chunks of %zu", f->name,
                             oi, refonly, h);
                    assert_packed_equal(&one, &chunked, what);
                    qk_packed_release(&one);
                    qk_packed_release(&chunked);
                }
    }
    free(x);
}

static void chunked_rows_equal_one_shot(void **state) {
    (void)state;
    chunked_case(0);
}

/* The same for a tensor scaled by 2^-130: tiny for the per-tensor-scaled formats, whose
 * QK_TINY_EXACT option set then takes the reference path with its extra power of two. */
static void chunked_rows_of_a_tiny_tensor(void **state) {
    (void)state;
    chunked_case(-130);
}

/* What qk_quantize_rows refuses, with a message, leaving p as it was: no given amax for a
 * per-tensor-scaled format, rows outside the tensor or empty, a chunk splitting 2D blocks, a
 * format other than p's, NULL x or storage. */
static void quantize_rows_refusals(void **state) {
    (void)state;
    const size_t rows = 40, k = 64;
    float *x = make_matrix(rows, k, 3, 0, 0);
    qs_error err = {0};
    qk_packed p;
    const qk_format *nv = qk_format_by_name("nvfp4"), *nv2 = qk_format_by_name("nvfp4_2d"),
                    *mx = qk_format_by_name("mxfp4");
    assert_int_equal(qk_packed_init(&p, nv, NULL, rows, k, &err), QS_OK);
    memset(p.storage_, 0x5A, p.rows * p.row_bytes + p.rows * p.blocks_per_row);
    assert_int_equal(qk_quantize_rows(nv, NULL, x, 0, 8, &p, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "tensor_amax_given"));
    qk_quant_options o = {.tensor_amax_given = 1, .tensor_amax = 2.0f};
    assert_int_equal(qk_quantize_rows(nv, &o, x, 36, 8, &p, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "not inside"));
    assert_int_equal(qk_quantize_rows(nv, &o, x, 40, 1, &p, &err), QS_EINVAL);
    assert_int_equal(qk_quantize_rows(nv, &o, x, 0, 0, &p, &err), QS_EINVAL);
    assert_int_equal(qk_quantize_rows(mx, NULL, x, 0, 8, &p, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "packed storage is nvfp4"));
    assert_int_equal(qk_quantize_rows(nv, &o, NULL, 0, 8, &p, &err), QS_EINVAL);
    for (size_t i = 0; i < p.rows * p.row_bytes; i++)
        assert_int_equal(p.codes[i], 0x5A);
    assert_true(p.tensor_scale == 1.0f);
    qk_packed_release(&p);
    assert_int_equal(qk_quantize_rows(nv, &o, x, 0, 8, &p, &err), QS_EINVAL); /* released */
    assert_int_equal(qk_packed_init(&p, nv2, NULL, rows, k, &err), QS_OK);
    assert_int_equal(qk_quantize_rows(nv2, &o, x, 8, 16, &p, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "16-row blocks"));
    assert_int_equal(qk_quantize_rows(nv2, &o, x, 0, 8, &p, &err), QS_EINVAL);
    /* the last chunk may be short: rows 32..39 */
    assert_int_equal(qk_quantize_rows(nv2, &o, x, 32, 8, &p, &err), QS_OK);
    assert_true(p.tensor_amax == 2.0f);
    qk_packed_release(&p);
    free(x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(packed_fast_path_matches_reference),
        cmocka_unit_test(chunked_rows_equal_one_shot),
        cmocka_unit_test(chunked_rows_of_a_tiny_tensor),
        cmocka_unit_test(quantize_rows_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
