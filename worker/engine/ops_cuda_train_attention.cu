/* The backward of the training attention without T x T (ops_cuda_impl.h
 * qw_cuda_flash_attention_backward): FlashAttention-2's backward (Dao, arXiv 2307.08691,
 * algorithm 2) from the rows' logsumexp the forward saved (qw_cuda_flash_attention, the
 * evaluation's kernel), every probability recomputed, FP32 throughout. Per head h of kv head g,
 * query row i, key j <= i, scale 1/sqrt(E):
 *   s_ij  = scale q_i . k_j        p_ij = e^(s_ij - lse_i)      dp_ij = dO_i . v_j
 *   D_i   = sum_j p_ij dp_ij       ds_ij = p_ij (dp_ij - D_i) scale
 *   dq_i  = sum_j ds_ij k_j        dk_j = sum_h sum_i ds_ij q_i   dv_j = sum_h sum_i p_ij dO_i
 * Two kernels and no atomics, so the sums run in a fixed order: one warp per query row for D
 * and dq (keys in order), one warp per key row for dk and dv (the group's heads in order, then
 * queries in order: the CPU backward's order, worker/engine/ops_cpu_train.c). Tiles wholly
 * above the diagonal are never loaded: a query block reads keys up to its last query, a key
 * block queries from its first key. Scores are the forward kernel's bits: the same lane
 * partials of q . k, the same butterfly, the same scale. */
#include "ops_cuda_impl.h"
#include "ops_cuda_kern.cuh"

#include <math.h>

#define FB_BK 32     /* keys (dq kernel) or queries (dk/dv kernel) per tile: one per lane */
#define FB_WARPS 4   /* rows per block */
#define FB_MAX_E 128 /* two tiles of 32 x 128 floats: 32 KiB of static shared memory */

/* The dot product of this lane's EPL elements of a and row j of tile t, summed over the warp
 * with the forward kernel's butterfly (every lane gets the sum). */
template <int EPL>
__device__ float warp_dot(const float *a, const float (*t)[EPL * 32], int j, int lane, int E) {
    float part = 0.0f;
    for (int e = 0; e < EPL; e++) {
        int d = lane + 32 * e;
        if (d < E) part += a[e] * t[j][d];
    }
    for (int off = 16; off > 0; off >>= 1)
        part += __shfl_xor_sync(0xffffffffu, part, off);
    return part;
}

/* dq [T x H*E] and D [H x T] of one sequence: one warp per query row, two passes over its keys
 * (D first, then dq, which needs D). */
template <int EPL>
__global__ void k_flash_bwd_dq(float *dq, float *Drow, const float *dout, const float *q,
                               const float *k, const float *v, const float *lse, int T, int H,
                               int G, int E, float scale) {
    __shared__ float Ks[FB_BK][EPL * 32], Vs[FB_BK][EPL * 32];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int h = blockIdx.y, g = h / (H / G);
    int i0 = blockIdx.x * FB_WARPS, i = i0 + w;
    int last = min(T - 1, i0 + FB_WARPS - 1);
    size_t ldq = (size_t)H * E, ldk = (size_t)G * E;
    float qr[EPL], dor[EPL], acc[EPL];
    for (int e = 0; e < EPL; e++) {
        int d = lane + 32 * e;
        bool in = i < T && d < E;
        qr[e] = in ? q[(size_t)i * ldq + (size_t)h * E + d] : 0.0f;
        dor[e] = in ? dout[(size_t)i * ldq + (size_t)h * E + d] : 0.0f;
        acc[e] = 0.0f;
    }
    float L = i < T ? lse[(size_t)h * T + i] : 0.0f, D = 0.0f;
    for (int pass = 0; pass < 2; pass++) {
        float dsum = 0.0f; /* pass 0: lane j's sum of p dp over its keys */
        for (int k0 = 0; k0 <= last; k0 += FB_BK) {
            qw_load_head_tiles<FB_BK, EPL * 32>(Ks, Vs, k, v, k0, T, ldk, g, E);
            __syncthreads();
            if (i < T && k0 <= i) {
                float p = 0.0f, dp = 0.0f;
                for (int j = 0; j < FB_BK; j++) {
                    float s = warp_dot<EPL>(qr, Ks, j, lane, E) * scale;
                    float pd = warp_dot<EPL>(dor, Vs, j, lane, E);
                    if (lane == j && k0 + j <= i) {
                        p = expf(s - L);
                        dp = pd;
                    }
                }
                if (pass == 0) {
                    dsum += p * dp;
                } else {
                    float ds = p * (dp - D) * scale;
                    for (int j = 0; j < FB_BK; j++) {
                        float dsj = __shfl_sync(0xffffffffu, ds, j);
                        for (int e = 0; e < EPL; e++) {
                            int d = lane + 32 * e;
                            if (d < E) acc[e] += dsj * Ks[j][d];
                        }
                    }
                }
            }
            __syncthreads();
        }
        if (pass == 0) {
            for (int off = 16; off > 0; off >>= 1)
                dsum += __shfl_xor_sync(0xffffffffu, dsum, off);
            D = dsum;
        }
    }
    if (i >= T) return;
    for (int e = 0; e < EPL; e++) {
        int d = lane + 32 * e;
        if (d < E) dq[(size_t)i * ldq + (size_t)h * E + d] = acc[e];
    }
    if (lane == 0) Drow[(size_t)h * T + i] = D;
}

