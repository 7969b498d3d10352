// FP8 E4M3 per-tensor quantizer for cuBLASLt's FP8 GEMM (qk_cuda_fp8.h): the tensor amax
// (tensor_amax.cuh, order-free), then fp8_operand_core.h's two scales and one code byte per
// element (x S_enc rounded as quant_ref.c rounds it, SR bits from the CPU's counter-based
// stream at the element's row-major index), the functions tests/kernels checks on the host.
#include <cuda_runtime.h>

#include <string.h>

#include "fp8_operand_core.h"
#include "qk_cuda_fp8.h"
#include "qk_cuda_options.h"
#include "launch_setup.cuh"

namespace {

struct fp8_params : qk_launch_opts {
    qk_format fmt; // copies (fmt.elem cleared): device code reads no host table
    qk_codec elem;
    size_t rows, k, ld;
};

// scales[0] = S_dec, scales[1] = S_enc from the amax bits in scales[2] (or the given amax).
__global__ void fp8_scales_kernel(fp8_params p, float *scales) {
    unsigned bits = reinterpret_cast<const unsigned *>(scales)[2];
    float amax = p.amax_given ? p.amax_value : __uint_as_float(bits);
    float enc = 1.0f, dec = 1.0f;
    qk_fp8_operand_scales_hd(&p.fmt, &p.elem, amax, &enc, &dec);
    scales[0] = dec;
    scales[1] = enc;
}

// One thread per code byte of [rows x ld]; padding columns are code 0.
__global__ void fp8_encode_kernel(const float *__restrict__ x, fp8_params p,
                                  const float *__restrict__ scales, uint8_t *__restrict__ codes) {
    const float enc = scales[1];
    const size_t n = p.rows * p.ld, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += stride) {
        codes[i] = qk_fp8_operand_code_hd(&p.elem, x, p.k, i / p.ld, i % p.ld, enc, p.rounding,
                                          p.seed, p.tensor_id, p.step);
    }
}

} // namespace

qs_status qk_cuda_quantize_fp8_async(const qk_format *fmt, const qk_quant_options *opt,
                                     const float *x, size_t rows, size_t k, size_t ld,
                                     uint8_t *codes, float *scales, void *stream_, qs_error *err) {
    const char *name = fmt ? qk_format_name(fmt) : "?";
    if (!fmt || strcmp(name, "fp8_e4m3") != 0 || !opt)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "kernels/cuda: fp8 operand: format %s: not quantized here", name);
    qs_status st = qk_cuda_check_options(fmt, opt, err);
    if (st) return st;
    if (!x || !codes || !scales || ld < k || rows == 0 || k == 0)
        return qs_error_set(err, QS_EINVAL,
                            "kernels/cuda: fp8 operand: %zu x %zu, ld %zu: expected buffers, "
                            "ld >= k, and a non-empty tensor",
                            rows, k, ld);
    cudaStream_t stream = (cudaStream_t)stream_;
    fp8_params p;
    memset(&p, 0, sizeof p);
    p.fmt = *fmt;
    p.fmt.elem = nullptr;
    p.elem = *fmt->elem;
    set_launch_opts(p, opt);
    p.rows = rows;
    p.k = k;
    p.ld = ld;
    unsigned *amax_bits = reinterpret_cast<unsigned *>(scales) + 2;
    cudaError_t e = cudaSuccess;
    if (!p.amax_given) {
        e = cudaMemsetAsync(amax_bits, 0, sizeof *amax_bits, stream);
        if (e == cudaSuccess) e = launch_tensor_amax(x, rows * k, amax_bits, stream);
    }
    if (e == cudaSuccess) {
        fp8_scales_kernel<<<1, 1, 0, stream>>>(p, scales);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) {
        size_t want = (rows * ld + 255) / 256;
        unsigned grid = (unsigned)(want < 4096 ? want : 4096);
        fp8_encode_kernel<<<grid, 256, 0, stream>>>(x, p, scales, codes);
        e = cudaGetLastError();
    }
    if (e != cudaSuccess)
        return qs_error_set(err, QS_EIO, "kernels/cuda: fp8 operand: %s", cudaGetErrorString(e));
    return QS_OK;
}
