/* Hugging Face checkpoints that must be refused: one test per rule, each checking the status
 * and that the message names the file and the field, tensor or offset. The inputs are the
 * tiny_f32 / tiny_bf16 / tiny_f16_sharded fixtures copied to a scratch directory and broken
 * in one place, or safetensors bytes built here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "fixture.h"

static void expect_open_fails(const char *path, qs_status code, const char *m1, const char *m2) {
    qw_checkpoint *ck = (qw_checkpoint *)&ck; /* must be reset to NULL on failure */
    qs_error err = {0};
    qs_status st = qw_checkpoint_open(path, &ck, &err);
    if (st != code)
        fail_msg("expected %s, got %s: %s", qs_status_name(code), qs_status_name(st), err.msg);
    assert_null(ck);
    fx_assert_msg(&err, m1, m2, NULL);
}

/* Copies fixture `name`, applies edit(config) to its config.json, returns the directory. */
static char *with_config(const char *name, void (*edit)(json_t *cfg)) {
    char *dir = fx_copy_dir(name), *p = fx_join(dir, "config.json");
    json_error_t je;
    json_t *cfg = json_load_file(p, 0, &je);
    assert_non_null(cfg);
    edit(cfg);
    assert_int_equal(json_dump_file(cfg, p, JSON_INDENT(2)), 0);
    json_decref(cfg);
    free(p);
    return dir;
}

/* Replaces model.safetensors in a copy of tiny_f32 with: u64 header length (given, or the
 * header's own when hlen is UINT64_MAX), the header, then nbuf zero bytes. */
static char *with_safetensors(const char *header, uint64_t hlen, size_t nbuf) {
    char *dir = fx_copy_dir("tiny_f32"), *p = fx_join(dir, "model.safetensors");
    size_t n = strlen(header);
    uint8_t *b = calloc(8 + n + nbuf, 1);
    assert_non_null(b);
    uint64_t len = hlen == UINT64_MAX ? n : hlen;
    memcpy(b, &len, 8);
    memcpy(b + 8, header, n);
    fx_write(p, b, 8 + n + nbuf);
    free(b);
    free(p);
    return dir;
}

static void check_st(const char *header, uint64_t hlen, size_t nbuf, qs_status code, const char *m1,
                     const char *m2) {
    char *dir = with_safetensors(header, hlen, nbuf);
    expect_open_fails(dir, code, m1, m2);
    fx_rmdir(dir);
}

static void safetensors_shorter_than_its_length_field(void **state) {
    (void)state;
    char *dir = fx_copy_dir("tiny_f32"), *p = fx_join(dir, "model.safetensors");
    fx_write(p, "\x10\0\0", 3);
    expect_open_fails(dir, QS_EFORMAT, "model.safetensors", "truncated");
    free(p);
    fx_rmdir(dir);
}

static void safetensors_header_length_past_end(void **state) {
    (void)state;
    check_st("{}", 1000, 0, QS_EFORMAT, "model.safetensors", "header length 1000");
}

static void safetensors_header_not_json(void **state) {
    (void)state;
    check_st("{\"a\": [", UINT64_MAX, 0, QS_EFORMAT, "model.safetensors", "not valid JSON");
}

static void safetensors_header_not_an_object(void **state) {
    (void)state;
    check_st("[1, 2]", UINT64_MAX, 0, QS_EFORMAT, "model.safetensors", "not a JSON object");
}

static void safetensors_unknown_dtype(void **state) {
    (void)state;
    check_st("{\"w\": {\"dtype\": \"F8_E9M9\", \"shape\": [2], \"data_offsets\": [0, 2]}}",
             UINT64_MAX, 2, QS_EUNSUPPORTED, "\"w\"", "F8_E9M9");
}

static void safetensors_shape_not_a_list(void **state) {
    (void)state;
    check_st("{\"w\": {\"dtype\": \"F32\", \"shape\": 4, \"data_offsets\": [0, 16]}}", UINT64_MAX,
             16, QS_EFORMAT, "\"w\"", "\"shape\"");
}

static void safetensors_negative_dimension(void **state) {
    (void)state;
    check_st("{\"w\": {\"dtype\": \"F32\", \"shape\": [-4], \"data_offsets\": [0, 16]}}",
             UINT64_MAX, 16, QS_EFORMAT, "\"w\"", "shape[0]");
}

static void safetensors_offsets_past_the_buffer(void **state) {
    (void)state;
    check_st("{\"w\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}", UINT64_MAX,
             12, QS_EFORMAT, "\"w\"", "outside the 12-byte data buffer");
}

static void safetensors_offsets_disagree_with_shape(void **state) {
    (void)state;
    check_st("{\"w\": {\"dtype\": \"BF16\", \"shape\": [4, 2], \"data_offsets\": [0, 12]}}",
             UINT64_MAX, 16, QS_EFORMAT, "\"w\"", "needs 16");
}

