/* Which GPU GEMM path each training GEMM takes (recipe_path.h). */
#include "recipe_path.h"

#include <string.h>

#include "format.h"
#include "quant_gemm_route.h"

/* The output width the prediction assumes: a multiple of 4, as every linear's in and out
 * features are in the model shapes trained (the route declines any other, quant_gemm_route.h). */
#define ALIGNED_NCOL 4

qk_gemm_decision qw_recipe_gemm_decide(const qw_recipe *r, int layer, int n_layers,
                                       qw_linear_gemm g, const qk_gemm_probe *probe,
                                       qk_gemm_request req) {
    static const qw_gemm_operand inputs[QW_N_LINEAR_GEMMS][2] = {
        {QW_FPROP_X, QW_FPROP_W}, {QW_DGRAD_DY, QW_DGRAD_W}, {QW_WGRAD_DY, QW_WGRAD_X}};
    if ((unsigned)g >= QW_N_LINEAR_GEMMS)
        return (qk_gemm_decision){QK_GEMM_PATH_FP32, "unknown GEMM kind"};
    if (req == QK_GEMM_REQ_FP32) /* train_job.c: qw_tmodel_set_gemm_fp32 */
        return (qk_gemm_decision){QK_GEMM_PATH_FP32, "request fp32: every GEMM FP32"};
    qw_operand_spec a, b;
    qw_recipe_operand(r, layer, n_layers, inputs[g][0], &a);
    qw_recipe_operand(r, layer, n_layers, inputs[g][1], &b);
    int both_quant = a.mode == QW_MODE_QUANT && b.mode == QW_MODE_QUANT && a.fmt && b.fmt;
    qk_gemm_path p;
    if (both_quant && qw_quant_gemm_route(a.fmt->name, b.fmt->name, ALIGNED_NCOL, probe, req, &p))
        return (qk_gemm_decision){p, "gemm_abt_quant runs it (quant_gemm_route.h)"};
    /* qlinear.c's fallback: the inputs fake-quantized (or rounded), then gemm_abt_bf16 where
       both are exact in BF16, else gemm_abt */
    int bf16 = qw_recipe_gemm_bf16(r, layer, n_layers, g);
    if (both_quant)
        return bf16 ? (qk_gemm_decision){QK_GEMM_PATH_BF16,
                                         "gemm_abt_quant declines: fake-quantized, both inputs "
                                         "exact in BF16"}
                    : (qk_gemm_decision){QK_GEMM_PATH_FP32,
                                         "gemm_abt_quant declines: fake-quantized, an input not "
                                         "exact in BF16"};
    return bf16 ? (qk_gemm_decision){QK_GEMM_PATH_BF16, "both inputs exact in BF16"}
                : (qk_gemm_decision){QK_GEMM_PATH_FP32, "an input not exact in BF16"};
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
