// Internal to kernels/cuda: the generic fake-quant (fake_quant_generic.cu) that
// qk_cuda_fake_quant (fake_quant.cu) calls for what its NVFP4/MXFP4 kernel does not cover.
#ifndef QK_CUDA_FAKE_QUANT_GENERIC_H
#define QK_CUDA_FAKE_QUANT_GENERIC_H

#include <cuda_runtime.h>

#include <stddef.h>

#include "quant.h"

// Fake-quantizes d_x [rows x k] in place on stream and waits for it. fmt is any format but
// the identity, opt already validated by qk_cuda_fake_quant (QK_TINY_TE, not reference_only).
// Errors: QS_EIO (CUDA error text).
qs_status qk_cuda_fake_quant_generic(const qk_format *fmt, const qk_quant_options *opt, float *d_x,
                                     size_t rows, size_t k, cudaStream_t stream, qs_error *err);

#endif
