/* The route of a quantized training GEMM on CUDA (quant_gemm_route.h). */
#include "quant_gemm_route.h"

#include <string.h>

static int type_of(const char *f, qk_gemm_type *t) {
    if (!f) return 0;
    if (!strcmp(f, "nvfp4") || !strcmp(f, "nvfp4_2d"))
        *t = QK_GEMM_NVFP4;
    else if (!strcmp(f, "mxfp4"))
        *t = QK_GEMM_MXFP4;
    else if (!strcmp(f, "fp8_e4m3"))
        *t = QK_GEMM_FP8_E4M3;
    else
        return 0;
    return 1;
}

int qw_quant_gemm_operands(const char *fa, const char *fb, int ncol, qk_gemm_type *type) {
    qk_gemm_type ta, tb;
    if (!type_of(fa, &ta) || !type_of(fb, &tb) || ta != tb || ncol <= 0 || ncol % 4 != 0) return 0;
    *type = ta;
    return 1;
}

int qw_quant_gemm_runs(qk_gemm_type type, int select_ok, qk_gemm_path path,
                       const qk_gemm_probe *probe) {
    if (!select_ok) return 0;
    if (type == QK_GEMM_FP8_E4M3)
        return path == QK_GEMM_PATH_FP8 &&
               qk_gemm_probe_decide(probe, type, type, 1, QK_GEMM_REQ_AUTO).path ==
                   QK_GEMM_PATH_FP8;
    if (type == QK_GEMM_NVFP4 || type == QK_GEMM_MXFP4)
        return path == QK_GEMM_PATH_NATIVE_FP4 || path == QK_GEMM_PATH_EMULATED_BF16;
    return 0;
}
