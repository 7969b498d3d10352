/* The `method` of a sensitivity job spec (kinds/method.h, kinds/sensitivity.h): rtn is never
 * written, so an eval spec keeps the key recorded before methods existed (the same spec and key
 * as tests/kinds/test_spec.c's EVAL_TEXT); any other method, its options and its calibration
 * change the key, the calibration file's path does not; the decoder takes back exactly what
 * the encoder writes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "method.h"
#include "method_label.h"
#include "sensitivity.h"
#include "spec.h"

#define MODEL_DIGEST "eca1f7e6930602478a3e12bacc8deab4e52c8053a0b75014e38b5ec8679bd05e"
#define DATA_DIGEST "53c11776f131be55a12fd7c6ce25d3baaee3abc8682e5c4e2d8139992bd4e3df"
/* tests/kinds/test_spec.c: the key of its EVAL_TEXT, recorded by the pre-kinds build */
#define EVAL_KEY "17f40fb202416f0b03c604841176a4aa5ca37e3c28295abc90e837f24beacebe"

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
    strcpy(s->numerics_version, "1");
}

/* s made method i with its default options (and calibration at path when it takes one). */
static void with_method(qs_sensitivity_spec *s, const char *name, const char *path) {
    qs_error err = {0};
    s->method = qs_method_by_name(name);
    assert_true(s->method >= 0);
    assert_int_equal(qs_method_options(s->method, NULL, &s->method_options, &err), QS_OK);
    if (qs_method_at(s->method)->calibrated) {
        s->calib_chunks = 4;
        s->calib_path = strdup(path);
        strcpy(s->calib_digest, DATA_DIGEST);
    }
}

static void key_of(const qs_sensitivity_spec *s, char key[65], char **text) {
    json_t *o = NULL;
    qs_error err = {0};
    assert_int_equal(qs_sensitivity_encode(s, &o, &err), QS_OK);
    assert_int_equal(qs_spec_key(o, key, &err), QS_OK);
    if (text) *text = qs_spec_canonical(o);
    json_decref(o);
}

static void rtn_keeps_the_recorded_key(void **state) {
    (void)state;
    qs_sensitivity_spec s;
    eval_spec(&s);
    s.method = QS_METHOD_RTN;
    char key[65], *text = NULL;
    key_of(&s, key, &text);
    assert_string_equal(key, EVAL_KEY);
    assert_null(strstr(text, "method"));
    assert_null(strstr(text, "calibration"));
    free(text);
    qs_sensitivity_clear(&s);
}

/* Each method has a key of its own; encode -> decode -> encode gives the same text. */
static void every_method_has_its_own_key_and_round_trips(void **state) {
    (void)state;
    char keys[16][65];
    for (int i = 0; i < qs_method_count(); i++) {
        qs_sensitivity_spec s, back;
        eval_spec(&s);
        with_method(&s, qs_method_at(i)->name, "/d");
        char *text = NULL;
        key_of(&s, keys[i], &text);
        for (int j = 0; j < i; j++)
            assert_string_not_equal(keys[i], keys[j]);
        json_t *o = json_loads(text, 0, NULL);
        qs_error err = {0};
        assert_int_equal(qs_sensitivity_decode(o, &back, &err), QS_OK);
        char again[65], *text2 = NULL;
        key_of(&back, again, &text2);
        assert_string_equal(text, text2);
        assert_int_equal(back.method, i);
        json_decref(o);
        free(text);
        free(text2);
        qs_sensitivity_clear(&s);
        qs_sensitivity_clear(&back);
    }
}

/* The calibration file's digest and chunk count are part of the key; its path is not. */
static void calibration_counts_in_the_key_but_not_its_path(void **state) {
    (void)state;
    qs_sensitivity_spec s;
    eval_spec(&s);
    with_method(&s, "gptq", "/d");
    char k1[65], k2[65], k3[65];
    key_of(&s, k1, NULL);
    free(s.calib_path);
    s.calib_path = strdup("/elsewhere/d");
    key_of(&s, k2, NULL);
    assert_string_equal(k1, k2);
    s.calib_chunks = 5;
    key_of(&s, k3, NULL);
    assert_string_not_equal(k1, k3);
    json_object_set_new(s.method_options, "act_order", json_true());
    s.calib_chunks = 4;
    key_of(&s, k3, NULL);
    assert_string_not_equal(k1, k3);
    qs_sensitivity_clear(&s);
}

