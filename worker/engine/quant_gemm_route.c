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

int qw_quant_gemm_handle_path(qk_gemm_type type, const qk_gemm_probe *probe, qk_gemm_request req,
                              qk_gemm_path *path) {
    if (req != QK_GEMM_REQ_AUTO && req != QK_GEMM_REQ_EMULATED) return 0;
    int force = req == QK_GEMM_REQ_EMULATED;
    qs_error err = {0};
    if (qk_gemm_path_select(probe ? probe->cc : 0, force, type, type, path, &err) != QS_OK)
        return 0;
    if (probe && !force && (type == QK_GEMM_NVFP4 || type == QK_GEMM_MXFP4))
        *path = qk_gemm_probe_decide(probe, type, type, 1, QK_GEMM_REQ_AUTO).path;
    return 1;
}

int qw_quant_gemm_route(const char *fa, const char *fb, int ncol, const qk_gemm_probe *probe,
                        qk_gemm_request req, qk_gemm_path *path) {
    qk_gemm_type t;
    qk_gemm_path p = QK_GEMM_PATH_FP32;
    if (!qw_quant_gemm_operands(fa, fb, ncol, &t)) return 0;
    int select_ok = qw_quant_gemm_handle_path(t, probe, req, &p);
    if (!qw_quant_gemm_runs(t, select_ok, p, probe)) return 0;
    *path = p;
    return 1;
}
