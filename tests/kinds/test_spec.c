/* Typed job specs (kinds/): the canonical JSON of the sensitivity kinds, written out as the
 * pre-kinds coordinator (its grid expansion, commit 952f45b) wrote it, with the job
 * keys that build gave; the new fields (leave-one-out forms, lm_head and embeddings, tied
 * embeddings, resources); the decoder's errors; the affinity key; the registry. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "names.h"
#include "registry.h"
#include "sensitivity.h"
#include "spec.h"

#define MODEL_DIGEST "eca1f7e6930602478a3e12bacc8deab4e52c8053a0b75014e38b5ec8679bd05e"
#define DATA_DIGEST "53c11776f131be55a12fd7c6ce25d3baaee3abc8682e5c4e2d8139992bd4e3df"

/* Job 1 and 2 of a dry run of the pre-kinds build over tests/engine/data/llama3_gqa and
 * experiments/data/gpl3.bytes.tokens (ctx 64, 8 chunks, metrics kl and ppl), with the paths it
 * had replaced by /m and /d (paths are not part of the key). */
static const char *const BASELINE_TEXT =
    "{\"dataset\":{\"ctx\":64,\"digest\":\"" DATA_DIGEST "\",\"max_chunks\":8,\"path\":\"/d\"},"
    "\"format\":\"bf16\",\"format_options\":{},\"kind\":\"baseline\",\"metrics\":[\"ppl\"],"
    "\"mode\":null,\"model\":{\"digest\":\"" MODEL_DIGEST "\",\"path\":\"/m\"},"
    "\"numerics_version\":\"1\",\"part\":null,\"quantize\":null}";
static const char *const BASELINE_KEY =
    "badf1cceae0c2fc106cc034d0a69a2e55cae4d4f9ed5d7aa32c330ead1690611";
static const char *const EVAL_TEXT =
    "{\"dataset\":{\"ctx\":64,\"digest\":\"" DATA_DIGEST "\",\"max_chunks\":8,\"path\":\"/d\"},"
    "\"format\":\"nvfp4\",\"format_options\":{\"clamp\":\"none\",\"rounding\":\"rne\"},"
    "\"kind\":\"eval\",\"metrics\":[\"kl\",\"ppl\"],\"mode\":\"component\","
    "\"model\":{\"digest\":\"" MODEL_DIGEST "\",\"path\":\"/m\"},\"numerics_version\":\"1\","
    "\"part\":\"q\",\"quantize\":\"weights\"}";
static const char *const EVAL_KEY =
    "17f40fb202416f0b03c604841176a4aa5ca37e3c28295abc90e837f24beacebe";

/* An eval spec like EVAL_TEXT's, owned strings. */
static void eval_spec(qs_sensitivity_spec *s) {
    memset(s, 0, sizeof *s);
    s->eval = true;
    s->model.path = strdup("/m");
    strcpy(s->model.digest, MODEL_DIGEST);
    s->dataset.path = strdup("/d");
    strcpy(s->dataset.digest, DATA_DIGEST);
    s->dataset.ctx = 64;
    s->dataset.max_chunks = 8;
    s->format = strdup("nvfp4");
    s->format_options = json_pack("{s:s, s:s}", "clamp", "none", "rounding", "rne");
    s->mode = QS_MODE_COMPONENT;
    s->block = -1;
    s->part = 0;
    s->loo_of = QS_PARTS_BLOCK_LINEARS;
    s->metrics = QS_METRIC_KL | QS_METRIC_PPL;
    strcpy(s->numerics_version, "1"); /* EVAL_TEXT's, whose key is recorded above */
}

/* Encodes s to canonical text (caller frees). */
static char *encode_text(const qs_sensitivity_spec *s) {
    json_t *o = NULL;
    qs_error err = {0};
    assert_int_equal(qs_sensitivity_encode(s, &o, &err), QS_OK);
    char *text = qs_spec_canonical(o);
    json_decref(o);
    return text;
}

static qs_status decode_text(const char *text, qs_sensitivity_spec *s, qs_error *err) {
    json_t *o = json_loads(text, 0, NULL);
    assert_non_null(o);
    qs_status st = qs_sensitivity_decode(o, s, err);
    json_decref(o);
    return st;
}