static qs_status decode_edit(const char *name, const char *key, json_t *value, qs_error *err) {
    qs_sensitivity_spec s, back;
    eval_spec(&s);
    with_method(&s, name, "/d");
    json_t *o = NULL;
    assert_int_equal(qs_sensitivity_encode(&s, &o, err), QS_OK);
    if (value)
        json_object_set_new(o, key, value);
    else
        json_object_del(o, key);
    qs_status st = qs_sensitivity_decode(o, &back, err);
    json_decref(o);
    qs_sensitivity_clear(&s);
    qs_sensitivity_clear(&back);
    return st;
}

/* What the encoder never writes is refused, naming the field. */
static void decoder_refuses_what_encode_never_writes(void **state) {
    (void)state;
    qs_error err = {0};
    assert_int_equal(decode_edit("gptq", "method", json_string("rtn"), &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "rtn is written as no method"));
    assert_int_equal(decode_edit("gptq", "method", json_string("awq"), &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "unknown 'awq'"));
    assert_int_equal(
        decode_edit("gptq", "method_options", json_pack("{s:b}", "act_order", 0), &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "method_options"));
    assert_int_equal(decode_edit("gptq", "calibration", NULL, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "calibration"));
    assert_int_equal(
        decode_edit("rotate16", "calibration",
                    json_pack("{s:i,s:s,s:s}", "chunks", 2, "path", "/d", "digest", DATA_DIGEST),
                    &err),
        QS_EINVAL);
    assert_non_null(strstr(err.msg, "takes no calibration"));
    assert_int_equal(
        decode_edit("smoothquant", "method_options", json_pack("{s:f}", "alpha", 1.5), &err),
        QS_EINVAL);
    assert_non_null(strstr(err.msg, "alpha"));
}

/* per-linear's options: every option with its default and the linears as given; each linear's
 * method is a real one (not rtn, not per-linear itself) on a "<block>.<kind>" key, and the map
 * counts in the key. */
