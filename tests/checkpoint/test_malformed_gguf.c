/* GGUF files that must be refused: one test per rule. Each starts from tiny_quant.gguf
 * (written by gguf-py, see make_fixtures.py), patches one field found by its key or tensor
 * name, and checks the status and that the message names the file and the key, tensor or
 * offset. Layouts: ggml docs/gguf.md. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fixture.h"

typedef struct gguf_bytes {
    uint8_t *b;
    size_t n;
} gguf_bytes;

static gguf_bytes load(void) {
    gguf_bytes g;
    g.b = fx_read(fx_path("tiny_quant.gguf"), &g.n);
    return g;
}

/* Offset just past the key string `key` (where its u32 value type starts). */
static size_t key_end(const gguf_bytes *g, const char *key) {
    size_t at = fx_find(g->b, g->n, key, strlen(key));
    assert_true(at != SIZE_MAX);
    uint64_t len;
    memcpy(&len, g->b + at - 8, 8);
    assert_int_equal(len, strlen(key));
    return at + strlen(key);
}

/* Offset just past tensor info name `name` (where its u32 n_dims starts). */
static size_t tensor_info(const gguf_bytes *g, const char *name) {
    return key_end(g, name);
}

static void put32(gguf_bytes *g, size_t at, uint32_t v) {
    memcpy(g->b + at, &v, 4);
}
static void put64(gguf_bytes *g, size_t at, uint64_t v) {
    memcpy(g->b + at, &v, 8);
}

/* Writes the bytes to a scratch file, opens it, expects code and the substrings. */
static void expect_fails(gguf_bytes *g, size_t n, qs_status code, const char *m1, const char *m2) {
    char *dir = fx_scratch(), *p = fx_join(dir, "bad.gguf");
    fx_write(p, g->b, n);
    qw_checkpoint *ck = NULL;
    qs_error err = {0};
    qs_status st = qw_checkpoint_open(p, &ck, &err);
    if (st != code)
        fail_msg("expected %s, got %s: %s", qs_status_name(code), qs_status_name(st), err.msg);
    assert_null(ck);
    fx_assert_msg(&err, "bad.gguf", m1, m2, NULL);
    free(p);
    fx_rmdir(dir);
    free(g->b);
}

static void bad_magic(void **state) {
    (void)state;
    gguf_bytes g = load();
    memcpy(g.b, "GGML", 4);
    expect_fails(&g, g.n, QS_EFORMAT, "offset 0", "magic");
}

static void version_other_than_3(void **state) {
    (void)state;
    gguf_bytes g = load();
    put32(&g, 4, 2);
    expect_fails(&g, g.n, QS_EUNSUPPORTED, "offset 4", "version 2");
}

static void counts_larger_than_the_file(void **state) {
    (void)state;
    gguf_bytes g = load();
    put64(&g, 8, (uint64_t)1 << 60);
    expect_fails(&g, g.n, QS_EFORMAT, "offset 8", "cannot fit");
}

static void unknown_metadata_value_type(void **state) {
    (void)state;
    gguf_bytes g = load();
    put32(&g, key_end(&g, "test.f64"), 13);
    expect_fails(&g, g.n, QS_EFORMAT, "test.f64", "unknown value type 13");
}

static void string_length_past_the_end(void **state) {
    (void)state;
    gguf_bytes g = load();
    put64(&g, key_end(&g, "test.string") + 4, (uint64_t)1 << 40);
    expect_fails(&g, g.n, QS_EFORMAT, "test.string", "truncated");
}

static void array_count_past_the_end(void **state) {
    (void)state;
    gguf_bytes g = load();
    put64(&g, key_end(&g, "tokenizer.ggml.tokens") + 8, (uint64_t)1 << 58);
    /* The message gives the element count, not a byte total that wrapped around. */
    expect_fails(&g, g.n, QS_EFORMAT, "tokenizer.ggml.tokens",
                 "an array of 288230376151711744 elements");
}

static void architecture_other_than_llama(void **state) {
    (void)state;
    gguf_bytes g = load();
    memcpy(g.b + key_end(&g, "general.architecture") + 12, "mamba", 5);
    expect_fails(&g, g.n, QS_EUNSUPPORTED, "general.architecture", "mamba");
}

static void missing_llama_key(void **state) {
    (void)state;
    gguf_bytes g = load();
    g.b[key_end(&g, "llama.embedding_length") - 1] = 'X';
    expect_fails(&g, g.n, QS_EFORMAT, "\"llama.embedding_length\" is missing", NULL);
}