static void test_eval_spec_encodes_as_before_with_the_same_key(void **state) {
    (void)state;
    qs_sensitivity_spec s;
    eval_spec(&s);
    char *text = encode_text(&s);
    assert_string_equal(text, EVAL_TEXT);
    char key[65];
    qs_error err = {0};
    assert_int_equal(qs_spec_key_text(text, key, &err), QS_OK);
    assert_string_equal(key, EVAL_KEY);
    free(text);
    qs_sensitivity_clear(&s);
}

/* A grid's `numerics` joins the key, except "any", which asks nothing of the path: a spec
 * without it keeps the key it had before paths were named (EVAL_KEY). */
static void test_numerics_is_in_the_key_unless_any(void **state) {
    (void)state;
    qs_error err = {0};
    char key[65], cpu[65], cuda[65];
    json_t *o = json_loads(EVAL_TEXT, 0, NULL);
    assert_non_null(o);
    json_object_set_new(o, "numerics", json_string("any"));
    assert_int_equal(qs_spec_key(o, key, &err), QS_OK);
    assert_string_equal(key, EVAL_KEY);
    json_object_set_new(o, "numerics", json_string("cpu"));
    assert_int_equal(qs_spec_key(o, cpu, &err), QS_OK);
    json_object_set_new(o, "numerics", json_string("cuda"));
    assert_int_equal(qs_spec_key(o, cuda, &err), QS_OK);
    assert_string_not_equal(cpu, EVAL_KEY);
    assert_string_not_equal(cuda, EVAL_KEY);
    assert_string_not_equal(cpu, cuda);
    /* the worker's decoder accepts the key it carries */
    qs_sensitivity_spec s;
    assert_int_equal(qs_sensitivity_decode(o, &s, &err), QS_OK);
    qs_sensitivity_clear(&s);
    json_decref(o);
}

static void test_stored_specs_decode_and_encode_to_the_same_text(void **state) {
    (void)state;
    const char *texts[] = {BASELINE_TEXT, EVAL_TEXT};
    const char *keys[] = {BASELINE_KEY, EVAL_KEY};
    for (int i = 0; i < 2; i++) {
        qs_sensitivity_spec s;
        qs_error err = {0};
        assert_int_equal(decode_text(texts[i], &s, &err), QS_OK);
        assert_int_equal(s.eval, i == 1);
        char *again = encode_text(&s);
        assert_string_equal(again, texts[i]);
        char key[65];
        assert_int_equal(qs_spec_key_text(again, key, &err), QS_OK);
        assert_string_equal(key, keys[i]);
        free(again);
        qs_sensitivity_clear(&s);
    }
}

/* Mode policy and a dataset with BOS decode and encode to the same text; the
 * map, the BOS id and the text-ness of the path are where the spec says; a map the part does
 * not name, a baseline with a map, a negative BOS are refused. */
