// The 16- and 32-point random Hadamard transforms on the device (qk_cuda.h qk_cuda_rht16,
// qk_cuda_rht), the same operations in the same order as hadamard.c: sign flip (forward), the
// Walsh-Hadamard butterfly in Sylvester order (4 or 5 stages), a multiply by 1/sqrt(d) (exact
// 0.25 for 16; for 32 hadamard.c's nearest float), sign flip (inverse). The 16 signs come from
// the host's qk_rht16_signs; the 32 from the same Philox word, as hadamard.c's qk_rht draws
// them.
#include <cuda_runtime.h>

#include <stdint.h>

#include "qk_cuda.h" // first: its quant.h gives error.h C linkage (hadamard.h would not)

#include "hadamard.h"
#include "philox.h"

namespace {

constexpr int kThreads = 256;

struct signs16 {
    float s[16];
};

// One thread per 16-element tile (64 contiguous bytes: four float4 loads).
__global__ void rht16_kernel(float *__restrict__ x, size_t tiles, signs16 sg, int inverse) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < tiles; t += stride) {
        float v[16];
        float4 *p = reinterpret_cast<float4 *>(x + t * 16);
#pragma unroll
        for (int q = 0; q < 4; q++) {
            float4 f = p[q];
            v[4 * q] = f.x;
            v[4 * q + 1] = f.y;
            v[4 * q + 2] = f.z;
            v[4 * q + 3] = f.w;
        }
        if (!inverse)
#pragma unroll
            for (int j = 0; j < 16; j++)
                v[j] *= sg.s[j];
                // the butterfly stages of hadamard.c's fwht16 (h = 1, 2, 4, 8); the pairs of one
                // stage are independent, so this order gives its bits; constant bounds keep v in
                // registers
#pragma unroll
        for (int st = 0; st < 4; st++)
#pragma unroll
            for (int j = 0; j < 16; j++)
                if ((j & (1 << st)) == 0) {
                    float a = v[j], b = v[j + (1 << st)];
                    v[j] = a + b;
                    v[j + (1 << st)] = a - b;
                }
#pragma unroll
        for (int j = 0; j < 16; j++)
            v[j] *= 0.25f;
        if (inverse)
#pragma unroll
            for (int j = 0; j < 16; j++)
                v[j] *= sg.s[j];
#pragma unroll
        for (int q = 0; q < 4; q++)
            p[q] = make_float4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]);
    }
}

struct signs32 {
    float s[32];
};

// One thread per 32-element tile (128 contiguous bytes: eight float4 loads).
__global__ void rht32_kernel(float *__restrict__ x, size_t tiles, signs32 sg, int inverse) {
    const float norm = 0.17677669529663688f; // hadamard.c's 1/sqrt(32)
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < tiles; t += stride) {
        float v[32];
        float4 *p = reinterpret_cast<float4 *>(x + t * 32);
#pragma unroll
        for (int q = 0; q < 8; q++) {
            float4 f = p[q];
            v[4 * q] = f.x;
            v[4 * q + 1] = f.y;
            v[4 * q + 2] = f.z;
            v[4 * q + 3] = f.w;
        }
        if (!inverse)
#pragma unroll
            for (int j = 0; j < 32; j++)
                v[j] *= sg.s[j];
                // hadamard.c's fwht32 stages (h = 1, 2, 4, 8, 16); a stage's pairs are
                // independent, so this order gives its bits
#pragma unroll
        for (int st = 0; st < 5; st++)
#pragma unroll
            for (int j = 0; j < 32; j++)
                if ((j & (1 << st)) == 0) {
                    float a = v[j], b = v[j + (1 << st)];
                    v[j] = a + b;
                    v[j + (1 << st)] = a - b;
                }
#pragma unroll
        for (int j = 0; j < 32; j++)
            v[j] *= norm;
        if (inverse)
#pragma unroll
            for (int j = 0; j < 32; j++)
                v[j] *= sg.s[j];
#pragma unroll
        for (int q = 0; q < 8; q++)
            p[q] = make_float4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]);
    }
}

} // namespace

