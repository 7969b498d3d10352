/* FP4 training recipes (recipe.h); the named ones are kinds/recipes.h's table. */
#include "recipe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recipes.h"

qs_status qw_recipe_by_name(const char *name, qw_recipe *r, qs_error *err) {
    const qs_recipe_row *n = qs_recipe_find(name);
    if (!n) {
        char list[256];
        qs_recipe_names(list, sizeof list);
        return qs_error_set(err, QS_EINVAL, "recipe \"%s\": unknown (known: %s)", name, list);
    }
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", n->name);
    r->version = QW_RECIPE_VERSION;
    r->hp_bf16 = n->hp_bf16;
    r->fmt = strcmp(n->format, "none") ? qk_format_by_name(n->format) : NULL;
    r->w2d = n->w2d;
    r->rht = n->rht;
    r->rht_dim = n->rht_dim;
    r->sr = n->sr;
    r->bf16_first = n->bf16_first;
    r->bf16_last = n->bf16_last;
    return QS_OK;
}

static int parse_int(const char *v, int lo, int hi, int *out) {
    char *end = NULL;
    long x = strtol(v, &end, 10);
    if (!*v || *end || x < lo || x > hi) return -1;
    *out = (int)x;
    return 0;
}

qs_status qw_recipe_set(qw_recipe *r, const char *key, const char *value, qs_error *err) {
    qw_recipe t = *r;
    int *flag = !strcmp(key, "w2d")   ? &t.w2d
                : !strcmp(key, "rht") ? &t.rht
                : !strcmp(key, "sr")  ? &t.sr
                                      : NULL;
    int *count = !strcmp(key, "bf16_first")  ? &t.bf16_first
                 : !strcmp(key, "bf16_last") ? &t.bf16_last
                                             : NULL;
    if (!strcmp(key, "format")) {
        if (!strcmp(value, "none")) {
            t.fmt = NULL;
        } else if (!strcmp(value, "nvfp4") || !strcmp(value, "mxfp4") ||
                   !strcmp(value, "fp8_e4m3")) {
            t.fmt = qk_format_by_name(value);
        } else {
            return qs_error_set(err, QS_EINVAL,
                                "recipe %s: format \"%s\": expected nvfp4, mxfp4, fp8_e4m3 or none",
                                r->name, value);
        }
    } else if (!strcmp(key, "rht_dim")) {
        if (strcmp(value, "16") && strcmp(value, "32"))
            return qs_error_set(err, QS_EINVAL, "recipe %s: rht_dim \"%s\": expected 16 or 32",
                                r->name, value);
        t.rht_dim = atoi(value);
    } else if (flag) {
        if (parse_int(value, 0, 1, flag))
            return qs_error_set(err, QS_EINVAL, "recipe %s: %s \"%s\": expected 0 or 1", r->name,
                                key, value);
    } else if (count) {
        if (parse_int(value, 0, 1000, count))
            return qs_error_set(err, QS_EINVAL, "recipe %s: %s \"%s\": expected 0..1000", r->name,
                                key, value);
    } else {
        return qs_error_set(err, QS_ENOTFOUND,
                            "recipe %s: unknown ingredient \"%s\" (format, w2d, rht, rht_dim, sr, "
                            "bf16_first, bf16_last)",
                            r->name, key);
    }
    if (t.w2d && (!t.fmt || strcmp(qk_format_name(t.fmt), "nvfp4") != 0))
        return qs_error_set(err, QS_EINVAL,
                            "recipe %s: w2d=1 needs format nvfp4 (2D 16x16 weight blocks)",
                            r->name);
    *r = t;
    return QS_OK;
}

qs_status qw_recipe_check(const qw_recipe *r, int n_layers, qs_error *err) {
    if (n_layers < 1)
        return qs_error_set(err, QS_EINVAL, "recipe %s: %d blocks", r->name, n_layers);
    if (r->bf16_first < 0 || r->bf16_last < 0)
        return qs_error_set(err, QS_EINVAL, "recipe %s: negative BF16 block count", r->name);
    if (r->w2d && (!r->fmt || strcmp(qk_format_name(r->fmt), "nvfp4") != 0))
        return qs_error_set(err, QS_EINVAL, "recipe %s: w2d=1 needs format nvfp4", r->name);
    if (r->rht_dim != 16 && r->rht_dim != 32)
        return qs_error_set(err, QS_EINVAL, "recipe %s: rht_dim %d, expected 16 or 32", r->name,
                            r->rht_dim);
    return QS_OK;
}

int qw_recipe_canonical(const qw_recipe *r, char *buf, size_t cap) {
    return snprintf(buf, cap,
                    "v%d format=%s w2d=%d rht=%d rht_dim=%d sr=%d bf16_first=%d bf16_last=%d hp=%s",
                    r->version, r->fmt ? qk_format_name(r->fmt) : "none", r->w2d, r->rht,
                    r->rht_dim, r->sr, r->bf16_first, r->bf16_last, r->hp_bf16 ? "bf16" : "fp32");
}

int qw_recipe_layer_quantized(const qw_recipe *r, int layer, int n_layers) {
    if (!r->fmt || layer < 0) return 0;
    return layer >= r->bf16_first && layer < n_layers - r->bf16_last;
}

void qw_recipe_operand(const qw_recipe *r, int layer, int n_layers, qw_gemm_operand op,
                       qw_operand_spec *out) {
    memset(out, 0, sizeof *out);
    if (!qw_recipe_layer_quantized(r, layer, n_layers)) {
        out->mode = r->hp_bf16 ? QW_MODE_BF16 : QW_MODE_FP32;
        return;
    }
    out->mode = QW_MODE_QUANT;
    out->fmt = r->fmt;
    out->rounding = QK_ROUND_RNE;
    int weight = op == QW_FPROP_W || op == QW_DGRAD_W;
    int grad = op == QW_DGRAD_DY || op == QW_WGRAD_DY;
    if (weight && r->w2d) out->fmt = qk_format_by_name("nvfp4_2d");
    if (grad && r->sr) out->rounding = QK_ROUND_SR;
    if ((op == QW_WGRAD_DY || op == QW_WGRAD_X) && r->rht) {
        out->rht = 1;
        out->rht_dim = r->rht_dim;
    }
}

const char *qw_gemm_operand_name(qw_gemm_operand op) {
    static const char *names[] = {"fprop_x", "fprop_w",  "dgrad_dy",
                                  "dgrad_w", "wgrad_dy", "wgrad_x"};
    return (unsigned)op < QW_N_OPERANDS ? names[op] : "?";
}
