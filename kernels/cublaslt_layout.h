/* Host-side logic of the cuBLASLt block-scaled FP4 GEMM, shared by the CUDA code
 * (kernels/cuda/gemm.cu, quantize_lt.cu) and the CPU tests (tests/kernels/test_cublaslt_layout.c):
 * the operand layout cuBLASLt reads, the repacking of a CPU qk_packed into it, the folding of
 * the FP32 per-tensor scales into alpha, and a CPU evaluation of the GEMM from those buffers
 * (the reference the GPU tests compare with).
 *
 * Layout of one FP4 operand [rows x k] (NVFP4, NVFP4 2D, MXFP4), cuBLASLt "TN" (docs/numerics.md 4.2,
 * 4.3; CUDALibrarySamples cuBLASLt/LtNvfp4Matmul; TransformerEngine cublaslt_gemm.cu):
 * - codes: E2M1, two per byte, the even column in the low nibble (docs/numerics.md 1.1), K-major:
 *   row r starts at byte r * ld_bytes; columns k .. k_pad-1 hold code 0 (+0).
 * - K is padded to k_pad = roundup(k, 4 * vec) (64 for NVFP4, 128 for MXFP4): the scale matrix
 *   then has exactly Cp = k_pad / vec columns, every 128x4 scale tile is fully used by the GEMM,
 *   and K is a multiple of 32 elements (16 bytes), the alignment FP4 TMA needs (docs/numerics.md 4.2,
 *   Megatron get_fp4_align_size). The padded columns are zeros and add exactly 0 to every dot
 *   product, so the GEMM over k_pad equals the GEMM over k.
 * - scales: the logical row-major matrix S[rows][C], C = ceil(k / vec), one UE4M3 (NVFP4) or
 *   UE8M0 (MXFP4) byte per block, in the 128x4 tiled layout of qk_swizzle_128x4 (swizzle.h),
 *   padded rows and columns 0: qk_swizzle_128x4_size(rows, C) bytes.
 * - the FP32 per-tensor decode scale (NVFP4's S_dec = 1 / S_enc; 1 for MXFP4) is NOT applied by
 *   cuBLASLt's VEC16/VEC32 scale modes and is folded into alpha (qk_lt_fold_alpha).
 *
 * The engine's linear y[T x out] = x[T x in] * W^T (W row-major [out x in]) maps to cuBLASLt's
 * column-major D[m x n] = alpha * op(A) * op(B) with A = W (m = out, TRANSA = T, lda = k_pad),
 * B = x (n = T, TRANSB = N, ldb = k_pad), D column-major [out x T] with ldd = out, which is y
 * row-major [T x out]. Both operands are K-major (TN), the only layout FP4 tensor cores take. */
#ifndef QK_CUBLASLT_LAYOUT_H
#define QK_CUBLASLT_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

/* quant.h first: it includes error.h with C linkage (error.h has no extern "C" of its own) */
#include "quant.h"

#include "error.h"
#include "numerics.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Which block-scale mode cuBLASLt applies (values of cublasLtMatmulMatrixScale_t,
 * docs/numerics.md 4.1). */
typedef enum qk_lt_scale_mode {
    QK_LT_SCALE_VEC16_UE4M3 = 1, /* NVFP4: one UE4M3 per 16 elements of K */
    QK_LT_SCALE_VEC32_UE8M0 = 2, /* MXFP4: one UE8M0 per 32 elements of K */
} qk_lt_scale_mode;

/* Shape and sizes of one FP4 operand in cuBLASLt's layout (see the top of this file). */
typedef struct qk_lt_layout {
    qk_lt_scale_mode mode;
    size_t vec;         /* elements per block scale: 16 or 32 */
    size_t rows, k;     /* logical shape (rows = M for W, T for x) */
    size_t k_pad;       /* GEMM K and leading dimension in elements: roundup(k, 4 * vec) */
    size_t ld_bytes;    /* bytes per row of codes: k_pad / 2 */
    size_t codes_bytes; /* rows * ld_bytes */
    size_t scale_cols;  /* C = ceil(k / vec), logical scale columns */
    size_t scale_bytes; /* qk_swizzle_128x4_size(rows, C) = roundup(rows,128) * k_pad / vec */
} qk_lt_layout;

#ifdef __CUDACC__
#define QK_LT_HD static inline __host__ __device__
#else
#define QK_LT_HD static inline
#endif

/* Byte offset of scale S[r][c] in the 128x4 tiled buffer of a scale matrix with scale_cols
 * columns (docs/numerics.md 4.3; the same formula as qk_swizzle_128x4_offset, inline here so the
 * device packer and dequantizer compute it too):
 *   ((r/128)*(Cp/4) + c/4)*512 + (r%32)*16 + ((r%128)/32)*4 + c%4, Cp = roundup(C, 4). */
