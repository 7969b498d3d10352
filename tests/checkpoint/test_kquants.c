/* GGUF K-quants (Q2_K ... Q8_K), IQ4_NL / IQ4_XS and Q5_0 / Q5_1 against independent decoders:
 * random blocks against gguf-py's gguf.quants.dequantize, and a model that llama.cpp's
 * llama-quantize (ggml_quantize_chunk, what llama-quantize runs) wrote against gguf-py's reading of
 * it (fixtures by tests/checkpoint/kquants/make_kquants.py). Every value must match bit for bit:
 * the dequantizers round in ggml's order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "fixture.h"

/* The model of make_kquants.py (DIM, FFN, HEADS, KV_HEADS, VOCAB; one block, untied). */
enum { DIM = 256, FFN = 256, HEADS = 4, KV_HEADS = 2, VOCAB = 256 };
/* Rows of each tensor that tiny_kquant_expect.safetensors holds (make_kquants.py EXPECT_ROWS). */
enum { EXPECT_ROWS = 16 };

static const char *const names[] = {
    "model.embed_tokens.weight",
    "lm_head.weight",
    "model.norm.weight",
    "model.layers.0.input_layernorm.weight",
    "model.layers.0.post_attention_layernorm.weight",
    "model.layers.0.self_attn.q_proj.weight",
    "model.layers.0.self_attn.k_proj.weight",
    "model.layers.0.self_attn.v_proj.weight",
    "model.layers.0.self_attn.o_proj.weight",
    "model.layers.0.mlp.gate_proj.weight",
    "model.layers.0.mlp.up_proj.weight",
    "model.layers.0.mlp.down_proj.weight",
};

/* Bitwise comparison of two FP32 arrays, reporting the first difference. */
static void assert_same_floats(const char *what, const float *a, const float *b, int64_t n) {
    if (memcmp(a, b, (size_t)n * sizeof(float)) == 0) return;
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0)
            fail_msg("%s: element %lld: %.9g vs %.9g", what, (long long)i, a[i], b[i]);
}

static qw_checkpoint *open_ok(const char *path) {
    qw_checkpoint *ck = NULL;
    qs_error err = {0};
    if (qw_checkpoint_open(path, &ck, &err) != QS_OK) fail_msg("%s", err.msg);
    return ck;
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
    const char *want_types[] = {"Q2_K", "Q3_K",   "Q4_K",   "Q5_K", "Q6_K",
                                "Q8_K", "IQ4_NL", "IQ4_XS", "Q5_0", "Q5_1"};
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

/* The model llama.cpp's quantizer wrote: its config, one dtype per tensor as asked, and the
 * first EXPECT_ROWS rows of every tensor (HF order, Q/K rows un-permuted) equal to gguf-py's
 * dequantization. */
static void llama_quantize_model_matches_gguf_py(void **state) {
    (void)state;
    qw_checkpoint *ck = open_ok(fx_path("tiny_kquant.gguf"));
    const qw_config *c = qw_checkpoint_config(ck);
    assert_int_equal(c->dim, DIM);
    assert_int_equal(c->hidden_dim, FFN);
    assert_int_equal(c->n_heads, HEADS);
    assert_int_equal(c->n_kv_heads, KV_HEADS);
    assert_int_equal(c->vocab_size, VOCAB);
    assert_int_equal(c->tied_embeddings, 0);
    fx_expect x;
    fx_expect_open(&x, "tiny_kquant_expect.safetensors");
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const float *d;
        int64_t s[2], n;
        int nd;
        qs_error err = {0};
        if (qw_checkpoint_tensor(ck, names[i], &d, s, &nd, &err)) fail_msg("%s", err.msg);
        const float *want = fx_expect_tensor(&x, names[i], &n);
        int64_t kept = nd == 2 ? (s[0] < EXPECT_ROWS ? s[0] : EXPECT_ROWS) * s[1] : s[0];
        assert_int_equal(kept, n);
        assert_same_floats(names[i], d, want, n);
    }
    /* The types make_kquants.py quantized to (its TYPES table). */
    const struct {
        const char *name, *dtype;
    } types[] = {
        {"model.embed_tokens.weight", "Q4_K"},
        {"lm_head.weight", "Q6_K"},
        {"model.layers.0.self_attn.q_proj.weight", "Q2_K"},
        {"model.layers.0.self_attn.k_proj.weight", "Q3_K"},
        {"model.layers.0.self_attn.v_proj.weight", "Q5_K"},
        {"model.layers.0.self_attn.o_proj.weight", "IQ4_XS"},
        {"model.layers.0.mlp.gate_proj.weight", "IQ4_NL"},
        {"model.layers.0.mlp.up_proj.weight", "Q4_K"},
        {"model.layers.0.mlp.down_proj.weight", "Q6_K"},
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        qw_stored_tensor v;
        int64_t s[2];
        int nd;
        qs_error err = {0};
        if (qw_checkpoint_tensor_stored(ck, types[i].name, &v, s, &nd, &err))
            fail_msg("%s", err.msg);
        assert_string_equal(qw_dtype_name(v.dtype), types[i].dtype);
    }
    fx_expect_close(&x);
    qw_checkpoint_close(ck);
}

