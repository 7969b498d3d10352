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

// The signs of one D-point tile, passed by value (kernel parameter space).
template <int D> struct signs {
    float s[D];
};

// log2 of the tile sizes the transform has: the butterfly's stage count.
template <int D> struct stages {
    static constexpr int n = D == 16 ? 4 : 5;
};

// One thread per D-element tile (D * 4 contiguous bytes: D / 4 float4 loads), D = 16 or 32:
// signs (forward), hadamard.c's fwht16 / fwht32 stages (h = 1, 2, ..., D/2; the pairs of one
// stage are independent, so this order gives its bits; constant bounds keep v in registers),
// the multiply by norm (0.25 for 16, hadamard.c's 1/sqrt(32) for 32), signs (inverse).
template <int D>
__global__ void rht_kernel(float *__restrict__ x, size_t tiles, signs<D> sg, float norm,
                           int inverse) {
    static_assert(D == 16 || D == 32, "the 16- and 32-point transforms only");
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < tiles; t += stride) {
        float v[D];
        float4 *p = reinterpret_cast<float4 *>(x + t * D);
#pragma unroll
        for (int q = 0; q < D / 4; q++) {
            float4 f = p[q];
            v[4 * q] = f.x;
            v[4 * q + 1] = f.y;
            v[4 * q + 2] = f.z;
            v[4 * q + 3] = f.w;
        }
        if (!inverse)
#pragma unroll
            for (int j = 0; j < D; j++)
                v[j] *= sg.s[j];
#pragma unroll
        for (int st = 0; st < stages<D>::n; st++)
#pragma unroll
            for (int j = 0; j < D; j++)
                if ((j & (1 << st)) == 0) {
                    float a = v[j], b = v[j + (1 << st)];
                    v[j] = a + b;
                    v[j + (1 << st)] = a - b;
                }
#pragma unroll
        for (int j = 0; j < D; j++)
            v[j] *= norm;
        if (inverse)
#pragma unroll
            for (int j = 0; j < D; j++)
                v[j] *= sg.s[j];
#pragma unroll
        for (int q = 0; q < D / 4; q++)
            p[q] = make_float4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]);
    }
}

// Checks x [rows x k] (k a multiple of D, 16-byte aligned), launches rht_kernel<D> on stream
// and waits for it on the default stream. Errors: QS_EINVAL (named "rhtD"), QS_EIO (CUDA's).
template <int D>
qs_status rht_launch(float *d_x, size_t rows, size_t k, const signs<D> &sg, float norm,
                     int inverse, void *stream_, qs_error *err) {
    if (!d_x || rows == 0 || k == 0)
        return qs_error_set(err, QS_EINVAL, "kernels/cuda: rht%d: empty tensor (rows=%zu, k=%zu)",
                            D, rows, k);
    if (k % D != 0)
        return qs_error_set(err, QS_EINVAL,
                            "kernels/cuda: rht%d: k=%zu is not a multiple of the %d-point tile", D,
                            k, D);
    if (((uintptr_t)d_x & 15) != 0)
        return qs_error_set(err, QS_EINVAL, "kernels/cuda: rht%d: d_x is not 16-byte aligned", D);
    const size_t tiles = rows * (k / D);
    size_t want = (tiles + kThreads - 1) / kThreads;
    unsigned grid = (unsigned)(want > 65535 * 16 ? 65535 * 16 : want);
    cudaStream_t stream = (cudaStream_t)stream_;
    rht_kernel<D><<<grid, kThreads, 0, stream>>>(d_x, tiles, sg, norm, inverse ? 1 : 0);
    cudaError_t e = cudaGetLastError();
    // stream-ordered: only the default stream (NULL) is waited for (qk_cuda.h)
    if (e == cudaSuccess && !stream) e = cudaStreamSynchronize(stream);
    if (e != cudaSuccess)
        return qs_error_set(err, QS_EIO, "kernels/cuda: rht%d: %s", D, cudaGetErrorString(e));
    return QS_OK;
}

} // namespace

extern "C" qs_status qk_cuda_rht16(float *d_x, size_t rows, size_t k, uint64_t seed, int inverse,
                                   void *stream_, qs_error *err) {
    signs<16> sg;
    qk_rht16_signs(seed, sg.s);
    return rht_launch<16>(d_x, rows, k, sg, 0.25f, inverse, stream_, err);
}

extern "C" qs_status qk_cuda_rht(float *d_x, size_t rows, size_t k, int d, uint64_t seed,
                                 int inverse, void *stream_, qs_error *err) {
    if (d == 16) return qk_cuda_rht16(d_x, rows, k, seed, inverse, stream_, err);
    if (d != 32)
        return qs_error_set(err, QS_EINVAL, "kernels/cuda: rht: d=%d, expected 16 or 32", d);
    // hadamard.c qk_rht: bits 0..31 of the first word of Philox(ctr {0, 0, ~0, ~0}, seed)
    const uint32_t ctr[4] = {0, 0, 0xFFFFFFFFu, 0xFFFFFFFFu};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t w[4];
    qk_philox4x32_10(ctr, key, w);
    signs<32> sg;
    for (int j = 0; j < 32; j++)
        sg.s[j] = ((w[0] >> j) & 1u) ? -1.0f : 1.0f;
    return rht_launch<32>(d_x, rows, k, sg, 0.17677669529663688f /* hadamard.c's 1/sqrt(32) */,
                          inverse, stream_, err);
}
