/* config.json rules (transformers' LlamaConfig fields and defaults): one test per rule.
 * Inputs are excerpts of the published configs of Llama 2 7B, Llama 3.1 8B and Llama 3.2 1B
 * (Hugging Face meta-llama repositories), edited one field at a time for the refusals. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "fixture.h"

static const char *const llama2_7b =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"bos_token_id\": 1, \"eos_token_id\": 2, "
    "\"hidden_act\": \"silu\","
    " \"hidden_size\": 4096, \"intermediate_size\": 11008, \"max_position_embeddings\": 4096, "
    "\"model_type\": \"llama\","
    " \"num_attention_heads\": 32, \"num_hidden_layers\": 32, \"num_key_value_heads\": 32, "
    "\"rms_norm_eps\": 1e-05,"
    " \"rope_scaling\": null, \"tie_word_embeddings\": false, \"torch_dtype\": \"float16\", "
    "\"vocab_size\": 32000}";

static const char *const llama31_8b =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"bos_token_id\": 128000, \"eos_token_id\": "
    "[128001, 128008, 128009],"
    " \"hidden_act\": \"silu\", \"hidden_size\": 4096, \"intermediate_size\": 14336, "
    "\"max_position_embeddings\": 131072,"
    " \"model_type\": \"llama\", \"num_attention_heads\": 32, \"num_hidden_layers\": 32, "
    "\"num_key_value_heads\": 8,"
    " \"rms_norm_eps\": 1e-05, \"rope_scaling\": {\"factor\": 8.0, \"low_freq_factor\": 1.0, "
    "\"high_freq_factor\": 4.0,"
    " \"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"}, \"rope_theta\": "
    "500000.0,"
    " \"tie_word_embeddings\": false, \"vocab_size\": 128256}";

static const char *const llama32_1b =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"bos_token_id\": 128000, \"eos_token_id\": "
    "128001, \"head_dim\": 64,"
    " \"hidden_act\": \"silu\", \"hidden_size\": 2048, \"intermediate_size\": 8192, "
    "\"max_position_embeddings\": 131072,"
    " \"model_type\": \"llama\", \"num_attention_heads\": 32, \"num_hidden_layers\": 16, "
    "\"num_key_value_heads\": 8,"
    " \"rms_norm_eps\": 1e-05, \"rope_scaling\": {\"factor\": 32.0, \"high_freq_factor\": 4.0, "
    "\"low_freq_factor\": 1.0,"
    " \"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"}, \"rope_theta\": "
    "500000.0,"
    " \"tie_word_embeddings\": true, \"vocab_size\": 128256}";

static qw_config parse_ok(const char *json) {
    qw_config c;
    qs_error err = {0};
    if (qw_config_parse_json("m/config.json", json, strlen(json), &c, &err) != QS_OK)
        fail_msg("%s", err.msg);
    return c;
}

/* Parses json with `from` replaced by `to` (must occur once) and expects failure. */
static void expect_edit_fails(const char *base, const char *from, const char *to, qs_status code,
                              const char *field) {
    char buf[4096];
    const char *at = strstr(base, from);
    assert_non_null(at);
    snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - base), base, to, at + strlen(from));
    qw_config c;
    qs_error err = {0};
    qs_status st = qw_config_parse_json("m/config.json", buf, strlen(buf), &c, &err);
    if (st != code)
        fail_msg("expected %s, got %s: %s", qs_status_name(code), qs_status_name(st), err.msg);
    fx_assert_msg(&err, "m/config.json", field, NULL);
}

static void llama2_defaults_rope_theta_and_head_dim(void **state) {
    (void)state;
    qw_config c = parse_ok(llama2_7b);
    assert_int_equal(c.dim, 4096);
    assert_int_equal(c.hidden_dim, 11008);
    assert_int_equal(c.n_layers, 32);
    assert_int_equal(c.n_heads, 32);
    assert_int_equal(c.n_kv_heads, 32);
    assert_int_equal(c.head_dim, 4096 / 32); /* LlamaConfig: head_dim = hidden_size // heads */
    assert_float_equal(c.rope_theta, 10000.0f, 0); /* LlamaConfig default */
    assert_float_equal(c.rope_factor, 0.0f, 0);
    assert_int_equal(c.vocab_size, 32000);
    assert_int_equal(c.max_seq_len, 4096);
    assert_int_equal(c.tied_embeddings, 0);
}