static void per_linear_options_name_a_method_per_block_linear(void **state) {
    (void)state;
    qs_error err = {0};
    int pl = qs_method_by_name("per-linear");
    assert_true(pl > QS_METHOD_RTN);
    assert_true(qs_method_at(pl)->per_linear && qs_method_at(pl)->calibrated);
    json_t *o = NULL;
    json_t *given = json_pack("{s:{s:s,s:s},s:f}", "linears", "0.q", "gptq", "3.down", "rotate16",
                              "damp", 0.05);
    assert_int_equal(qs_method_options(pl, given, &o, &err), QS_OK);
    json_t *want = json_pack("{s:b,s:f,s:f,s:{s:s,s:s}}", "act_order", 0, "alpha", 0.5, "damp",
                             0.05, "linears", "0.q", "gptq", "3.down", "rotate16");
    assert_true(json_equal(o, want));
    json_decref(want);
    json_decref(given);
    json_decref(o);
    /* no linears: the empty map, every linear of the policy by rtn */
    assert_int_equal(qs_method_options(pl, NULL, &o, &err), QS_OK);
    assert_int_equal(json_object_size(json_object_get(o, "linears")), 0);
    json_decref(o);
    static const char *const bad[][3] = {
        {"0.q", "rtn", "expected a method other than rtn and per-linear"},
        {"0.q", "per-linear", "expected a method other than rtn and per-linear"},
        {"0.q", "awq", "expected a method other than rtn and per-linear"},
        {"lm_head", "gptq", "'lm_head' is not a block linear"},
        {"0.q_proj", "gptq", "'0.q_proj' is not a block linear"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        given = json_pack("{s:{s:s}}", "linears", bad[i][0], bad[i][1]);
        o = NULL;
        assert_int_equal(qs_method_options(pl, given, &o, &err), QS_EINVAL);
        assert_null(o);
        if (!strstr(err.msg, bad[i][2]) || !strstr(err.msg, "method_options.linears"))
            fail_msg("%s: %s: %s", bad[i][0], bad[i][1], err.msg);
        json_decref(given);
    }
    given = json_pack("{s:s}", "linears", "gptq");
    assert_int_equal(qs_method_options(pl, given, &o, &err), QS_EINVAL);
    json_decref(given);
    /* the map is the job: another method on one linear, another key */
    qs_sensitivity_spec s;
    eval_spec(&s);
    with_method(&s, "per-linear", "/d");
    char k1[65], k2[65];
    json_object_set_new(s.method_options, "linears", json_pack("{s:s}", "0.q", "gptq"));
    key_of(&s, k1, NULL);
    json_object_set_new(s.method_options, "linears", json_pack("{s:s}", "0.q", "mr-gptq"));
    key_of(&s, k2, NULL);
    assert_string_not_equal(k1, k2);
    qs_sensitivity_clear(&s);
}

/* mr-gptq's scale_search: written only when true, so mr-gptq without it (or with false) keeps
 * its key, and with it has a key of its own that round-trips; per-linear carries it, gptq and
 * non-booleans are refused naming the option. */
static void mr_gptq_scale_search_is_keyed_only_when_true(void **state) {
    (void)state;
    qs_error err = {0};
    int mr = qs_method_by_name("mr-gptq");
    char plain[65], off[65], on[65], again[65];
    qs_sensitivity_spec s, back;
    eval_spec(&s);
    with_method(&s, "mr-gptq", "/d");
    key_of(&s, plain, NULL);
    json_t *given = json_pack("{s:b}", "scale_search", 0);
    json_decref(s.method_options);
    assert_int_equal(qs_method_options(mr, given, &s.method_options, &err), QS_OK);
    json_decref(given);
    assert_null(json_object_get(s.method_options, "scale_search"));
    key_of(&s, off, NULL);
    assert_string_equal(plain, off);
    given = json_pack("{s:b}", "scale_search", 1);
    json_decref(s.method_options);
    assert_int_equal(qs_method_options(mr, given, &s.method_options, &err), QS_OK);
    json_decref(given);
    json_t *want = json_pack("{s:b,s:f,s:b}", "act_order", 0, "damp", 0.01, "scale_search", 1);
    assert_true(json_equal(s.method_options, want));
    json_decref(want);
    char *text = NULL;
    key_of(&s, on, &text);
    assert_string_not_equal(plain, on);
    json_t *o = json_loads(text, 0, NULL);
    assert_int_equal(qs_sensitivity_decode(o, &back, &err), QS_OK);
    key_of(&back, again, NULL);
    assert_string_equal(on, again);
    json_decref(o);
    free(text);
    qs_sensitivity_clear(&s);
    qs_sensitivity_clear(&back);
    json_t *out = NULL;
    given = json_pack("{s:b}", "scale_search", 1);
    assert_int_equal(qs_method_options(qs_method_by_name("gptq"), given, &out, &err), QS_EINVAL);
    assert_null(out);
    assert_non_null(strstr(err.msg, "method_options.scale_search: unknown option"));
    /* per-linear carries it for its mr-gptq linears, as a plan over an mr-gptq sweep does */
    assert_int_equal(qs_method_options(qs_method_by_name("per-linear"), given, &out, &err), QS_OK);
    assert_true(json_is_true(json_object_get(out, "scale_search")));
    json_decref(out);
    json_decref(given);
    out = NULL;
    given = json_pack("{s:s}", "scale_search", "yes");
    assert_int_equal(qs_method_options(mr, given, &out, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "method_options.scale_search: expected true or false"));
    json_decref(given);
}

/* The label a user reads and writes: the method's name, "+search" after mr-gptq with
 * scale_search; the label names back that method and flag, and "+search" after any other
 * method names nothing. */
static void a_method_with_scale_search_is_labelled_plus_search(void **state) {
    (void)state;
    int mr = qs_method_by_name("mr-gptq");
    char label[32];
    json_t *on = json_pack("{s:b,s:f,s:b}", "act_order", 0, "damp", 0.01, "scale_search", 1);
    json_t *off = json_pack("{s:b,s:f}", "act_order", 0, "damp", 0.01);
    qs_method_label(mr, on, label, sizeof label);
    assert_string_equal(label, "mr-gptq+search");
    qs_method_label(mr, off, label, sizeof label);
    assert_string_equal(label, "mr-gptq");
    qs_method_label(QS_METHOD_RTN, NULL, label, sizeof label);
    assert_string_equal(label, "rtn");
    qs_method_label(qs_method_by_name("per-linear"), on, label, sizeof label);
    assert_string_equal(label, "per-linear");
    json_decref(on);
    json_decref(off);
    bool search = true;
    assert_int_equal(qs_method_by_label("mr-gptq", &search), mr);
    assert_false(search);
    assert_int_equal(qs_method_by_label("mr-gptq+search", &search), mr);
    assert_true(search);
    assert_int_equal(qs_method_by_label("rtn", &search), QS_METHOD_RTN);
    static const char *const none[] = {"gptq+search",       "rtn+search",
                                       "per-linear+search", "+search",
                                       "mr-gptq+",          "mr-gptq+search+search",
                                       "mr-gptq+searchx",   ""};
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++)
        if (qs_method_by_label(none[i], &search) >= 0) fail_msg("'%s' named a method", none[i]);
    assert_int_equal(qs_method_by_label(NULL, &search), -1);
}

