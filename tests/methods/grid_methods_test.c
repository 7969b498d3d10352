/* The `method` axis of a sensitivity grid (coordinator/grid/grid_sensitivity.c, kinds/method.h)
 * over a fixture checkpoint and token file (tests/cli fixtures) through the real probe. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "fixtures.h"
#include "grid.h"
#include "probe.h"

typedef struct env {
    char *dir;
    char grid[512];
} env;

static int setup(void **state) {
    env *e = calloc(1, sizeof *e);
    /* 300 tokens at ctx 16: 18 whole chunks */
    if (!e || !(e->dir = fx_grid_dir("qsweep-methods-grid", 3, 64, 300))) {
        free(e);
        return -1;
    }
    snprintf(e->grid, sizeof e->grid, "%s/grid.yaml", e->dir);
    *state = e;
    return 0;
}

static int teardown(void **state) {
    env *e = *state;
    if (fx_grid_dir_release(e->dir)) return -1;
    free(e);
    return 0;
}

static qs_status load(env *e, const char *text, qc_grid **g, qs_error *err) {
    assert_int_equal(fx_write_text(e->grid, text), 0);
    return qc_grid_load(e->grid, NULL, 0, qsweep_probe(), g, err);
}

static void expand(env *e, const char *text, qc_job_list *l) {
    qc_grid *g = NULL;
    qs_error err = {0};
    if (load(e, text, &g, &err) || qc_grid_expand(g, l, &err)) fail_msg("%s", err.msg);
    qc_grid_free(g);
}

#define HEAD "name: t\nmodels: [ckpt]\n"
#define SENS                                                                                       \
    "sensitivity:\n  formats: [nvfp4, mxfp4]\n  quantize: [weights, weights+activations]\n"        \
    "  modes: [component, block]\n"

/* method: [rtn] is the grid without a method: the same jobs, keys and labels. */
static void rtn_alone_is_the_grid_without_a_method(void **state) {
    env *e = *state;
    qc_job_list a = {0}, b = {0};
    expand(e, HEAD "dataset: {tokens: toks.bin, ctx: 16, max_chunks: 2}\n" SENS, &a);
    expand(e, HEAD "dataset: {tokens: toks.bin, ctx: 16, max_chunks: 2}\n" SENS "  method: [rtn]\n",
           &b);
    assert_int_equal(a.n, b.n);
    assert_true(a.n > 1);
    for (size_t i = 0; i < a.n; i++) {
        assert_string_equal(a.jobs[i].key, b.jobs[i].key);
        assert_string_equal(a.jobs[i].spec, b.jobs[i].spec);
    }
    qc_job_list_free(&a);
    qc_job_list_free(&b);
}

/* Three methods triple the evals; the calibrated ones carry the calibration, labels name them. */
static void each_method_is_a_job_of_its_own(void **state) {
    env *e = *state;
    qc_job_list a = {0}, b = {0};
    expand(e, HEAD "dataset: {tokens: toks.bin, ctx: 16, max_chunks: 2}\n" SENS, &a);
    expand(e,
           HEAD
           "dataset: {tokens: toks.bin, ctx: 16, max_chunks: 2, calibration: {chunks: 3}}\n" SENS
           "  method: [rtn, gptq, {name: smoothquant, options: {alpha: 0.75}}]\n",
           &b);
    assert_int_equal(b.n - 1, 3 * (a.n - 1));
    size_t gptq = 0, smooth = 0;
    for (size_t i = 0; i < b.n; i++) {
        json_t *s = json_loads(b.jobs[i].spec, 0, NULL);
        const char *m = json_string_value(json_object_get(s, "method"));
        json_t *cal = json_object_get(s, "calibration");
        if (m && !strcmp(m, "gptq")) {
            gptq++;
            assert_int_equal(json_integer_value(json_object_get(cal, "chunks")), 3);
            assert_non_null(strstr(b.jobs[i].label, "method gptq"));
        }
        if (m && !strcmp(m, "smoothquant")) {
            smooth++;
            assert_true(json_number_value(json_object_get(json_object_get(s, "method_options"),
                                                          "alpha")) == 0.75);
        }
        if (!m) assert_null(cal);
        json_decref(s);
    }
    assert_int_equal(gptq, a.n - 1);
    assert_int_equal(smooth, a.n - 1);
    qc_job_list_free(&a);
    qc_job_list_free(&b);
}

