/* Which training GEMMs may run with BF16 operands (bf16_exact.h). */
#include "bf16_exact.h"

#include <string.h>

#include "element.h"
#include "format.h"

/* BF16: 8 significant bits; its smallest subnormal is 2^(-126 - 7) = 2^-133. */
#define BF16_SIGNIFICANT_BITS 8
#define BF16_MIN_EXP2 (-133)
/* E8M0's smallest scale, code 0 = 2^-127 (OCP MX v1.0 section 5.4.1; docs/numerics.md 2.1). */
#define E8M0_MIN_EXP2 (-127)

int qw_format_bf16_exact(const qk_format *fmt) {
    if (!fmt || fmt->rule != QK_RULE_MX || fmt->storage != QK_STORE_E8M0 || fmt->tensor_scale)
        return 0;
    const qk_codec *e = fmt->elem;
    if (e->kind != QK_CODEC_MINIFLOAT) return 0;
    /* element x 2^s: the element's significant bits, its lowest bit at least the smallest
     * subnormal's, 2^(1 - bias - man_bits), times the smallest scale */
    int lowest = 1 - e->bias - e->man_bits + E8M0_MIN_EXP2;
    return e->man_bits + 1 <= BF16_SIGNIFICANT_BITS && lowest >= BF16_MIN_EXP2;
}

int qw_operand_bf16_exact(const qw_operand_spec *spec) {
    switch (spec->mode) {
    case QW_MODE_BF16:
        return 1;
    case QW_MODE_QUANT:
        return qw_format_bf16_exact(spec->fmt);
    case QW_MODE_FP32:
    default:
        return 0;
    }
}

int qw_recipe_gemm_bf16(const qw_recipe *r, int layer, int n_layers, qw_linear_gemm g) {
    static const qw_gemm_operand inputs[QW_N_LINEAR_GEMMS][2] = {
        {QW_FPROP_X, QW_FPROP_W}, {QW_DGRAD_DY, QW_DGRAD_W}, {QW_WGRAD_DY, QW_WGRAD_X}};
    if ((unsigned)g >= QW_N_LINEAR_GEMMS) return 0;
    for (int i = 0; i < 2; i++) {
        qw_operand_spec s;
        qw_recipe_operand(r, layer, n_layers, inputs[g][i], &s);
        if (!qw_operand_bf16_exact(&s)) return 0;
    }
    return 1;
}

const char *qw_linear_gemm_name(qw_linear_gemm g) {
    static const char *names[] = {"fprop", "dgrad", "wgrad"};
    return (unsigned)g < QW_N_LINEAR_GEMMS ? names[g] : "?";
}

const char *qw_train_gemm_path(const char *backend_path, int n_fp32, int *linears) {
    *linears = strcmp(backend_path, "cpu") != 0 && strcmp(backend_path, "none") != 0;
    if (!*linears) return backend_path;
    return n_fp32 ? "fp32" : "bf16";
}