/* Two settings of one label measured in one sweep are told apart by the options that differ
 * between them ("gptq+damp=0.1"), in the shortest decimal; a label measured once, or options
 * equal across its settings, stay out. The setting label names back the method, the length of
 * its label and the scale search; an option the method has not, or one without a value, names
 * nothing. */
static void two_settings_of_one_label_are_labelled_by_their_options(void **state) {
    (void)state;
    int gq = qs_method_by_name("gptq"), mr = qs_method_by_name("mr-gptq");
    int sq = qs_method_by_name("smoothquant");
    json_t *d01 = json_pack("{s:b,s:f}", "act_order", 0, "damp", 0.01);
    json_t *d1 = json_pack("{s:b,s:f}", "act_order", 0, "damp", 0.1);
    json_t *d01a = json_pack("{s:b,s:f}", "act_order", 1, "damp", 0.01);
    json_t *s01 = json_pack("{s:b,s:f,s:b}", "act_order", 0, "damp", 0.01, "scale_search", 1);
    json_t *s02 = json_pack("{s:b,s:f,s:b}", "act_order", 0, "damp", 0.02, "scale_search", 1);
    json_t *a5 = json_pack("{s:f}", "alpha", 0.5);
    const qs_method_setting all[] = {
        {QS_METHOD_RTN, NULL}, {gq, d01}, {gq, d1}, {mr, s01}, {mr, s02}, {mr, d01}, {sq, a5}};
    static const char *const want[] = {"rtn",
                                       "gptq+damp=0.01",
                                       "gptq+damp=0.1",
                                       "mr-gptq+search+damp=0.01",
                                       "mr-gptq+search+damp=0.02",
                                       "mr-gptq",
                                       "smoothquant"};
    char label[64];
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        int n =
            qs_method_setting_label(&all[i], all, sizeof all / sizeof all[0], label, sizeof label);
        assert_string_equal(label, want[i]);
        assert_int_equal(n, (int)strlen(want[i]));
        bool search;
        size_t len;
        assert_int_equal(qs_method_by_setting_label(label, &search, &len), all[i].method);
        assert_int_equal(search, strstr(want[i], "+search") != NULL);
        assert_int_equal(len, strcspn(want[i], "+") + (search ? strlen("+search") : 0));
    }
    /* two options that differ: both, in label order; alone in its sweep, a setting is its label */
    const qs_method_setting three[] = {{gq, d01}, {gq, d1}, {gq, d01a}};
    qs_method_setting_label(&three[2], three, 3, label, sizeof label);
    assert_string_equal(label, "gptq+act_order=true+damp=0.01");
    qs_method_setting_label(&three[1], &three[1], 1, label, sizeof label);
    assert_string_equal(label, "gptq");
    /* a short buffer: the whole count, the text cut */
    char small[8];
    assert_int_equal(qs_method_setting_label(&all[2], all, 3, small, sizeof small), 13);
    assert_string_equal(small, "gptq+da");
    static const char *const none[] = {
        "gptq+damp=",         "gptq+alpha=0.5",    "smoothquant+damp=1", "rotate16+damp=0.1",
        "gptq+search+damp=1", "gptq+damp=0.1+foo", "gptq+dampx=0.1",     "awq+damp=0.1"};
    bool search;
    size_t len;
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++)
        if (qs_method_by_setting_label(none[i], &search, &len) >= 0)
            fail_msg("'%s' named a method", none[i]);
    assert_int_equal(qs_method_by_setting_label("gptq+act_order=true+damp=0.1", &search, &len), gq);
    assert_int_equal(len, 4);
    json_decref(d01);
    json_decref(d1);
    json_decref(d01a);
    json_decref(s01);
    json_decref(s02);
    json_decref(a5);
}