static void refused(env *e, const char *text, const char *want) {
    qc_grid *g = NULL;
    qs_error err = {0};
    qs_status st = load(e, text, &g, &err);
    qc_grid_free(g);
    if (st == QS_OK) fail_msg("accepted: %s", text);
    if (!strstr(err.msg, want)) fail_msg("expected '%s' in: %s", want, err.msg);
    if (!strstr(err.msg, "grid.yaml:")) fail_msg("no file:line in: %s", err.msg);
}

/* Errors name the file, line and what is wrong. */
static void bad_methods_and_calibration_are_refused(void **state) {
    env *e = *state;
    refused(e,
            HEAD "dataset: {tokens: toks.bin, ctx: 16, max_chunks: 2}\n" SENS "  method: [awq]\n",
            "unknown method 'awq'");
    /* the label results and plans print is no method name: the error names the grid's form */
    refused(e,
            HEAD
            "dataset: {tokens: toks.bin, ctx: 16, max_chunks: 2, calibration: {chunks: 3}}\n" SENS
            "  method: [mr-gptq+search]\n",
            "'mr-gptq+search' is a label; a grid writes {name: mr-gptq, options: {scale_search: "
            "true}}");
    /* per-linear's linears name blocks of the model: the fixture has 3 (0..2); the error points
       at the linear's entry (line 8, column 62), not at the method key */
    refused(e,
            HEAD
            "dataset: {tokens: toks.bin, ctx: 16, max_chunks: 2, calibration: {chunks: 3}}\n" SENS
            "  method: [{name: per-linear, options: {linears: {1.q: gptq, 9.q: gptq}}}]\n",
            "grid.yaml:8:62: method per-linear: linear '9.q': model ckpt has blocks 0..2");
    refused(e,
            HEAD
            "dataset: {tokens: toks.bin, ctx: 16, max_chunks: 2, calibration: {chunks: 3}}\n" SENS
            "  method:\n    - rtn\n    - name: per-linear\n      options:\n        linears:\n"
            "          1.q: gptq\n          99.down: gptq\n",
            "grid.yaml:14:11: method per-linear: linear '99.down': model ckpt has blocks 0..2");
    refused(e,
            HEAD "dataset: {tokens: toks.bin, ctx: 16, max_chunks: 2}\n" SENS "  method: [gptq]\n",
            "needs calibration data");
    refused(e,
            HEAD
            "dataset: {tokens: toks.bin, ctx: 16, max_chunks: 16, calibration: {chunks: 3}}\n" SENS
            "  method: [gptq]\n",
            "would overlap the scored ones");
    refused(e,
            HEAD "dataset: {tokens: toks.bin, ctx: 16, calibration: {chunks: 3}}\n" SENS
                 "  method: [gptq]\n",
            "would overlap the scored ones");
    refused(e,
            HEAD
            "dataset: {tokens: toks.bin, ctx: 16, max_chunks: 2, calibration: {chunks: 3}}\n" SENS
            "  method: [rotate16]\n",
            "no method of the grid is calibrated");
    refused(e,
            HEAD
            "dataset: {tokens: toks.bin, ctx: 16, max_chunks: 2, calibration: {chunks: 3}}\n" SENS
            "  method: [{name: smoothquant, options: {alpha: 2}}]\n",
            "alpha");
    /* a value strtod reads as no finite number is refused, not dropped for the default */
    refused(e,
            HEAD
            "dataset: {tokens: toks.bin, ctx: 16, max_chunks: 2, calibration: {chunks: 3}}\n" SENS
            "  method: [{name: gptq, options: {damp: nan}}]\n",
            "method_options.damp: expected a number in (0, 1)");
    refused(e,
            HEAD
            "dataset: {tokens: toks.bin, ctx: 16, max_chunks: 2, calibration: {chunks: 3}}\n" SENS
            "  method: [{name: smoothquant, options: {alpha: inf}}]\n",
            "method_options.alpha: expected a number in [0, 1]");
    refused(e,
            HEAD "dataset: {tokens: toks.bin, ctx: 16, max_chunks: 2}\n" SENS
                 "  method: [rtn, rtn]\n",
            "listed twice");
    /* fused groups share a tensor scale that a method's linear does not take */
    refused(e,
            HEAD "dataset: {tokens: toks.bin, ctx: 16, max_chunks: 2}\n" SENS
                 "  fuse: [qkv]\n  method: [rotate16]\n",
            "fused groups are round-to-nearest only");
}

