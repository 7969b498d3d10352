/* FP8 E4M3 per-tensor operands for cuBLASLt's FP8 GEMM (qk_gemm.h QK_GEMM_FP8_E4M3), quantized
 * on the device with the CPU quantizer's arithmetic (kernels/quant.h qk_quantize of fp8_e4m3:
 * S_enc = 448 / amax, element code = e4m3(x S_enc) rounded as the options say, S_dec = 1 /
 * S_enc), so the codes equal the CPU's and the GEMM's products are the fake-quantized values'. */
#ifndef QK_CUDA_FP8_H
#define QK_CUDA_FP8_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "format.h"
#include "quant.h"

/* Floats of device scratch qk_cuda_quantize_fp8_async needs beside the codes: the decode scale
 * (the GEMM's scale pointer), the encode scale and the amax bits. */
#define QK_CUDA_FP8_SCALE_FLOATS 4

/* x [rows x k] (device, FP32, rows k apart) to E4M3 codes [rows x ld] (ld >= k, padding columns
 * code 0), stream-ordered with no host round trip: scales[0] = S_dec (FP32, device), scales[1] =
 * S_enc, scales[2] the amax bits (scales: QK_CUDA_FP8_SCALE_FLOATS device floats). Rounding RNE,
 * RZ or SR (the CPU's stream: seed, tensor_id, step, element index r k + c); the tensor amax the
 * tensor's own, or opt->tensor_amax when tensor_amax_given. Errors: QS_EUNSUPPORTED (not
 * fp8_e4m3, options.reference_only, tiny_amax exact: the caller fake-quantizes instead),
 * QS_EINVAL (ld < k, NULL buffer, a given amax not finite or negative), QS_EIO (a launch). */
qs_status qk_cuda_quantize_fp8_async(const qk_format *fmt, const qk_quant_options *opt,
                                     const float *x, size_t rows, size_t k, size_t ld,
                                     uint8_t *codes, float *scales, void *stream, qs_error *err);

#endif
