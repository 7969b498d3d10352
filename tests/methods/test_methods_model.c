/* Methods on a synthetic Llama (worker/method, method_apply.h). With the identity weight format the
 * method's transforms are all that changes, so a rotation (block or global) or SmoothQuant must
 * leave the logits as they are up to FP32 rounding: that checks the online input hook against
 * the weight it is paired with in every linear. Then: the policy's reset brings the model back
 * bit for bit, quantized methods run in W4A16 and W4A4, and the tiles a method cannot use are
 * refused naming the linear. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "format.h"
#include "method_apply.h"
#include "model.h"
#include "policy.h"

enum { CTX = 32 };

static uint32_t tokens[4 * CTX];

static void make_tokens(int vocab) {
    uint64_t s = 88172645463325252ull;
    for (size_t i = 0; i < sizeof tokens / sizeof tokens[0]; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        tokens[i] = (uint32_t)(s % (uint64_t)vocab);
    }
}

/* logits of chunk 0 (the scored one: calibration uses chunks 1..3) into a fresh buffer */
static float *logits_of(qw_model *m) {
    const int V = qw_model_config(m)->vocab_size;
    const float *l;
    qs_error err = {0};
    if (qw_model_forward(m, tokens, CTX, &l, &err)) fail_msg("%s", err.msg);
    float *out = malloc((size_t)CTX * V * sizeof *out);
    assert_non_null(out);
    memcpy(out, l, (size_t)CTX * V * sizeof *out);
    return out;
}

static void policy_all(qw_model *m, const char *wfmt, const char *afmt) {
    qw_policy p;
    qs_error err = {0};
    assert_int_equal(qw_policy_init(&p, qw_model_config(m)->n_layers, &err), QS_OK);
    qw_quant_spec s = {.weight = qk_format_by_name(wfmt),
                       .act = afmt ? qk_format_by_name(afmt) : NULL};
    assert_int_equal(qw_policy_isolation(&p, QW_ISO_ALL, QW_LINEAR_Q, 0, &s, &err), QS_OK);
    if (qw_model_apply_policy(m, &p, &err)) fail_msg("%s", err.msg);
    qw_policy_free(&p);
}

static qw_method_plan plan_named(const char *name, int rotate, int gptq, int smooth) {
    qw_method_plan p = {.name = name,
                        .rotate = rotate,
                        .gptq = gptq,
                        .smooth = smooth,
                        .alpha = 0.5,
                        .calib = tokens + CTX,
                        .calib_chunks = 3,
                        .ctx = CTX};
    return p;
}

static qw_model *tiny(const char *shape) {
    qw_model *m;
    qs_error err = {0};
    if (qw_model_create_synthetic(shape, CTX, 2, &m, &err)) fail_msg("%s", err.msg);
    make_tokens(qw_model_config(m)->vocab_size);
    return m;
}

/* Rotations of 16 and 32, the global one and SmoothQuant on the identity format: every logit
 * within 2e-5 of the largest one's magnitude of the unquantized model's. */
