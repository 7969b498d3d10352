// GPU fake-quant for NVFP4 and MXFP4: emulated FP4 with the CPU reference's arithmetic
// (numerics.h), contract in qk_cuda.h.
//
// Layout of the work: one thread per 4 consecutive elements of a row; the L = block/4 threads
// of one scale block are adjacent lanes of a warp (each row's thread count is padded to a
// whole number of blocks), so the block amax is an L-lane shuffle reduction. Loads and stores
// of a warp cover 512 contiguous bytes (coalesced). NVFP4 first reduces the tensor amax
// (max of |x| bit patterns, NaN ignored, order-free so deterministic) into one word that the
// block kernel reads, exactly as the CPU's two passes.
#include <cuda_runtime.h>

#include <stdint.h>

#include "format.h"
#include "numerics.h"
#include "qk_cuda.h"
#include "qk_cuda_options.h"
#include "fake_quant_generic.h"
#include "launch_setup.cuh"

namespace {

constexpr int kThreads = 256;

struct fq_params : qk_launch_opts { // rounding: RNE or SR
    size_t rows, k, nblk;
    int mx;   // 1: MXFP4, 0: NVFP4
    int vec4; // k % 4 == 0 and x 16-byte aligned: float4 loads and stores
};

// Grid: x covers one row's padded thread count (nblk * L), y strides over rows, so no
// thread divides by the row length.
template <int B>
__global__ void fake_quant_kernel(float *__restrict__ x, fq_params p, const unsigned *amax_bits) {
    constexpr int L = B / 4; // lanes per scale block
    const size_t gpr = p.nblk * L;
    const size_t g = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    const size_t c = (g / L) * B + (g % L) * 4; // L is a power of two: shifts
    float s_enc_nv = 1.0f, s_dec_nv = 1.0f;
    if (!p.mx)
        qk_nvfp4_global_scales_core(p.amax_given ? p.amax_value : __uint_as_float(*amax_bits),
                                    &s_enc_nv, &s_dec_nv);
    for (size_t r = blockIdx.y; r < p.rows; r += gridDim.y) {
        const bool active = g < gpr;
        float *row = x + r * p.k;
        float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (active && p.vec4 && c + 3 < p.k) {
            float4 q = *reinterpret_cast<const float4 *>(row + c);
            v[0] = q.x;
            v[1] = q.y;
            v[2] = q.z;
            v[3] = q.w;
        } else {
#pragma unroll
            for (int j = 0; j < 4; j++)
                if (active && c + j < p.k) v[j] = row[c + j];
        }
        unsigned m = 0, any = 0;
#pragma unroll
        for (int j = 0; j < 4; j++) { // padding lanes hold +0: never raise the amax
            unsigned b = __float_as_uint(v[j]) & 0x7FFFFFFFu;
            m = max(m, b >= 0x7F800000u ? 0u : b); // NaN and +-Inf ignored (CPU's block_amax)
            any = max(any, b);
        }
#pragma unroll
        for (int off = 1; off < L; off <<= 1) { // every lane takes part, active or not
            m = max(m, __shfl_xor_sync(0xFFFFFFFFu, m, off));
            any = max(any, __shfl_xor_sync(0xFFFFFFFFu, any, off));
        }
        if (!active) continue;

        // block scale: scale_rules.h scale_for / quant_fast.c qk_quant_row_fast, same operations
        float enc, dec, s_dec = 1.0f;
        float amax = __uint_as_float(m);
        if (p.mx) {
            const float nan = qk_float_of(0x7FC00000u);
            uint8_t code =
                qk_mx_scale_code_core(any >= 0x7F800000u ? nan : amax, p.rule, 2, 1, 6.0f);
            enc = code == 0xFF ? nan : qk_pow2f(127 - (int)code);
            dec = code == 0xFF ? nan : qk_pow2f((int)code - 127);
        } else {
            s_dec = s_dec_nv;
            float sv = amax * (s_enc_nv * (1.0f / 6.0f));
            if (p.clamp == QK_NVFP4_CLAMP_TORCHAO && sv < 0x1p-6f) sv = 0x1p-6f;
            if (p.clamp == QK_NVFP4_CLAMP_ZERO_TO_ONE && sv == 0.0f) sv = 1.0f;
            dec = qk_e4m3_value_nonneg(qk_e4m3_rne_nonneg(sv));
            enc = fminf(1.0f / (dec * s_dec), FLT_MAX);
        }
        float out[4];
        if (p.rounding == QK_ROUND_SR) {
            const size_t idx = r * p.k + c;
            uint32_t rb[4];
            if ((idx & 3) == 0) { // one Philox block serves the 4 elements (philox.h layout)
                const uint32_t ctr[4] = {(uint32_t)(idx >> 2), (uint32_t)(idx >> 34), p.tensor_id,
                                         p.step};
                const uint32_t key[2] = {(uint32_t)p.seed, (uint32_t)(p.seed >> 32)};
                qk_philox4x32_10_core(ctr, key, rb);
            } else {
#pragma unroll
                for (int j = 0; j < 4; j++)
                    rb[j] = qk_sr_bits_core(p.seed, p.tensor_id, p.step, idx + j);
            }
#pragma unroll
            for (int j = 0; j < 4; j++) {
                uint32_t code = qk_minifloat_encode_core(4, 2, 1, 1, 0x7u, 0x7u, v[j] * enc,
                                                         QK_ROUND_SR, rb[j]);
                out[j] = (qk_e2m1_value(code) * dec) * s_dec;
            }
        } else {
#pragma unroll
            for (int j = 0; j < 4; j++)
                out[j] = (qk_e2m1_rne_value(v[j] * enc) * dec) * s_dec;
        }
        if (p.vec4 && c + 3 < p.k) {
            *reinterpret_cast<float4 *>(row + c) = make_float4(out[0], out[1], out[2], out[3]);
        } else {
#pragma unroll
            for (int j = 0; j < 4; j++)
                if (c + j < p.k) row[c + j] = out[j];
        }
    }
}

qs_status cuda_fail(qs_error *err, cudaError_t e, const char *what) {
    return qs_error_set(err, QS_EIO, "kernels/cuda: %s: %s", what, cudaGetErrorString(e));
}

} // namespace

