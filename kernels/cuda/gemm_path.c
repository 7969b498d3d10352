/* The GEMM path chosen from the device's compute capability and the operand types (qk_gemm.h),
 * host C so that tests/kernels/test_cuda_gemm_path.c checks the choice on any machine. */
#include "qk_gemm.h"

int qk_gemm_cc_native_fp4(int cc) {
    return cc >= 100 && cc < 110;
}

const char *qk_gemm_path_name(qk_gemm_path path) {
    switch (path) {
    case QK_GEMM_PATH_BF16:
        return "bf16";
    case QK_GEMM_PATH_FP8:
        return "fp8";
    case QK_GEMM_PATH_NATIVE_FP4:
        return "native_fp4";
    case QK_GEMM_PATH_EMULATED_BF16:
        return "emulated_bf16";
    default:
        return NULL;
    }
}

static int is_fp4(qk_gemm_type t) {
    return t == QK_GEMM_NVFP4 || t == QK_GEMM_MXFP4;
}

static const char *type_name(qk_gemm_type t) {
    switch (t) {
    case QK_GEMM_BF16:
        return "bf16";
    case QK_GEMM_FP8_E4M3:
        return "fp8_e4m3";
    case QK_GEMM_NVFP4:
        return "nvfp4";
    case QK_GEMM_MXFP4:
        return "mxfp4";
    default:
        return "unknown";
    }
}

qs_status qk_gemm_path_select(int cc, int force_emulation, qk_gemm_type x_type, qk_gemm_type w_type,
                              qk_gemm_path *path, qs_error *err) {
    if (!path) return qs_error_set(err, QS_EINVAL, "kernels/cuda: gemm: path is NULL");
    if (x_type == QK_GEMM_BF16 && w_type == QK_GEMM_BF16) {
        *path = QK_GEMM_PATH_BF16;
    } else if (x_type == QK_GEMM_FP8_E4M3 && w_type == QK_GEMM_FP8_E4M3) {
        if (cc < 89)
            return qs_error_set(err, QS_EUNSUPPORTED,
                                "kernels/cuda: gemm: FP8 needs compute capability 8.9+, the device "
                                "has %d.%d",
                                cc / 10, cc % 10);
        *path = QK_GEMM_PATH_FP8;
    } else if (is_fp4(x_type) && x_type == w_type) {
        *path = qk_gemm_cc_native_fp4(cc) && !force_emulation ? QK_GEMM_PATH_NATIVE_FP4
                                                              : QK_GEMM_PATH_EMULATED_BF16;
    } else if ((is_fp4(x_type) && w_type == QK_GEMM_BF16) ||
               (x_type == QK_GEMM_BF16 && is_fp4(w_type))) {
        *path = QK_GEMM_PATH_EMULATED_BF16;
    } else {
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "kernels/cuda: gemm: no GEMM for x of type %s with W of type %s "
                            "(qk_gemm.h lists the pairings)",
                            type_name(x_type), type_name(w_type));
    }
    return QS_OK;
}
