/* The engine policy an eval spec names (worker/jobs/jobs.h qw_jobs_policy): every mode of
 * kinds/names.h, the lm_head and embeddings parts, W4A4 on the embeddings (weight format
 * only: a lookup has no activation input), mode policy's explicit map. 4 blocks; counts
 * written out per mode. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include <jansson.h>

#include "jobs.h"
#include "policy.h"
#include "quant.h"
#include "sensitivity.h"

#define L 4
#define D "\"0123456789abcdef\""

/* An eval spec with mode, part, quantize and optional extra fields. */
static void spec(char *buf, size_t cap, const char *mode, const char *part, const char *quantize,
                 const char *extra) {
    snprintf(buf, cap,
             "{\"dataset\":{\"ctx\":16,\"digest\":" D ",\"max_chunks\":0,\"path\":\"/d\"},"
             "\"format\":\"nvfp4\",\"format_options\":{\"clamp\":\"none\",\"rounding\":\"rne\"},"
             "\"kind\":\"eval\",\"metrics\":[\"ppl\"],\"mode\":\"%s\",\"model\":{\"digest\":" D
             ",\"path\":\"/m\"},\"numerics_version\":\"1\",\"part\":\"%s\",\"quantize\":\"%s\"%s}",
             mode, part, quantize, extra);
}

static int quantized(const qw_quant_spec *q) {
    return q->weight != NULL;
}

static void policy_of(const char *mode, const char *part, const char *quantize, const char *extra,
                      qw_policy *p) {
    char text[2048];
    spec(text, sizeof text, mode, part, quantize, extra);
    qs_error err = {0};
    if (qw_jobs_policy(text, L, p, &err)) fail_msg("%s: %s", mode, err.msg);
}