extern "C" int qk_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); // clear the sticky "no device" error
        return 0;
    }
    return n;
}

extern "C" qs_status qk_cuda_fake_quant(const qk_format *fmt, const qk_quant_options *opt,
                                        float *d_x, size_t rows, size_t k, void *stream_,
                                        qs_error *err) {
    static const qk_quant_options defaults = {};
    if (!opt) opt = &defaults;
    if (!fmt || !d_x || rows == 0 || k == 0)
        return qs_error_set(err, QS_EINVAL, "kernels/cuda: empty tensor (rows=%zu, k=%zu)", rows,
                            k);
    if (fmt->rule == QK_RULE_IDENTITY) return QS_OK; // "bf16": the unquantized reference
    bool nv = fmt->rule == QK_RULE_NVFP4 && fmt->block_rows == 1;
    bool mx = fmt->rule == QK_RULE_MX && fmt->elem == &qk_codec_e2m1;
    qs_status st = qk_cuda_check_options(fmt, opt, err);
    if (st) return st;
    // the warp-per-block kernel below covers NVFP4 1x16 and MXFP4 under RNE and SR; the
    // generic kernel every other case (fake_quant_generic.cu)
    if (!(nv || mx) || opt->rounding == QK_ROUND_RZ)
        return qk_cuda_fake_quant_generic(fmt, opt, d_x, rows, k, (cudaStream_t)stream_, err);
    cudaStream_t stream = (cudaStream_t)stream_;
    const int B = nv ? 16 : 32;
    fq_params p;
    p.rows = rows;
    p.k = k;
    p.nblk = (k + B - 1) / B;
    p.mx = mx ? 1 : 0;
    p.vec4 = (k % 4 == 0) && (((uintptr_t)d_x & 15) == 0);
    set_launch_opts(p, opt);
    unsigned *amax = nullptr;
    cudaError_t e = start_tensor_amax(d_x, rows * k, nv && !p.amax_given, &amax, stream);
    if (!amax) return cuda_fail(err, e, "cudaMallocAsync");
    if (e == cudaSuccess) {
        size_t per_row = p.nblk * (size_t)(B / 4);
        dim3 grid((unsigned)((per_row + kThreads - 1) / kThreads),
                  (unsigned)(rows < 65535 ? rows : 65535));
        if (per_row > (size_t)kThreads * 0x7FFFFFFFu) {
            e = cudaErrorInvalidValue; // kept: no launch, so no cudaGetLastError over it
        } else {
            if (nv)
                fake_quant_kernel<16><<<grid, kThreads, 0, stream>>>(d_x, p, amax);
            else
                fake_quant_kernel<32><<<grid, kThreads, 0, stream>>>(d_x, p, amax);
            e = cudaGetLastError();
        }
    }
    cudaError_t ef = cudaFreeAsync(amax, stream);
    if (e == cudaSuccess) e = ef;
    // stream-ordered: only the default stream (NULL) is waited for (qk_cuda.h)
    if (e == cudaSuccess && !stream) e = cudaStreamSynchronize(stream);
    return e == cudaSuccess ? QS_OK : cuda_fail(err, e, "fake-quant kernels");
}

extern "C" qs_status qk_cuda_fake_quant_host(const qk_format *fmt, const qk_quant_options *opt,
                                             float *x, size_t rows, size_t k, qs_error *err) {
    if (!x || rows == 0 || k == 0)
        return qs_error_set(err, QS_EINVAL, "kernels/cuda: empty tensor (rows=%zu, k=%zu)", rows,
                            k);
    float *d = nullptr;
    size_t bytes = rows * k * sizeof *x;
    cudaError_t e = cudaMalloc((void **)&d, bytes);
    if (e != cudaSuccess) return cuda_fail(err, e, "cudaMalloc");
    e = cudaMemcpy(d, x, bytes, cudaMemcpyHostToDevice);
    qs_status st = e == cudaSuccess ? qk_cuda_fake_quant(fmt, opt, d, rows, k, nullptr, err)
                                    : cuda_fail(err, e, "cudaMemcpy to device");
    if (st == QS_OK) {
        e = cudaMemcpy(x, d, bytes, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess) st = cuda_fail(err, e, "cudaMemcpy to host");
    }
    cudaFree(d);
    return st;
}
