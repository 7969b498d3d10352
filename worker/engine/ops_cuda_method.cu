/* A quantization method's online input transform on the GPU (ops_cuda_method.h): the CPU
 * entry's arithmetic, qk_smooth_apply's division then qk_block_hadamard's butterfly (stages
 * h = 1, 2, 4 ... of a + c, a - c) and one multiply by the same float norm, in the same order
 * for every element and rounded as the CPU rounds (__fdiv_rn, __fadd_rn, __fsub_rn, __fmul_rn:
 * nothing fused), so the output equals the CPU's bit for bit. One block per tile, the tile in
 * shared memory. */
#include "ops_cuda_impl.h"
#include "ops_cuda_kern.cuh"

#include <math.h>

extern "C" {
#include "ops_cuda_method.h"
}

/* The one place this file waits for the stream: the host is about to read memory that queued
 * work writes. Each call names that read in a comment; ctest engine_cuda_method_syncs counts
 * them. */
static cudaError_t host_wait(cuda_ctx *c) {
    return cudaStreamSynchronize(c->stream);
}

/* y[n] = x[n] / s[i % K] (qk_smooth_apply, divide). */
static __global__ void k_method_divide(float *y, const float *x, const float *s, size_t n, int K) {
    QW_GRID_STRIDE(i, n) {
        y[i] = __fdiv_rn(x[i], s[i % (size_t)K]);
    }
}

/* Tiles of b along rows of K (tile t: row t / (K/b), columns (t % (K/b)) * b ..), one block a
 * tile, grid-stride over tiles: the tile divided by s (NULL: none) into shared memory, rotated
 * there stage by stage (qk_block_hadamard's pairs (j, j + h)), scaled by norm on the way out. */
static __global__ void k_method_rotate(float *y, const float *x, const float *s, size_t tiles,
                                       int K, int b, float norm) {
    extern __shared__ float v[];
    const size_t per_row = (size_t)(K / b);
    for (size_t t = blockIdx.x; t < tiles; t += gridDim.x) {
        const size_t col = (t % per_row) * (size_t)b, base = (t / per_row) * (size_t)K + col;
        for (int j = threadIdx.x; j < b; j += blockDim.x)
            v[j] = s ? __fdiv_rn(x[base + j], s[col + j]) : x[base + j];
        __syncthreads();
        for (int h = 1; h < b; h <<= 1) {
            for (int p = threadIdx.x; p < b / 2; p += blockDim.x) {
                const int j = (p / h) * 2 * h + p % h;
                const float a = v[j], c = v[j + h];
                v[j] = __fadd_rn(a, c);
                v[j + h] = __fsub_rn(a, c);
            }
            __syncthreads();
        }
        for (int j = threadIdx.x; j < b; j += blockDim.x)
            y[base + j] = __fmul_rn(v[j], norm);
        __syncthreads(); /* v is the next tile's */
    }
}

extern "C" qs_status qw_cuda_method_input(qw_backend *b, float *y, const float *x, int T, int K,
                                          const float *s, int tile, qs_error *err) {
    if (!b || !b->impl)
        return qs_error_set(err, QS_EINVAL, "cuda method input: not a CUDA backend");
    if (T < 1 || K < 1) return qs_error_set(err, QS_EINVAL, "method input: T=%d, K=%d", T, K);
    if (tile && (tile < 2 || (tile & (tile - 1))))
        return qs_error_set(err, QS_EINVAL, "methods: hadamard: size %d is not a power of two",
                            tile);
    if (tile && K % tile)
        return qs_error_set(err, QS_EINVAL,
                            "methods: hadamard: k=%d is not a multiple of the %d-point tile", K,
                            tile);
    if (tile > QW_CUDA_METHOD_MAX_TILE)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "cuda method input: a %d-point rotation tile is over the %d one "
                            "block holds in shared memory",
                            tile, QW_CUDA_METHOD_MAX_TILE);
    cuda_ctx *c = cuda_enter(b);
    const size_t n = (size_t)T * (size_t)K;
    cudaError_t e = cudaSuccess;
    if (tile) {
        const size_t tiles = n / (size_t)tile;
        const unsigned threads = tile / 2 < 32 ? 32 : tile / 2 > 256 ? 256 : (unsigned)tile / 2;
        const unsigned grid = (unsigned)(tiles > 65535 ? 65535 : tiles);
        const float norm = (float)(1.0 / sqrt((double)tile)); /* qk_block_hadamard's */
        k_method_rotate<<<grid, threads, (size_t)tile * sizeof(float), c->stream>>>(y, x, s, tiles,
                                                                                    K, tile, norm);
    } else if (s) {
        k_method_divide<<<qw_grid_of(n, 256), 256, 0, c->stream>>>(y, x, s, n, K);
    } else if (y != x) {
        e = cudaMemcpyAsync(y, x, n * sizeof *y, cudaMemcpyDeviceToDevice, c->stream);
    }
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e == cudaSuccess && qw_cuda_host_reads(c, y))
        e = host_wait(c); /* host read: y in managed memory (a test's buffer) */
    return qw_cuda_status(c, e, "method input", err);
}
