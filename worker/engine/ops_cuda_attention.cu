/* Causal GQA attention that never writes T x T (ops_cuda_impl.h qw_cuda_flash_attention): the
 * blocked online softmax of FlashAttention-2 (Dao, arXiv 2307.08691, algorithm 1), in FP32 as
 * the evaluation's activations are. One warp per query row, BK = 32 keys per shared-memory tile:
 *   s_j = scale * q . k_j          lane j of the warp holds key j's score of the tile
 *   m'  = max(m, max_j s_j)        the running maximum
 *   l'  = l e^(m - m') + sum_j e^(s_j - m')
 *   o'  = o e^(m - m') + sum_j e^(s_j - m') v_j   each lane its E/32 output elements
 * and at the end o / l, with lse = m + log l saved for a backward. Keys after the query are
 * masked (e^-inf = 0), and tiles wholly after a block's last query are never loaded: the causal
 * half is skipped, not computed and discarded. Head h reads kv head h / (H/G). */
#include "ops_cuda_impl.h"
#include "ops_cuda_kern.cuh"

#include <math.h>

#include "device_memory.h"

#define FA_BK 32     /* keys per tile: one per lane */
#define FA_WARPS 4   /* query rows per block */
#define FA_MAX_E 128 /* K and V tiles of 32 x 128 floats: 32 KiB of static shared memory */
/* the memory estimate counts no T x T scores for the heads this kernel takes */
static_assert(FA_MAX_E == QS_MEM_FLASH_MAX_HEAD_DIM, "device_memory.h: flash head dim");

/* EPL = ceil(E/32) elements of a head row per lane: lane l holds elements l, l+32, ... */
template <int EPL>
__global__ void k_flash_attention(float *out, float *lse, const float *q, const float *k,
                                  const float *v, int T, int H, int G, int E, float scale) {
    __shared__ float Ks[FA_BK][EPL * 32], Vs[FA_BK][EPL * 32];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int h = blockIdx.y, g = h / (H / G);
    int i0 = blockIdx.x * FA_WARPS, i = i0 + w;
    int last = min(T - 1, i0 + FA_WARPS - 1); /* the block's last query: no key beyond it */
    size_t ldq = (size_t)H * E, ldk = (size_t)G * E;
    float qr[EPL], o[EPL];
    for (int e = 0; e < EPL; e++) {
        int d = lane + 32 * e;
        qr[e] = i < T && d < E ? q[(size_t)i * ldq + (size_t)h * E + d] : 0.0f;
        o[e] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int k0 = 0; k0 <= last; k0 += FA_BK) {
        /* the tile's keys and values of kv head g, zero past T */
        qw_load_head_tiles<FA_BK, EPL * 32>(Ks, Vs, k, v, k0, T, ldk, g, E);
        __syncthreads();
        if (i < T && k0 <= i) {
            float s = -INFINITY;
            for (int j = 0; j < FA_BK; j++) {
                float part = 0.0f;
                for (int e = 0; e < EPL; e++) {
                    int d = lane + 32 * e;
                    if (d < E) part += qr[e] * Ks[j][d];
                }
                for (int off = 16; off > 0; off >>= 1)
                    part += __shfl_xor_sync(0xffffffffu, part, off);
                if (lane == j && k0 + j <= i) s = part * scale;
            }
            float mt = s;
            for (int off = 16; off > 0; off >>= 1)
                mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, off));
            float mn = fmaxf(m, mt); /* finite: key k0 <= i is in the tile */
            float corr = expf(m - mn), p = expf(s - mn), ps = p;
            for (int off = 16; off > 0; off >>= 1)
                ps += __shfl_xor_sync(0xffffffffu, ps, off);
            l = l * corr + ps;
            for (int e = 0; e < EPL; e++)
                o[e] *= corr;
            for (int j = 0; j < FA_BK; j++) {
                float pj = __shfl_sync(0xffffffffu, p, j);
                for (int e = 0; e < EPL; e++) {
                    int d = lane + 32 * e;
                    if (d < E) o[e] += pj * Vs[j][d];
                }
            }
            m = mn;
        }
        __syncthreads();
    }
    if (i >= T) return;
    float inv = 1.0f / l;
    for (int e = 0; e < EPL; e++) {
        int d = lane + 32 * e;
        if (d < E) out[(size_t)i * ldq + (size_t)h * E + d] = o[e] * inv;
    }
    if (lse && lane == 0) lse[(size_t)h * T + i] = m + logf(l);
}

int qw_cuda_flash_attention_fits(int E) {
    return E >= 1 && E <= FA_MAX_E;
}

qs_status qw_cuda_flash_attention(cuda_ctx *c, float *out, float *lse, const float *q,
                                  const float *k, const float *v, int T, int H, int G, int E,
                                  qs_error *err) {
    if (T < 1 || H < 1 || G < 1 || H % G != 0 || !qw_cuda_flash_attention_fits(E))
        return qs_error_set(err, QS_EINVAL,
                            "cuda attention: T %d, H %d, G %d, head_dim %d (expected H a multiple "
                            "of G, head_dim 1..%d)",
                            T, H, G, E, FA_MAX_E);
    dim3 grid((unsigned)((T + FA_WARPS - 1) / FA_WARPS), (unsigned)H);
    float scale = 1.0f / sqrtf((float)E);
    int epl = (E + 31) / 32;
    if (epl <= 1)
        k_flash_attention<1>
            <<<grid, 32 * FA_WARPS, 0, c->stream>>>(out, lse, q, k, v, T, H, G, E, scale);
    else if (epl <= 2)
        k_flash_attention<2>
            <<<grid, 32 * FA_WARPS, 0, c->stream>>>(out, lse, q, k, v, T, H, G, E, scale);
    else
        k_flash_attention<4>
            <<<grid, 32 * FA_WARPS, 0, c->stream>>>(out, lse, q, k, v, T, H, G, E, scale);
    return qw_cuda_status(c, cudaGetLastError(), "attention", err);
}
