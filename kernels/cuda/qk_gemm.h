/* GEMMs on the GPU through cuBLASLt, for the engine's linear layers. Plain C: callers need no
 * CUDA header (device pointers are void *, streams are cudaStream_t passed as void *).
 *
 * The one operation: the engine's linear
 *     y[T x out] = alpha * x[T x in] * W^T  (+ beta * y)
 * with x and W both K-major (row-major with the reduction axis `in` contiguous), which is
 * cuBLASLt's TN layout: A = W (m = out, TRANSA = T), B = x (n = T, TRANSB = N), D column-major
 * [out x T] = y row-major [T x out] (mapping in cublaslt_layout.h). Accumulation is FP32
 * (CUBLAS_COMPUTE_32F), scale type FP32; y is FP32 or BF16.
 *
 * Operand types and the path that runs (chosen at run time from the device):
 *   BF16 x BF16          -> "bf16"          cuBLASLt BF16 GEMM, any GPU
 *   FP8 E4M3 x FP8 E4M3  -> "fp8"           cuBLASLt FP8 GEMM (sm_89+, TN), per-tensor decode
 *                                           scales through A/B_SCALE_POINTER (device FP32)
 *   NVFP4 x NVFP4,       -> "native_fp4"    on compute capability 10.x: CUDA_R_4F_E2M1 operands,
 *   MXFP4 x MXFP4                           A/B_SCALE_MODE VEC16_UE4M3 / VEC32_UE8M0 with the
 *                                           swizzled block scales, tensor scales in alpha
 *                        -> "emulated_bf16" elsewhere (Hopper): each FP4 operand dequantized on
 *                                           the device to BF16 e2m1 * block scale (exact,
 *                                           qk_lt_element), then the BF16 GEMM, tensor scales in
 *                                           alpha: the native result up to accumulation order
 *   FP4 x BF16 (either)  -> "emulated_bf16" everywhere (W4A16: the FP4 side dequantized)
 * Any other pairing is QS_EUNSUPPORTED.
 *
 * A qk_gemm handle owns a cuBLASLt handle, one workspace (32 MiB), the BF16 scratch of the
 * emulated path, and a cache of plans (matmul descriptor, four layouts, the heuristic's
 * algorithm) keyed by (path, types, m, n, k, leading dimensions, output type, beta != 0): the
 * first call of a shape asks cuBLASLt's heuristic, later calls reuse it. A handle serves one
 * host thread and one stream at a time (workspace and scratch are shared by its calls). Every
 * cuBLAS and CUDA status is read; CUBLAS_STATUS_NOT_SUPPORTED (or a heuristic that finds no
 * algorithm) returns QS_EUNSUPPORTED naming the path and shape, other failures QS_EIO. */
#ifndef QK_GEMM_H
#define QK_GEMM_H

#include <stddef.h>
#include <stdint.h>

#include "cublaslt_layout.h"
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

/* Element type of the output y. */
typedef enum qk_gemm_out {
    QK_GEMM_OUT_F32 = 0,
    QK_GEMM_OUT_BF16 = 1,
} qk_gemm_out;

/* The path a GEMM runs on; its name (qk_gemm_path_name) is the `gemm_path` of results. */
typedef enum qk_gemm_path {
    QK_GEMM_PATH_BF16 = 0,          /* "bf16" */
    QK_GEMM_PATH_FP8 = 1,           /* "fp8" */
    QK_GEMM_PATH_NATIVE_FP4 = 2,    /* "native_fp4" */
    QK_GEMM_PATH_EMULATED_BF16 = 3, /* "emulated_bf16" */
} qk_gemm_path;

/* One operand (x or W) in device memory, K-major [rows x k]. */
typedef struct qk_gemm_operand {
    qk_gemm_type type;
    const void *data;      /* BF16 / FP8: element (r, c) at data + r * ld + c (in elements);
                              FP4: codes in `layout` (qk_cuda_quantize_lt writes them) */
    size_t ld;             /* BF16 / FP8: elements between rows, >= k (multiple of 8 for BF16 and 16
                              for FP8: cuBLASLt's 16-byte alignment); FP4: ignored (layout.k_pad) */
    const uint8_t *scales; /* FP4: swizzled block scales (layout.scale_bytes); else NULL */
    qk_lt_layout layout;   /* FP4: from qk_lt_layout_init; else unused */
    float tensor_scale;    /* FP32 per-tensor decode scale on the host (NVFP4 S_dec, FP8
                              1/S_enc; 1 for MXFP4), > 0, folded into alpha; ignored for
                              BF16 operands and when d_tensor_scale is given */
    int tensor_scale_exp2; /* qk_packed.tensor_scale_exp2 (<= 0), folded into alpha */
    const float *d_tensor_scale; /* FP8 only, optional: the decode scale in DEVICE memory, passed
                                    as A/B_SCALE_POINTER (then tensor_scale must be 1), for scales
                                    that stay on the device (no host sync) */
} qk_gemm_operand;

