/* Named quantization options: the one place that maps the text a grid or a job spec carries
 * ("scale_rule: floor") onto qk_quant_options, and knows which option applies to which format
 * (from the format's descriptor, so a new format row needs no change here). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "format.h"

/* Value names, indexed by the enum value they stand for. */
static const char *const rounding_names[] = {
    [QK_ROUND_RNE] = "rne", [QK_ROUND_RZ] = "rz", [QK_ROUND_SR] = "sr"};
static const char *const mx_rule_names[] = {
    [QK_MX_RCEIL] = "rceil", [QK_MX_FLOOR] = "floor", [QK_MX_CEIL] = "ceil", [QK_MX_EVEN] = "even"};
static const char *const clamp_names[] = {[QK_NVFP4_CLAMP_NONE] = "none",
                                          [QK_NVFP4_CLAMP_TORCHAO] = "torchao",
                                          [QK_NVFP4_CLAMP_ZERO_TO_ONE] = "zero_to_one"};
static const char *const tiny_names[] = {[QK_TINY_TE] = "te", [QK_TINY_EXACT] = "exact"};

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static int applies(const qk_format *fmt, const char *key) {
    if (!strcmp(key, "rounding")) return fmt->rule != QK_RULE_IDENTITY;
    if (!strcmp(key, "scale_rule")) return fmt->rule == QK_RULE_MX;
    if (!strcmp(key, "clamp")) return fmt->rule == QK_RULE_NVFP4;
    if (!strcmp(key, "tiny_amax")) return fmt->tensor_scale;
    if (!strcmp(key, "group_size")) return fmt->group_option;
    return 0;
}

const char *qk_quant_option_keys(const qk_format *fmt) {
    if (fmt->rule == QK_RULE_IDENTITY) return "none";
    if (fmt->rule == QK_RULE_MX) return "rounding, scale_rule";
    if (fmt->rule == QK_RULE_NVFP4) return "rounding, clamp, tiny_amax";
    if (fmt->tensor_scale) return "rounding, tiny_amax";
    if (fmt->group_option) return "rounding, group_size";
    return "rounding";
}

static int lookup(const char *const *names, size_t n, const char *value) {
    for (size_t i = 0; i < n; i++)
        if (names[i] && !strcmp(names[i], value)) return (int)i;
    return -1;
}

qs_status qk_quant_option_set(const qk_format *fmt, qk_quant_options *opt, const char *key,
                              const char *value, qs_error *err) {
    if (!key || !applies(fmt, key))
        return qs_error_set(err, QS_ENOTFOUND,
                            "option '%s' does not apply to format %s (options: %s)",
                            key ? key : "(null)", fmt->name, qk_quant_option_keys(fmt));
    if (!value) return qs_error_set(err, QS_EINVAL, "option %s: missing value", key);
    if (!strcmp(key, "group_size")) {
        char *end = NULL;
        errno = 0;
        long g = strtol(value, &end, 10);
        if (errno || end == value || *end || g < 1 || g > 65536)
            return qs_error_set(err, QS_EINVAL,
                                "option group_size: '%s' is not an integer in 1..65536", value);
        opt->group_size = (int)g;
        return QS_OK;
    }
    const char *const *names = rounding_names;
    size_t n = N_OF(rounding_names);
    const char *choices = "rne, rz, sr";
    if (!strcmp(key, "scale_rule")) {
        names = mx_rule_names, n = N_OF(mx_rule_names), choices = "rceil, floor, ceil, even";
    } else if (!strcmp(key, "clamp")) {
        names = clamp_names, n = N_OF(clamp_names), choices = "none, torchao, zero_to_one";
    } else if (!strcmp(key, "tiny_amax")) {
        names = tiny_names, n = N_OF(tiny_names), choices = "te, exact";
    }
    int i = lookup(names, n, value);
    if (i < 0)
        return qs_error_set(err, QS_EINVAL, "unknown value '%s' for option %s (expected %s)", value,
                            key, choices);
    if (names == rounding_names)
        opt->rounding = (qk_rounding)i;
    else if (names == mx_rule_names)
        opt->mx_rule = (qk_mx_scale_rule)i;
    else if (names == tiny_names)
        opt->tiny_amax = (qk_tiny_amax)i;
    else
        opt->nvfp4_clamp = (qk_nvfp4_clamp)i;
    return QS_OK;
}

const char *qk_quant_option_value(const qk_format *fmt, const qk_quant_options *opt,
                                  const char *key) {
    if (!key || !applies(fmt, key)) return NULL;
    if (!strcmp(key, "rounding") && (size_t)opt->rounding < N_OF(rounding_names))
        return rounding_names[opt->rounding];
    if (!strcmp(key, "scale_rule") && (size_t)opt->mx_rule < N_OF(mx_rule_names))
        return mx_rule_names[opt->mx_rule];
    if (!strcmp(key, "clamp") && (size_t)opt->nvfp4_clamp < N_OF(clamp_names))
        return clamp_names[opt->nvfp4_clamp];
    if (!strcmp(key, "tiny_amax") && (size_t)opt->tiny_amax < N_OF(tiny_names))
        return tiny_names[opt->tiny_amax];
    return NULL;
}