static void test_policy_and_bos_specs_round_trip(void **state) {
    (void)state;
    json_t *map = json_pack("{s:s, s:s}", "1.down", "mxfp4", "lm_head", "nvfp4");
    char id[17], text[2048];
    qs_error err = {0};
    assert_int_equal(qs_sensitivity_policy_id(map, id, &err), QS_OK);
    json_decref(map);
    assert_int_equal(strlen(id), 16);
    snprintf(text, sizeof text,
             "{\"dataset\":{\"bos_id\":1,\"ctx\":64,\"digest\":\"" DATA_DIGEST "\","
             "\"max_chunks\":8,\"path\":\"text:/d.txt\"},\"format\":\"policy\","
             "\"format_options\":{\"mxfp4\":{\"rounding\":\"rne\",\"scale_rule\":\"rceil\"},"
             "\"nvfp4\":{\"clamp\":\"none\",\"rounding\":\"rne\"}},\"kind\":\"eval\","
             "\"metrics\":[\"kl\"],\"mode\":\"policy\",\"model\":{\"digest\":\"" MODEL_DIGEST
             "\",\"path\":\"/m\"},\"numerics_version\":\"1\",\"part\":\"%s\",\"policy\":"
             "{\"1.down\":\"mxfp4\",\"lm_head\":\"nvfp4\"},\"quantize\":\"weights\"}",
             id);
    qs_sensitivity_spec s;
    if (decode_text(text, &s, &err)) fail_msg("%s", err.msg);
    assert_int_equal(s.mode, QS_MODE_POLICY);
    assert_true(s.dataset.bos);
    assert_int_equal(s.dataset.bos_id, 1);
    assert_string_equal(qs_dataset_text_path(s.dataset.path), "/d.txt");
    assert_null(qs_dataset_text_path("/d.tokens"));
    assert_int_equal(qs_sensitivity_extra_parts(&s), 1u << QS_PART_LM_HEAD);
    char *again = encode_text(&s);
    assert_string_equal(again, text);
    free(again);
    /* the BOS id is part of the key; the path (text or not) is not */
    char k1[65], k2[65];
    assert_int_equal(qs_spec_key_text(text, k1, &err), QS_OK);
    s.dataset.bos = false;
    again = encode_text(&s);
    assert_int_equal(qs_spec_key_text(again, k2, &err), QS_OK);
    assert_string_not_equal(k1, k2);
    free(again);
    free(s.dataset.path);
    s.dataset.path = strdup("/d.tokens");
    again = encode_text(&s);
    char k3[65];
    assert_int_equal(qs_spec_key_text(again, k3, &err), QS_OK);
    assert_string_equal(k2, k3);
    free(again);
    qs_sensitivity_clear(&s);

    char bad[2100];
    snprintf(bad, sizeof bad, "%s", text);
    char *at = strstr(bad, "\"lm_head\":\"nvfp4\"}");
    memcpy(at, "\"lm_head\":\"mxfp4\"}", 18); /* another map, the same part */
    assert_int_equal(decode_text(bad, &s, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "is not the id of its policy"));
    at = strstr(text, "\"bos_id\":1");
    snprintf(bad, sizeof bad, "%.*s\"bos_id\":-1%s", (int)(at - text), text, at + 10);
    assert_int_equal(decode_text(bad, &s, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "dataset.bos_id"));
    /* a map in a spec of another mode (found by kinds_fuzz_spec: it was dropped on decoding,
       so re-encoding changed the key) */
    char *comp = strdup(EVAL_TEXT);
    char with_map[1200];
    comp[strlen(comp) - 1] = 0;
    snprintf(with_map, sizeof with_map, "%s,\"policy\":\"1\"}", comp);
    free(comp);
    assert_int_equal(decode_text(with_map, &s, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "policy applies to mode policy only"));
    const char *base_with_map =
        "{\"dataset\":{\"ctx\":64,\"digest\":\"" DATA_DIGEST "\",\"max_chunks\":8,\"path\":"
        "\"/d\"},\"format\":\"bf16\",\"format_options\":{},\"kind\":\"baseline\","
        "\"metrics\":[\"ppl\"],\"mode\":null,\"model\":{\"digest\":\"" MODEL_DIGEST "\","
        "\"path\":\"/m\"},\"numerics_version\":\"1\",\"part\":null,\"policy\":{},"
        "\"quantize\":null}";
    assert_int_equal(decode_text(base_with_map, &s, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "a baseline has no leave_one_out_of, tied_embeddings or policy"));
}

/* Paths and resources say where, not what: the key ignores them; any other field counts. */
static void test_key_ignores_paths_and_resources_only(void **state) {
    (void)state;
    qs_sensitivity_spec s;
    eval_spec(&s);
    free(s.model.path);
    s.model.path = strdup("/elsewhere/model");
    s.resources = (qs_resources){
        .present = true, .gpu_count = 2, .gpu_memory_mib = 80000, .native_fp4 = true};
    char *text = encode_text(&s);
    assert_non_null(strstr(text, "\"resources\":{\"gpu_count\":2,\"gpu_memory_mib\":80000,"
                                 "\"native_fp4\":true}"));
    char key[65];
    qs_error err = {0};
    assert_int_equal(qs_spec_key_text(text, key, &err), QS_OK);
    assert_string_equal(key, EVAL_KEY);
    qs_sensitivity_spec back;
    assert_int_equal(decode_text(text, &back, &err), QS_OK);
    assert_true(back.resources.present);
    assert_int_equal(back.resources.gpu_count, 2);
    assert_int_equal(back.resources.gpu_memory_mib, 80000);
    assert_true(back.resources.native_fp4);
    qs_sensitivity_clear(&back);
    free(text);
    s.dataset.max_chunks = 9;
    text = encode_text(&s);
    assert_int_equal(qs_spec_key_text(text, key, &err), QS_OK);
    assert_string_not_equal(key, EVAL_KEY);
    free(text);
    qs_sensitivity_clear(&s);
}

