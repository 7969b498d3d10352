/* Device-side helpers shared by the CUDA ops' kernels (ops_cuda.cu, ops_cuda_train.cu,
 * ops_cuda_reduce.cu): the elementwise launch size, the grid-stride loop and block-wide
 * reductions in a fixed order (so that a result does not depend on scheduling). CUDA only;
 * every function is static, one copy per translation unit. */
#ifndef QW_OPS_CUDA_KERN_CUH
#define QW_OPS_CUDA_KERN_CUH

#include <stddef.h>

/* Grid size of an elementwise kernel over n elements with `block` threads per block, for a
 * grid-stride loop: ceil(n / block) clamped to 1 .. 65535. */
static inline unsigned qw_grid_of(size_t n, unsigned block) {
    size_t g = (n + block - 1) / block;
    return (unsigned)(g < 1 ? 1 : g > 65535 ? 65535 : g);
}

/* for (size_t i over 0 .. n-1) split over every thread of the grid. */
#define QW_GRID_STRIDE(i, n)                                                                       \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);                        \
         i += (size_t)gridDim.x * blockDim.x)

/* Block-wide sum of a double (blockDim.x a multiple of 32, <= 1024; sh >= 33 entries): warp
 * shuffles, then warp 0's thread sums the warps in order. Every thread gets the sum. */
static __device__ double qw_block_sum(double v, double *sh) {
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        double s = 0.0;
        for (int i = 0; i < (int)(blockDim.x >> 5); i++)
            s += sh[i];
        sh[32] = s;
    }
    __syncthreads();
    return sh[32];
}

/* Block-wide fmaxf of a float, laid out as qw_block_sum (sh >= 33 entries). Every thread gets
 * the maximum; NaN inputs are dropped as fmaxf drops them. */
static __device__ float qw_block_max(float v, float *sh) {
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
    __syncthreads();
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float m = sh[0];
        for (int i = 1; i < (int)(blockDim.x >> 5); i++)
            m = fmaxf(m, sh[i]);
        sh[32] = m;
    }
    __syncthreads();
    return sh[32];
}

/* Sum of a double over a 256-thread block (sh >= 256 entries), a fixed tree over shared
 * memory; every thread gets it. */
static __device__ double qw_block_sum256(double v, double *sh) {
    __syncthreads();
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

/* fmaxf of a float over a 256-thread block (sh >= 256 entries), the same tree. */
static __device__ float qw_block_max256(float v, float *sh) {
    __syncthreads();
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}

/* Rows r0 .. r0+R-1 of one head (its E elements at head * E of rows ld apart) of a and b into
 * the shared tiles A and Bt [R x W], zeros past row T: the K/V (or Q/dO) tiles of the blocked
 * attention kernels, loaded by the whole block. */
template <int R, int W>
static __device__ void qw_load_head_tiles(float (*A)[W], float (*Bt)[W], const float *a,
                                          const float *b, int r0, int T, size_t ld, int head,
                                          int E) {
    for (int x = threadIdx.x; x < R * E; x += blockDim.x) {
        int r = x / E, d = x % E, row = r0 + r;
        size_t off = (size_t)row * ld + (size_t)head * E + d;
        A[r][d] = row < T ? a[off] : 0.0f;
        Bt[r][d] = row < T ? b[off] : 0.0f;
    }
}

#endif
