/* GPU fake-quant for NVFP4 (1x16 blocks) and MXFP4 (1x32, every MX scale rule), with RNE or
 * stochastic rounding, emulating FP4 in FP32 with the SAME bit-level code as the CPU
 * reference (numerics.h), so results equal qk_fake_quant's bit for bit on any GPU, Hopper
 * (sm_90, no FP4 hardware) included. One exception: a NaN output (only an MX block holding
 * Inf/NaN produces one) may carry another NaN payload, as GPUs canonicalise NaN.
 *
 * Plain C interface: callers need no CUDA headers. Built only when QSWEEP_HAVE_CUDA. */
#ifndef QK_CUDA_H
#define QK_CUDA_H

#include <stddef.h>

#include "quant.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices; 0 when there is none or no driver (never an error). */
int qk_cuda_device_count(void);

/* Fake-quantizes the device buffer d_x [rows x k] (row-major FP32) in place on `stream`
 * (a cudaStream_t, NULL for the default stream) and waits for it. Options as qk_fake_quant;
 * opt may be NULL. Two passes for NVFP4 (tensor amax, then blocks), one for MXFP4.
 * Errors: QS_EINVAL (shape, options), QS_EUNSUPPORTED (another format, RZ rounding, or
 * reference_only), QS_EIO (a CUDA error, with its text). */
qs_status qk_cuda_fake_quant(const qk_format *fmt, const qk_quant_options *opt, float *d_x,
                             size_t rows, size_t k, void *stream, qs_error *err);

/* The same on a host buffer x: copies it to the device, fake-quantizes, copies it back. */
qs_status qk_cuda_fake_quant_host(const qk_format *fmt, const qk_quant_options *opt, float *x,
                                  size_t rows, size_t k, qs_error *err);

#ifdef __cplusplus
}
#endif

#endif