static void llama_key_of_the_wrong_type(void **state) {
    (void)state;
    gguf_bytes g = load();
    put32(&g, key_end(&g, "llama.block_count"), 6); /* FLOAT32 over the UINT32 value */
    expect_fails(&g, g.n, QS_EFORMAT, "llama.block_count", "not an integer");
}

static void duplicate_metadata_key(void **state) {
    (void)state;
    gguf_bytes g = load();
    size_t at = key_end(&g, "test.i8") - 2;
    g.b[at] = 'u'; /* test.i8 -> test.u8, already present */
    expect_fails(&g, g.n, QS_EFORMAT, "test.u8", "twice");
}

static void alignment_not_a_power_of_two(void **state) {
    (void)state;
    gguf_bytes g = load();
    put32(&g, key_end(&g, "general.alignment") + 4, 48);
    expect_fails(&g, g.n, QS_EFORMAT, "general.alignment", "48");
}

static void block_count_contradicts_tensors(void **state) {
    (void)state;
    gguf_bytes g = load();
    put32(&g, key_end(&g, "llama.block_count") + 4, 3);
    expect_fails(&g, g.n, QS_ENOTFOUND, "model.layers.2.input_layernorm.weight", "missing");
}

static void embedding_length_contradicts_shapes(void **state) {
    (void)state;
    gguf_bytes g = load();
    put32(&g, key_end(&g, "llama.embedding_length") + 4, 128);
    expect_fails(&g, g.n, QS_EFORMAT, "model.embed_tokens.weight", "hidden_size");
}

static void unsupported_tensor_type_is_named(void **state) {
    (void)state;
    gguf_bytes g = load();
    size_t at = tensor_info(&g, "blk.1.attn_q.weight");
    put32(&g, at + 4 + 2 * 8, 16); /* IQ2_XXS */
    expect_fails(&g, g.n, QS_EUNSUPPORTED, "blk.1.attn_q.weight", "IQ2_XXS");
}

static void unknown_tensor_type_is_named(void **state) {
    (void)state;
    gguf_bytes g = load();
    size_t at = tensor_info(&g, "blk.0.ffn_up.weight");
    put32(&g, at + 4 + 2 * 8, 9999);
    expect_fails(&g, g.n, QS_EUNSUPPORTED, "blk.0.ffn_up.weight", "9999");
}

static void tensor_offset_misaligned(void **state) {
    (void)state;
    gguf_bytes g = load();
    size_t at = tensor_info(&g, "blk.0.attn_v.weight") + 4 + 2 * 8 + 4;
    uint64_t off;
    memcpy(&off, g.b + at, 8);
    put64(&g, at, off + 1);
    expect_fails(&g, g.n, QS_EFORMAT, "model.layers.0.self_attn.v_proj.weight",
                 "misaligned or past the end");
}

static void tensor_data_past_the_end(void **state) {
    (void)state;
    gguf_bytes g = load();
    size_t at = tensor_info(&g, "blk.0.attn_v.weight") + 4 + 2 * 8 + 4;
    put64(&g, at, (uint64_t)1 << 40);
    expect_fails(&g, g.n, QS_EFORMAT, "model.layers.0.self_attn.v_proj.weight", "past the end");
}

static void quantized_row_not_a_whole_block(void **state) {
    (void)state;
    gguf_bytes g = load();
    put64(&g, tensor_info(&g, "blk.0.attn_q.weight") + 4, 48); /* ne[0] = 48, Q4_0 blocks are 32 */
    expect_fails(&g, g.n, QS_EFORMAT, "blk.0.attn_q.weight", "multiple of the Q4_0 block");
}

static void too_many_dimensions(void **state) {
    (void)state;
    gguf_bytes g = load();
    put32(&g, tensor_info(&g, "output_norm.weight"), 5);
    expect_fails(&g, g.n, QS_EFORMAT, "output_norm.weight", "n_dims = 5");
}

static void zero_dimension(void **state) {
    (void)state;
    gguf_bytes g = load();
    put64(&g, tensor_info(&g, "output_norm.weight") + 4, 0);
    expect_fails(&g, g.n, QS_EFORMAT, "output_norm.weight", "dimension 0");
}

static void duplicate_tensor(void **state) {
    (void)state;
    gguf_bytes g = load();
    size_t at = tensor_info(&g, "blk.1.ffn_norm.weight");
    g.b[at - strlen("ffn_norm.weight") - 2] = '0'; /* blk.1.ffn_norm -> blk.0.ffn_norm */
    expect_fails(&g, g.n, QS_EFORMAT, "blk.0.ffn_norm.weight", "twice");
}

static void data_cut_short(void **state) {
    (void)state;
    gguf_bytes g = load();
    expect_fails(&g, g.n - 1, QS_EFORMAT, "past the end", NULL);
}

