// Packed FP4 quantizer writing cuBLASLt's layout directly (qk_cuda.h qk_cuda_quantize_lt):
// NVFP4 (1x16 and 16x16 blocks) and MXFP4, RNE / RZ / SR, with the CPU reference's operations
// (scale_rules.h scale_for and quant_ref.c qk_quant_group_ref) through codec_core.h's
// qk_scale_for_hd and qk_codec_encode_hd, so the bytes equal qk_quantize + qk_lt_pack (the same
// algorithm is run on the host in tests/kernels/test_cuda_codec_core.c against those two).
//
// Work layout (as fake_quant.cu): one thread per 4 consecutive columns of a row; the L = B/4
// threads of one scale block are adjacent lanes, so the block amax is an L-lane shuffle
// reduction. The threads of a row cover all k_pad columns, so every code byte is written
// (padding columns as code 0, padding blocks as scale 0); only the scale buffer's padding rows
// need the memset. A 2D block (16 rows x 16 columns) is one thread group of 4 lanes looping
// over its 16 rows twice: amax, then encode.
#include <cuda_runtime.h>

#include <stdint.h>

#include "codec_core.h"
#include "cublaslt_layout.h"
#include "format.h"
#include "numerics.h"
#include "qk_cuda.h"
#include "qk_cuda_options.h"
#include "launch_setup.cuh"

namespace {

constexpr int kThreads = 256;

struct lt_params : qk_launch_opts {
    qk_format fmt; // copies (fmt.elem cleared): device code reads no host table
    qk_codec elem;
    size_t rows, k;
    size_t k_pad, ld_bytes, scale_cols;
    int mx;    // 1: MXFP4, 0: NVFP4
    int brows; // rows per block: 1 or 16
    int vec4;  // k % 4 == 0 and x 16-byte aligned: float4 loads
};

// Columns c .. c+3 of a row (0 beyond k); one 16-byte load when the rows are 16-byte aligned.
__device__ __forceinline__ void load4(const float *row, size_t c, size_t k, int vec4, float v[4]) {
    if (vec4 && c + 3 < k) {
        float4 q = *reinterpret_cast<const float4 *>(row + c);
        v[0] = q.x;
        v[1] = q.y;
        v[2] = q.z;
        v[3] = q.w;
        return;
    }
#pragma unroll
    for (int j = 0; j < 4; j++)
        v[j] = c + j < k ? row[c + j] : 0.0f;
}

template <int B>
__global__ void quantize_lt_kernel(const float *__restrict__ x, lt_params p,
                                   const unsigned *amax_bits, uint8_t *__restrict__ codes,
                                   uint8_t *__restrict__ scales) {
    constexpr int L = B / 4;
    const size_t gpr = p.k_pad / 4; // threads per row: every padded column
    const size_t g = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    const size_t c = g * 4;
    const size_t blk = c / B;
    float s_enc = 1.0f, s_dec = 1.0f;
    if (!p.mx)
        qk_nvfp4_global_scales_core(p.amax_given ? p.amax_value : __uint_as_float(*amax_bits),
                                    &s_enc, &s_dec);
    const size_t groups = (p.rows + p.brows - 1) / p.brows;
    for (size_t grp = blockIdx.y; grp < groups; grp += gridDim.y) {
        const bool active = g < gpr;
        const size_t r0 = grp * p.brows;
        const size_t h = p.rows - r0 < (size_t)p.brows ? p.rows - r0 : (size_t)p.brows;
        // block amax over the group's rows (quant_ref.c block_amax: NaN, +-Inf ignored; MX: any
        // non-finite element makes the block NaN)
        unsigned m = 0, any = 0;
        if (active && c < p.k) {
            for (size_t r = r0; r < r0 + h; r++) {
                float v[4];
                load4(x + r * p.k, c, p.k, p.vec4, v);
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    unsigned b = __float_as_uint(v[j]) & 0x7FFFFFFFu;
                    m = max(m, b >= 0x7F800000u ? 0u : b);
                    any = max(any, b);
                }
            }
        }
#pragma unroll
        for (int off = 1; off < L; off <<= 1) { // every lane takes part
            m = max(m, __shfl_xor_sync(0xFFFFFFFFu, m, off));
            any = max(any, __shfl_xor_sync(0xFFFFFFFFu, any, off));
        }
        if (!active) continue;
        const bool pad_block = blk * B >= p.k; // wholly beyond k: scale 0, codes 0
        // block scale (scale_rules.h scale_for, through codec_core.h as the generic kernel)
        uint8_t code_s = 0;
        float enc = 1.0f;
        if (!pad_block) {
            const float amax =
                (p.mx && any >= 0x7F800000u) ? qk_float_of(0x7FC00000u) : __uint_as_float(m);
            const qk_block_scale_hd bs =
                qk_scale_for_hd(&p.fmt, &p.elem, p.rule, p.clamp, s_enc, s_dec, amax);
            code_s = (uint8_t)bs.code;
            enc = bs.enc;
        }
        for (size_t r = r0; r < r0 + h; r++) {
            uint32_t packed = 0;
            if (!pad_block) {
                float v[4];
                load4(x + r * p.k, c, p.k, p.vec4, v);
                uint32_t rb[4] = {0, 0, 0, 0};
                const size_t idx = r * p.k + c;
                if (p.rounding == QK_ROUND_SR) {
                    if ((idx & 3) == 0) { // one Philox block serves the 4 elements (philox.h)
                        const uint32_t ctr[4] = {(uint32_t)(idx >> 2), (uint32_t)(idx >> 34),
                                                 p.tensor_id, p.step};
                        const uint32_t key[2] = {(uint32_t)p.seed, (uint32_t)(p.seed >> 32)};
                        qk_philox4x32_10_core(ctr, key, rb);
                    } else {
#pragma unroll
                        for (int j = 0; j < 4; j++)
                            if (c + j < p.k)
                                rb[j] = qk_sr_bits_core(p.seed, p.tensor_id, p.step, idx + j);
                    }
                }
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    uint32_t code = 0; // padding columns: +0
                    if (c + j < p.k)
                        code = qk_codec_encode_hd(&p.elem, v[j] * enc, p.rounding, rb[j]);
                    packed |= code << (4 * j); // even column in the low nibble
                }
            }
            *reinterpret_cast<uint16_t *>(codes + r * p.ld_bytes + c / 2) = (uint16_t)packed;
            if ((g % L) == 0) scales[qk_lt_scale_offset(r, blk, p.scale_cols)] = code_s;
        }
    }
}