static void transforms_alone_leave_the_logits_unchanged(void **state) {
    (void)state;
    qw_model *m = tiny("synthetic:tiny-llama3:7");
    const int V = qw_model_config(m)->vocab_size;
    float *ref = logits_of(m);
    double amax = 0.0;
    for (size_t i = 0; i < (size_t)CTX * V; i++)
        amax = fmax(amax, fabs(ref[i]));
    const qw_method_plan plans[] = {
        plan_named("rotate16", 16, 0, 0), plan_named("rotate32", 32, 0, 0),
        plan_named("rotate-full", -2, 0, 0), plan_named("smoothquant", 0, 0, 1)};
    for (size_t pi = 0; pi < 4; pi++) {
        policy_all(m, "bf16", NULL);
        qw_method_state *s = NULL;
        qw_method_info info;
        qs_error err = {0};
        if (qw_method_apply(m, &plans[pi], &s, &info, &err)) fail_msg("%s", err.msg);
        assert_int_equal(info.linears, qw_model_config(m)->n_layers * QW_LINEAR_KINDS);
        float *got = logits_of(m);
        double worst = 0.0;
        for (size_t i = 0; i < (size_t)CTX * V; i++)
            worst = fmax(worst, fabs((double)got[i] - ref[i]));
        if (!(worst <= 2e-5 * amax))
            fail_msg("%s: logits moved by %g (largest %g)", plans[pi].name, worst, amax);
        assert_true(worst > 0.0 || pi == 3); /* the rotation really ran (not a pass-through) */
        free(got);
        assert_int_equal(qw_model_apply_policy(m, NULL, &err), QS_OK);
        qw_method_state_free(s);
        got = logits_of(m);
        assert_memory_equal(got, ref, (size_t)CTX * V * sizeof *got);
        free(got);
    }
    free(ref);
    qw_model_destroy(m);
}

/* Every method runs on NVFP4 and MXFP4, W4A16 and W4A4, and changes the logits from RTN's. */
static void every_method_runs_quantized(void **state) {
    (void)state;
    qw_model *m = tiny("synthetic:tiny-llama3:7");
    const int V = qw_model_config(m)->vocab_size;
    const qw_method_plan plans[] = {plan_named("gptq", 0, 1, 0), plan_named("rotate16", 16, 0, 0),
                                    plan_named("rotate-full", -2, 0, 0),
                                    plan_named("mr-gptq", -1, 1, 0),
                                    plan_named("smoothquant", 0, 0, 1)};
    const char *fmts[] = {"nvfp4", "mxfp4"};
    for (int fi = 0; fi < 2; fi++)
        for (int acts = 0; acts < 2; acts++) {
            policy_all(m, fmts[fi], acts ? fmts[fi] : NULL);
            float *rtn = logits_of(m);
            for (size_t pi = 0; pi < 5; pi++) {
                policy_all(m, fmts[fi], acts ? fmts[fi] : NULL);
                qw_method_state *s = NULL;
                qw_method_info info;
                qs_error err = {0};
                if (qw_method_apply(m, &plans[pi], &s, &info, &err))
                    fail_msg("%s %s: %s", plans[pi].name, fmts[fi], err.msg);
                float *got = logits_of(m);
                int finite = 1;
                for (size_t i = 0; i < (size_t)CTX * V; i++)
                    finite &= isfinite(got[i]) != 0;
                assert_true(finite);
                assert_true(memcmp(got, rtn, (size_t)CTX * V * sizeof *got) != 0);
                if (plans[pi].gptq || plans[pi].smooth)
                    assert_int_equal(info.calib_tokens,
                                     (size_t)3 * CTX * (size_t)qw_model_config(m)->n_layers);
                free(got);
                qw_model_apply_policy(m, NULL, &err);
                qw_method_state_free(s);
            }
            free(rtn);
        }
    qw_model_destroy(m);
}

/* per-linear (method_apply.h plan->linear): a table giving every linear one plan computes what that
 * plan alone computes, bit for bit; a table of none leaves round-to-nearest; a block runs a
 * calibration pass only when one of its linears' methods is calibrated. */
