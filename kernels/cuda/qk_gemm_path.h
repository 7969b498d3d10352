/* Which GEMM path a linear takes on a GPU: a pure function of the device's compute capability,
 * the operands' formats, whether the weight's values are exact in BF16, and what the user asked
 * for ($QSWEEP_CUDA_GEMM). Plain C with no CUDA header, built in every tree (also without nvcc),
 * so that the worker's GPU list (worker/gpu/gpu_info.h "native FP4"), the engine's CUDA backend
 * (worker/engine/ops_cuda_lt.cu) and the GEMM itself (qk_gemm.h) share one table, and
 * tests/kernels/test_cuda_gemm_path.c checks it on any machine.
 *
 * The table (qk_gemm_decide; "cc" is 10 * major + minor):
 *   request fp32                      -> fp32 for every GEMM (cuBLAS FP32, pedantic: no TF32)
 *   request bf16                      -> bf16 for unquantized weights (rounded to BF16 if they
 *                                        are not exact), emulated_bf16 for FP4 and FP8 weights
 *   request auto / emulated:
 *     W FP4, x same FP4 format (W4A4) -> native_fp4 on cc 10.x (auto only), else emulated_bf16
 *     W FP4, x BF16 (W4A16)           -> emulated_bf16 (cuBLASLt has no FP4 x BF16 GEMM)
 *     W FP8 E4M3, x FP8 E4M3          -> fp8 on cc >= 8.9 (auto only), else emulated_bf16
 *     W FP8 E4M3, x BF16              -> emulated_bf16
 *     W BF16, values exact in BF16    -> bf16 (BF16 checkpoints; dequantized formats whose
 *                                        values BF16 holds exactly)
 *     W BF16, values not exact        -> fp32 (F32 / F16 masters: BF16 would change them)
 *     any other pairing (FP4 x FP8, NVFP4 x MXFP4, x FP4 with W BF16) -> emulated_bf16 (each
 *                                        quantized operand dequantized exactly to BF16)
 * "emulated_bf16" is exact: an E2M1 code times a UE4M3 or UE8M0 block scale has at most 6
 * significant bits and an exponent inside BF16's range, and an E4M3 value 4 bits, so BF16 holds
 * every dequantized value; a BF16 GEMM with FP32 accumulation (tensor scales in alpha) then
 * differs from a native block-scaled GEMM only in summation order.
 *
 * Native block-scaled FP4 is compute capability 10.x only (B200/GB200 10.0, B300 10.3):
 * NVIDIA's sample cuBLASLt/LtNvfp4Matmul (github.com/NVIDIA/CUDALibrarySamples) and the cuBLAS
 * documentation's "1D Block Scaling Factors Layout" (docs.nvidia.com/cuda/cublas, section on
 * cublasLtMatmul block scaling) describe CUDA_R_4F_E2M1 with VEC16_UE4M3 / VEC32_UE8M0 scales
 * for Blackwell data-center parts; TransformerEngine's NVFP4 recipe needs 10.0+ and skips its
 * NVFP4 tests on 12.x. No NVIDIA cuBLASLt statement for 12.x (RTX 50xx, RTX PRO 6000) was
 * found for this tree, so 12.x runs emulated_bf16 until a device check shows the native path
 * there. Hopper (9.0) has no FP4 tensor cores. FP8 E4M3 GEMMs need 8.9 (Ada) or later
 * (cuBLAS documentation, cublasLtMatmul data types). */
#ifndef QK_GEMM_PATH_H
#define QK_GEMM_PATH_H

#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element type of an operand. */
typedef enum qk_gemm_type {
    QK_GEMM_BF16 = 0,     /* uint16 BF16 bits, [rows x ld] elements */
    QK_GEMM_FP8_E4M3 = 1, /* one E4M3 byte per element, [rows x ld] */
    QK_GEMM_NVFP4 = 2,    /* E2M1 + UE4M3 per 16, layout qk_lt_layout (VEC16_UE4M3) */
    QK_GEMM_MXFP4 = 3,    /* E2M1 + UE8M0 per 32, layout qk_lt_layout (VEC32_UE8M0) */
} qk_gemm_type;

/* The path a GEMM runs on; its name (qk_gemm_path_name) is the `gemm_path` of results. */
typedef enum qk_gemm_path {
    QK_GEMM_PATH_BF16 = 0,          /* "bf16" */
    QK_GEMM_PATH_FP8 = 1,           /* "fp8" */
    QK_GEMM_PATH_NATIVE_FP4 = 2,    /* "native_fp4" */
    QK_GEMM_PATH_EMULATED_BF16 = 3, /* "emulated_bf16" */
    QK_GEMM_PATH_FP32 = 4,          /* "fp32": cuBLAS FP32 (the engine runs it, not qk_gemm) */
} qk_gemm_path;

/* What the user asked for: $QSWEEP_CUDA_GEMM (worker/jobs/jobs_backend.h). */
typedef enum qk_gemm_request {
    QK_GEMM_REQ_AUTO = 0,     /* "auto" (default): the table above */
    QK_GEMM_REQ_FP32 = 1,     /* "fp32": FP32 cuBLAS for every GEMM */
    QK_GEMM_REQ_BF16 = 2,     /* "bf16": BF16 for every GEMM */
    QK_GEMM_REQ_EMULATED = 3, /* "emulated": as auto, but nothing native below BF16 */
} qk_gemm_request;

/* One decision: the path and why, in words (a static string: "cc 9.0 has no block-scaled FP4
 * GEMM in cuBLASLt", ...). */
typedef struct qk_gemm_decision {
    qk_gemm_path path;
    const char *why;
} qk_gemm_decision;

/* The table above for a GEMM y = x W^T on a device of compute capability cc: w_type and x_type
 * the operand formats as they reach the GEMM (QK_GEMM_BF16 for an unquantized operand),
 * w_bf16_exact 1 when an unquantized weight's values are exact in BF16 (read only when w_type
 * is QK_GEMM_BF16), req the user's request (an unknown value is read as auto). Pure. */
qk_gemm_decision qk_gemm_decide(int cc, qk_gemm_type w_type, qk_gemm_type x_type, int w_bf16_exact,
                                qk_gemm_request req);

/* 1 for the compute capabilities with native block-scaled FP4 GEMMs in cuBLASLt (10.x), the
 * same answer as qk_gemm_decide gives for NVFP4 x NVFP4 under auto. */
int qk_gemm_cc_native_fp4(int cc);

/* The operand-level choice of qk_gemm_linear (qk_gemm.h): qk_gemm_decide for the pairings the
 * GEMM runs (force_emulation = request emulated); QS_EUNSUPPORTED naming both types for those
 * it does not (FP8 with anything but FP8; NVFP4 with MXFP4), and FP8 below cc 8.9 (naming the
 * capability). QS_EINVAL when path is NULL. */
qs_status qk_gemm_path_select(int cc, int force_emulation, qk_gemm_type x_type, qk_gemm_type w_type,
                              qk_gemm_path *path, qs_error *err);

/* "bf16", "fp8", "native_fp4", "emulated_bf16", "fp32"; NULL for an unknown value. */
const char *qk_gemm_path_name(qk_gemm_path path);

/* Parses a request name: "auto", "fp32", "bf16", "emulated"; "lt" is read as "auto". Errors:
 * QS_EINVAL quoting s and the names. */
qs_status qk_gemm_request_parse(const char *s, qk_gemm_request *out, qs_error *err);

/* "auto", "fp32", "bf16", "emulated"; NULL for an unknown value. */
const char *qk_gemm_request_name(qk_gemm_request req);

#ifdef __cplusplus
}
#endif

#endif