/* The leave-one-out forms by block and by layer, with the part texts the grid writes. */
static void test_leave_one_out_by_block_and_by_layer(void **state) {
    (void)state;
    qs_sensitivity_spec s;
    eval_spec(&s);
    s.mode = QS_MODE_LEAVE_ONE_OUT_BLOCK;
    s.block = 3;
    s.part = -1;
    char *text = encode_text(&s);
    assert_non_null(strstr(text, "\"mode\":\"leave_one_out_block\""));
    assert_non_null(strstr(text, "\"part\":\"3\""));
    free(text);
    s.mode = QS_MODE_LEAVE_ONE_OUT_LAYER;
    s.part = 6;
    text = encode_text(&s);
    assert_non_null(strstr(text, "\"mode\":\"leave_one_out_layer\""));
    assert_non_null(strstr(text, "\"part\":\"3.down\""));
    qs_sensitivity_spec back;
    qs_error err = {0};
    assert_int_equal(decode_text(text, &back, &err), QS_OK);
    assert_int_equal(back.mode, QS_MODE_LEAVE_ONE_OUT_LAYER);
    assert_int_equal(back.block, 3);
    assert_int_equal(back.part, 6);
    qs_sensitivity_clear(&back);
    free(text);
    qs_sensitivity_clear(&s);
}

/* Quantizing lm_head of a tied model quantizes the head copy only, and the spec says so. */
static void test_tied_embeddings_are_recorded_in_the_spec(void **state) {
    (void)state;
    qs_sensitivity_spec s;
    eval_spec(&s);
    s.part = QS_PART_LM_HEAD;
    char *text = encode_text(&s);
    assert_non_null(strstr(text, "\"part\":\"lm_head\""));
    assert_null(strstr(text, "tied_embeddings")); /* untied: nothing to say */
    free(text);
    s.tied = true;
    text = encode_text(&s);
    assert_non_null(strstr(text, "\"tied_embeddings\":\"head_copy_only\""));
    free(text);
    s.part = QS_PART_EMBEDDINGS;
    text = encode_text(&s);
    assert_non_null(strstr(text, "\"tied_embeddings\":\"embeddings_copy_only\""));
    free(text);
    s.part = 2; /* v: neither copy is quantized */
    text = encode_text(&s);
    assert_null(strstr(text, "tied_embeddings"));
    free(text);
    s.mode = QS_MODE_LEAVE_ONE_OUT;
    s.loo_of = QS_PARTS_BLOCK_LINEARS | 1u << QS_PART_LM_HEAD | 1u << QS_PART_EMBEDDINGS;
    text = encode_text(&s);
    assert_non_null(strstr(text, "\"leave_one_out_of\":[\"q\",\"k\",\"v\",\"o\",\"gate\",\"up\","
                                 "\"down\",\"lm_head\",\"embeddings\"]"));
    assert_non_null(strstr(text, "\"tied_embeddings\":\"both_copies\""));
    qs_sensitivity_spec back;
    qs_error err = {0};
    assert_int_equal(decode_text(text, &back, &err), QS_OK);
    assert_int_equal(back.loo_of, s.loo_of);
    assert_true(back.tied);
    assert_int_equal(qs_sensitivity_extra_parts(&back),
                     1u << QS_PART_LM_HEAD | 1u << QS_PART_EMBEDDINGS);
    qs_sensitivity_clear(&back);
    free(text);
    qs_sensitivity_clear(&s);
}

/* "sqnr_rows": the SQNR probe's sample, only when the job samples (the key of a spec without it
 * is as before); the decoder reads it back and refuses a count below 1, a non-integer, a job
 * without metric sqnr and a baseline with it. */