/* A per-linear linear that a job of the grid does not quantize would be silently unused by
 * that job: the grid refuses it at its line, naming the linear and the job's mode and part. */
#define CALIB "dataset: {tokens: toks.bin, ctx: 16, max_chunks: 2, calibration: {chunks: 3}}\n"
static void per_linear_linears_a_job_does_not_quantize_are_refused(void **state) {
    env *e = *state;
    refused(e,
            HEAD CALIB "sensitivity:\n  formats: [nvfp4]\n  modes: [component]\n"
                       "  parts: [q, down]\n"
                       "  method: [{name: per-linear, options: {linears: {0.q: gptq}}}]\n",
            "method per-linear: linear '0.q' is not quantized by the component-mode job of part "
            "down");
    refused(e,
            HEAD CALIB
            "sensitivity:\n  formats: [nvfp4]\n  modes: [component]\n"
            "  parts: [q]\n"
            "  method: [{name: per-linear, options: {linears: {0.q: gptq, 1.k: gptq}}}]\n",
            "method per-linear: linear '1.k' is not quantized by the component-mode job of part q");
    refused(e,
            HEAD CALIB "sensitivity:\n  formats: [nvfp4]\n  modes: [block]\n"
                       "  method: [{name: per-linear, options: {linears: {0.q: gptq}}}]\n",
            "method per-linear: linear '0.q' is not quantized by the block-mode job of part 1");
    refused(e,
            HEAD CALIB "sensitivity:\n  modes: [policy]\n"
                       "  method: [{name: per-linear, options: {linears: {0.q: gptq}}}]\n"
                       "  policy: {0.down: nvfp4}\n",
            "method per-linear: linear '0.q' is not quantized by the policy-mode job");
    /* the line of the entry in a block mapping */
    refused(e,
            HEAD CALIB "sensitivity:\n  formats: [nvfp4]\n  modes: [component]\n"
                       "  parts: [q]\n  method:\n    - name: per-linear\n      options:\n"
                       "        linears:\n          0.q: gptq\n          2.up: gptq\n",
            "grid.yaml:13:");
    /* every job quantizes every linear named: q of each block in component mode of q, a plan's
       linears in its policy */
    qc_job_list l = {0};
    expand(e,
           HEAD CALIB "sensitivity:\n  formats: [nvfp4]\n  modes: [component]\n  parts: [q]\n"
                      "  method: [{name: per-linear, options: {linears: {0.q: gptq, 2.q: "
                      "mr-gptq}}}]\n",
           &l);
    assert_int_equal(l.n, 2);
    qc_job_list_free(&l);
    expand(e,
           HEAD CALIB "sensitivity:\n  modes: [policy]\n"
                      "  method: [{name: per-linear, options: {linears: {0.q: gptq}}}]\n"
                      "  policy: {0.q: nvfp4, 0.down: mxfp4}\n",
           &l);
    assert_int_equal(l.n, 2);
    qc_job_list_free(&l);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(rtn_alone_is_the_grid_without_a_method, setup, teardown),
        cmocka_unit_test_setup_teardown(each_method_is_a_job_of_its_own, setup, teardown),
        cmocka_unit_test_setup_teardown(bad_methods_and_calibration_are_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(per_linear_linears_a_job_does_not_quantize_are_refused,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