static void safetensors_begin_after_end(void **state) {
    (void)state;
    check_st("{\"w\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [8, 4]}}", UINT64_MAX,
             16, QS_EFORMAT, "\"w\"", "data_offsets");
}

static void safetensors_offsets_missing(void **state) {
    (void)state;
    check_st("{\"w\": {\"dtype\": \"F32\", \"shape\": [1]}}", UINT64_MAX, 4, QS_EFORMAT, "\"w\"",
             "data_offsets");
}

/* Every proper prefix of a real safetensors file is refused: the last tensor ends at the
 * end of the file, so any cut puts some offset out of bounds or the header. */
static void safetensors_every_truncation(void **state) {
    (void)state;
    size_t n;
    uint8_t *b = fx_read(fx_path("tiny_f32/model.safetensors"), &n);
    uint64_t hlen;
    memcpy(&hlen, b, 8);
    int refused = 0;
    for (size_t len = 0; len < n; len += len < 8 + hlen + 64 ? 1 : 997) {
        uint8_t *cut = malloc(len ? len : 1); /* exact-size copy: ASan sees any over-read */
        memcpy(cut, b, len);
        qw_tensor_table t = {0};
        qs_error err = {0};
        if (qw_safetensors_parse("cut.safetensors", cut, len, 0, &t, &err) == QS_OK)
            fail_msg("prefix %zu accepted", len);
        assert_int_equal(err.code, QS_EFORMAT);
        assert_non_null(strstr(err.msg, "cut.safetensors"));
        qw_table_free(&t);
        free(cut);
        refused++;
    }
    assert_true(refused > (int)hlen);
    free(b);
}

static void safetensors_data_cut_short(void **state) {
    (void)state;
    char *dir = fx_copy_dir("tiny_f32"), *p = fx_join(dir, "model.safetensors");
    size_t n;
    free(fx_read(p, &n));
    assert_int_equal(truncate(p, (off_t)n - 4), 0); /* the last tensor loses its last element */
    expect_open_fails(dir, QS_EFORMAT, "model.safetensors", "data_offsets");
    free(p);
    fx_rmdir(dir);
}

static void edit_layers_3(json_t *c) {
    json_object_set_new(c, "num_hidden_layers", json_integer(3));
}
static void config_declares_a_missing_tensor(void **state) {
    (void)state;
    char *dir = with_config("tiny_f32", edit_layers_3);
    expect_open_fails(dir, QS_ENOTFOUND, "model.layers.2.input_layernorm.weight", "missing");
    fx_rmdir(dir);
}

static void edit_ffn_128(json_t *c) {
    json_object_set_new(c, "intermediate_size", json_integer(128));
}
static void config_contradicts_tensor_shape(void **state) {
    (void)state;
    char *dir = with_config("tiny_f32", edit_ffn_128);
    expect_open_fails(dir, QS_EFORMAT, "model.layers.0.mlp.gate_proj.weight", "intermediate_size");
    fx_rmdir(dir);
}

static void edit_kv_4(json_t *c) {
    json_object_set_new(c, "num_key_value_heads", json_integer(4));
}
static void config_kv_heads_contradict_k_proj(void **state) {
    (void)state;
    char *dir = with_config("tiny_f32", edit_kv_4);
    expect_open_fails(dir, QS_EFORMAT, "model.layers.0.self_attn.k_proj.weight", "[32, 64]");
    fx_rmdir(dir);
}

static void edit_untie(json_t *c) {
    json_object_set_new(c, "tie_word_embeddings", json_false());
}
static void untied_config_without_lm_head(void **state) {
    (void)state;
    char *dir = with_config("tiny_bf16", edit_untie);
    expect_open_fails(dir, QS_ENOTFOUND, "lm_head.weight", "missing");
    fx_rmdir(dir);
}

static void edit_vocab(json_t *c) {
    json_object_set_new(c, "vocab_size", json_integer(65));
}
static void config_vocab_contradicts_embeddings(void **state) {
    (void)state;
    char *dir = with_config("tiny_f32", edit_vocab);
    expect_open_fails(dir, QS_EFORMAT, "model.embed_tokens.weight", "vocab_size");
    fx_rmdir(dir);
}

static void directory_without_config(void **state) {
    (void)state;
    char *dir = fx_copy_dir("tiny_f32"), *p = fx_join(dir, "config.json");
    unlink(p);
    expect_open_fails(dir, QS_ENOTFOUND, "config.json", "cannot open");
    free(p);
    fx_rmdir(dir);
}

static void directory_without_weights(void **state) {
    (void)state;
    char *dir = fx_copy_dir("tiny_f32"), *p = fx_join(dir, "model.safetensors");
    unlink(p);
    expect_open_fails(dir, QS_ENOTFOUND, "model.safetensors", "neither");
    free(p);
    fx_rmdir(dir);
}

