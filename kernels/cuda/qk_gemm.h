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
 * algorithm) keyed by (path, types, m, n, k, leading dimensions, output type, beta != 0, and the
 * alignment of A, B and y): the first call of a shape asks cuBLASLt's heuristic, later calls
 * reuse it. The heuristic is told each buffer's real alignment (the largest power of two up to
 * 256 dividing its address) through CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_{A,B,C,D}_BYTES, whose
 * default of 256 would let it pick algorithms that need more than the 16 bytes offsets into the
 * engine's buffers guarantee (cublasLt.h, cublasLtMatmulPreferenceAttributes_t). A handle serves
 * one host thread and one stream at a time (workspace and scratch are shared by its calls). Every
 * cuBLAS and CUDA status is read. A native FP4 GEMM that cuBLASLt refuses with any status (at
 * the heuristic or at the matmul; no algorithm) runs on the emulated path instead, remembers the
 * refusal for the shape, and keeps why (qk_gemm_fallback). Otherwise
 * CUBLAS_STATUS_NOT_SUPPORTED (or no algorithm) returns QS_EUNSUPPORTED naming the path and
 * shape, other failures QS_EIO. */
#ifndef QK_GEMM_H
#define QK_GEMM_H

#include <stddef.h>
#include <stdint.h>

#include "cublaslt_layout.h"
#include "error.h"
#include "qk_gemm_path.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element type of the output y. */
typedef enum qk_gemm_out {
    QK_GEMM_OUT_F32 = 0,
    QK_GEMM_OUT_BF16 = 1,
} qk_gemm_out;

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
    const float *d_tensor_scale; /* optional: the FP32 decode scale in DEVICE memory, for scales
                                    that stay on the device (no host sync). FP8: passed as
                                    A/B_SCALE_POINTER (then tensor_scale must be 1). FP4
                                    (qk_cuda_quantize_lt_async writes it): alpha is folded on
                                    the device (CUBLASLT_POINTER_MODE_DEVICE, in the plan key),
                                    tensor_scale is ignored, tensor_scale_exp2 still applies */
    int resident; /* W only, FP4: 1 when data and scales stay unchanged at these addresses until
                     qk_gemm_forget(g, data) (a placed model's weight): the emulated path then
                     dequantizes it to BF16 once, on its first GEMM, and keeps the copy within
                     the handle's budget (qk_gemm_set_dequant_budget; default a quarter of the
                     device's memory; least recently used copies dropped first; a weight larger
                     than the budget is dequantized per call as with 0). 0: per call */
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

/* 1 when the device runs block-scaled FP4 GEMMs natively (qk_gemm_cc_native_fp4: 10.x), else
 * 0. */
int qk_gemm_native_fp4(const qk_gemm *g);

/* The path qk_gemm_linear takes for operands of types x_type and w_type on this device;
 * QS_EUNSUPPORTED for a pairing it does not run (the message names both types). */
qs_status qk_gemm_path_for(const qk_gemm *g, qk_gemm_type x_type, qk_gemm_type w_type,
                           qk_gemm_path *path, qs_error *err);

/* Test and tuning switch: 1 makes FP4 GEMMs take the emulated path even on a device that runs
 * them natively (the GPU tests compare the two paths on Blackwell). Default 0. */
void qk_gemm_force_emulation(qk_gemm *g, int on);

/* y[T x out] (row-major, row stride ldy >= out elements, device memory of type y_type) =
 * alpha * x[T x in] * W^T + beta * y, x and w as above (x has rows = T, w rows = out, both
 * k = in). FP4 and FP8 tensor scales are folded into alpha (qk_lt_fold_alpha) unless FP8's
 * d_tensor_scale is given. Runs on `stream` (NULL: default stream) without synchronising
 * it, except for the first call of a shape (the heuristic query) and scratch growth. *path_out
 * (may be NULL) receives the path taken: a native FP4 GEMM that cuBLASLt refuses for the shape
 * (any status, no algorithm) falls back to the emulated path and says so there, with the
 * reason in qk_gemm_fallback.
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

/* Drops the BF16 copies of resident weights whose codes are at data (call it before that memory
 * is freed or rewritten; synchronises the device when a copy is dropped). NULL g: no-op. */
void qk_gemm_forget(qk_gemm *g, const void *data);

/* Sets the bytes the resident weights' BF16 copies may take (dropping the least recently used
 * above it). */
void qk_gemm_set_dequant_budget(qk_gemm *g, size_t bytes);

/* What the resident weights' copies did: GEMMs that found one (hits), copies made (misses),
 * copies held, their bytes and the budget. */
typedef struct qk_gemm_dq_stats {
    uint64_t hits, misses;
    size_t weights, bytes, budget;
} qk_gemm_dq_stats;
/* g's counters into *out (all zero for NULL g). */
void qk_gemm_dequant_stats(const qk_gemm *g, qk_gemm_dq_stats *out);

/* Why the last native FP4 GEMM of g ran emulated ("native_fp4 refused, ran emulated_bf16:
 * kernels/cuda: gemm: cublasLtMatmulAlgoGetHeuristic ... CUBLAS_STATUS_INVALID_VALUE ... m=...
 * n=... k=..."), "" when none did since g was made or qk_gemm_fallback_clear. Never NULL. */
const char *qk_gemm_fallback(const qk_gemm *g);

/* The CUBLAS_STATUS_* name of that refusal ("CUBLAS_STATUS_NOT_SUPPORTED" also for "no
 * algorithm"; "no_status" when the message had none), "" when there was none. Never NULL. */
const char *qk_gemm_fallback_status(const qk_gemm *g);

/* Forgets the fallback reason (a new job's count starts). */
void qk_gemm_fallback_clear(qk_gemm *g);

/* Number of cached plans, keys cuBLASLt refused included (tests: a repeated shape adds
 * none). */
size_t qk_gemm_plan_count(const qk_gemm *g);

#ifdef __cplusplus
}
#endif

#endif