static void per_linear_tables_apply_each_linears_plan(void **state) {
    (void)state;
    qw_model *m = tiny("synthetic:tiny-llama3:7");
    const int V = qw_model_config(m)->vocab_size, nl = qw_model_config(m)->n_layers,
              n = nl * QW_LINEAR_KINDS;
    const size_t bytes = (size_t)CTX * V * sizeof(float);
    qw_method_plan mr = plan_named("mr-gptq", -1, 1, 0), rot = plan_named("rotate16", 16, 0, 0);
    const qw_method_plan **table = calloc((size_t)n, sizeof *table);
    assert_non_null(table);
    qw_method_plan per = plan_named("per-linear", 0, 0, 0);
    per.linear = table;
    per.n_linear = n;
    qs_error err = {0};
    qw_method_state *s = NULL;
    qw_method_info info;
    /* the plan alone, then the same plan through a table */
    policy_all(m, "mxfp4", NULL);
    float *rtn = logits_of(m);
    if (qw_method_apply(m, &mr, &s, &info, &err)) fail_msg("%s", err.msg);
    float *alone = logits_of(m);
    size_t alone_tokens = info.calib_tokens;
    qw_model_apply_policy(m, NULL, &err);
    qw_method_state_free(s);
    for (int i = 0; i < n; i++)
        table[i] = &mr;
    policy_all(m, "mxfp4", NULL);
    if (qw_method_apply(m, &per, &s, &info, &err)) fail_msg("%s", err.msg);
    float *got = logits_of(m);
    assert_memory_equal(got, alone, bytes);
    assert_int_equal(info.calib_tokens, alone_tokens);
    free(got);
    qw_model_apply_policy(m, NULL, &err);
    qw_method_state_free(s);
    /* no linear named: round-to-nearest, no pass */
    for (int i = 0; i < n; i++)
        table[i] = NULL;
    policy_all(m, "mxfp4", NULL);
    if (qw_method_apply(m, &per, &s, &info, &err)) fail_msg("%s", err.msg);
    got = logits_of(m);
    assert_memory_equal(got, rtn, bytes);
    assert_int_equal(info.linears, 0);
    assert_int_equal(info.calib_tokens, 0);
    free(got);
    qw_model_apply_policy(m, NULL, &err);
    qw_method_state_free(s);
    /* rotations everywhere, GPTQ after a rotation on block 1's down only: one pass */
    for (int i = 0; i < n; i++)
        table[i] = &rot;
    table[1 * QW_LINEAR_KINDS + QW_LINEAR_DOWN] = &mr;
    policy_all(m, "mxfp4", NULL);
    if (qw_method_apply(m, &per, &s, &info, &err)) fail_msg("%s", err.msg);
    assert_int_equal(info.linears, n);
    assert_int_equal(info.calib_tokens, (size_t)3 * CTX);
    got = logits_of(m);
    assert_true(memcmp(got, rtn, bytes) != 0 && memcmp(got, alone, bytes) != 0);
    free(got);
    qw_model_apply_policy(m, NULL, &err);
    qw_method_state_free(s);
    free(rtn);
    free(alone);
    free(table);
    qw_model_destroy(m);
}

/* A global rotation needs K a power of two (tiny-llama2's down_proj has K 176), mr-gptq a block
 * format; both refused naming the linear, the model left as the policy made it. */
static void tiles_a_method_cannot_use_are_refused(void **state) {
    (void)state;
    qw_model *m = tiny("synthetic:tiny-llama2:5");
    policy_all(m, "nvfp4", NULL);
    float *rtn = logits_of(m);
    qw_method_plan full = plan_named("rotate-full", -2, 0, 0);
    qw_method_state *s = NULL;
    qw_method_info info;
    qs_error err = {0};
    assert_int_equal(qw_method_apply(m, &full, &s, &info, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "power of two"));
    assert_non_null(strstr(err.msg, "model.layers.0"));
    assert_null(s);
    float *got = logits_of(m);
    assert_memory_equal(got, rtn, (size_t)CTX * qw_model_config(m)->vocab_size * sizeof *got);
    free(got);
    free(rtn);
    policy_all(m, "int8_channel", NULL);
    qw_method_plan mr = plan_named("mr-gptq", -1, 1, 0);
    assert_int_equal(qw_method_apply(m, &mr, &s, &info, &err), QS_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "no block"));
    qw_model_destroy(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(transforms_alone_leave_the_logits_unchanged),
        cmocka_unit_test(every_method_runs_quantized),
        cmocka_unit_test(per_linear_tables_apply_each_linears_plan),
        cmocka_unit_test(tiles_a_method_cannot_use_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