/* Two per-linear settings of one sweep differ in their linears, which no option of the label
 * spells: each is told apart by the linears whose method differs from another setting's, in key
 * order, as "+<block>.<kind>=<method label>" (a map's scale_search folded into its mr-gptq
 * linears), and the setting label names back per-linear. */
static void two_per_linear_settings_are_labelled_by_their_linears(void **state) {
    (void)state;
    int pl = qs_method_by_name("per-linear");
    json_t *a = json_pack("{s:b,s:f,s:f,s:{s:s,s:s}}", "act_order", 0, "alpha", 0.5, "damp", 0.01,
                          "linears", "0.q", "gptq", "1.q", "gptq");
    json_t *b = json_pack("{s:b,s:f,s:f,s:{s:s,s:s},s:b}", "act_order", 0, "alpha", 0.5, "damp",
                          0.01, "linears", "0.q", "mr-gptq", "1.q", "gptq", "scale_search", 1);
    json_t *c = json_pack("{s:b,s:f,s:f,s:{s:s,s:s,s:s}}", "act_order", 0, "alpha", 0.5, "damp",
                          0.01, "linears", "1.q", "gptq", "0.q", "gptq", "0.down", "smoothquant");
    const qs_method_setting all[] = {{QS_METHOD_RTN, NULL}, {pl, a}, {pl, b}, {pl, c}};
    static const char *const want[] = {"rtn", "per-linear+0.q=gptq",
                                       "per-linear+0.q=mr-gptq+search",
                                       "per-linear+0.down=smoothquant+0.q=gptq"};
    char label[96];
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        int n =
            qs_method_setting_label(&all[i], all, sizeof all / sizeof all[0], label, sizeof label);
        assert_string_equal(label, want[i]);
        assert_int_equal(n, (int)strlen(want[i]));
        bool search;
        size_t len;
        assert_int_equal(qs_method_by_setting_label(label, &search, &len), all[i].method);
        assert_false(search);
        assert_int_equal(len, strcspn(want[i], "+"));
    }
    /* alone in its sweep, per-linear is its label */
    qs_method_setting_label(&all[1], &all[1], 1, label, sizeof label);
    assert_string_equal(label, "per-linear");
    static const char *const none[] = {"per-linear+0.q=", "per-linear+q=gptq", "gptq+0.q=gptq",
                                       "per-linear+0.q=gptq+foo", "per-linear+search"};
    bool search;
    size_t len;
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++)
        if (qs_method_by_setting_label(none[i], &search, &len) >= 0)
            fail_msg("'%s' named a method", none[i]);
    json_decref(a);
    json_decref(b);
    json_decref(c);
}

/* A setting label the user types (`qsweep plan --methods`) compares with the measured one by
 * value: each option read as the grid reads it and written as qs_method_setting_label writes
 * it, options in label order, per-linear's linears in key order. */