static void test_each_mode_quantizes_what_its_name_says(void **state) {
    (void)state;
    static const struct {
        const char *mode, *part;
        int count;
    } cases[] = {
        {"component", "down", L},
        {"block", "2", 7},
        {"layer", "2.up", 1},
        {"leave_one_out", "down", 6 * L},
        {"cumulative", "1", 2 * 7},
        {"leave_one_out_block", "1", (L - 1) * 7},
        {"leave_one_out_layer", "3.q", 7 * L - 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        qw_policy p;
        policy_of(cases[i].mode, cases[i].part, "weights", "", &p);
        if (qw_policy_count(&p) != cases[i].count)
            fail_msg("%s %s: %d linears, want %d", cases[i].mode, cases[i].part,
                     qw_policy_count(&p), cases[i].count);
        assert_false(quantized(&p.lm_head));
        assert_false(quantized(&p.embed));
        qw_policy_free(&p);
    }
    qw_policy p;
    policy_of("leave_one_out_layer", "3.q", "weights", "", &p);
    assert_false(quantized(qw_policy_linear(&p, 3, QW_LINEAR_Q)));
    assert_true(quantized(qw_policy_linear(&p, 3, QW_LINEAR_K)));
    assert_true(quantized(qw_policy_linear(&p, 0, QW_LINEAR_Q)));
    qw_policy_free(&p);
    policy_of("leave_one_out_block", "1", "weights", "", &p);
    assert_false(quantized(qw_policy_linear(&p, 1, QW_LINEAR_DOWN)));
    assert_true(quantized(qw_policy_linear(&p, 2, QW_LINEAR_DOWN)));
    qw_policy_free(&p);
}

static void test_lm_head_and_embeddings_parts(void **state) {
    (void)state;
    qw_policy p;
    policy_of("component", "lm_head", "weights+activations", "", &p);
    assert_int_equal(qw_policy_count(&p), 1);
    assert_true(quantized(&p.lm_head));
    assert_non_null(p.lm_head.act); /* W4A4: the head's input too */
    qw_policy_free(&p);
    policy_of("component", "embeddings", "weights+activations", "", &p);
    assert_int_equal(qw_policy_count(&p), 1);
    assert_true(quantized(&p.embed));
    assert_null(p.embed.act);
    qw_policy_free(&p);
    /* leave lm_head out of (block linears + lm_head): every block linear, not the head */
    policy_of(
        "leave_one_out", "lm_head", "weights",
        ",\"leave_one_out_of\":[\"q\",\"k\",\"v\",\"o\",\"gate\",\"up\",\"down\",\"lm_head\"]", &p);
    assert_int_equal(qw_policy_count(&p), 7 * L);
    assert_false(quantized(&p.lm_head));
    qw_policy_free(&p);
    policy_of(
        "leave_one_out", "q", "weights",
        ",\"leave_one_out_of\":[\"q\",\"k\",\"v\",\"o\",\"gate\",\"up\",\"down\",\"lm_head\"]", &p);
    assert_int_equal(qw_policy_count(&p), 6 * L + 1);
    assert_true(quantized(&p.lm_head));
    qw_policy_free(&p);
}

static void test_block_beyond_the_model_is_refused(void **state) {
    (void)state;
    char text[2048];
    spec(text, sizeof text, "leave_one_out_block", "4", "weights", "");
    qw_policy p;
    qs_error err = {0};
    assert_int_equal(qw_jobs_policy(text, L, &p, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "block 4 is not a block of 0..3"));
    spec(text, sizeof text, "layer", "1.lm_head", "weights", "");
    assert_int_equal(qw_jobs_policy(text, L, &p, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "part: 'lm_head' is not a part"));
}

/* An eval spec of mode policy over map (JSON object text) with options (JSON object text). */
static void policy_spec(char *buf, size_t cap, const char *map, const char *options,
                        const char *quantize) {
    json_t *m = json_loads(map, 0, NULL);
    char id[17];
    qs_error err = {0};
    if (!m || qs_sensitivity_policy_id(m, id, &err)) fail_msg("bad map %s", map);
    json_decref(m);
    snprintf(buf, cap,
             "{\"dataset\":{\"ctx\":16,\"digest\":" D ",\"max_chunks\":0,\"path\":\"/d\"},"
             "\"format\":\"policy\",\"format_options\":%s,\"kind\":\"eval\",\"metrics\":"
             "[\"kl\"],\"mode\":\"policy\",\"model\":{\"digest\":" D ",\"path\":\"/m\"},"
             "\"numerics_version\":\"1\",\"part\":\"%s\",\"policy\":%s,\"quantize\":\"%s\"}",
             options, id, map, quantize);
}

/* Mode policy: each linear of the map in its own format and options, nothing else; W4A4 on
 * every GEMM input of the map, the embeddings weight-only. */
static void test_policy_mode_sets_each_linear_of_its_map(void **state) {
    (void)state;
    char text[4096];
    policy_spec(text, sizeof text,
                "{\"0.q\":\"nvfp4\",\"3.down\":\"mxfp4\",\"embeddings\":\"nvfp4\","
                "\"lm_head\":\"mxfp4\"}",
                "{\"mxfp4\":{\"rounding\":\"rz\",\"scale_rule\":\"rceil\"},\"nvfp4\":"
                "{\"clamp\":\"none\",\"rounding\":\"rne\"}}",
                "weights+activations");
    qw_policy p;
    qs_error err = {0};
    if (qw_jobs_policy(text, L, &p, &err)) fail_msg("%s", err.msg);
    assert_int_equal(qw_policy_count(&p), 4);
    const qw_quant_spec *q = qw_policy_linear(&p, 0, QW_LINEAR_Q);
    const qw_quant_spec *d = qw_policy_linear(&p, 3, QW_LINEAR_DOWN);
    assert_string_equal(qk_format_name(q->weight), "nvfp4");
    assert_string_equal(qk_format_name(d->weight), "mxfp4");
    assert_int_equal(d->weight_opt.rounding, QK_ROUND_RZ);
    assert_int_equal(q->weight_opt.rounding, QK_ROUND_RNE);
    assert_non_null(q->act);
    assert_int_equal(d->act_opt.rounding, QK_ROUND_RZ);
    assert_string_equal(qk_format_name(p.lm_head.weight), "mxfp4");
    assert_non_null(p.lm_head.act);
    assert_string_equal(qk_format_name(p.embed.weight), "nvfp4");
    assert_null(p.embed.act); /* a lookup has no activation input */
    assert_false(quantized(qw_policy_linear(&p, 0, QW_LINEAR_K)));
    qw_policy_free(&p);

    /* a block beyond the model; a map entry without its options; a part that is not the id */
    policy_spec(text, sizeof text, "{\"4.q\":\"nvfp4\"}",
                "{\"nvfp4\":{\"clamp\":\"none\",\"rounding\":\"rne\"}}", "weights");
    assert_int_equal(qw_jobs_policy(text, L, &p, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "policy.4.q: block 4 is not a block of 0..3"));
    policy_spec(text, sizeof text, "{\"1.q\":\"mxfp4\"}",
                "{\"nvfp4\":{\"clamp\":\"none\",\"rounding\":\"rne\"}}", "weights");
    assert_int_equal(qw_jobs_policy(text, L, &p, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "format_options.mxfp4: expected the options object"));
    policy_spec(text, sizeof text, "{\"1.q\":\"bf16\"}", "{\"bf16\":{}}", "weights");
    assert_int_equal(qw_jobs_policy(text, L, &p, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "policy.1.q: expected the name of a quantized format"));
    policy_spec(text, sizeof text, "{\"1.wq\":\"nvfp4\"}",
                "{\"nvfp4\":{\"clamp\":\"none\",\"rounding\":\"rne\"}}", "weights");
    assert_int_equal(qw_jobs_policy(text, L, &p, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "policy: '1.wq' is not a linear"));
    policy_spec(text, sizeof text, "{\"1.q\":\"nvfp4\"}",
                "{\"nvfp4\":{\"clamp\":\"none\",\"rounding\":\"rne\"}}", "weights");
    char *part = strstr(text, "\"part\":\"") + 8;
    part[0] = part[0] == '0' ? '1' : '0';
    assert_int_equal(qw_jobs_policy(text, L, &p, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "is not the id of its policy"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_mode_quantizes_what_its_name_says),
        cmocka_unit_test(test_lm_head_and_embeddings_parts),
        cmocka_unit_test(test_block_beyond_the_model_is_refused),
        cmocka_unit_test(test_policy_mode_sets_each_linear_of_its_map),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
