/* Named quantization options (kernels/quant.h qk_quant_option_set): one test per rule. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "quant.h"

static const qk_format *fmt(const char *name) {
    const qk_format *f = qk_format_by_name(name);
    assert_non_null(f);
    return f;
}

static void zero_options_read_back_as_the_documented_defaults(void **state) {
    (void)state;
    qk_quant_options o = {0};
    assert_string_equal(qk_quant_option_value(fmt("mxfp4"), &o, "scale_rule"), "rceil");
    assert_string_equal(qk_quant_option_value(fmt("mxfp4"), &o, "rounding"), "rne");
    assert_string_equal(qk_quant_option_value(fmt("nvfp4"), &o, "clamp"), "none");
    assert_string_equal(qk_quant_option_value(fmt("nvfp4"), &o, "tiny_amax"), "te");
    assert_string_equal(qk_quant_option_value(fmt("fp8_e4m3"), &o, "tiny_amax"), "te");
}

/* tiny_amax (te | exact) applies to the formats with a per-tensor scale, and only to them. */
static void tiny_amax_applies_to_per_tensor_scaled_formats(void **state) {
    (void)state;
    qk_quant_options o = {0};
    qs_error err = {0};
    assert_int_equal(qk_quant_option_set(fmt("nvfp4_2d"), &o, "tiny_amax", "exact", &err), QS_OK);
    assert_int_equal(o.tiny_amax, QK_TINY_EXACT);
    assert_string_equal(qk_quant_option_value(fmt("nvfp4_2d"), &o, "tiny_amax"), "exact");
    assert_int_equal(qk_quant_option_set(fmt("fp8_e4m3"), &o, "tiny_amax", "te", &err), QS_OK);
    assert_int_equal(o.tiny_amax, QK_TINY_TE);
    assert_string_equal(qk_quant_option_keys(fmt("nvfp4")), "rounding, clamp, tiny_amax");
    assert_string_equal(qk_quant_option_keys(fmt("fp8_e4m3")), "rounding, tiny_amax");
    assert_int_equal(qk_quant_option_set(fmt("mxfp4"), &o, "tiny_amax", "exact", &err),
                     QS_ENOTFOUND);
    assert_non_null(strstr(err.msg, "rounding, scale_rule"));
}

static void each_value_name_sets_its_enum(void **state) {
    (void)state;
    qk_quant_options o = {0};
    qs_error err = {0};
    const qk_format *mx = fmt("mxfp4"), *nv = fmt("nvfp4");
    assert_int_equal(qk_quant_option_set(mx, &o, "scale_rule", "floor", &err), QS_OK);
    assert_int_equal(o.mx_rule, QK_MX_FLOOR);
    assert_int_equal(qk_quant_option_set(mx, &o, "scale_rule", "ceil", &err), QS_OK);
    assert_int_equal(o.mx_rule, QK_MX_CEIL);
    assert_int_equal(qk_quant_option_set(mx, &o, "scale_rule", "even", &err), QS_OK);
    assert_int_equal(o.mx_rule, QK_MX_EVEN);
    assert_int_equal(qk_quant_option_set(mx, &o, "scale_rule", "rceil", &err), QS_OK);
    assert_int_equal(o.mx_rule, QK_MX_RCEIL);
    assert_int_equal(qk_quant_option_set(nv, &o, "rounding", "rz", &err), QS_OK);
    assert_int_equal(o.rounding, QK_ROUND_RZ);
    assert_int_equal(qk_quant_option_set(nv, &o, "rounding", "sr", &err), QS_OK);
    assert_int_equal(o.rounding, QK_ROUND_SR);
    assert_int_equal(qk_quant_option_set(nv, &o, "clamp", "torchao", &err), QS_OK);
    assert_int_equal(o.nvfp4_clamp, QK_NVFP4_CLAMP_TORCHAO);
    assert_int_equal(qk_quant_option_set(nv, &o, "clamp", "zero_to_one", &err), QS_OK);
    assert_int_equal(o.nvfp4_clamp, QK_NVFP4_CLAMP_ZERO_TO_ONE);
    assert_string_equal(qk_quant_option_value(nv, &o, "clamp"), "zero_to_one");
    assert_int_equal(qk_quant_option_set(fmt("int4_group"), &o, "group_size", "64", &err), QS_OK);
    assert_int_equal(o.group_size, 64);
}

static void an_option_of_another_format_is_refused_listing_those_that_apply(void **state) {
    (void)state;
    qk_quant_options o = {0};
    qs_error err = {0};
    assert_int_equal(qk_quant_option_set(fmt("nvfp4"), &o, "scale_rule", "floor", &err),
                     QS_ENOTFOUND);
    assert_non_null(strstr(err.msg, "scale_rule"));
    assert_non_null(strstr(err.msg, "rounding, clamp"));
    assert_int_equal(qk_quant_option_set(fmt("bf16"), &o, "rounding", "rne", &err), QS_ENOTFOUND);
    assert_non_null(strstr(err.msg, "none"));
    assert_int_equal(qk_quant_option_set(fmt("mxfp4"), &o, "group_size", "32", &err), QS_ENOTFOUND);
    assert_null(qk_quant_option_value(fmt("nvfp4"), &o, "scale_rule"));
}

static void an_unknown_value_is_refused_listing_the_choices_and_changes_nothing(void **state) {
    (void)state;
    qk_quant_options o = {0};
    qs_error err = {0};
    assert_int_equal(qk_quant_option_set(fmt("mxfp4"), &o, "scale_rule", "round", &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "'round'"));
    assert_non_null(strstr(err.msg, "rceil, floor, ceil, even"));
    assert_int_equal(o.mx_rule, QK_MX_RCEIL);
    assert_int_equal(qk_quant_option_set(fmt("int4_group"), &o, "group_size", "12x", &err),
                     QS_EINVAL);
    assert_int_equal(qk_quant_option_set(fmt("int4_group"), &o, "group_size", "0", &err),
                     QS_EINVAL);
    assert_int_equal(o.group_size, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(zero_options_read_back_as_the_documented_defaults),
        cmocka_unit_test(each_value_name_sets_its_enum),
        cmocka_unit_test(tiny_amax_applies_to_per_tensor_scaled_formats),
        cmocka_unit_test(an_option_of_another_format_is_refused_listing_those_that_apply),
        cmocka_unit_test(an_unknown_value_is_refused_listing_the_choices_and_changes_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