QK_LT_HD size_t qk_lt_scale_offset(size_t r, size_t c, size_t scale_cols) {
    size_t cp4 = (scale_cols + 3) / 4;
    return ((r / 128) * cp4 + c / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + (c % 4);
}

/* Value of E2M1 code `code` (low 4 bits) under block-scale byte `scale` of mode `mode`:
 * e2m1 * UE4M3 (sign bit ignored) or e2m1 * 2^(scale - 127) (NaN for 0xFF). Exact (at most 6
 * significant bits). Shared by qk_lt_element (host) and the device dequantizer. */
QK_LT_HD float qk_lt_value(qk_lt_scale_mode mode, uint32_t code, uint8_t scale) {
    float sb;
    if (mode == QK_LT_SCALE_VEC16_UE4M3)
        sb = qk_e4m3_value_nonneg(scale & 0x7Fu);
    else
        sb = scale == 0xFF ? qk_float_of(0x7FC00000u) : qk_pow2f((int)scale - 127);
    return qk_e2m1_value(code & 0xFu) * sb;
}

/* Fills l for an operand of format fmt ("nvfp4", "nvfp4_2d" -> VEC16_UE4M3; "mxfp4" ->
 * VEC32_UE8M0) and shape [rows x k]. Errors: QS_EINVAL (NULL, rows or k 0, sizes overflow),
 * QS_EUNSUPPORTED (any other format: cuBLASLt has no block-scaled GEMM for it here). */
qs_status qk_lt_layout_init(const qk_format *fmt, size_t rows, size_t k, qk_lt_layout *l,
                            qs_error *err);

/* Writes the CPU-quantized p (qk_quantize) in the layout l into codes [l->codes_bytes] and
 * scales [l->scale_bytes]: codes rows copied with zero padding to ld_bytes, scales through
 * qk_swizzle_128x4 with zero padding. This is what the GPU packer (qk_cuda_quantize_lt) writes
 * directly; the GPU tests compare the two byte for byte. Errors: QS_EINVAL (NULL buffers, a
 * buffer shorter than the layout needs, p's format or shape not those of l). */
qs_status qk_lt_pack(const qk_packed *p, const qk_lt_layout *l, uint8_t *codes, size_t codes_len,
                     uint8_t *scales, size_t scales_len, qs_error *err);

/* The alpha of a block-scaled GEMM: *out = alpha * (s_a * 2^exp2_a) * (s_b * 2^exp2_b), the
 * FP32 per-tensor decode scales of both operands folded in (docs/numerics.md 3.3 step 7: "the
 * global factor S_dec_A * S_dec_B must be applied to the output"; TransformerEngine folds it
 * into alpha; arXiv 2509.25149 App. B.3). s_* is qk_packed.tensor_scale (NVFP4: S_dec =
 * 1 / S_enc, S_enc = 2688 / amax_t; MXFP4, BF16: 1) and exp2_* its tensor_scale_exp2 (<= 0,
 * nonzero only under QK_TINY_EXACT). Computed in double (each product of two FP32 values is
 * exact there) and rounded once to FP32, so for alpha = 1 and exp2 = 0 it equals the FP32
 * product s_a * s_b. Errors: QS_EINVAL (a non-finite or negative scale, an exponent outside
 * -252..0, a non-finite alpha), QS_EUNSUPPORTED (the product is nonzero but not an FP32
 * normal number: it would overflow or lose bits as a subnormal alpha; the message gives it). */
qs_status qk_lt_fold_alpha(float alpha, float s_a, int exp2_a, float s_b, int exp2_b, float *out,
                           qs_error *err);

/* Value of element (r, c) of an operand in layout l, from its codes and swizzled scales:
 * e2m1(code) * block scale (UE4M3 or 2^(e - 127); NaN for E8M0 0xFF), WITHOUT the tensor scale.
 * Exactly representable in BF16 (at most 6 significant bits, FP32's exponent range;
 * docs/numerics.md 4.5), which is why the emulated path loses nothing. Padding (r, c) inside
 * the layout (c < k_pad) reads 0. No bounds check beyond the layout (callers pass r < rows). */
float qk_lt_element(const qk_lt_layout *l, const uint8_t *codes, const uint8_t *scales, size_t r,
                    size_t c);

/* BF16 bits of qk_lt_element (exact: the FP32 value's low 16 bits are 0); the host reference of
 * the device dequantizer of the emulated path. */
uint16_t qk_lt_element_bf16(const qk_lt_layout *l, const uint8_t *codes, const uint8_t *scales,
                            size_t r, size_t c);

/* CPU evaluation of what cuBLASLt computes from these buffers for the engine's linear:
 * y[t][o] = alpha * sum_{c < k_pad} x(t, c) * w(o, c), elements by qk_lt_element, products and
 * sum in double, one rounding to FP32; y row-major [T x out] with row stride ldy >= out.
 * lx: x's layout (rows = T), lw: W's (rows = out); both with the same k and mode. alpha as
 * qk_lt_fold_alpha gives it. The GEMM tests compare the device result with this within a
 * tolerance (the device accumulates in FP32 in an unspecified order, docs/numerics.md 4.2).
 * Errors: QS_EINVAL (NULL, layouts that disagree on k or mode, ldy < out). */
qs_status qk_lt_linear_ref(const qk_lt_layout *lx, const uint8_t *x_codes, const uint8_t *x_scales,
                           const qk_lt_layout *lw, const uint8_t *w_codes, const uint8_t *w_scales,
                           float alpha, float *y, size_t ldy, qs_error *err);

#ifdef __cplusplus
}
#endif

#endif
