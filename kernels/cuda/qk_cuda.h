/* GPU quantizers for every format of the numeric core (fake-quant), the packed FP4 quantizer
 * writing cuBLASLt's layout, and the RHT, emulating the formats in FP32 with the SAME bit-level
 * code as the CPU reference (numerics.h, codec_core.h), so results equal qk_fake_quant's /
 * qk_quantize's bit for bit on any GPU, Hopper (sm_90, no FP4 hardware) included. One exception: a
 * NaN output (only an MX block holding Inf/NaN produces one) may carry another NaN payload, as GPUs
 * canonicalise NaN.
 *
 * Plain C interface: callers need no CUDA headers. Built only when QSWEEP_HAVE_CUDA. */
#ifndef QK_CUDA_H
#define QK_CUDA_H

#include <stddef.h>

#include <stdint.h>

#include "cublaslt_layout.h"
#include "quant.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices; 0 when there is none or no driver (never an error). */
int qk_cuda_device_count(void);

/* Fake-quantizes the device buffer d_x [rows x k] (row-major FP32) in place on `stream`
 * (a cudaStream_t, NULL for the default stream): stream-ordered, with no host round trip (the
 * tensor amax stays on the device, its buffer a stream-ordered pool allocation); only with the
 * default stream does the call wait for it. A caller on its own stream synchronises before the
 * host reads d_x (an error of the kernels then shows there). Every format of format.c
 * ("bf16" is the identity: nothing to do), options as qk_fake_quant (rounding RNE / RZ / SR,
 * MX rules, NVFP4 clamps, group_size, a given tensor_amax); opt may be NULL. NVFP4 1x16 and
 * MXFP4 under RNE/SR take a warp-per-block kernel (two passes for NVFP4: tensor amax, then
 * blocks); every other case a generic three-pass kernel (tensor amax, block amax, elements).
 * Errors: QS_EINVAL (shape, options), QS_EUNSUPPORTED (reference_only, tiny_amax = exact),
 * QS_EIO (a CUDA error, with its text). */
qs_status qk_cuda_fake_quant(const qk_format *fmt, const qk_quant_options *opt, float *d_x,
                             size_t rows, size_t k, void *stream, qs_error *err);

/* The same on a host buffer x: copies it to the device, fake-quantizes, copies it back. */
qs_status qk_cuda_fake_quant_host(const qk_format *fmt, const qk_quant_options *opt, float *x,
                                  size_t rows, size_t k, qs_error *err);

/* Quantizes the device buffer d_x [rows x k] (row-major FP32, unchanged) into the cuBLASLt
 * layout l (qk_lt_layout_init with the same format and shape): E2M1 codes into d_codes
 * [l->codes_bytes] (two per byte, K-major, zero padding to k_pad) and block scales into d_scales
 * [l->scale_bytes] (128x4 tiled, padded slots 0), the same bytes as qk_quantize followed by
 * qk_lt_pack on the CPU. Formats: nvfp4, nvfp4_2d (16x16 blocks, scale repeated on each row),
 * mxfp4; rounding RNE, RZ or SR (the Philox stream of philox.h, by row-major index). The FP32
 * tensor decode scale (NVFP4 S_dec, else 1) and the tensor amax (0 for MXFP4) go to
 * *tensor_scale and *tensor_amax (host; either may be NULL): the call synchronises `stream` to
 * read them back. Errors: QS_EINVAL (shape, layout mismatch, options), QS_EUNSUPPORTED
 * (another format, reference_only, tiny_amax = exact), QS_EIO (CUDA error text). */
qs_status qk_cuda_quantize_lt(const qk_format *fmt, const qk_quant_options *opt, const float *d_x,
                              size_t rows, size_t k, const qk_lt_layout *l, uint8_t *d_codes,
                              uint8_t *d_scales, float *tensor_scale, float *tensor_amax,
                              void *stream, qs_error *err);

/* qk_cuda_quantize_lt without a host round trip: the same codes and scales, and the FP32 tensor
 * decode scale (NVFP4 S_dec, 1 for MXFP4) written to d_tensor_scale[0] (device memory) on
 * `stream`, stream-ordered (the tensor amax never leaves the device; its buffer is a
 * stream-ordered pool allocation). Pass d_tensor_scale as the qk_gemm_operand's (qk_gemm.h).
 * Errors: as qk_cuda_quantize_lt, QS_EINVAL for a NULL d_tensor_scale; an error of the kernels
 * shows at the caller's next synchronisation. */
qs_status qk_cuda_quantize_lt_async(const qk_format *fmt, const qk_quant_options *opt,
                                    const float *d_x, size_t rows, size_t k, const qk_lt_layout *l,
                                    uint8_t *d_codes, uint8_t *d_scales, float *d_tensor_scale,
                                    void *stream, qs_error *err);

/* The 16-point random Hadamard transform of hadamard.h (qk_rht16: same signs, same butterfly
 * order, same bits) in place on the device buffer d_x [rows x k], k % 16 == 0; inverse = 1 for
 * the inverse; d_x 16-byte aligned. Runs on stream, stream-ordered (waits only for the default
 * stream, NULL), as qk_cuda_fake_quant. Errors: QS_EINVAL
 * (k % 16, empty, misaligned), QS_EIO. */
qs_status qk_cuda_rht16(float *d_x, size_t rows, size_t k, uint64_t seed, int inverse, void *stream,
                        qs_error *err);

/* The d-point random Hadamard transform of hadamard.h qk_rht (d = 16 or 32: same signs, same
 * butterfly order, the same FP32 multiply by 1/sqrt(d), same bits) in place on the device
 * buffer d_x [rows x k], k % d == 0, d_x 16-byte aligned; d = 16 is qk_cuda_rht16. Runs on
 * stream, stream-ordered as qk_cuda_rht16. Errors: QS_EINVAL (d other than 16 or 32, k % d,
 * empty, misaligned), QS_EIO. */
qs_status qk_cuda_rht(float *d_x, size_t rows, size_t k, int d, uint64_t seed, int inverse,
                      void *stream, qs_error *err);

#ifdef __cplusplus
}
#endif

#endif
