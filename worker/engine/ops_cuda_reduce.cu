/* The CUDA backend's reductions on the device (ops_cuda.h): SQNR sums of a probed linear and
 * the per-row scores of the evaluation (NLL, KL against a baseline, top-1), as eval.h defines
 * them. Deterministic: fixed block partials summed in a fixed order, no atomics. */
#include "ops_cuda_impl.h"
#include "ops_cuda_kern.cuh"

#include <math.h>
#include <string.h>

#define SQNR_BLOCKS 256
#define SQNR_THREADS 256

/* The one place this file waits for the stream: the host reads the sums and scores the queued
 * kernels wrote. Each call names that read in a comment; ctest engine_cuda_reduce_syncs counts
 * them. */
static cudaError_t host_wait(cuda_ctx *c) {
    return cudaStreamSynchronize(c->stream);
}

/* Block partials of sum(ref^2) and sum((y-ref)^2): part[2*blockIdx.x + {0,1}]. */
__global__ void k_sqnr_partial(const float *y, const float *ref, size_t n, double *part) {
    __shared__ double s0[SQNR_THREADS], s1[SQNR_THREADS];
    double a = 0.0, b = 0.0;
    QW_GRID_STRIDE(i, n) {
        double r = ref[i], d = (double)y[i] - r;
        a += r * r;
        b += d * d;
    }
    s0[threadIdx.x] = a;
    s1[threadIdx.x] = b;
    __syncthreads();
    for (int s = SQNR_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) {
            s0[threadIdx.x] += s0[threadIdx.x + s];
            s1[threadIdx.x] += s1[threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        part[2 * blockIdx.x] = s0[0];
        part[2 * blockIdx.x + 1] = s1[0];
    }
}

qs_status qw_cuda_sqnr(cuda_ctx *c, const float *y, const float *ref, size_t n, double *signal,
                       double *noise, qs_error *err) {
    qs_status st = qw_cuda_scratch_reserve(&c->partial, 2 * SQNR_BLOCKS * sizeof(double), 0, err);
    if (st != QS_OK) return st;
    double *part = (double *)c->partial.p;
    k_sqnr_partial<<<SQNR_BLOCKS, SQNR_THREADS, 0, c->stream>>>(y, ref, n, part);
    double host[2 * SQNR_BLOCKS];
    if ((st = qw_cuda_status(c, cudaGetLastError(), "sqnr", err)) != QS_OK) return st;
    if ((st = qw_cuda_status(
             c, cudaMemcpyAsync(host, part, sizeof host, cudaMemcpyDeviceToHost, c->stream), "sqnr",
             err)) != QS_OK)
        return st;
    if ((st = qw_cuda_status(c, host_wait(c), "sqnr", err)) != QS_OK) /* host read: the sums */
        return st;
    double a = 0.0, b = 0.0;
    for (int i = 0; i < SQNR_BLOCKS; i++) {
        a += host[2 * i];
        b += host[2 * i + 1];
    }
    *signal = a;
    *noise = b;
    return QS_OK;
}

/* Per-row results of k_score_rows. */
typedef struct row_score {
    double nll, kl;
    int32_t argmax, ref_argmax;
} row_score;

/* Block-wide (max, first index) of a float; result in thread 0's return value. */
__device__ void block_argmax(float v, int idx, float *shv, int *shi, float *outv, int *outi) {
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_down_sync(0xffffffffu, v, o);
        int oi = __shfl_down_sync(0xffffffffu, idx, o);
        if (ov > v || (ov == v && oi < idx)) {
            v = ov;
            idx = oi;
        }
    }
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) {
        shv[wid] = v;
        shi[wid] = idx;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float bv = shv[0];
        int bi = shi[0];
        for (int i = 1; i < (int)(blockDim.x >> 5); i++)
            if (shv[i] > bv || (shv[i] == bv && shi[i] < bi)) {
                bv = shv[i];
                bi = shi[i];
            }
        shv[32] = bv;
        shi[32] = bi;
    }
    __syncthreads();
    *outv = shv[32];
    *outi = shi[32];
}

/* One block (256 threads) per row r of logits l [R x V]. NaN in a row makes every comparison
 * false: argmax then stays at the first index with a non-NaN maximum, as the CPU loop's. */