static void a_typed_setting_label_reads_its_values_as_the_grid_does(void **state) {
    (void)state;
    int gq = qs_method_by_name("gptq"), sq = qs_method_by_name("smoothquant");
    json_t *d01 = json_pack("{s:b,s:f}", "act_order", 0, "damp", 0.01);
    json_t *d1 = json_pack("{s:b,s:f}", "act_order", 0, "damp", 0.1);
    json_t *a5 = json_pack("{s:f}", "alpha", 0.5), *a1 = json_pack("{s:f}", "alpha", 1.0);
    const qs_method_setting all[] = {{gq, d01}, {gq, d1}, {sq, a5}, {sq, a1}};
    char measured[64], typed[64];
    qs_error err = {0};
    qs_method_setting_label(&all[1], all, 4, measured, sizeof measured);
    assert_string_equal(measured, "gptq+damp=0.1");
    static const char *const damp[] = {"gptq+damp=0.1", "gptq+damp=0.10", "gptq+damp=1e-1",
                                       "gptq+damp=.1", "gptq+damp=0.100000000000000005"};
    for (size_t i = 0; i < sizeof damp / sizeof damp[0]; i++) {
        assert_int_equal(qs_method_setting_label_canonical(damp[i], typed, sizeof typed, &err),
                         QS_OK);
        assert_string_equal(typed, measured);
    }
    qs_method_setting_label(&all[3], all, 4, measured, sizeof measured);
    assert_string_equal(measured, "smoothquant+alpha=1");
    assert_int_equal(
        qs_method_setting_label_canonical("smoothquant+alpha=1.0", typed, sizeof typed, &err),
        QS_OK);
    assert_string_equal(typed, measured);
    static const char *const in[] = {"gptq+damp=0.020+act_order=true", "mr-gptq+search+damp=2e-2",
                                     "rtn", "mr-gptq+search",
                                     "per-linear+1.q=gptq+0.q=mr-gptq+search+damp=0.05"};
    static const char *const want[] = {"gptq+act_order=true+damp=0.02", "mr-gptq+search+damp=0.02",
                                       "rtn", "mr-gptq+search",
                                       "per-linear+damp=0.05+0.q=mr-gptq+search+1.q=gptq"};
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
        assert_int_equal(qs_method_setting_label_canonical(in[i], typed, sizeof typed, &err),
                         QS_OK);
        assert_string_equal(typed, want[i]);
    }
    assert_int_equal(qs_method_setting_label_canonical("awq", typed, sizeof typed, &err),
                     QS_ENOTFOUND);
    json_decref(d01);
    json_decref(d1);
    json_decref(a5);
    json_decref(a1);
}

/* A typed setting label that spells out options names every setting whose options agree, even
 * where the sweep measured that label in one setting and so labels it without them
 * ("gptq+damp=0.01" names the one gptq setting, labelled "gptq"); a bare label names every
 * setting of it; a value, an option or a linear that differs names none. */