static void test_sqnr_rows_is_in_the_spec_and_key(void **state) {
    (void)state;
    qs_sensitivity_spec s;
    eval_spec(&s);
    s.metrics |= QS_METRIC_SQNR;
    char *plain = encode_text(&s);
    assert_null(strstr(plain, "sqnr_rows"));
    s.sqnr_rows = 16;
    char *text = encode_text(&s);
    assert_non_null(strstr(text, "\"sqnr_rows\":16"));
    char key[65], key_plain[65];
    qs_error err = {0};
    assert_int_equal(qs_spec_key_text(text, key, &err), QS_OK);
    assert_int_equal(qs_spec_key_text(plain, key_plain, &err), QS_OK);
    assert_string_not_equal(key, key_plain);
    qs_sensitivity_spec back;
    assert_int_equal(decode_text(text, &back, &err), QS_OK);
    assert_int_equal(back.sqnr_rows, 16);
    char *again = encode_text(&back);
    assert_string_equal(again, text);
    free(again);
    qs_sensitivity_clear(&back);
    free(text);
    free(plain);
    s.metrics &= ~(unsigned)QS_METRIC_SQNR; /* a sample of a probe the job does not run */
    json_t *o = NULL;
    assert_int_equal(qs_sensitivity_encode(&s, &o, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "sqnr_rows"));
    qs_sensitivity_clear(&s);
    const char *bad[] = {"0", "-3", "\"16\"", "1.5"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char t[2048];
        snprintf(t, sizeof t, "%.*s,\"sqnr_rows\":%s}", (int)strlen(EVAL_TEXT) - 1, EVAL_TEXT,
                 bad[i]);
        assert_int_equal(decode_text(t, &back, &err), QS_EINVAL);
        if (!strstr(err.msg, "sqnr_rows")) fail_msg("%s: %s", bad[i], err.msg);
    }
    char t[2048];
    snprintf(t, sizeof t, "%.*s,\"sqnr_rows\":8}", (int)strlen(EVAL_TEXT) - 1, EVAL_TEXT);
    assert_int_equal(decode_text(t, &back, &err), QS_EINVAL); /* EVAL_TEXT: metrics kl, ppl */
    assert_non_null(strstr(err.msg, "sqnr_rows"));
    snprintf(t, sizeof t, "%.*s,\"sqnr_rows\":8}", (int)strlen(BASELINE_TEXT) - 1, BASELINE_TEXT);
    assert_int_equal(decode_text(t, &back, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "sqnr_rows"));
}

/* One bad field at a time, each named in the message. */
/* "fuse": the fused groups, sorted by name, only when the job has some (the key of an unfused
 * spec is as before); the decoder reads it back and refuses unknown, repeated or unsorted
 * names and a baseline with it. */
static void test_fuse_is_in_the_spec_and_key(void **state) {
    (void)state;
    qs_sensitivity_spec s;
    eval_spec(&s);
    s.fuse = QS_FUSE_QKV | QS_FUSE_GATE_UP;
    char *text = encode_text(&s);
    assert_non_null(strstr(text, "\"fuse\":[\"gate_up\",\"qkv\"]"));
    char key[65];
    qs_error err = {0};
    assert_int_equal(qs_spec_key_text(text, key, &err), QS_OK);
    assert_string_not_equal(key, EVAL_KEY);
    qs_sensitivity_spec back;
    assert_int_equal(decode_text(text, &back, &err), QS_OK);
    assert_int_equal(back.fuse, QS_FUSE_QKV | QS_FUSE_GATE_UP);
    char *again = encode_text(&back);
    assert_string_equal(again, text);
    free(again);
    qs_sensitivity_clear(&back);
    s.fuse = QS_FUSE_QKV;
    free(text);
    text = encode_text(&s);
    assert_non_null(strstr(text, "\"fuse\":[\"qkv\"]"));
    free(text);
    qs_sensitivity_clear(&s);
    assert_string_equal(qs_fuse_text(QS_FUSE_QKV | QS_FUSE_GATE_UP), "gate_up+qkv");
    const char *bad[] = {"[\"qkv\",\"gate_up\"]", "[\"qkv\",\"qkv\"]", "[\"kv\"]", "[]", "\"qkv\""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char t[2048];
        snprintf(t, sizeof t, "%.*s,\"fuse\":%s}", (int)strlen(EVAL_TEXT) - 1, EVAL_TEXT, bad[i]);
        assert_int_equal(decode_text(t, &back, &err), QS_EINVAL);
        if (!strstr(err.msg, "fuse")) fail_msg("%s: %s", bad[i], err.msg);
    }
    char t[2048];
    snprintf(t, sizeof t, "%.*s,\"fuse\":[\"qkv\"]}", (int)strlen(BASELINE_TEXT) - 1,
             BASELINE_TEXT);
    assert_int_equal(decode_text(t, &back, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "fuse"));
}