static void llama31_rope_scaling_and_eos_list(void **state) {
    (void)state;
    qw_config c = parse_ok(llama31_8b);
    assert_int_equal(c.n_kv_heads, 8);
    assert_float_equal(c.rope_theta, 500000.0f, 0);
    assert_float_equal(c.rope_factor, 8.0f, 0);
    assert_float_equal(c.rope_low_freq_factor, 1.0f, 0);
    assert_float_equal(c.rope_high_freq_factor, 4.0f, 0);
    assert_int_equal(c.rope_original_max_pos, 8192);
    assert_int_equal(c.bos_token_id, 128000);
    assert_int_equal(c.eos_token_id, 128001); /* first of the list */
}

static void llama32_tied_embeddings_and_explicit_head_dim(void **state) {
    (void)state;
    qw_config c = parse_ok(llama32_1b);
    assert_int_equal(c.tied_embeddings, 1);
    assert_int_equal(c.head_dim, 64);
    assert_float_equal(c.rope_factor, 32.0f, 0);
}

/* transformers 5 writes rope_theta and the scaling as one "rope_parameters" object; the
 * values below are Llama 3.1 8B's, moved into that layout. */
static const char *const llama31_8b_rope_parameters =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"bos_token_id\": 128000, \"eos_token_id\": "
    "128001, \"hidden_act\": \"silu\", \"hidden_size\": 4096, \"intermediate_size\": 14336,"
    " \"max_position_embeddings\": 131072, \"model_type\": \"llama\", \"num_attention_heads\": 32,"
    " \"num_hidden_layers\": 32, \"num_key_value_heads\": 8, \"rms_norm_eps\": 1e-05,"
    " \"rope_parameters\": {\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,"
    " \"original_max_position_embeddings\": 8192, \"rope_theta\": 500000.0, \"rope_type\": "
    "\"llama3\"}, \"tie_word_embeddings\": false, \"vocab_size\": 128256}";

static void rope_parameters_layout_gives_theta_and_scaling(void **state) {
    (void)state;
    qw_config c = parse_ok(llama31_8b_rope_parameters);
    assert_float_equal(c.rope_theta, 500000.0f, 0);
    assert_float_equal(c.rope_factor, 8.0f, 0);
    assert_float_equal(c.rope_low_freq_factor, 1.0f, 0);
    assert_float_equal(c.rope_high_freq_factor, 4.0f, 0);
    assert_int_equal(c.rope_original_max_pos, 8192);
}

static void rope_parameters_default_type_means_no_scaling(void **state) {
    (void)state;
    char buf[4096];
    const char *from = "\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,"
                       " \"original_max_position_embeddings\": 8192, \"rope_theta\": 500000.0, "
                       "\"rope_type\": \"llama3\"";
    const char *at = strstr(llama31_8b_rope_parameters, from);
    assert_non_null(at);
    snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - llama31_8b_rope_parameters),
             llama31_8b_rope_parameters, "\"rope_theta\": 100000.0, \"rope_type\": \"default\"",
             at + strlen(from));
    qw_config c = parse_ok(buf);
    assert_float_equal(c.rope_theta, 100000.0f, 0);
    assert_float_equal(c.rope_factor, 0.0f, 0);
}

static void rope_parameters_contradicting_rope_theta(void **state) {
    (void)state;
    expect_edit_fails(llama31_8b_rope_parameters, "\"rms_norm_eps\": 1e-05,",
                      "\"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0,", QS_EFORMAT,
                      "rope_parameters.rope_theta");
}

static void rope_parameters_beside_rope_scaling(void **state) {
    (void)state;
    expect_edit_fails(llama31_8b_rope_parameters, "\"rms_norm_eps\": 1e-05,",
                      "\"rms_norm_eps\": 1e-05, \"rope_scaling\": {\"rope_type\": \"llama3\"},",
                      QS_EFORMAT, "rope_scaling");
}

static void rope_parameters_missing_a_factor(void **state) {
    (void)state;
    expect_edit_fails(llama31_8b_rope_parameters, "\"factor\": 8.0, ", "", QS_EFORMAT,
                      "rope_parameters.factor");
}

static void missing_required_field(void **state) {
    (void)state;
    expect_edit_fails(llama2_7b, "\"hidden_size\": 4096,", "", QS_EFORMAT,
                      "\"hidden_size\" is missing");
    expect_edit_fails(llama2_7b, "\"rms_norm_eps\": 1e-05,", "", QS_EFORMAT,
                      "\"rms_norm_eps\" is missing");
    expect_edit_fails(llama2_7b, "\"vocab_size\": 32000", "\"x\": 0", QS_EFORMAT,
                      "\"vocab_size\" is missing");
}