static void a_typed_setting_label_names_the_settings_it_agrees_with(void **state) {
    (void)state;
    int gq = qs_method_by_name("gptq"), mr = qs_method_by_name("mr-gptq");
    int pl = qs_method_by_name("per-linear");
    json_t *d01 = json_pack("{s:b,s:f}", "act_order", 0, "damp", 0.01);
    json_t *srch = json_pack("{s:b,s:f,s:b}", "act_order", 0, "damp", 0.01, "scale_search", 1);
    json_t *lin = json_pack("{s:f,s:{s:s,s:s}}", "damp", 0.05, "linears", "0.q", "mr-gptq+search",
                            "1.q", "gptq");
    const qs_method_setting g = {gq, d01}, m = {mr, srch}, p = {pl, lin};
    static const char *const yes[] = {"gptq", "gptq+damp=0.01", "gptq+act_order=false",
                                      "gptq+act_order=false+damp=0.01"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
        if (!qs_method_setting_named(yes[i], strlen(yes[i]), &g))
            fail_msg("'%s' does not name gptq with damp 0.01", yes[i]);
    static const char *const no[] = {"gptq+damp=0.1", "gptq+act_order=true", "mr-gptq",
                                     "smoothquant+alpha=0.5", "gptq+search"};
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        if (qs_method_setting_named(no[i], strlen(no[i]), &g))
            fail_msg("'%s' names gptq with damp 0.01", no[i]);
    assert_true(qs_method_setting_named("mr-gptq+search+damp=0.01", 24, &m));
    assert_false(qs_method_setting_named("mr-gptq+damp=0.01", 17, &m));
    const char *one = "per-linear+damp=0.05+0.q=mr-gptq+search";
    assert_true(qs_method_setting_named(one, strlen(one), &p));
    const char *other = "per-linear+1.q=mr-gptq+search";
    assert_false(qs_method_setting_named(other, strlen(other), &p));
    /* the length bounds the text: a list's entry */
    assert_true(qs_method_setting_named("gptq+damp=0.01,rtn", 14, &g));
    json_decref(d01);
    json_decref(srch);
    json_decref(lin);
}

/* per-linear's labels: a map whose mr-gptq linears all search is written as the plans wrote it
 * before labels ("mr-gptq" and scale_search true: the same job and key, however it was
 * given); a map of both variants keeps the labels and no flag, and has a key of its own. */
static void per_linear_writes_each_scale_search_choice_one_way(void **state) {
    (void)state;
    qs_error err = {0};
    int pl = qs_method_by_name("per-linear");
    json_t *old = json_pack("{s:{s:s,s:s,s:s},s:b}", "linears", "0.q", "mr-gptq", "0.down",
                            "mr-gptq", "1.q", "gptq", "scale_search", 1);
    json_t *by_label = json_pack("{s:{s:s,s:s,s:s}}", "linears", "0.q", "mr-gptq+search", "0.down",
                                 "mr-gptq+search", "1.q", "gptq");
    json_t *both = json_pack("{s:{s:s,s:s,s:s},s:b}", "linears", "0.q", "mr-gptq+search", "0.down",
                             "mr-gptq", "1.q", "gptq", "scale_search", 1);
    json_t *a = NULL, *b = NULL, *c = NULL;
    assert_int_equal(qs_method_options(pl, old, &a, &err), QS_OK);
    assert_int_equal(qs_method_options(pl, by_label, &b, &err), QS_OK);
    assert_int_equal(qs_method_options(pl, both, &c, &err), QS_OK);
    json_t *want = json_pack("{s:b,s:f,s:f,s:{s:s,s:s,s:s},s:b}", "act_order", 0, "alpha", 0.5,
                             "damp", 0.01, "linears", "0.q", "mr-gptq", "0.down", "mr-gptq", "1.q",
                             "gptq", "scale_search", 1);
    assert_true(json_equal(a, want));
    assert_true(json_equal(b, want));
    /* scale_search true makes a plain "mr-gptq" search too: every mr-gptq linear searches */
    assert_true(json_equal(c, want));
    json_decref(want);
    json_t *mixed = json_pack("{s:{s:s,s:s,s:s}}", "linears", "0.q", "mr-gptq+search", "0.down",
                              "mr-gptq", "1.q", "gptq");
    json_t *d = NULL;
    assert_int_equal(qs_method_options(pl, mixed, &d, &err), QS_OK);
    want = json_pack("{s:b,s:f,s:f,s:{s:s,s:s,s:s}}", "act_order", 0, "alpha", 0.5, "damp", 0.01,
                     "linears", "0.q", "mr-gptq+search", "0.down", "mr-gptq", "1.q", "gptq");
    assert_true(json_equal(d, want));
    json_decref(want);
    qs_sensitivity_spec s;
    eval_spec(&s);
    with_method(&s, "per-linear", "/d");
    char k_all[65], k_mixed[65];
    json_decref(s.method_options);
    s.method_options = json_incref(a);
    key_of(&s, k_all, NULL);
    json_decref(s.method_options);
    s.method_options = json_incref(d);
    key_of(&s, k_mixed, NULL);
    assert_string_not_equal(k_all, k_mixed);
    qs_sensitivity_clear(&s);
    json_t *bad = json_pack("{s:{s:s}}", "linears", "0.q", "gptq+search"), *o = NULL;
    assert_int_equal(qs_method_options(pl, bad, &o, &err), QS_EINVAL);
    assert_null(o);
    assert_non_null(strstr(err.msg, "0.q: expected a method other than rtn and per-linear"));
    /* the refusal names the label it was given: only mr-gptq has a "+search" variant */
    if (!strstr(err.msg, "not 'gptq+search'")) fail_msg("%s", err.msg);
    json_decref(bad);
    json_decref(old);
    json_decref(by_label);
    json_decref(both);
    json_decref(mixed);
    json_decref(a);
    json_decref(b);
    json_decref(c);
    json_decref(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rtn_keeps_the_recorded_key),
        cmocka_unit_test(every_method_has_its_own_key_and_round_trips),
        cmocka_unit_test(calibration_counts_in_the_key_but_not_its_path),
        cmocka_unit_test(decoder_refuses_what_encode_never_writes),
        cmocka_unit_test(per_linear_options_name_a_method_per_block_linear),
        cmocka_unit_test(mr_gptq_scale_search_is_keyed_only_when_true),
        cmocka_unit_test(a_method_with_scale_search_is_labelled_plus_search),
        cmocka_unit_test(two_settings_of_one_label_are_labelled_by_their_options),
        cmocka_unit_test(two_per_linear_settings_are_labelled_by_their_linears),
        cmocka_unit_test(a_typed_setting_label_reads_its_values_as_the_grid_does),
        cmocka_unit_test(a_typed_setting_label_names_the_settings_it_agrees_with),
        cmocka_unit_test(per_linear_writes_each_scale_search_choice_one_way),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