static void test_decoder_names_the_bad_field(void **state) {
    (void)state;
    static const struct {
        const char *from, *to, *msg;
    } cases[] = {
        {"\"mode\":\"component\"", "\"mode\":\"diagonal\"", "mode: unknown 'diagonal'"},
        {"\"part\":\"q\"", "\"part\":\"3\"", "part: '3' is not a part"},
        {"\"part\":\"q\"", "\"part\":\"wq\"", "part: 'wq' is not a part"},
        {"\"mode\":\"component\"", "\"mode\":\"layer\"", "is not \"<block>.<kind>\""},
        {"\"quantize\":\"weights\"", "\"quantize\":\"w4a16\"", "quantize: unknown value"},
        {"\"metrics\":[\"kl\",\"ppl\"]", "\"metrics\":[\"kl\",\"bleu\"]", "metrics[1]"},
        {"\"metrics\":[\"kl\",\"ppl\"]", "\"metrics\":[]", "metrics: expected a non-empty"},
        {"\"kind\":\"eval\"", "\"kind\":\"train\"", "kind: expected"},
        {"\"kind\":\"eval\"", "\"kind\":\"eval\",\"colour\":1", "unknown key 'colour'"},
        {"\"ctx\":64", "\"ctx\":1", "dataset.ctx"},
        {"\"digest\":\"" MODEL_DIGEST "\"", "\"digest\":\"../x\"", "model.digest"},
        {"\"part\":\"q\"", "\"part\":\"q\",\"tied_embeddings\":\"head_copy_only\"",
         "tied_embeddings: expected"},
        /* found by kinds_fuzz_spec: what re-encoding would change must be refused */
        {"\"ctx\":64", "\"ctx\":64,\"quantize\":\"w\"", "dataset: unknown key 'quantize'"},
        {"\"path\":\"/m\"", "\"path\":\"/m\",\"x\":1", "model: unknown key 'x'"},
        {"\"metrics\":[\"kl\",\"ppl\"]", "\"metrics\":[\"ppl\",\"kl\"]", "out of order"},
        {"\"part\":\"q\"", "\"part\":\"lm_head\",\"leave_one_out_of\":[\"q\"]",
         "leave_one_out_of applies to mode leave_one_out only"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[2048];
        const char *at = strstr(EVAL_TEXT, cases[i].from);
        assert_non_null(at);
        snprintf(text, sizeof text, "%.*s%s%s", (int)(at - EVAL_TEXT), EVAL_TEXT, cases[i].to,
                 at + strlen(cases[i].from));
        qs_sensitivity_spec s;
        qs_error err = {0};
        assert_int_equal(decode_text(text, &s, &err), QS_EINVAL);
        if (!strstr(err.msg, cases[i].msg))
            fail_msg("case %zu: '%s' lacks '%s'", i, err.msg, cases[i].msg);
        assert_null(s.format); /* cleared on error */
    }
}

/* Only the canonical text of a part or a list decodes: "05.down" would re-encode as "5.down"
 * and change the key (found by kinds_fuzz_spec). */
static void test_non_canonical_parts_and_lists_are_refused(void **state) {
    (void)state;
    static const char *const texts[] = {
        "\"mode\":\"layer\",\"model\"",
        "\"part\":\"05.down\"",
        "\"mode\":\"layer\",\"model\"",
        "\"part\":\"+5.down\"",
        "\"mode\":\"leave_one_out\",\"model\"",
        "\"leave_one_out_of\":[\"k\",\"q\"],\"part\":\"q\"",
        "\"mode\":\"leave_one_out\",\"model\"",
        "\"leave_one_out_of\":[\"q_proj\",\"k\"],\"part\":\"k\"",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i += 2) {
        char text[2048], mid[1024];
        const char *m = strstr(EVAL_TEXT, "\"mode\":\"component\",\"model\"");
        snprintf(mid, sizeof mid, "%.*s%s%s", (int)(m - EVAL_TEXT), EVAL_TEXT, texts[i],
                 m + strlen("\"mode\":\"component\",\"model\""));
        const char *p = strstr(mid, "\"part\":\"q\"");
        snprintf(text, sizeof text, "%.*s%s%s", (int)(p - mid), mid, texts[i + 1],
                 p + strlen("\"part\":\"q\""));
        qs_sensitivity_spec s;
        qs_error err = {0};
        if (decode_text(text, &s, &err) != QS_EINVAL) fail_msg("accepted: %s", text);
    }
}

static void test_lm_head_is_refused_in_block_modes(void **state) {
    (void)state;
    qs_sensitivity_spec s;
    eval_spec(&s);
    s.mode = QS_MODE_LAYER;
    s.block = 0;
    s.part = QS_PART_LM_HEAD;
    json_t *o = NULL;
    qs_error err = {0};
    assert_int_equal(qs_sensitivity_encode(&s, &o, &err), QS_EINVAL);
    assert_null(o);
    assert_non_null(strstr(err.msg, "lm_head is a part of component and leave_one_out modes"));
    qs_sensitivity_clear(&s);
}

static void test_affinity_key_and_synthetic_identity(void **state) {
    (void)state;
    char key[QS_AFFINITY_KEY_MAX];
    qs_affinity_key(MODEL_DIGEST, key, sizeof key);
    assert_string_equal(key, "model:" MODEL_DIGEST);
    qs_affinity_key("not hex!", key, sizeof key);
    assert_string_equal(key, "");
    /* the digest the pre-kinds grid gave {synthetic: llama2-7b, seed: 1} */
    char path[64], digest[65];
    qs_error err = {0};
    assert_int_equal(qs_synthetic_model("llama2-7b", 1, path, sizeof path, digest, &err), QS_OK);
    assert_string_equal(path, "synthetic:llama2-7b:1");
    assert_string_equal(digest, "631081d849f4d6168359bda11043ec6d3fa3a229a62830b366fd1b570159eb8c");
    assert_true(qs_is_synthetic(path));
    assert_int_equal(qs_synthetic_model("a:b", 1, path, sizeof path, digest, &err), QS_EINVAL);
}

static void test_names_and_aliases(void **state) {
    (void)state;
    assert_int_equal(qs_mode_by_name("leave_one_out_component"), QS_MODE_LEAVE_ONE_OUT);
    assert_int_equal(qs_mode_by_name("leave_one_out_layer"), QS_MODE_LEAVE_ONE_OUT_LAYER);
    assert_int_equal(qs_mode_by_name("loo"), -1);
    assert_int_equal(qs_quantize_by_name("W4A4"), 1);
    assert_int_equal(qs_quantize_by_name("w4a16"), 0);
    assert_int_equal(qs_linear_kind_index("down_proj"), 6);
    assert_int_equal(qs_part_by_name("embeddings"), QS_PART_EMBEDDINGS);
    assert_int_equal(qs_metric_bit("top1"), QS_METRIC_TOP1);
    assert_int_equal(qs_metric_bit("bleu"), 0);
    assert_string_equal(qs_linear_module_names[4], "mlp.gate_proj");
}

static void test_registry_checks_a_spec_by_its_kind(void **state) {
    (void)state;
    qs_error err = {0};
    assert_int_equal(qs_job_spec_check(EVAL_TEXT, &err), QS_OK);
    assert_int_equal(qs_job_spec_check(BASELINE_TEXT, &err), QS_OK);
    assert_int_equal(qs_job_spec_check("{\"kind\":\"sleep\"}", &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "'sleep' is not a job kind"));
    assert_int_equal(qs_job_spec_check("[1]", &err), QS_EFORMAT);
    const qs_job_kind *k = qs_job_kind_find("eval");
    assert_non_null(k);
    assert_string_equal(k->grid_kind, "sensitivity");
    /* every registered kind is found by its name (other kinds join the table) */
    assert_true(qs_job_kind_count() >= 2);
    for (size_t i = 0; i < qs_job_kind_count(); i++)
        assert_ptr_equal(qs_job_kind_find(qs_job_kind_at(i)->name), qs_job_kind_at(i));
    assert_null(qs_job_kind_at(qs_job_kind_count()));
}

/* A model a pipeline trains (spec.h): "trained_by" names the train job's key, the digest is
 * the stand-in BLAKE2b-256("trained:" + key) (written out here, from Python's
 * hashlib.blake2b(digest_size=32)); the spec round-trips, trained_by is part of the job key,
 * a model without it encodes as before, and a stand-in that is not the key's is refused. */
static void test_trained_model_is_named_by_its_training_job(void **state) {
    (void)state;
    const char *key = "abababababababababababababababababababababababababababababababab";
    char digest[65];
    qs_error err = {0};
    assert_int_equal(qs_trained_model_digest(key, digest, &err), QS_OK);
    assert_string_equal(digest, "a21cd0fba662f939aa92ba7719a3ce819f5101d2b6f80b0f8238066f31710237");
    assert_int_equal(qs_trained_model_digest("not-a-key", digest, &err), QS_EINVAL);
    json_t *plain = json_loads(EVAL_TEXT, 0, NULL);
    char text[2048];
    snprintf(text, sizeof text, "%s", EVAL_TEXT);
    char *at = strstr(text, "\"model\":{");
    assert_non_null(at);
    char trained[2048];
    snprintf(
        trained, sizeof trained,
        "%.*s\"model\":{\"digest\":\"a21cd0fba662f939aa92ba7719a3ce819f5101d2b6f80b0f8238066f31"
        "710237\",\"path\":\"/ckpt/%s\",\"trained_by\":\"%s\"}%s",
        (int)(at - text), text, key, key, strstr(at, "}") + 1);
    json_t *spec = json_loads(trained, 0, NULL);
    assert_non_null(spec);
    qs_sensitivity_spec s;
    assert_int_equal(qs_sensitivity_decode(spec, &s, &err), QS_OK);
    assert_string_equal(s.model.trained_by, key);
    json_t *back = NULL;
    assert_int_equal(qs_sensitivity_encode(&s, &back, &err), QS_OK);
    char *canon = qs_spec_canonical(back);
    assert_string_equal(canon, trained);
    free(canon);
    char k1[65], k2[65];
    assert_int_equal(qs_spec_key(back, k1, &err), QS_OK);
    json_object_set_new(
        json_object_get(back, "model"), "trained_by",
        json_string("cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd"));
    assert_int_equal(qs_spec_key(back, k2, &err), QS_OK);
    assert_string_not_equal(k1, k2);
    /* the other key's stand-in is not this digest */
    qs_sensitivity_clear(&s);
    assert_int_equal(qs_sensitivity_decode(back, &s, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "model.digest: expected"));
    json_object_set_new(json_object_get(back, "model"), "trained_by", json_string("xyz"));
    assert_int_equal(qs_sensitivity_decode(back, &s, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "model.trained_by: expected the train job's job_key"));
    /* a model without trained_by: the spec and key of before */
    assert_int_equal(qs_sensitivity_decode(plain, &s, &err), QS_OK);
    assert_string_equal(s.model.trained_by, "");
    assert_int_equal(qs_spec_key(plain, k1, &err), QS_OK);
    assert_string_equal(k1, EVAL_KEY);
    qs_sensitivity_clear(&s);
    json_decref(back);
    json_decref(spec);
    json_decref(plain);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_eval_spec_encodes_as_before_with_the_same_key),
        cmocka_unit_test(test_stored_specs_decode_and_encode_to_the_same_text),
        cmocka_unit_test(test_policy_and_bos_specs_round_trip),
        cmocka_unit_test(test_key_ignores_paths_and_resources_only),
        cmocka_unit_test(test_numerics_is_in_the_key_unless_any),
        cmocka_unit_test(test_leave_one_out_by_block_and_by_layer),
        cmocka_unit_test(test_tied_embeddings_are_recorded_in_the_spec),
        cmocka_unit_test(test_decoder_names_the_bad_field),
        cmocka_unit_test(test_non_canonical_parts_and_lists_are_refused),
        cmocka_unit_test(test_lm_head_is_refused_in_block_modes),
        cmocka_unit_test(test_affinity_key_and_synthetic_identity),
        cmocka_unit_test(test_names_and_aliases),
        cmocka_unit_test(test_registry_checks_a_spec_by_its_kind),
        cmocka_unit_test(test_fuse_is_in_the_spec_and_key),
        cmocka_unit_test(test_sqnr_rows_is_in_the_spec_and_key),
        cmocka_unit_test(test_trained_model_is_named_by_its_training_job),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