/* The engine's path: row ranges of the stored views (1, 3 and 16 rows; Q/K permuted) convert to
 * gguf-py's values too. */
static void stored_rows_match_gguf_py(void **state) {
    (void)state;
    qw_checkpoint *ck = open_ok(fx_path("tiny_kquant.gguf"));
    fx_expect x;
    fx_expect_open(&x, "tiny_kquant_expect.safetensors");
    const int64_t steps[] = {1, 3, EXPECT_ROWS};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        qw_stored_tensor v;
        int64_t s[2], n;
        int nd;
        qs_error err = {0};
        if (qw_checkpoint_tensor_stored(ck, names[i], &v, s, &nd, &err)) fail_msg("%s", err.msg);
        const float *want = fx_expect_tensor(&x, names[i], &n);
        int64_t rows = n / v.cols;
        float *got = malloc((size_t)(EXPECT_ROWS * v.cols) * sizeof(float));
        assert_non_null(got);
        for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++)
            for (int64_t r = 0; r < rows; r += steps[k]) {
                int64_t m = r + steps[k] <= rows ? steps[k] : rows - r;
                qw_stored_rows_f32(&v, r, m, got);
                assert_same_floats(names[i], got, want + r * v.cols, m * v.cols);
            }
        free(got);
    }
    fx_expect_close(&x);
    qw_checkpoint_close(ck);
}

/* A K-quant row must be whole 256-element super-blocks: ne[0] = 128 is refused, naming the
 * tensor, the type and the block. */
static void kquant_row_not_a_whole_super_block(void **state) {
    (void)state;
    size_t n;
    uint8_t *b = fx_read(fx_path("tiny_kquant.gguf"), &n);
    const char *tensor = "blk.0.attn_q.weight";
    size_t at = fx_find(b, n, tensor, strlen(tensor));
    assert_true(at != SIZE_MAX);
    uint64_t ne0 = 128;
    memcpy(b + at + strlen(tensor) + 4, &ne0, sizeof ne0); /* n_dims (u32), then ne[0] */
    qw_config cfg;
    qw_tensor_table table = {0};
    qs_error err = {0};
    assert_int_equal(qw_gguf_parse("tiny_kquant.gguf", b, n, 0, &cfg, &table, &err), QS_EFORMAT);
    fx_assert_msg(&err, "blk.0.attn_q.weight", "multiple of the Q2_K block (256)", NULL);
    qw_table_free(&table);
    free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(random_blocks_match_gguf_py),
        cmocka_unit_test(llama_quantize_model_matches_gguf_py),
        cmocka_unit_test(stored_rows_match_gguf_py),
        cmocka_unit_test(kquant_row_not_a_whole_super_block),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
