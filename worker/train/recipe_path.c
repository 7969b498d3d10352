/* Which GPU GEMM path each training GEMM takes (recipe_path.h). */
#include "recipe_path.h"

#include <string.h>

#include "format.h"

qk_gemm_type qw_operand_gemm_type(const qw_operand_spec *spec, int *bf16_exact) {
    int exact = qw_operand_bf16_exact(spec);
    qk_gemm_type t = QK_GEMM_BF16;
    if (spec->mode == QW_MODE_QUANT && spec->fmt) {
        const char *n = spec->fmt->name;
        if (!strcmp(n, "nvfp4") || !strcmp(n, "nvfp4_2d"))
            t = QK_GEMM_NVFP4;
        else if (!strcmp(n, "mxfp4"))
            t = QK_GEMM_MXFP4;
        else if (!strcmp(n, "fp8_e4m3"))
            t = QK_GEMM_FP8_E4M3;
    }
    if (bf16_exact) *bf16_exact = t == QK_GEMM_BF16 ? exact : 1;
    return t;
}

qk_gemm_decision qw_recipe_gemm_decide(const qw_recipe *r, int layer, int n_layers,
                                       qw_linear_gemm g, const qk_gemm_probe *probe,
                                       qk_gemm_request req) {
    static const qw_gemm_operand inputs[QW_N_LINEAR_GEMMS][2] = {
        {QW_FPROP_X, QW_FPROP_W}, {QW_DGRAD_DY, QW_DGRAD_W}, {QW_WGRAD_DY, QW_WGRAD_X}};
    if ((unsigned)g >= QW_N_LINEAR_GEMMS)
        return (qk_gemm_decision){QK_GEMM_PATH_FP32, "unknown GEMM kind"};
    qw_operand_spec a, b;
    qw_recipe_operand(r, layer, n_layers, inputs[g][0], &a);
    qw_recipe_operand(r, layer, n_layers, inputs[g][1], &b);
    int ea, eb;
    qk_gemm_type ta = qw_operand_gemm_type(&a, &ea), tb = qw_operand_gemm_type(&b, &eb);
    /* an FP32 input makes the GEMM FP32 whatever the other is (the table reads the weight's
       exactness only: hand it both) */
    return qk_gemm_probe_decide(probe, tb, ta, ea && eb, req);
}

/* The more specific of two paths, as results name one per kind. */
static int rank(qk_gemm_path p) {
    switch (p) {
    case QK_GEMM_PATH_NATIVE_FP4:
        return 4;
    case QK_GEMM_PATH_FP8:
        return 3;
    case QK_GEMM_PATH_EMULATED_BF16:
        return 2;
    case QK_GEMM_PATH_BF16:
        return 1;
    default:
        return 0;
    }
}

qk_gemm_path qw_recipe_kind_path(const qw_recipe *r, int n_layers, int n_kinds, qw_linear_gemm g,
                                 const qk_gemm_probe *probe, qk_gemm_request req, int *n_quant) {
    qk_gemm_path best = QK_GEMM_PATH_FP32;
    int q = 0;
    for (int layer = -1; layer < n_layers; layer++) {
        qk_gemm_path p = qw_recipe_gemm_decide(r, layer, n_layers, g, probe, req).path;
        if (rank(p) >= 2) q += layer < 0 ? 1 : n_kinds;
        if (rank(p) > rank(best)) best = p;
    }
    if (n_quant) *n_quant = q;
    return best;
}

const char *qw_train_ran_path(unsigned ran) {
    if (ran & (1u << QK_GEMM_PATH_FP32)) return "fp32";
    qk_gemm_path best = QK_GEMM_PATH_FP32;
    for (int p = 0; p <= QK_GEMM_PATH_FP32; p++)
        if ((ran & (1u << p)) && rank((qk_gemm_path)p) > rank(best)) best = (qk_gemm_path)p;
    return ran ? qk_gemm_path_name(best) : "none";
}
