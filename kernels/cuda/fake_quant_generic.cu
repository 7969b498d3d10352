// Generic GPU fake-quant: every format of format.c (NVFP4 1D and 16x16, every MX element type,
// FP8 per tensor, INT8 per channel, INT4 group-wise) under RNE, RZ or SR, with the operations
// of the CPU reference through codec_core.h (host-tested against element.c and the CPU quantizer).
// qk_cuda_fake_quant (fake_quant.cu) sends here what its fast NVFP4/MXFP4 kernel does not do.
//
// Three passes: the tensor amax (NVFP4, FP8 per tensor; tensor_amax.cuh), one warp per block
// for the block amax (any block shape: 1x16, 16x16, 1x32, 1xk, 1xgroup), then one thread per
// element, which recomputes its block's scale from the block amax (a few integer operations,
// identical for every element of the block) and writes the fake-quantized value.
#include <cuda_runtime.h>

#include <stdint.h>

#include "codec_core.h"
#include "fake_quant_generic.h"
#include "launch_setup.cuh"

namespace {

constexpr int kThreads = 256;

struct gen_params : qk_launch_opts {
    qk_format fmt; // copies: device code reads no host table
    qk_codec elem;
    size_t rows, k, block, nblk, brows, ngroups;
};

// One warp per (row group, block): max |x| over its finite elements by bits; an MX block
// holding Inf/NaN gets NaN (quant_ref.c block_amax).
__global__ void block_amax_kernel(const float *__restrict__ x, gen_params p, float *amax) {
    const size_t warps = (size_t)gridDim.x * (blockDim.x / 32);
    const int lane = threadIdx.x & 31;
    for (size_t w = blockIdx.x * (size_t)(blockDim.x / 32) + threadIdx.x / 32;
         w < p.ngroups * p.nblk; w += warps) {
        const size_t g = w / p.nblk, b = w % p.nblk;
        const size_t r0 = g * p.brows, c0 = b * p.block;
        const size_t h = p.rows - r0 < p.brows ? p.rows - r0 : p.brows;
        const size_t n = p.k - c0 < p.block ? p.k - c0 : p.block;
        unsigned m = 0, nonfinite = 0;
        for (size_t i = lane; i < h * n; i += 32) {
            unsigned bits = __float_as_uint(x[(r0 + i / n) * p.k + c0 + i % n]) & 0x7FFFFFFFu;
            if (bits >= 0x7F800000u)
                nonfinite = 1;
            else
                m = max(m, bits);
        }
        m = __reduce_max_sync(0xFFFFFFFFu, m);
        nonfinite = __reduce_max_sync(0xFFFFFFFFu, nonfinite);
        if (lane == 0)
            amax[w] = (p.fmt.rule == QK_RULE_MX && nonfinite) ? qk_float_of(0x7FC00000u)
                                                              : __uint_as_float(m);
    }
}

__global__ void element_kernel(const float *x, float *y, gen_params p, const float *amax,
                               const unsigned *tensor_amax_bits) {
    float s_enc = 1.0f, s_dec = 1.0f;
    if (p.fmt.tensor_scale)
        qk_tensor_scales_hd(&p.fmt, &p.elem,
                            p.amax_given ? p.amax_value : __uint_as_float(*tensor_amax_bits),
                            &s_enc, &s_dec);
    const size_t n = p.rows * p.k;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += stride) {
        const size_t r = i / p.k, c = i % p.k;
        const float a = amax ? amax[(r / p.brows) * p.nblk + c / p.block] : 0.0f;
        const qk_block_scale_hd bs =
            qk_scale_for_hd(&p.fmt, &p.elem, p.rule, p.clamp, s_enc, s_dec, a);
        const uint32_t rb =
            p.rounding == QK_ROUND_SR ? qk_sr_bits_core(p.seed, p.tensor_id, p.step, i) : 0;
        y[i] = qk_fake_quant_element_hd(&p.fmt, &p.elem, &bs, s_dec, x[i], p.rounding, rb);
    }
}

qs_status cuda_fail(qs_error *err, cudaError_t e, const char *what) {
    return qs_error_set(err, QS_EIO, "kernels/cuda: fake-quant (generic): %s: %s", what,
                        cudaGetErrorString(e));
}

unsigned grid_for(size_t work, size_t per_block) {
    size_t g = (work + per_block - 1) / per_block;
    return (unsigned)(g < 1 ? 1 : (g > 65535 * 16 ? 65535 * 16 : g));
}

} // namespace

qs_status qk_cuda_fake_quant_generic(const qk_format *fmt, const qk_quant_options *opt, float *d_x,
                                     size_t rows, size_t k, cudaStream_t stream, qs_error *err) {
    gen_params p;
    memset(&p, 0, sizeof p);
    p.fmt = *fmt;
    p.elem = *fmt->elem;
    p.fmt.elem = nullptr; // the device reads p.elem
    p.rows = rows;
    p.k = k;
    p.block = fmt->block == 0                              ? k
              : (fmt->group_option && opt->group_size > 0) ? (size_t)opt->group_size
                                                           : (size_t)fmt->block;
    p.nblk = (k + p.block - 1) / p.block;
    p.brows = (size_t)fmt->block_rows;
    p.ngroups = (rows + p.brows - 1) / p.brows;
    set_launch_opts(p, opt);
    const bool need_blocks = fmt->rule != QK_RULE_TENSOR;
    const bool need_tensor = fmt->tensor_scale && !opt->tensor_amax_given;
    float *amax = nullptr;
    unsigned *tamax = nullptr;
    cudaError_t e = start_tensor_amax(d_x, rows * k, need_tensor, &tamax, stream);
    if (e == cudaSuccess && need_blocks)
        e = cudaMallocAsync((void **)&amax, p.ngroups * p.nblk * sizeof *amax, stream);
    if (e == cudaSuccess && need_blocks) {
        block_amax_kernel<<<grid_for(p.ngroups * p.nblk, kThreads / 32), kThreads, 0, stream>>>(
            d_x, p, amax);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) {
        element_kernel<<<grid_for(rows * k, kThreads), kThreads, 0, stream>>>(d_x, d_x, p, amax,
                                                                              tamax);
        e = cudaGetLastError();
    }
    if (amax) {
        cudaError_t ef = cudaFreeAsync(amax, stream);
        if (e == cudaSuccess) e = ef;
    }
    if (tamax) {
        cudaError_t ef = cudaFreeAsync(tamax, stream);
        if (e == cudaSuccess) e = ef;
    }
    // stream-ordered: only the default stream (NULL) is waited for (qk_cuda.h)
    if (e == cudaSuccess && !stream) e = cudaStreamSynchronize(stream);
    return e == cudaSuccess ? QS_OK : cuda_fail(err, e, "kernels");
}
