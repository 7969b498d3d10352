// The NVFP4 / per-tensor amax pass shared by the fake-quant and packed quantizers: max of
// |x| bit patterns over the tensor, NaN and +-Inf ignored (as the CPU's tensor_amax), an
// order-free max, so deterministic. Internal to kernels/cuda (each .cu gets its own copy).
#ifndef QK_CUDA_TENSOR_AMAX_CUH
#define QK_CUDA_TENSOR_AMAX_CUH

#include <cuda_runtime.h>

#include <stddef.h>

namespace {

constexpr int kAmaxThreads = 256;

__device__ __forceinline__ unsigned abs_bits_no_nan(float v) {
    unsigned b = __float_as_uint(v) & 0x7FFFFFFFu;
    return b >= 0x7F800000u ? 0u : b; // NaN and +-Inf ignored, as on the CPU
}

__global__ void tensor_amax_kernel(const float *__restrict__ x, size_t n, int vec4, unsigned *out) {
    unsigned m = 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t start = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    size_t tail = 0;
    if (vec4) { // 16-byte loads over the bulk, x being 16-byte aligned
        const float4 *x4 = reinterpret_cast<const float4 *>(x);
        for (size_t q = start; q < n / 4; q += stride) {
            float4 v = x4[q];
            m = max(max(m, abs_bits_no_nan(v.x)), abs_bits_no_nan(v.y));
            m = max(max(m, abs_bits_no_nan(v.z)), abs_bits_no_nan(v.w));
        }
        tail = n / 4 * 4;
    }
    for (size_t i = tail + start; i < n; i += stride)
        m = max(m, abs_bits_no_nan(x[i]));
    // warp, then block, then one atomic per block (thousands of same-address atomics would
    // serialise)
    __shared__ unsigned warp_max[kAmaxThreads / 32];
    m = __reduce_max_sync(0xFFFFFFFFu, m);
    if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x / 32] = m;
    __syncthreads();
    if (threadIdx.x < 32) {
        m = threadIdx.x < kAmaxThreads / 32 ? warp_max[threadIdx.x] : 0u;
        m = __reduce_max_sync(0xFFFFFFFFu, m);
        if (threadIdx.x == 0) atomicMax(out, m);
    }
}

// Launches tensor_amax_kernel over n values of x into *out (which the caller zeroed).
inline cudaError_t launch_tensor_amax(const float *x, size_t n, unsigned *out,
                                      cudaStream_t stream) {
    size_t want = (n + kAmaxThreads * 8 - 1) / (kAmaxThreads * 8);
    unsigned grid = (unsigned)(want < 2048 ? (want ? want : 1) : 2048);
    tensor_amax_kernel<<<grid, kAmaxThreads, 0, stream>>>(x, n, (((uintptr_t)x & 15) == 0), out);
    return cudaGetLastError();
}

} // namespace

#endif