static void path_that_does_not_exist(void **state) {
    (void)state;
    expect_open_fails("/nonexistent/qsweep/model", QS_ENOTFOUND, "/nonexistent/qsweep/model",
                      "no such");
}

/* Sharded checkpoints: the index and the shards must agree. */
static char *sharded_with_index(const char *index_json) {
    char *dir = fx_copy_dir("tiny_f16_sharded"), *p = fx_join(dir, "model.safetensors.index.json");
    fx_write(p, index_json, strlen(index_json));
    free(p);
    return dir;
}

static void sharded_index_names_a_missing_shard(void **state) {
    (void)state;
    char *dir = fx_copy_dir("tiny_f16_sharded"),
         *p = fx_join(dir, "model-00002-of-00002.safetensors");
    unlink(p);
    expect_open_fails(dir, QS_ENOTFOUND, "model-00002-of-00002.safetensors", "weight_map");
    free(p);
    fx_rmdir(dir);
}

static void sharded_index_names_the_wrong_shard(void **state) {
    (void)state;
    char *dir = sharded_with_index(
        "{\"weight_map\": {\"lm_head.weight\": \"model-00002-of-00002.safetensors\", "
        "\"model.norm.weight\": \"model-00001-of-00002.safetensors\"}}");
    /* lm_head.weight sorts into the first shard (make_fixtures.py splits the sorted names). */
    expect_open_fails(dir, QS_EFORMAT, "weight_map.lm_head.weight", "does not hold");
    fx_rmdir(dir);
}

static void sharded_index_shard_outside_the_directory(void **state) {
    (void)state;
    char *dir = sharded_with_index(
        "{\"weight_map\": {\"lm_head.weight\": \"../model-00001-of-00002.safetensors\"}}");
    expect_open_fails(dir, QS_EFORMAT, "weight_map.lm_head.weight", "plain file name");
    fx_rmdir(dir);
}

static void sharded_index_without_weight_map(void **state) {
    (void)state;
    char *dir = sharded_with_index("{\"metadata\": {}}");
    expect_open_fails(dir, QS_EFORMAT, "model.safetensors.index.json", "weight_map");
    fx_rmdir(dir);
}

static void sharded_index_not_json(void **state) {
    (void)state;
    char *dir = sharded_with_index("{\"weight_map\": ");
    expect_open_fails(dir, QS_EFORMAT, "model.safetensors.index.json", "not valid JSON");
    fx_rmdir(dir);
}

static void tensor_lookup_of_a_missing_name(void **state) {
    (void)state;
    qw_checkpoint *ck = NULL;
    qs_error err = {0};
    assert_int_equal(qw_checkpoint_open(fx_path("tiny_f32"), &ck, &err), QS_OK);
    const float *d;
    int64_t s[2];
    int nd;
    assert_int_equal(
        qw_checkpoint_tensor(ck, "model.layers.9.mlp.up_proj.weight", &d, s, &nd, &err),
        QS_ENOTFOUND);
    fx_assert_msg(&err, "tiny_f32", "model.layers.9.mlp.up_proj.weight", NULL);
    qw_checkpoint_close(ck);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(safetensors_shorter_than_its_length_field),
        cmocka_unit_test(safetensors_header_length_past_end),
        cmocka_unit_test(safetensors_header_not_json),
        cmocka_unit_test(safetensors_header_not_an_object),
        cmocka_unit_test(safetensors_unknown_dtype),
        cmocka_unit_test(safetensors_shape_not_a_list),
        cmocka_unit_test(safetensors_negative_dimension),
        cmocka_unit_test(safetensors_offsets_past_the_buffer),
        cmocka_unit_test(safetensors_offsets_disagree_with_shape),
        cmocka_unit_test(safetensors_begin_after_end),
        cmocka_unit_test(safetensors_offsets_missing),
        cmocka_unit_test(safetensors_every_truncation),
        cmocka_unit_test(safetensors_data_cut_short),
        cmocka_unit_test(config_declares_a_missing_tensor),
        cmocka_unit_test(config_contradicts_tensor_shape),
        cmocka_unit_test(config_kv_heads_contradict_k_proj),
        cmocka_unit_test(untied_config_without_lm_head),
        cmocka_unit_test(config_vocab_contradicts_embeddings),
        cmocka_unit_test(directory_without_config),
        cmocka_unit_test(directory_without_weights),
        cmocka_unit_test(path_that_does_not_exist),
        cmocka_unit_test(sharded_index_names_a_missing_shard),
        cmocka_unit_test(sharded_index_names_the_wrong_shard),
        cmocka_unit_test(sharded_index_shard_outside_the_directory),
        cmocka_unit_test(sharded_index_without_weight_map),
        cmocka_unit_test(sharded_index_not_json),
        cmocka_unit_test(tensor_lookup_of_a_missing_name),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
