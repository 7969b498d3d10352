// The launch setup the GPU quantizers share (fake_quant.cu, fake_quant_generic.cu,
// quantize_lt.cu): the call's options as kernels read them, and the tensor-amax word.
// Internal to kernels/cuda (each .cu gets its own copy).
#ifndef QK_CUDA_LAUNCH_SETUP_CUH
#define QK_CUDA_LAUNCH_SETUP_CUH

#include <cuda_runtime.h>

#include <stdint.h>

#include "quant.h"
#include "tensor_amax.cuh"

namespace {

// The options of one call a kernel reads on the device: the base of each kernel's parameters.
struct qk_launch_opts {
    qk_mx_scale_rule rule;
    qk_nvfp4_clamp clamp;
    qk_rounding rounding;
    uint64_t seed;
    uint32_t tensor_id, step;
    int amax_given;   // the tensor amax comes from options.tensor_amax (one pass)
    float amax_value; // that amax
};

inline void set_launch_opts(qk_launch_opts &o, const qk_quant_options *opt) {
    o.rule = opt->mx_rule;
    o.clamp = opt->nvfp4_clamp;
    o.rounding = opt->rounding;
    o.seed = opt->seed;
    o.tensor_id = opt->tensor_id;
    o.step = opt->step;
    o.amax_given = opt->tensor_amax_given;
    o.amax_value = opt->tensor_amax;
}

// *amax: one device word zeroed on stream (nullptr when it cannot be allocated); when measure,
// the tensor amax of x [n] (FP32 bits, launch_tensor_amax) goes into it, stream-ordered.
inline cudaError_t start_tensor_amax(const float *x, size_t n, bool measure, unsigned **amax,
                                     cudaStream_t stream) {
    *amax = nullptr;
    cudaError_t e = cudaMallocAsync((void **)amax, sizeof **amax, stream);
    if (e != cudaSuccess) {
        *amax = nullptr;
        return e;
    }
    e = cudaMemsetAsync(*amax, 0, sizeof **amax, stream);
    if (e == cudaSuccess && measure) e = launch_tensor_amax(x, n, *amax, stream);
    return e;
}

} // namespace

#endif