/* Opaque handle: cuBLASLt handle, workspace, scratch, plan cache, device properties. */
typedef struct qk_gemm qk_gemm;

/* Creates a handle on CUDA device `device` (made current for the call). Errors: QS_EIO (no such
 * device, CUDA or cuBLAS failure, with its text), QS_ENOMEM. */
qs_status qk_gemm_create(int device, qk_gemm **out, qs_error *err);

/* Frees the handle, its plans, workspace and scratch (synchronises the device first); NULL ok. */
void qk_gemm_destroy(qk_gemm *g);

/* Compute capability of the handle's device as 10 * major + minor (90 = Hopper, 100 = B200). */
int qk_gemm_compute_capability(const qk_gemm *g);

/* 1 when the device runs block-scaled FP4 GEMMs natively (compute capability 10.x), else 0. */
int qk_gemm_native_fp4(const qk_gemm *g);

/* The path qk_gemm_linear takes for operands of types x_type and w_type on this device;
 * QS_EUNSUPPORTED for a pairing it does not run (the message names both types). */
qs_status qk_gemm_path_for(const qk_gemm *g, qk_gemm_type x_type, qk_gemm_type w_type,
                           qk_gemm_path *path, qs_error *err);

/* The choice behind qk_gemm_path_for, from a compute capability (10 * major + minor) and the
 * emulation switch, without a device (gemm_path.c): BF16 x BF16 -> bf16; FP8 x FP8 -> fp8 on
 * cc >= 89, else QS_EUNSUPPORTED; FP4 x FP4 (same format) -> native_fp4 on cc 100..109 unless
 * force_emulation, else emulated_bf16; FP4 x BF16 either way -> emulated_bf16; anything else
 * QS_EUNSUPPORTED naming both types. */
qs_status qk_gemm_path_select(int cc, int force_emulation, qk_gemm_type x_type, qk_gemm_type w_type,
                              qk_gemm_path *path, qs_error *err);

/* 1 for the compute capabilities that run block-scaled FP4 GEMMs natively here: 10.x
 * (B200/GB200 10.0, B300 10.3; TransformerEngine's NVFP4 support). */
int qk_gemm_cc_native_fp4(int cc);

/* "bf16", "fp8", "native_fp4", "emulated_bf16"; NULL for an unknown value. */
const char *qk_gemm_path_name(qk_gemm_path path);

/* Test and tuning switch: 1 makes FP4 GEMMs take the emulated path even on a device that runs
 * them natively (the GPU tests compare the two paths on Blackwell). Default 0. */
void qk_gemm_force_emulation(qk_gemm *g, int on);

/* y[T x out] (row-major, row stride ldy >= out elements, device memory of type y_type) =
 * alpha * x[T x in] * W^T + beta * y, x and w as above (x has rows = T, w rows = out, both
 * k = in). FP4 and FP8 tensor scales are folded into alpha (qk_lt_fold_alpha) unless FP8's
 * d_tensor_scale is given. Runs on `stream` (NULL: default stream) without synchronising
 * it, except for the first call of a shape (the heuristic query) and scratch growth. *path_out
 * (may be NULL) receives the path taken: a native FP4 GEMM that cuBLASLt refuses for the shape
 * (NOT_SUPPORTED, no algorithm) falls back to the emulated path and says so there.
 * Errors: QS_EINVAL (NULL, zero or mismatched shapes, ld < k, misaligned pointer or ld, a
 * quantized operand's tensor_scale not > 0), QS_EUNSUPPORTED (pairing, or cuBLASLt
 * NOT_SUPPORTED / no algorithm for this shape: the message names path, m, n, k), QS_EIO
 * (CUDA/cuBLAS error text), QS_ENOMEM. */
qs_status qk_gemm_linear(qk_gemm *g, const qk_gemm_operand *x, const qk_gemm_operand *w, size_t T,
                         size_t out, size_t in, float alpha, float beta, void *y,
                         qk_gemm_out y_type, size_t ldy, void *stream, qk_gemm_path *path_out,
                         qs_error *err);

/* Device dequantizer of the emulated path, public for the engine: y[rows x ldy] BF16 bits =
 * e2m1(code) * block scale of the FP4 operand op (qk_lt_element, bit-identical to
 * qk_lt_element_bf16), columns 0 .. op->layout.k - 1; the tensor scale is NOT applied. Runs
 * on stream without synchronising. Errors: QS_EINVAL (not an FP4 operand, ldy < k), QS_EIO.
 * On a device without native FP4, weights dequantized ONCE this way and passed as a BF16 W
 * spare the per-call dequantization of the emulated path: the BF16 operand's tensor_scale is
 * ignored, so the caller multiplies its alpha by the FP4 weights' tensor_scale. */
qs_status qk_gemm_dequant_bf16(const qk_gemm_operand *op, uint16_t *y, size_t ldy, void *stream,
                               qs_error *err);

/* Number of cached plans, keys cuBLASLt refused included (tests: a repeated shape adds
 * none). */
size_t qk_gemm_plan_count(const qk_gemm *g);

#ifdef __cplusplus
}
#endif

#endif