extern "C" qs_status qk_cuda_rht16(float *d_x, size_t rows, size_t k, uint64_t seed, int inverse,
                                   void *stream_, qs_error *err) {
    if (!d_x || rows == 0 || k == 0)
        return qs_error_set(err, QS_EINVAL, "kernels/cuda: rht16: empty tensor (rows=%zu, k=%zu)",
                            rows, k);
    if (k % 16 != 0)
        return qs_error_set(err, QS_EINVAL,
                            "kernels/cuda: rht16: k=%zu is not a multiple of the 16-point tile", k);
    if (((uintptr_t)d_x & 15) != 0)
        return qs_error_set(err, QS_EINVAL, "kernels/cuda: rht16: d_x is not 16-byte aligned");
    signs16 sg;
    qk_rht16_signs(seed, sg.s);
    const size_t tiles = rows * (k / 16);
    size_t want = (tiles + kThreads - 1) / kThreads;
    unsigned grid = (unsigned)(want > 65535 * 16 ? 65535 * 16 : want);
    cudaStream_t stream = (cudaStream_t)stream_;
    rht16_kernel<<<grid, kThreads, 0, stream>>>(d_x, tiles, sg, inverse ? 1 : 0);
    cudaError_t e = cudaGetLastError();
    // stream-ordered: only the default stream (NULL) is waited for (qk_cuda.h)
    if (e == cudaSuccess && !stream) e = cudaStreamSynchronize(stream);
    if (e != cudaSuccess)
        return qs_error_set(err, QS_EIO, "kernels/cuda: rht16: %s", cudaGetErrorString(e));
    return QS_OK;
}

extern "C" qs_status qk_cuda_rht(float *d_x, size_t rows, size_t k, int d, uint64_t seed,
                                 int inverse, void *stream_, qs_error *err) {
    if (d == 16) return qk_cuda_rht16(d_x, rows, k, seed, inverse, stream_, err);
    if (d != 32)
        return qs_error_set(err, QS_EINVAL, "kernels/cuda: rht: d=%d, expected 16 or 32", d);
    if (!d_x || rows == 0 || k == 0)
        return qs_error_set(err, QS_EINVAL, "kernels/cuda: rht32: empty tensor (rows=%zu, k=%zu)",
                            rows, k);
    if (k % 32 != 0)
        return qs_error_set(err, QS_EINVAL,
                            "kernels/cuda: rht32: k=%zu is not a multiple of the 32-point tile", k);
    if (((uintptr_t)d_x & 15) != 0)
        return qs_error_set(err, QS_EINVAL, "kernels/cuda: rht32: d_x is not 16-byte aligned");
    // hadamard.c qk_rht: bits 0..31 of the first word of Philox(ctr {0, 0, ~0, ~0}, seed)
    const uint32_t ctr[4] = {0, 0, 0xFFFFFFFFu, 0xFFFFFFFFu};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t w[4];
    qk_philox4x32_10(ctr, key, w);
    signs32 sg;
    for (int j = 0; j < 32; j++)
        sg.s[j] = ((w[0] >> j) & 1u) ? -1.0f : 1.0f;
    const size_t tiles = rows * (k / 32);
    size_t want = (tiles + kThreads - 1) / kThreads;
    unsigned grid = (unsigned)(want > 65535 * 16 ? 65535 * 16 : want);
    cudaStream_t stream = (cudaStream_t)stream_;
    rht32_kernel<<<grid, kThreads, 0, stream>>>(d_x, tiles, sg, inverse ? 1 : 0);
    cudaError_t e = cudaGetLastError();
    // stream-ordered: only the default stream (NULL) is waited for (qk_cuda.h)
    if (e == cudaSuccess && !stream) e = cudaStreamSynchronize(stream);
    if (e != cudaSuccess)
        return qs_error_set(err, QS_EIO, "kernels/cuda: rht32: %s", cudaGetErrorString(e));
    return QS_OK;
}
