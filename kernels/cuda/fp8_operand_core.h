/* The FP8 E4M3 per-tensor operand of cuBLASLt's FP8 GEMM (qk_cuda_fp8.h), element by element,
 * as __host__ __device__ functions: the kernels of quantize_fp8.cu run them on the device and
 * tests/kernels/test_cuda_fp8_operand.c on the host against qk_quantize. Plain C. */
#ifndef QK_CUDA_FP8_OPERAND_CORE_H
#define QK_CUDA_FP8_OPERAND_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "codec_core.h"
#include "numerics.h"

/* The tensor's encode and decode scales from its amax (NaN and +-Inf excluded) or the given
 * one (scale_rules.c qk_plan_tensor_scales under QK_TINY_TE). */
QK_HD void qk_fp8_operand_scales_hd(const qk_format *f, const qk_codec *elem, float amax,
                                    float *s_enc, float *s_dec) {
    qk_tensor_scales_hd(f, elem, amax, s_enc, s_dec);
}

/* Code byte (r, c) of the operand [rows x ld] of x [rows x k]: e4m3(x[r][c] S_enc) rounded as
 * asked, SR bits from the stream (seed, tensor_id, step) at the element's index r k + c, as
 * qk_quantize draws them; 0 (+0) in the padding columns c >= k. */
QK_HD uint8_t qk_fp8_operand_code_hd(const qk_codec *elem, const float *x, size_t k, size_t r,
                                     size_t c, float s_enc, qk_rounding rounding, uint64_t seed,
                                     uint32_t tensor_id, uint32_t step) {
    if (c >= k) return 0;
    size_t idx = r * k + c;
    uint32_t rb = rounding == QK_ROUND_SR ? qk_sr_bits_core(seed, tensor_id, step, idx) : 0u;
    return (uint8_t)qk_codec_encode_hd(elem, x[idx] * s_enc, rounding, rb);
}

#endif