static void field_of_the_wrong_type(void **state) {
    (void)state;
    expect_edit_fails(llama2_7b, "\"num_attention_heads\": 32", "\"num_attention_heads\": \"32\"",
                      QS_EFORMAT, "\"num_attention_heads\" must be an integer");
    expect_edit_fails(llama2_7b, "\"hidden_size\": 4096", "\"hidden_size\": 4096.5", QS_EFORMAT,
                      "\"hidden_size\"");
    expect_edit_fails(llama2_7b, "\"tie_word_embeddings\": false", "\"tie_word_embeddings\": 0",
                      QS_EFORMAT, "\"tie_word_embeddings\"");
}

static void non_positive_size(void **state) {
    (void)state;
    expect_edit_fails(llama2_7b, "\"num_hidden_layers\": 32", "\"num_hidden_layers\": 0",
                      QS_EFORMAT, "\"num_hidden_layers\" = 0");
    expect_edit_fails(llama2_7b, "\"rms_norm_eps\": 1e-05", "\"rms_norm_eps\": -1e-05", QS_EFORMAT,
                      "\"rms_norm_eps\"");
}

static void heads_not_a_multiple_of_kv_heads(void **state) {
    (void)state;
    expect_edit_fails(llama31_8b, "\"num_key_value_heads\": 8", "\"num_key_value_heads\": 5",
                      QS_EFORMAT, "\"num_key_value_heads\" (5)");
}

static void hidden_size_not_divisible_without_head_dim(void **state) {
    (void)state;
    expect_edit_fails(llama2_7b, "\"num_attention_heads\": 32", "\"num_attention_heads\": 30",
                      QS_EFORMAT, "\"head_dim\"");
}

static void other_architecture(void **state) {
    (void)state;
    expect_edit_fails(llama2_7b, "LlamaForCausalLM", "MistralForCausalLM", QS_EUNSUPPORTED,
                      "\"architectures\"");
    expect_edit_fails(llama2_7b, "\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"",
                      QS_EUNSUPPORTED, "\"hidden_act\"");
}

static void unsupported_rope_scaling_type(void **state) {
    (void)state;
    expect_edit_fails(llama31_8b, "\"rope_type\": \"llama3\"", "\"rope_type\": \"yarn\"",
                      QS_EUNSUPPORTED, "yarn");
}

static void rope_scaling_missing_a_factor(void **state) {
    (void)state;
    expect_edit_fails(llama31_8b, "\"low_freq_factor\": 1.0,", "", QS_EFORMAT,
                      "rope_scaling.low_freq_factor");
    expect_edit_fails(llama31_8b, "\"original_max_position_embeddings\": 8192,", "", QS_EFORMAT,
                      "rope_scaling.original_max_position_embeddings");
}

static void token_id_beyond_vocabulary(void **state) {
    (void)state;
    expect_edit_fails(llama2_7b, "\"eos_token_id\": 2", "\"eos_token_id\": 32000", QS_EFORMAT,
                      "\"eos_token_id\"");
}

static void not_json(void **state) {
    (void)state;
    expect_edit_fails(llama2_7b, "\"vocab_size\": 32000}", "\"vocab_size\": 32000", QS_EFORMAT,
                      "not valid JSON");
    expect_edit_fails(llama2_7b, "\"bos_token_id\": 1,",
                      "\"bos_token_id\": 1, \"bos_token_id\": 1,", QS_EFORMAT, "duplicate");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(llama2_defaults_rope_theta_and_head_dim),
        cmocka_unit_test(llama31_rope_scaling_and_eos_list),
        cmocka_unit_test(llama32_tied_embeddings_and_explicit_head_dim),
        cmocka_unit_test(missing_required_field),
        cmocka_unit_test(field_of_the_wrong_type),
        cmocka_unit_test(non_positive_size),
        cmocka_unit_test(heads_not_a_multiple_of_kv_heads),
        cmocka_unit_test(hidden_size_not_divisible_without_head_dim),
        cmocka_unit_test(other_architecture),
        cmocka_unit_test(unsupported_rope_scaling_type),
        cmocka_unit_test(rope_scaling_missing_a_factor),
        cmocka_unit_test(token_id_beyond_vocabulary),
        cmocka_unit_test(not_json),
        cmocka_unit_test(rope_parameters_layout_gives_theta_and_scaling),
        cmocka_unit_test(rope_parameters_default_type_means_no_scaling),
        cmocka_unit_test(rope_parameters_contradicting_rope_theta),
        cmocka_unit_test(rope_parameters_beside_rope_scaling),
        cmocka_unit_test(rope_parameters_missing_a_factor),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