qs_status cuda_fail(qs_error *err, cudaError_t e, const char *what) {
    return qs_error_set(err, QS_EIO, "kernels/cuda: quantize lt: %s: %s", what,
                        cudaGetErrorString(e));
}

} // namespace

// d_ts[0] = the FP32 tensor decode scale from the tensor amax (or the given one) as the host
// side below computes it (qk_nvfp4_global_scales_core); 1 for MXFP4. One thread.
static __global__ void k_tensor_scale(const unsigned *amax, int mx, int given, float given_value,
                                      float *d_ts) {
    float amax_t = given ? given_value : qk_float_of(amax[0]);
    float s_enc = 1.0f, s_dec = 1.0f;
    if (!mx) qk_nvfp4_global_scales_core(amax_t, &s_enc, &s_dec);
    d_ts[0] = s_dec;
}

// The body of qk_cuda_quantize_lt and qk_cuda_quantize_lt_async: d_ts NULL reads the tensor
// scale and amax back to the host (a sync); else writes the decode scale to d_ts on the device.
static qs_status quantize_lt_impl(const qk_format *fmt, const qk_quant_options *opt,
                                  const float *d_x, size_t rows, size_t k, const qk_lt_layout *l,
                                  uint8_t *d_codes, uint8_t *d_scales, float *tensor_scale,
                                  float *tensor_amax, float *d_ts, void *stream_, qs_error *err) {
    static const qk_quant_options defaults = {};
    if (!opt) opt = &defaults;
    if (!fmt || !d_x || !l || !d_codes || !d_scales)
        return qs_error_set(err, QS_EINVAL, "kernels/cuda: quantize lt: NULL argument");
    qk_lt_layout want;
    qs_status st = qk_lt_layout_init(fmt, rows, k, &want, err);
    if (st) return st;
    if (want.mode != l->mode || want.rows != l->rows || want.k != l->k || want.k_pad != l->k_pad ||
        want.ld_bytes != l->ld_bytes || want.scale_cols != l->scale_cols ||
        want.scale_bytes != l->scale_bytes)
        return qs_error_set(err, QS_EINVAL,
                            "kernels/cuda: quantize lt: layout [%zu x %zu] mode %d is not the "
                            "layout of %s [%zu x %zu] (qk_lt_layout_init)",
                            l->rows, l->k, (int)l->mode, fmt->name, rows, k);
    const bool mx = fmt->rule == QK_RULE_MX;
    st = qk_cuda_check_options(fmt, opt, err);
    if (st) return st;
    if (((uintptr_t)d_codes & 1) != 0)
        return qs_error_set(err, QS_EINVAL,
                            "kernels/cuda: quantize lt: d_codes is not 2-byte "
                            "aligned");
    cudaStream_t stream = (cudaStream_t)stream_;
    lt_params p;
    memset(&p, 0, sizeof p);
    p.fmt = *fmt;
    p.fmt.elem = nullptr;
    p.elem = *fmt->elem;
    p.rows = rows;
    p.k = k;
    p.k_pad = l->k_pad;
    p.ld_bytes = l->ld_bytes;
    p.scale_cols = l->scale_cols;
    p.mx = mx ? 1 : 0;
    p.brows = fmt->block_rows;
    p.vec4 = (k % 4 == 0) && (((uintptr_t)d_x & 15) == 0);
    set_launch_opts(p, opt);

    unsigned *amax = nullptr;
    cudaError_t e = start_tensor_amax(d_x, rows * k, !mx && !p.amax_given, &amax, stream);
    if (!amax) return cuda_fail(err, e, "cudaMallocAsync");
    if (e == cudaSuccess && rows % 128 != 0) // padding rows of the scale tiles
        e = cudaMemsetAsync(d_scales + (rows / 128) * 128 * (l->k_pad / l->vec), 0,
                            l->scale_bytes - (rows / 128) * 128 * (l->k_pad / l->vec), stream);
    if (e == cudaSuccess) {
        const size_t per_row = l->k_pad / 4;
        const size_t groups = (rows + p.brows - 1) / p.brows;
        dim3 grid((unsigned)((per_row + kThreads - 1) / kThreads),
                  (unsigned)(groups < 65535 ? groups : 65535));
        if (mx)
            quantize_lt_kernel<32><<<grid, kThreads, 0, stream>>>(d_x, p, amax, d_codes, d_scales);
        else
            quantize_lt_kernel<16><<<grid, kThreads, 0, stream>>>(d_x, p, amax, d_codes, d_scales);
        e = cudaGetLastError();
    }
    if (d_ts) { // the decode scale stays on the device: stream-ordered, no host round trip
        if (e == cudaSuccess) {
            k_tensor_scale<<<1, 1, 0, stream>>>(amax, p.mx, p.amax_given, p.amax_value, d_ts);
            e = cudaGetLastError();
        }
        cudaError_t ef = cudaFreeAsync(amax, stream);
        if (e == cudaSuccess) e = ef;
        return e == cudaSuccess ? QS_OK : cuda_fail(err, e, "kernels");
    }
    unsigned amax_host = 0;
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(&amax_host, amax, sizeof amax_host, cudaMemcpyDeviceToHost, stream);
    cudaError_t ef = cudaFreeAsync(amax, stream);
    if (e == cudaSuccess) e = ef;
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
    if (e != cudaSuccess) return cuda_fail(err, e, "kernels");
    float amax_t = mx ? 0.0f : (p.amax_given ? p.amax_value : qk_float_of(amax_host));
    float s_enc = 1.0f, s_dec = 1.0f;
    if (!mx) qk_nvfp4_global_scales_core(amax_t, &s_enc, &s_dec);
    if (tensor_scale) *tensor_scale = s_dec;
    if (tensor_amax) *tensor_amax = amax_t;
    return QS_OK;
}

extern "C" qs_status qk_cuda_quantize_lt(const qk_format *fmt, const qk_quant_options *opt,
                                         const float *d_x, size_t rows, size_t k,
                                         const qk_lt_layout *l, uint8_t *d_codes, uint8_t *d_scales,
                                         float *tensor_scale, float *tensor_amax, void *stream,
                                         qs_error *err) {
    return quantize_lt_impl(fmt, opt, d_x, rows, k, l, d_codes, d_scales, tensor_scale, tensor_amax,
                            nullptr, stream, err);
}

extern "C" qs_status qk_cuda_quantize_lt_async(const qk_format *fmt, const qk_quant_options *opt,
                                               const float *d_x, size_t rows, size_t k,
                                               const qk_lt_layout *l, uint8_t *d_codes,
                                               uint8_t *d_scales, float *d_tensor_scale,
                                               void *stream, qs_error *err) {
    if (!d_tensor_scale)
        return qs_error_set(err, QS_EINVAL, "kernels/cuda: quantize_lt: d_tensor_scale is NULL");
    return quantize_lt_impl(fmt, opt, d_x, rows, k, l, d_codes, d_scales, nullptr, nullptr,
                            d_tensor_scale, stream, err);
}
