/* Shared GPU-quantizer test helpers: random inputs with specials, option variants
 * (cuda_test_util.h). */
#include "cuda_test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "philox.h"

int qkt_special(uint32_t sel, float subnormal, float *g) {
    switch (sel) {
    case 1:
        *g = NAN;
        return 1;
    case 2:
        *g = INFINITY;
        return 1;
    case 3:
        *g = -INFINITY;
        return 1;
    case 4:
        *g = -0.0f;
        return 1;
    case 5:
        *g = subnormal;
        return 1;
    default:
        return 0;
    }
}

float *qkt_random_matrix(size_t rows, size_t k, uint64_t seed, float scale, float big,
                         unsigned flags) {
    size_t n = rows * k;
    float *x = malloc((n ? n : 1) * sizeof *x);
    if (!x) abort();
    for (size_t i = 0; i < n; i++) {
        uint32_t a = qk_sr_bits(seed, 0, 0, 2 * i), b = qk_sr_bits(seed, 0, 0, 2 * i + 1);
        float g = (float)(a * 0x1p-32 * 2.0 - 1.0) * ((b % 97 == 0) ? big : scale);
        if (flags & QKT_SPECIALS) {
            if (!qkt_special(b % 997, 3e-42f, &g) && (flags & QKT_ZERO) && b % 997 == 6) g = 0.0f;
            if ((b >> 16) % 61 == 0) g *= 1e-30f; /* tiny blocks: E4M3 scales underflow */
        }
        x[i] = g;
    }
    return x;
}

size_t qkt_mismatches(const float *a, const float *b, size_t n, size_t *first) {
    size_t bad = 0;
    if (first) *first = n;
    for (size_t i = 0; i < n; i++)
        if (!(isnan(a[i]) && isnan(b[i])) && memcmp(&a[i], &b[i], sizeof a[i]) != 0) {
            if (bad++ == 0 && first) *first = i;
        }
    return bad;
}

void qkt_for_each_variant(const qk_format *fmt, const qk_quant_options *base, qkt_variant_fn fn,
                          void *ctx) {
    char label[32];
    qk_quant_options o = *base;
    fn(ctx, fmt, &o, QKT_VAR_BASE, "base");
    if (fmt->rule == QK_RULE_MX)
        for (int rule = QK_MX_FLOOR; rule <= QK_MX_EVEN; rule++) {
            o.mx_rule = (qk_mx_scale_rule)rule;
            snprintf(label, sizeof label, "rule %d", rule);
            fn(ctx, fmt, &o, QKT_VAR_MX_RULE, label);
        }
    o.mx_rule = base->mx_rule;
    if (fmt->rule == QK_RULE_NVFP4)
        for (int c = QK_NVFP4_CLAMP_TORCHAO; c <= QK_NVFP4_CLAMP_ZERO_TO_ONE; c++) {
            o.nvfp4_clamp = (qk_nvfp4_clamp)c;
            snprintf(label, sizeof label, "clamp %d", c);
            fn(ctx, fmt, &o, QKT_VAR_CLAMP, label);
        }
    o.nvfp4_clamp = base->nvfp4_clamp;
    if (fmt->group_option) {
        o.group_size = 32;
        fn(ctx, fmt, &o, QKT_VAR_GROUP, "group 32");
        o.group_size = base->group_size;
    }
    if (fmt->tensor_scale) {
        o.tensor_amax_given = 1;
        o.tensor_amax = 2.5f;
        fn(ctx, fmt, &o, QKT_VAR_AMAX, "tensor_amax 2.5");
    }
}