/* Loads a rope_*.gguf fixture and returns the file offset of rope_freqs.weight's data. */
static gguf_bytes load_rope(const char *name, size_t *data_off) {
    gguf_bytes g;
    g.b = fx_read(fx_path(name), &g.n);
    qw_tensor_table t = {0};
    qw_config cfg;
    qs_error err = {0};
    assert_int_equal(qw_gguf_parse(name, g.b, g.n, 0, &cfg, &t, &err), QS_OK);
    qw_tensor_entry *e = qw_table_find(&t, "rope_freqs.weight");
    assert_non_null(e);
    *data_off = e->offset;
    qw_table_free(&t);
    return g;
}

static void rope_freqs_off_the_llama3_rule(void **state) {
    (void)state;
    size_t at;
    gguf_bytes g = load_rope("rope_small.gguf", &at);
    float v;
    memcpy(&v, g.b + at + 4 * 4, 4); /* element 4: in the smooth band of this case */
    v *= 1.01f;
    memcpy(g.b + at + 4 * 4, &v, 4);
    expect_fails(&g, g.n, QS_EUNSUPPORTED, "rope_freqs.weight", "does not follow");
}

static void rope_freqs_not_positive(void **state) {
    (void)state;
    size_t at;
    gguf_bytes g = load_rope("rope_llama32.gguf", &at);
    float v = -1.0f;
    memcpy(g.b + at, &v, 4);
    expect_fails(&g, g.n, QS_EFORMAT, "rope_freqs.weight", "element 0");
}

static void rope_freqs_of_the_wrong_length(void **state) {
    (void)state;
    size_t at;
    gguf_bytes g = load_rope("rope_llama31.gguf", &at);
    put64(&g, tensor_info(&g, "rope_freqs.weight") + 4, 32); /* 64 -> 32 elements */
    expect_fails(&g, g.n, QS_EFORMAT, "rope_freqs.weight", "head_dim / 2");
}

/* Every prefix of the header (metadata and tensor infos) and a sample of cuts in the data:
 * each is refused with EFORMAT, read from an exact-size buffer so ASan sees any over-read. */
static void every_truncation(void **state) {
    (void)state;
    gguf_bytes g = load();
    size_t header_end = tensor_info(&g, "output_norm.weight") + 64;
    int refused = 0;
    for (size_t len = 0; len < g.n; len += len < header_end ? 1 : 1009) {
        uint8_t *cut = malloc(len ? len : 1);
        memcpy(cut, g.b, len);
        qw_tensor_table t = {0};
        qw_config cfg;
        qs_error err = {0};
        if (qw_gguf_parse("cut.gguf", cut, len, 0, &cfg, &t, &err) == QS_OK)
            fail_msg("prefix %zu accepted", len);
        if (err.code != QS_EFORMAT || !strstr(err.msg, "cut.gguf"))
            fail_msg("prefix %zu: %s", len, err.msg);
        qw_table_free(&t);
        free(cut);
        refused++;
    }
    assert_true(refused > 1000);
    free(g.b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bad_magic),
        cmocka_unit_test(version_other_than_3),
        cmocka_unit_test(counts_larger_than_the_file),
        cmocka_unit_test(unknown_metadata_value_type),
        cmocka_unit_test(string_length_past_the_end),
        cmocka_unit_test(array_count_past_the_end),
        cmocka_unit_test(architecture_other_than_llama),
        cmocka_unit_test(missing_llama_key),
        cmocka_unit_test(llama_key_of_the_wrong_type),
        cmocka_unit_test(duplicate_metadata_key),
        cmocka_unit_test(alignment_not_a_power_of_two),
        cmocka_unit_test(block_count_contradicts_tensors),
        cmocka_unit_test(embedding_length_contradicts_shapes),
        cmocka_unit_test(unsupported_tensor_type_is_named),
        cmocka_unit_test(unknown_tensor_type_is_named),
        cmocka_unit_test(tensor_offset_misaligned),
        cmocka_unit_test(tensor_data_past_the_end),
        cmocka_unit_test(quantized_row_not_a_whole_block),
        cmocka_unit_test(too_many_dimensions),
        cmocka_unit_test(zero_dimension),
        cmocka_unit_test(duplicate_tensor),
        cmocka_unit_test(data_cut_short),
        cmocka_unit_test(rope_freqs_off_the_llama3_rule),
        cmocka_unit_test(rope_freqs_not_positive),
        cmocka_unit_test(rope_freqs_of_the_wrong_length),
        cmocka_unit_test(every_truncation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
