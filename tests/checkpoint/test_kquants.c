/* GGUF K-quants (Q2_K ... Q8_K) and IQ4_NL / IQ4_XS against independent decoders: random
 * blocks against gguf-py's gguf.quants.dequantize, and a model that llama.cpp's llama-quantize
 * wrote against gguf-py's reading of it (fixtures by tests/checkpoint/kquants/make_kquants.py).
 * Every value must match bit for bit: the dequantizers round in ggml's order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "fixture.h"

/* Bitwise comparison of two FP32 arrays, reporting the first difference. */
static void assert_same_floats(const char *what, const float *a, const float *b, int64_t n) {
    if (memcmp(a, b, (size_t)n * sizeof(float)) == 0) return;
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0)
            fail_msg("%s: element %lld: %.9g vs %.9g", what, (long long)i, a[i], b[i]);
}

/* Eight random blocks of every type: qw_dtype_to_f32 gives gguf-py's values, the descriptor
 * gives ggml's block size and bytes. */
static void random_blocks_match_gguf_py(void **state) {
    (void)state;
    size_t nbin;
    uint8_t *bin = fx_read(fx_path("kquant_blocks.bin"), &nbin);
    json_error_t je;
    json_t *index = json_load_file(fx_path("kquant_blocks.json"), 0, &je);
    if (!index) fail_msg("kquant_blocks.json: %s", je.text);
    fx_expect x;
    fx_expect_open(&x, "kquant_blocks_expect.safetensors");
    const char *want_types[] = {"Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ4_NL", "IQ4_XS"};
    for (size_t t = 0; t < sizeof want_types / sizeof want_types[0]; t++) {
        json_t *e = json_object_get(index, want_types[t]);
        if (!e) fail_msg("kquant_blocks.json has no %s", want_types[t]);
        qw_dtype dt;
        assert_true(
            qw_dtype_from_ggml((uint32_t)json_integer_value(json_object_get(e, "ggml_type")), &dt));
        assert_string_equal(qw_dtype_name(dt), want_types[t]);
        int64_t elems = json_integer_value(json_object_get(e, "block_elements"));
        int64_t blocks = json_integer_value(json_object_get(e, "blocks"));
        size_t off = (size_t)json_integer_value(json_object_get(e, "offset"));
        assert_int_equal(qw_dtype_block(dt), elems);
        int overflow = 0;
        size_t bytes = qw_dtype_bytes(dt, elems * blocks, &overflow);
        assert_int_equal(overflow, 0);
        assert_int_equal(bytes, (size_t)json_integer_value(json_object_get(e, "block_bytes")) *
                                    (size_t)blocks);
        assert_true(off + bytes <= nbin);
        int64_t n;
        const float *want = fx_expect_tensor(&x, want_types[t], &n);
        assert_int_equal(n, elems * blocks);
        float *got = malloc((size_t)n * sizeof(float));
        assert_non_null(got);
        qw_dtype_to_f32(dt, bin + off, n, got);
        assert_same_floats(want_types[t], got, want, n);
        free(got);
    }
    fx_expect_close(&x);
    json_decref(index);
    free(bin);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(random_blocks_match_gguf_py),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