/* dk, dv [T x G*E] of one sequence, overwritten: one warp per key row j of kv head g, over the
 * group's heads and, per head, the queries i >= j in tiles of 32. */
template <int EPL>
__global__ void k_flash_bwd_dkv(float *dk, float *dv, const float *dout, const float *q,
                                const float *k, const float *v, const float *lse, const float *Drow,
                                int T, int H, int G, int E, float scale) {
    __shared__ float Qs[FB_BK][EPL * 32], Os[FB_BK][EPL * 32];
    __shared__ float Ls[FB_BK], Ds[FB_BK];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int g = blockIdx.y, rep = H / G;
    int j0 = blockIdx.x * FB_WARPS, j = j0 + w;
    size_t ldq = (size_t)H * E, ldk = (size_t)G * E;
    float kr[EPL], vr[EPL], ak[EPL], av[EPL];
    for (int e = 0; e < EPL; e++) {
        int d = lane + 32 * e;
        bool in = j < T && d < E;
        kr[e] = in ? k[(size_t)j * ldk + (size_t)g * E + d] : 0.0f;
        vr[e] = in ? v[(size_t)j * ldk + (size_t)g * E + d] : 0.0f;
        ak[e] = av[e] = 0.0f;
    }
    for (int h = g * rep; h < (g + 1) * rep; h++)
        for (int q0 = j0; q0 < T; q0 += FB_BK) {
            qw_load_head_tiles<FB_BK, EPL * 32>(Qs, Os, q, dout, q0, T, ldq, h, E);
            for (int r = threadIdx.x; r < FB_BK; r += blockDim.x) {
                int row = q0 + r;
                Ls[r] = row < T ? lse[(size_t)h * T + row] : 0.0f;
                Ds[r] = row < T ? Drow[(size_t)h * T + row] : 0.0f;
            }
            __syncthreads();
            if (j < T) {
                float p = 0.0f, ds = 0.0f;
                for (int r = 0; r < FB_BK; r++) {
                    float s = warp_dot<EPL>(kr, Qs, r, lane, E) * scale;
                    float dp = warp_dot<EPL>(vr, Os, r, lane, E);
                    int row = q0 + r;
                    if (lane == r && row < T && row >= j) {
                        p = expf(s - Ls[r]);
                        ds = p * (dp - Ds[r]) * scale;
                    }
                }
                for (int r = 0; r < FB_BK; r++) {
                    float pr = __shfl_sync(0xffffffffu, p, r);
                    float dsr = __shfl_sync(0xffffffffu, ds, r);
                    for (int e = 0; e < EPL; e++) {
                        int d = lane + 32 * e;
                        if (d < E) {
                            av[e] += pr * Os[r][d];
                            ak[e] += dsr * Qs[r][d];
                        }
                    }
                }
            }
            __syncthreads();
        }
    if (j >= T) return;
    for (int e = 0; e < EPL; e++) {
        int d = lane + 32 * e;
        if (d < E) {
            dk[(size_t)j * ldk + (size_t)g * E + d] = ak[e];
            dv[(size_t)j * ldk + (size_t)g * E + d] = av[e];
        }
    }
}

template <int EPL>
static void launch_bwd(cuda_ctx *c, float *dq, float *dk, float *dv, float *Drow, const float *dout,
                       const float *q, const float *k, const float *v, const float *lse, int T,
                       int H, int G, int E, float scale) {
    dim3 gq((unsigned)((T + FB_WARPS - 1) / FB_WARPS), (unsigned)H);
    dim3 gk((unsigned)((T + FB_WARPS - 1) / FB_WARPS), (unsigned)G);
    k_flash_bwd_dq<EPL>
        <<<gq, 32 * FB_WARPS, 0, c->stream>>>(dq, Drow, dout, q, k, v, lse, T, H, G, E, scale);
    k_flash_bwd_dkv<EPL>
        <<<gk, 32 * FB_WARPS, 0, c->stream>>>(dk, dv, dout, q, k, v, lse, Drow, T, H, G, E, scale);
}

qs_status qw_cuda_flash_attention_backward(cuda_ctx *c, float *dq, float *dk, float *dv,
                                           float *Drow, const float *dout, const float *q,
                                           const float *k, const float *v, const float *lse, int T,
                                           int H, int G, int E, qs_error *err) {
    if (T < 1 || H < 1 || G < 1 || H % G != 0 || E < 1 || E > FB_MAX_E)
        return qs_error_set(err, QS_EINVAL,
                            "cuda attention backward: T %d, H %d, G %d, head_dim %d (expected H a "
                            "multiple of G, head_dim 1..%d)",
                            T, H, G, E, FB_MAX_E);
    float scale = 1.0f / sqrtf((float)E); /* the forward kernel's */
    int epl = (E + 31) / 32;
    if (epl <= 1)
        launch_bwd<1>(c, dq, dk, dv, Drow, dout, q, k, v, lse, T, H, G, E, scale);
    else if (epl <= 2)
        launch_bwd<2>(c, dq, dk, dv, Drow, dout, q, k, v, lse, T, H, G, E, scale);
    else
        launch_bwd<4>(c, dq, dk, dv, Drow, dout, q, k, v, lse, T, H, G, E, scale);
    return qw_cuda_status(c, cudaGetLastError(), "attention backward", err);
}