__global__ void k_score_rows(const float *l, int V, const uint32_t *targets, const float *ref,
                             row_score *out) {
    __shared__ float shv[33];
    __shared__ int shi[33];
    __shared__ double shd[256];
    const float *row = l + (size_t)blockIdx.x * V;
    float mv = -INFINITY;
    int mi = 0x7fffffff;
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        if (row[j] > mv || (row[j] == mv && j < mi)) {
            mv = row[j];
            mi = j;
        }
    float mx;
    int am;
    block_argmax(mv, mi, shv, shi, &mx, &am);
    double s = 0.0;
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        s += exp((double)row[j] - mx);
    s = qw_block_sum256(s, shd);
    double lse = (double)mx + log(s);
    row_score rs = {0.0, 0.0, am, -1};
    if (targets) rs.nll = lse - (double)row[targets[blockIdx.x]];
    if (ref) {
        const float *p = ref + (size_t)blockIdx.x * V;
        double kl = 0.0;
        float pv = -INFINITY;
        int pi = 0x7fffffff;
        for (int j = threadIdx.x; j < V; j += blockDim.x) {
            float q = (float)((double)row[j] - lse);
            kl += exp((double)p[j]) * ((double)p[j] - (double)q);
            if (p[j] > pv || (p[j] == pv && j < pi)) {
                pv = p[j];
                pi = j;
            }
        }
        rs.kl = qw_block_sum256(kl, shd);
        float pm;
        int pa;
        block_argmax(pv, pi, shv, shi, &pm, &pa);
        rs.ref_argmax = pa;
    }
    if (threadIdx.x == 0) out[blockIdx.x] = rs;
}

extern "C" qs_status qw_cuda_score_rows(qw_backend *b, const qw_tensor *logits,
                                        const uint32_t *targets, const float *ref_lp, double *nll,
                                        double *kl, int32_t *argmax, int32_t *ref_argmax,
                                        qs_error *err) {
    cuda_ctx *c = cuda_enter(b);
    int64_t R = logits->rows, V = logits->cols;
    if (!c) return qs_error_set(err, QS_EINVAL, "score rows: not a CUDA backend");
    if (R < 1 || V < 1)
        return qs_error_set(err, QS_EINVAL, "score rows: logits [%lld x %lld]", (long long)R,
                            (long long)V);
    if (targets)
        for (int64_t r = 0; r < R; r++)
            if (targets[r] >= (uint64_t)V)
                return qs_error_set(err, QS_EINVAL, "score rows: row %lld: target %u >= vocab %lld",
                                    (long long)r, targets[r], (long long)V);
    size_t tbytes = targets ? (size_t)R * sizeof(uint32_t) : 0;
    size_t obytes = (size_t)R * sizeof(row_score);
    qs_status st = qw_cuda_scratch_reserve(&c->rowbuf, obytes + tbytes, 0, err);
    if (st != QS_OK) return st;
    row_score *dout = (row_score *)c->rowbuf.p;
    uint32_t *dt = targets ? (uint32_t *)((char *)c->rowbuf.p + obytes) : NULL;
    if (dt && (st = qw_cuda_status(
                   c, cudaMemcpyAsync(dt, targets, tbytes, cudaMemcpyHostToDevice, c->stream),
                   "score rows", err)) != QS_OK)
        return st;
    k_score_rows<<<(unsigned)R, 256, 0, c->stream>>>(logits->data, (int)V, dt, ref_lp, dout);
    if ((st = qw_cuda_status(c, cudaGetLastError(), "score rows", err)) != QS_OK) return st;
    row_score *host = (row_score *)malloc(obytes);
    if (!host) return qs_error_set(err, QS_ENOMEM, "score rows: %lld rows", (long long)R);
    st = qw_cuda_status(c, cudaMemcpyAsync(host, dout, obytes, cudaMemcpyDeviceToHost, c->stream),
                        "score rows", err);
    if (st == QS_OK)
        st = qw_cuda_status(c, host_wait(c), "score rows", err); /* host read: the scores */
    if (st == QS_OK)
        for (int64_t r = 0; r < R; r++) {
            if (nll) nll[r] = host[r].nll;
            if (kl) kl[r] = host[r].kl;
            if (argmax) argmax[r] = host[r].argmax;
            if (ref_argmax) ref_argmax[r] = host[r].ref_argmax;
        }
    free(host);
    return st;
}
