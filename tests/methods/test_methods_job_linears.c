/* A per-linear job spec as the worker reads it (worker/method/method_spec.h), written by hand
 * rather than by a grid: each linear of its "linears" map must be one the job quantizes, by the
 * rule the grid applies at submit (kinds/method.h qs_method_linear_quantized), in every mode. A
 * linear the job leaves unquantized is refused naming the linear and the job's mode; a linear it
 * quantizes passes on to the next step, reading the calibration file (absent here). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "method_spec.h"
#include "sensitivity.h"

#define DIGEST "0000000000000000000000000000000000000000000000000000000000000000"
#define CALIB "/nonexistent/qsweep-calibration.tokens"

/* An eval job in mode and part, method per-linear with {linear: "gptq"}, as a job spec's text
 * holds it; policy mode takes the format "policy", the map {"0.k": "nvfp4"} and its id as part. */
static json_t *job_spec(const char *mode, const char *part, const char *linear) {
    json_t *s = json_pack("{s:{s:i, s:s, s:i, s:s}, s:s, s:s, s:[s, s], s:s, s:{s:s, s:s},"
                          " s:s, s:s, s:s, s:{s:b, s:f, s:f, s:{s:s}},"
                          " s:{s:i, s:s, s:s}}",
                          "dataset", "ctx", 64, "digest", DIGEST, "max_chunks", 8, "path", "/d",
                          "format", "nvfp4", "kind", "eval", "metrics", "kl", "ppl", "mode", mode,
                          "model", "digest", DIGEST, "path", "/m", "numerics_version", "1",
                          "quantize", "weights", "method", "per-linear", "method_options",
                          "act_order", 0, "alpha", 0.5, "damp", 0.01, "linears", linear, "gptq",
                          "calibration", "chunks", 1, "path", CALIB, "digest", DIGEST);
    assert_non_null(s);
    json_t *fopts = json_pack("{s:s, s:s}", "clamp", "none", "rounding", "rne");
    if (!strcmp(mode, "policy")) {
        json_t *map = json_pack("{s:s}", "0.k", "nvfp4");
        char id[17];
        qs_error err = {0};
        assert_int_equal(qs_sensitivity_policy_id(map, id, &err), QS_OK);
        json_object_set_new(s, "format", json_string("policy"));
        json_object_set_new(s, "policy", map);
        json_object_set_new(s, "part", json_string(id));
        json_object_set_new(s, "format_options", json_pack("{s:o}", "nvfp4", fopts));
    } else {
        json_object_set_new(s, "part", json_string(part));
        json_object_set_new(s, "format_options", fopts);
    }
    return s;
}

/* The worker's plan of that job: its status, err holding its message. */
static qs_status plan_of(const char *mode, const char *part, const char *linear, qs_error *err) {
    json_t *spec = job_spec(mode, part, linear);
    qs_sensitivity_spec s;
    if (qs_sensitivity_decode(spec, &s, err)) fail_msg("%s %s: %s", mode, part, err->msg);
    qw_method_plan plan;
    uint32_t *calib = NULL;
    qs_status st = qw_method_plan_from_spec(&s, &plan, &calib, err);
    qw_method_plan_clear(&plan);
    free(calib);
    qs_sensitivity_clear(&s);
    json_decref(spec);
    return st;
}

/* One job per mode of a per-linear map naming a linear it leaves unquantized: refused with
 * QS_EINVAL, naming the linear, the mode and the part. */
static void per_linear_linears_a_job_leaves_unquantized_are_refused(void **state) {
    (void)state;
    static const struct {
        const char *mode, *part, *linear, *says;
    } cases[] = {
        {"component", "down", "0.q", "component-mode job (part down)"},
        {"leave_one_out", "q", "1.q", "leave_one_out-mode job (part q)"},
        {"block", "1", "0.q", "block-mode job (part 1)"},
        {"layer", "0.k", "0.q", "layer-mode job (part 0.k)"},
        {"cumulative", "0", "1.q", "cumulative-mode job (part 0)"},
        {"leave_one_out_block", "0", "0.up", "leave_one_out_block-mode job (part 0)"},
        {"leave_one_out_layer", "1.v", "1.v", "leave_one_out_layer-mode job (part 1.v)"},
        {"policy", NULL, "0.q", "policy-mode job (policy "},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        qs_error err = {0};
        if (plan_of(cases[i].mode, cases[i].part, cases[i].linear, &err) != QS_EINVAL)
            fail_msg("%s %s with %s: not refused (%s)", cases[i].mode, cases[i].part,
                     cases[i].linear, err.msg);
        char linear[64];
        snprintf(linear, sizeof linear, "method_options.linears.%s: linear '%s' is not quantized",
                 cases[i].linear, cases[i].linear);
        if (!strstr(err.msg, linear) || !strstr(err.msg, cases[i].says))
            fail_msg("%s %s with %s: the message names no linear or mode: %s", cases[i].mode,
                     cases[i].part, cases[i].linear, err.msg);
    }
}

/* The same modes with a linear each job quantizes: no refusal of the map; the plan goes on to
 * read the calibration tokens, whose absence is the error it then stops at. */
static void per_linear_linears_a_job_quantizes_pass(void **state) {
    (void)state;
    static const struct {
        const char *mode, *part, *linear;
    } cases[] = {
        {"component", "down", "1.down"},
        {"leave_one_out", "q", "1.k"},
        {"block", "1", "1.q"},
        {"layer", "0.k", "0.k"},
        {"cumulative", "0", "0.gate"},
        {"leave_one_out_block", "0", "1.up"},
        {"leave_one_out_layer", "1.v", "1.k"},
        {"policy", NULL, "0.k"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        qs_error err = {0};
        qs_status st = plan_of(cases[i].mode, cases[i].part, cases[i].linear, &err);
        if (st == QS_OK || strstr(err.msg, "linears") || !strstr(err.msg, CALIB))
            fail_msg("%s %s with %s: expected the calibration file's error, got %d: %s",
                     cases[i].mode, cases[i].part, cases[i].linear, st, err.msg);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(per_linear_linears_a_job_leaves_unquantized_are_refused),
        cmocka_unit_test(per_linear_linears_a_job_quantizes_pass),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
