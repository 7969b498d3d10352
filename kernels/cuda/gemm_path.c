/* The GEMM path as a pure function of device, formats and request (qk_gemm_path.h), host C
 * built in every tree. */
#include "qk_gemm_path.h"

#include <string.h>

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
    case QK_GEMM_PATH_FP32:
        return "fp32";
    default:
        return NULL;
    }
}

static const char *const request_names[] = {"auto", "fp32", "bf16", "emulated"};

const char *qk_gemm_request_name(qk_gemm_request req) {
    return (unsigned)req < 4 ? request_names[req] : NULL;
}

qs_status qk_gemm_request_parse(const char *s, qk_gemm_request *out, qs_error *err) {
    for (int i = 0; i < 4; i++)
        if (s && !strcmp(s, request_names[i])) {
            *out = (qk_gemm_request)i;
            return QS_OK;
        }
    if (s && !strcmp(s, "lt")) { /* the cuBLASLt path by its former name: the table */
        *out = QK_GEMM_REQ_AUTO;
        return QS_OK;
    }
    return qs_error_set(err, QS_EINVAL, "gemm path \"%s\": expected auto, fp32, bf16 or emulated",
                        s ? s : "(null)");
}

static int is_fp4(qk_gemm_type t) {
    return t == QK_GEMM_NVFP4 || t == QK_GEMM_MXFP4;
}

static qk_gemm_decision decision(qk_gemm_path p, const char *why) {
    qk_gemm_decision d = {p, why};
    return d;
}

qk_gemm_decision qk_gemm_decide(int cc, qk_gemm_type w_type, qk_gemm_type x_type, int w_bf16_exact,
                                qk_gemm_request req) {
    int w_q = w_type != QK_GEMM_BF16, x_q = x_type != QK_GEMM_BF16;
    if (req == QK_GEMM_REQ_FP32) return decision(QK_GEMM_PATH_FP32, "asked for: gemm fp32");
    if (req == QK_GEMM_REQ_BF16)
        return w_q || x_q ? decision(QK_GEMM_PATH_EMULATED_BF16,
                                     "asked for: gemm bf16 (quantized operands dequantized)")
                          : decision(QK_GEMM_PATH_BF16, "asked for: gemm bf16");
    int emulate = req == QK_GEMM_REQ_EMULATED;
    if (!w_q && !x_q)
        return w_bf16_exact ? decision(QK_GEMM_PATH_BF16, "unquantized weight exact in BF16")
                            : decision(QK_GEMM_PATH_FP32,
                                       "unquantized weight not exact in BF16 (F32/F16 values)");
    if (is_fp4(w_type) && x_type == w_type) {
        if (emulate) return decision(QK_GEMM_PATH_EMULATED_BF16, "asked for: gemm emulated");
        if (qk_gemm_cc_native_fp4(cc))
            return decision(QK_GEMM_PATH_NATIVE_FP4, "block-scaled FP4 in cuBLASLt on cc 10.x");
        return decision(QK_GEMM_PATH_EMULATED_BF16,
                        cc >= 120 ? "cc 12.x: native FP4 in cuBLASLt not confirmed"
                                  : "no block-scaled FP4 GEMM below cc 10.0");
    }
    if (w_type == QK_GEMM_FP8_E4M3 && x_type == QK_GEMM_FP8_E4M3) {
        if (emulate) return decision(QK_GEMM_PATH_EMULATED_BF16, "asked for: gemm emulated");
        if (cc >= 89) return decision(QK_GEMM_PATH_FP8, "FP8 E4M3 in cuBLASLt from cc 8.9");
        return decision(QK_GEMM_PATH_EMULATED_BF16, "no FP8 GEMM below cc 8.9");
    }
    if (w_q && !x_q)
        return decision(QK_GEMM_PATH_EMULATED_BF16,
                        "quantized weight with BF16 activations: no mixed GEMM in cuBLASLt");
    return decision(QK_GEMM_PATH_EMULATED_BF16,
                    "operands of different formats: both dequantized to BF16");
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
    int fp8 = x_type == QK_GEMM_FP8_E4M3 || w_type == QK_GEMM_FP8_E4M3;
    int ok = (x_type == QK_GEMM_BF16 || is_fp4(x_type) || x_type == QK_GEMM_FP8_E4M3) &&
             (w_type == QK_GEMM_BF16 || is_fp4(w_type) || w_type == QK_GEMM_FP8_E4M3) &&
             (!fp8 || x_type == w_type) && !(is_fp4(x_type) && is_fp4(w_type) && x_type != w_type);
    if (!ok)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "kernels/cuda: gemm: no GEMM for x of type %s with W of type %s "
                            "(qk_gemm.h lists the pairings)",
                            type_name(x_type), type_name(w_type));
    if (fp8 && cc < 89)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "kernels/cuda: gemm: FP8 needs compute capability 8.9+, the device "
                            "has %d.%d",
                            cc / 10, cc % 10);
    /* a BF16 operand reaching the GEMM is BF16 already: exact by definition */
    qk_gemm_decision d = qk_gemm_decide(cc, w_type, x_type, 1,
                                        force_emulation ? QK_GEMM_REQ_EMULATED : QK_GEMM_REQ_AUTO);
    if (fp8 && force_emulation) /* qk_gemm_linear dequantizes only FP4 operands */
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "kernels/cuda: gemm: FP8 has no emulated path in qk_gemm_linear");
    *path = d.path;
    return QS_OK;
}
