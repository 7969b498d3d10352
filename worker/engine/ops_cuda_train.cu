/* Training ops on the GPU (ops_cuda_train.h): kernels and cuBLAS calls mirroring
 * the CPU training functions (ops_cpu_train.c) line by line. cuBLAS is column-major: a row-major
 * product C = op(A) op(B) is issued as C^T = op(B)^T op(A)^T, i.e. with the operands swapped
 * and the same transpose flags. */
#include "adamw.h"
#include "ops_cuda_impl.h"
#include "ops_cuda_kern.cuh"

#include <math.h>
#include <string.h>

extern "C" {
#include "ops_cuda_train.h"
}

/* The CUDA context of b, or NULL (error set). */
static cuda_ctx *ctx_or_err(qw_backend *b, qs_error *err) {
    if (!b || !b->ops || strcmp(b->ops->name, "cuda") != 0 || !b->impl) {
        qs_error_set(err, QS_EINVAL, "cuda train op: not a CUDA backend");
        return NULL;
    }
    return cuda_enter(b); /* the backend's device current in this thread (ops_cuda_impl.h) */
}

/* The one place this file waits for the stream: the host is about to read (or overwrite) memory
 * that queued work writes (or reads). Each call names that read in a comment; ctest
 * engine_cuda_train_syncs counts them. */
static cudaError_t host_wait(cuda_ctx *c) {
    return cudaStreamSynchronize(c->stream);
}

/* An op is queued on the backend's stream and returns: the stream's order keeps the ops in
 * sequence, and a kernel's execution error surfaces at the next wait (a fetch into host memory,
 * sumsq, qw_backend_cuda_check) under that wait's name. It waits only when an output is memory
 * the host may read directly (managed or host: the GPU tests' buffers), as the evaluation's ops
 * do (ops_cuda.cu). */
static qs_status done(cuda_ctx *c, const char *where, qs_error *err, const void *out,
                      const void *out2 = NULL, const void *out3 = NULL) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess && (qw_cuda_host_reads(c, out) || qw_cuda_host_reads(c, out2) ||
                             qw_cuda_host_reads(c, out3)))
        e = host_wait(c); /* host read: an output in managed or host memory */
    return qw_cuda_status(c, e, where, err);
}

static qs_status blas(cuda_ctx *c, cublasStatus_t s, const char *where, qs_error *err) {
    if (s == CUBLAS_STATUS_SUCCESS) return QS_OK;
    qw_cuda_note_error(c, where, "cuBLAS call failed");
    return qs_error_set(err, QS_EIO, "cuda train op: %s: cuBLAS status %d", where, (int)s);
}

#define CTX                                                                                        \
    cuda_ctx *c = ctx_or_err(b, err);                                                              \
    if (!c) return QS_EINVAL

/* ---------------------------------------------------------------- embedding */

__global__ void k_emb_fwd(float *out, const uint32_t *tok, const float *emb, int N, int D) {
    QW_GRID_STRIDE(i, (size_t)N * D) {
        size_t r = i / (size_t)D, d = i % (size_t)D;
        out[i] = emb[(size_t)tok[r] * D + d];
    }
}

/* One thread per column d, rows in token order: the CPU loop's sums exactly. */
__global__ void k_emb_bwd(float *demb, const float *dout, const uint32_t *tok, int N, int D) {
    int d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= D) return;
    for (int i = 0; i < N; i++)
        demb[(size_t)tok[i] * D + d] += dout[(size_t)i * D + d];
}

extern "C" qs_status qw_cuda_train_embedding_forward(qw_backend *b, float *out,
                                                     const uint32_t *tokens, const float *emb,
                                                     int N, int D, qs_error *err) {
    CTX;
    k_emb_fwd<<<qw_grid_of((size_t)N * D, 256), 256, 0, c->stream>>>(out, tokens, emb, N, D);
    return done(c, "embedding forward", err, out);
}

extern "C" qs_status qw_cuda_train_embedding_backward(qw_backend *b, float *demb, const float *dout,
                                                      const uint32_t *tokens, int N, int D,
                                                      qs_error *err) {
    CTX;
    k_emb_bwd<<<(unsigned)((D + 127) / 128), 128, 0, c->stream>>>(demb, dout, tokens, N, D);
    return done(c, "embedding backward", err, demb);
}

/* ---------------------------------------------------------------- RMSNorm */

__global__ void k_rms_fwd(float *out, float *rstd, const float *x, const float *w, int D,
                          float eps) {
    __shared__ double sh[256];
    const float *xr = x + (size_t)blockIdx.x * D;
    float *o = out + (size_t)blockIdx.x * D;
    double ss = 0.0;
    for (int i = threadIdx.x; i < D; i += blockDim.x)
        ss += (double)xr[i] * xr[i];
    ss = qw_block_sum256(ss, sh);
    float r = (float)(1.0 / sqrt(ss / D + (double)eps));
    if (rstd && threadIdx.x == 0) rstd[blockIdx.x] = r;
    for (int i = threadIdx.x; i < D; i += blockDim.x)
        o[i] = w[i] * (xr[i] * r);
}

__global__ void k_rms_bwd_dx(float *dx, const float *dout, const float *x, const float *w,
                             const float *rstd, int D) {
    __shared__ double sh[256];
    size_t t = blockIdx.x;
    const float *xr = x + t * D, *g = dout + t * D;
    float *d = dx + t * D;
    float r = rstd[t];
    double dot = 0.0;
    for (int i = threadIdx.x; i < D; i += blockDim.x)
        dot += (double)w[i] * g[i] * xr[i];
    dot = qw_block_sum256(dot, sh);
    float cc = (float)(dot * (double)r * r * r / D);
    for (int i = threadIdx.x; i < D; i += blockDim.x)
        d[i] += r * w[i] * g[i] - xr[i] * cc;
}

/* dw_i += sum_t dy_ti (x_ti r_t), rows in order (the CPU loop). */
__global__ void k_rms_bwd_dw(float *dw, const float *dout, const float *x, const float *rstd, int N,
                             int D) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= D) return;
    float s = 0.0f;
    for (int t = 0; t < N; t++)
        s += dout[(size_t)t * D + i] * (x[(size_t)t * D + i] * rstd[t]);
    dw[i] += s;
}

extern "C" qs_status qw_cuda_rmsnorm_forward(qw_backend *b, float *out, float *rstd, const float *x,
                                             const float *w, int N, int D, float eps,
                                             qs_error *err) {
    CTX;
    if (!(w = qw_cuda_vector(c, w, (size_t)D))) return qw_backend_cuda_check(b, err);
    k_rms_fwd<<<(unsigned)N, 256, 0, c->stream>>>(out, rstd, x, w, D, eps);
    return done(c, "rmsnorm forward", err, out, rstd);
}

extern "C" qs_status qw_cuda_train_rmsnorm_backward(qw_backend *b, float *dx, float *dw,
                                                    const float *dout, const float *x,
                                                    const float *w, const float *rstd, int N, int D,
                                                    qs_error *err) {
    CTX;
    k_rms_bwd_dx<<<(unsigned)N, 256, 0, c->stream>>>(dx, dout, x, w, rstd, D);
    k_rms_bwd_dw<<<(unsigned)((D + 127) / 128), 128, 0, c->stream>>>(dw, dout, x, rstd, N, D);
    return done(c, "rmsnorm backward", err, dx, dw);
}

/* ---------------------------------------------------------------- RoPE */

__global__ void k_rope_t(float *x, const float *cosb, const float *sinb, int N, int T, int nh,
                         int E, int backward) {
    int h2 = E / 2;
    QW_GRID_STRIDE(i, (size_t)N * nh * h2) {
        size_t r = i / ((size_t)nh * h2), h = (i / h2) % nh, j = i % h2, t = r % T;
        float *v = x + (r * nh + h) * E;
        float cc = cosb[t * h2 + j], s = sinb[t * h2 + j];
        float a = v[j], bb = v[j + h2];
        if (!backward) {
            v[j] = a * cc - bb * s;
            v[j + h2] = bb * cc + a * s;
        } else {
            v[j] = a * cc + bb * s;
            v[j + h2] = bb * cc - a * s;
        }
    }
}

extern "C" qs_status qw_cuda_rope_forward(qw_backend *b, float *x, const float *cosb,
                                          const float *sinb, int B, int T, int nh, int E,
                                          qs_error *err) {
    CTX;
    size_t tab = (size_t)T * (E / 2);
    if (!(cosb = qw_cuda_vector(c, cosb, tab)) || !(sinb = qw_cuda_vector(c, sinb, tab)))
        return qw_backend_cuda_check(b, err);
    size_t n = (size_t)B * T * nh * (E / 2);
    k_rope_t<<<qw_grid_of(n, 256), 256, 0, c->stream>>>(x, cosb, sinb, B * T, T, nh, E, 0);
    return done(c, "rope forward", err, x);
}

extern "C" qs_status qw_cuda_train_rope_backward(qw_backend *b, float *dx, const float *cosb,
                                                 const float *sinb, int B, int T, int nh, int E,
                                                 qs_error *err) {
    CTX;
    size_t n = (size_t)B * T * nh * (E / 2);
    k_rope_t<<<qw_grid_of(n, 256), 256, 0, c->stream>>>(dx, cosb, sinb, B * T, T, nh, E, 1);
    return done(c, "rope backward", err, dx);
}

/* ---------------------------------------------------------------- attention */

/* Blocked causal attention, FlashAttention-2 style: the evaluation's forward kernel
 * (qw_cuda_flash_attention, ops_cuda_attention.cu) per sequence, saving each row's logsumexp
 * where the probabilities were (saved [B x H x T], qw_train_attention_saved_floats), and the
 * backward recomputing the probabilities from it (ops_cuda_train_attention.cu); neither
 * writes T x T, and neither computes a tile above the diagonal. */
extern "C" qs_status qw_cuda_train_attention_forward(qw_backend *b, float *out, float *saved,
                                                     float *scratch, const float *q, const float *k,
                                                     const float *v, int B, int T, int H, int G,
                                                     int E, qs_error *err) {
    (void)scratch;
    CTX;
    size_t sq = (size_t)T * H * E, sk = (size_t)T * G * E, sl = (size_t)H * T;
    qs_status st = QS_OK;
    for (int bb = 0; bb < B && st == QS_OK; bb++)
        st = qw_cuda_flash_attention(c, out + bb * sq, saved + bb * sl, q + bb * sq, k + bb * sk,
                                     v + bb * sk, T, H, G, E, err);
    return st != QS_OK ? st : done(c, "attention forward", err, out, saved);
}

/* dscratch: each row's D of one sequence [H x T], reused sequence after sequence (the stream
 * orders them). */
extern "C" qs_status qw_cuda_train_attention_backward(qw_backend *b, float *dq, float *dk,
                                                      float *dv, float *dscratch, const float *dout,
                                                      const float *q, const float *k,
                                                      const float *v, const float *saved, int B,
                                                      int T, int H, int G, int E, qs_error *err) {
    CTX;
    size_t sq = (size_t)T * H * E, sk = (size_t)T * G * E, sl = (size_t)H * T;
    qs_status st = QS_OK;
    for (int bb = 0; bb < B && st == QS_OK; bb++)
        st = qw_cuda_flash_attention_backward(c, dq + bb * sq, dk + bb * sk, dv + bb * sk, dscratch,
                                              dout + bb * sq, q + bb * sq, k + bb * sk,
                                              v + bb * sk, saved + bb * sl, T, H, G, E, err);
    return st != QS_OK ? st : done(c, "attention backward", err, dq, dk, dv);
}

/* ---------------------------------------------------------------- SwiGLU */

__global__ void k_swiglu_fwd_t(float *h, const float *g, const float *u, size_t n) {
    QW_GRID_STRIDE(i, n)
    h[i] = g[i] / (1.0f + expf(-g[i])) * u[i]; /* the CPU's expression */
}

__global__ void k_swiglu_bwd_t(float *dg, float *du, const float *dh, const float *g,
                               const float *u, size_t n) {
    QW_GRID_STRIDE(i, n) {
        float s = 1.0f / (1.0f + expf(-g[i]));
        float si = g[i] * s;
        float dhi = dh[i], ui = u[i];
        du[i] = dhi * si;
        dg[i] = dhi * ui * (s * (1.0f + g[i] * (1.0f - s)));
    }
}

extern "C" qs_status qw_cuda_swiglu_forward(qw_backend *b, float *h, const float *g, const float *u,
                                            size_t n, qs_error *err) {
    CTX;
    k_swiglu_fwd_t<<<qw_grid_of(n, 256), 256, 0, c->stream>>>(h, g, u, n);
    return done(c, "swiglu forward", err, h);
}

extern "C" qs_status qw_cuda_train_swiglu_backward(qw_backend *b, float *dg, float *du,
                                                   const float *dh, const float *g, const float *u,
                                                   size_t n, qs_error *err) {
    CTX;
    k_swiglu_bwd_t<<<qw_grid_of(n, 256), 256, 0, c->stream>>>(dg, du, dh, g, u, n);
    return done(c, "swiglu backward", err, dg, du);
}

/* ---------------------------------------------------------------- cross-entropy */

__global__ void k_ce_fwd(float *logits, float *losses, const uint32_t *tg, int V) {
    __shared__ double shd[256];
    __shared__ float shf[256];
    float *row = logits + (size_t)blockIdx.x * V;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        mx = fmaxf(mx, row[j]);
    mx = qw_block_max256(mx, shf);
    double lt = (double)row[tg[blockIdx.x]] - (double)mx;
    __syncthreads(); /* every thread has read the target's logit before it is overwritten */
    double sum = 0.0;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float e = expf(row[j] - mx);
        row[j] = e;
        sum += e;
    }
    sum = qw_block_sum256(sum, shd);
    float inv = (float)(1.0 / sum);
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        row[j] *= inv;
    if (threadIdx.x == 0) losses[blockIdx.x] = (float)(log(sum) - lt);
}

__global__ void k_ce_bwd(float *probs, const uint32_t *tg, int V, float scale) {
    float *row = probs + (size_t)blockIdx.x * V;
    uint32_t t = tg[blockIdx.x];
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        row[j] = ((uint32_t)j == t ? row[j] - 1.0f : row[j]) * scale;
}

extern "C" qs_status qw_cuda_train_crossentropy_forward(qw_backend *b, float *logits, float *losses,
                                                        const uint32_t *targets, int N, int V,
                                                        qs_error *err) {
    CTX;
    k_ce_fwd<<<(unsigned)N, 256, 0, c->stream>>>(logits, losses, targets, V);
    return done(c, "crossentropy forward", err, logits, losses);
}

extern "C" qs_status qw_cuda_train_crossentropy_backward(qw_backend *b, float *probs,
                                                         const uint32_t *targets, int N, int V,
                                                         float scale, qs_error *err) {
    CTX;
    k_ce_bwd<<<(unsigned)N, 256, 0, c->stream>>>(probs, targets, V, scale);
    return done(c, "crossentropy backward", err, probs);
}

/* ---------------------------------------------------------------- linear */

extern "C" qs_status qw_cuda_train_linear_forward(qw_backend *b, float *y, const float *x,
                                                  const float *W, int N, int in, int out,
                                                  qs_error *err) {
    CTX;
    float one = 1.0f, zero = 0.0f;
    qs_status st = blas(c,
                        cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, out, N, in, &one, W, in, x,
                                    in, &zero, y, out),
                        "linear forward", err);
    return st != QS_OK ? st : done(c, "linear forward", err, y);
}

extern "C" qs_status qw_cuda_train_linear_backward(qw_backend *b, float *dx, int dx_accumulate,
                                                   float *dW, const float *dy, const float *x,
                                                   const float *W, int N, int in, int out,
                                                   qs_error *err) {
    CTX;
    float one = 1.0f, beta = dx_accumulate ? 1.0f : 0.0f;
    qs_status st = QS_OK;
    /* dx[N x in] (+)= dy[N x out] W[out x in] */
    if (dx)
        st = blas(c,
                  cublasSgemm(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, in, N, out, &one, W, in, dy, out,
                              &beta, dx, in),
                  "linear dgrad", err);
    /* dW[out x in] += dy^T x */
    if (st == QS_OK)
        st = blas(c,
                  cublasSgemm(c->blas, CUBLAS_OP_N, CUBLAS_OP_T, in, out, N, &one, x, in, dy, out,
                              &one, dW, in),
                  "linear wgrad", err);
    return st != QS_OK ? st : done(c, "linear backward", err, dx, dW);
}

/* ---------------------------------------------------------------- the table's training rest */

#include "hadamard.h"
#include "qk_cuda.h"

extern "C" qs_status qw_cuda_train_copy(qw_backend *b, void *dst, const void *src, size_t bytes,
                                        qs_error *err) {
    CTX;
    /* cudaMemcpyDefault: the direction from the pointers (unified addressing), so one function
       is the table's upload, fetch and copy */
    if (!bytes) return QS_OK;
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, c->stream);
    /* a device-to-device copy is queued like an op. A fetch waits: the host reads dst next. An
     * upload from pageable host memory does not: cudaMemcpyAsync stages pageable memory before
     * it returns (CUDA Runtime API, "API synchronization behavior"); from managed memory, which
     * the host may write next, it waits. */
    if (e == cudaSuccess && (qw_cuda_host_reads(c, dst) || qw_cuda_managed(c, src)))
        e = host_wait(c); /* host read: a fetch's destination, or a managed source */
    return qw_cuda_status(c, e, "copy", err);
}

extern "C" qs_status qw_cuda_train_zero(qw_backend *b, void *p, size_t bytes, qs_error *err) {
    CTX;
    qs_status st = QS_OK;
    if (bytes) st = qw_cuda_status(c, cudaMemsetAsync(p, 0, bytes, c->stream), "zero", err);
    return st != QS_OK ? st : done(c, "zero", err, p);
}

static __global__ void k_tr_add(float *out, const float *x, const float *y, size_t n) {
    QW_GRID_STRIDE(i, n) {
        out[i] = x[i] + y[i];
    }
}

extern "C" qs_status qw_cuda_train_add(qw_backend *b, float *out, const float *x, const float *y,
                                       size_t n, qs_error *err) {
    CTX;
    k_tr_add<<<qw_grid_of(n, 256), 256, 0, c->stream>>>(out, x, y, n);
    return done(c, "add", err, out);
}

extern "C" qs_status qw_cuda_train_gemm_abt(qw_backend *b, float *C, const float *A,
                                            const float *Bm, int M, int Ncol, int K, float beta,
                                            qs_error *err) {
    CTX;
    float one = 1.0f;
    qs_status st = blas(c,
                        cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, Ncol, M, K, &one, Bm, K, A,
                                    K, &beta, C, Ncol),
                        "gemm_abt", err);
    return st != QS_OK ? st : done(c, "gemm_abt", err, C);
}

/* Both inputs of gemm_abt_bf16 to BF16: exact for the BF16-exact values the caller promises
 * (each becomes its own top 16 bits); any other value would be rounded RNE. */
static __global__ void k_tr_to_bf16(__nv_bfloat16 *dst, const float *src, size_t n) {
    QW_GRID_STRIDE(i, n) {
        dst[i] = __float2bfloat16_rn(src[i]);
    }
}

/* C[M x Ncol] = A[M x K] Bm[Ncol x K]^T + beta C as qw_cuda_train_gemm_abt, the inputs converted
 * to BF16 into the backend's BF16 scratch (act16: A, then Bm from the next 128-byte boundary) and
 * multiplied by cublasGemmEx: CUDA_R_16BF inputs, CUDA_R_32F output, CUBLAS_COMPUTE_32F (FP32
 * accumulation on the tensor cores). The products of BF16 values are exact in FP32, so C differs
 * from the SGEMM's only by the summation order. An FP32 backend's handle is pedantic (no TF32 in
 * its SGEMMs, ops_cuda.cu); this call runs under the default math mode, and the handle's mode is
 * restored after it. */
extern "C" qs_status qw_cuda_train_gemm_abt_bf16(qw_backend *b, float *C, const float *A,
                                                 const float *Bm, int M, int Ncol, int K,
                                                 float beta, qs_error *err) {
    CTX;
    size_t na = (size_t)M * K, nb = (size_t)Ncol * K, off = (na + 63) / 64 * 64;
    qs_status st = qw_cuda_scratch_reserve(&c->act16, (off + nb) * sizeof(__nv_bfloat16), 0, err);
    if (st != QS_OK) return st;
    __nv_bfloat16 *a16 = (__nv_bfloat16 *)c->act16.p, *b16 = a16 + off;
    k_tr_to_bf16<<<qw_grid_of(na, 256), 256, 0, c->stream>>>(a16, A, na);
    st = qw_cuda_status(c, cudaGetLastError(), "gemm_abt_bf16: A to BF16", err);
    if (st != QS_OK) return st;
    k_tr_to_bf16<<<qw_grid_of(nb, 256), 256, 0, c->stream>>>(b16, Bm, nb);
    st = qw_cuda_status(c, cudaGetLastError(), "gemm_abt_bf16: B to BF16", err);
    if (st != QS_OK) return st;
    cublasMath_t mode = CUBLAS_DEFAULT_MATH;
    st = blas(c, cublasGetMathMode(c->blas, &mode), "gemm_abt_bf16: math mode", err);
    if (st == QS_OK && mode != CUBLAS_DEFAULT_MATH)
        st = blas(c, cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH), "gemm_abt_bf16: math mode",
                  err);
    if (st != QS_OK) return st;
    float one = 1.0f;
    st = blas(c,
              cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, Ncol, M, K, &one, b16, CUDA_R_16BF, K,
                           a16, CUDA_R_16BF, K, &beta, C, CUDA_R_32F, Ncol, CUBLAS_COMPUTE_32F,
                           CUBLAS_GEMM_DEFAULT),
              "gemm_abt_bf16", err);
    if (mode != CUBLAS_DEFAULT_MATH) {
        qs_error e2 = {};
        qs_status r = blas(c, cublasSetMathMode(c->blas, mode), "gemm_abt_bf16: restore math mode",
                           st == QS_OK ? err : &e2);
        if (st == QS_OK) st = r;
    }
    return st != QS_OK ? st : done(c, "gemm_abt_bf16", err, C);
}

static __global__ void k_tr_transpose(float *dst, const float *src, int rows, int cols) {
    QW_GRID_STRIDE(i, (size_t)rows * cols) {
        size_t r = i / (size_t)cols, cc = i % (size_t)cols;
        dst[cc * rows + r] = src[i];
    }
}

extern "C" qs_status qw_cuda_train_transpose(qw_backend *b, float *dst, const float *src, int rows,
                                             int cols, qs_error *err) {
    CTX;
    k_tr_transpose<<<qw_grid_of((size_t)rows * cols, 256), 256, 0, c->stream>>>(dst, src, rows,
                                                                                cols);
    return done(c, "transpose", err, dst);
}

/* qw_round_bf16, bit for bit: RNE, Inf saturated to +-max finite, NaN to 0x7FC0. */
static __global__ void k_tr_round_bf16(float *x, size_t n) {
    QW_GRID_STRIDE(i, n) {
        uint32_t u = __float_as_uint(x[i]);
        if ((u & 0x7F800000u) == 0x7F800000u) {
            u = (u & 0x007FFFFFu) ? 0x7FC00000u : ((u & 0x80000000u) | 0x7F7F0000u);
        } else {
            uint32_t r = u + 0x7FFFu + ((u >> 16) & 1u);
            if ((r & 0x7F800000u) == 0x7F800000u) r = (u & 0x80000000u) | 0x7F7F0000u;
            u = r & 0xFFFF0000u;
        }
        x[i] = __uint_as_float(u);
    }
}

extern "C" qs_status qw_cuda_train_round_bf16(qw_backend *b, float *x, size_t n, qs_error *err) {
    CTX;
    k_tr_round_bf16<<<qw_grid_of(n, 256), 256, 0, c->stream>>>(x, n);
    return done(c, "round_bf16", err, x);
}

/* The RHT on the device for both tile sizes the recipes use (kernels/cuda qk_cuda_rht: qk_rht's
 * signs, butterfly order and bits for d = 16 and 32), on the backend's stream, the launch
 * checked; any other d is refused as qk_rht refuses it. */
extern "C" qs_status qw_cuda_train_rht(qw_backend *b, float *x, size_t rows, size_t k, int d,
                                       uint64_t seed, qs_error *err) {
    CTX;
    qs_status st = qk_cuda_rht(x, rows, k, d, seed, 0, c->stream, err);
    return st != QS_OK ? st : done(c, d == 16 ? "rht16" : "rht32", err, x);
}

/* On the device (qk_cuda_fake_quant has every format); what it refuses (the options
 * reference_only and tiny_amax exact) runs the CPU quantizer on a host copy
 * (qw_cuda_host_fake_quant): the same bits either way. */
extern "C" qs_status qw_cuda_train_fake_quant(qw_backend *b, const qk_format *fmt,
                                              const qk_quant_options *opt, float *x, size_t rows,
                                              size_t k, qs_error *err) {
    CTX;
    qs_error e2 = {};
    qs_status st = qk_cuda_fake_quant(fmt, opt, x, rows, k, c->stream, &e2);
    if (st == QS_EUNSUPPORTED) /* stream-ordered fetch, CPU quantizer, upload, waited there */
        return qw_cuda_host_fake_quant(c, fmt, opt, x, rows, k, err);
    if (st != QS_OK) return qs_error_set(err, st, "%s", e2.msg);
    return done(c, "fake quant", err, x);
}

#ifdef QW_HAVE_QK_GEMM
#include "cublaslt_layout.h"
#include "qk_cuda_fp8.h"
#include "qk_gemm.h"

extern "C" {
#include "quant_gemm_route.h"
}

static size_t tr_up256(size_t n) {
    return (n + 255) / 256 * 256;
}

/* One operand quantized into [codes | scales] of mem at off, its decode scale at d_scale. */
static qs_status tr_quant_operand(cuda_ctx *c, const qk_format *f, const qk_quant_options *o,
                                  const float *x, size_t rows, size_t k, qk_gemm_type t,
                                  uint8_t *mem, float *d_scale, qk_gemm_operand *op,
                                  qs_error *err) {
    memset(op, 0, sizeof *op);
    qs_status st = qk_lt_layout_init(f, rows, k, &op->layout, err);
    if (st != QS_OK) return st;
    uint8_t *codes = mem, *scales = mem + tr_up256(op->layout.codes_bytes);
    st = qk_cuda_quantize_lt_async(f, o, x, rows, k, &op->layout, codes, scales, d_scale, c->stream,
                                   err);
    if (st != QS_OK) return st;
    op->type = t;
    op->data = codes;
    op->scales = scales;
    op->tensor_scale = 1.0f;
    op->d_tensor_scale = d_scale;
    return QS_OK;
}

/* C = A B^T + beta C on cuBLASLt's FP8 tensor cores: each operand quantized on the device to
 * E4M3 codes [rows x K rounded up to 16] (zero codes in the padding, which add nothing) with
 * its decode scale on the device, passed as the GEMM's A/B scale pointer. */
static qs_status tr_fp8_gemm(cuda_ctx *c, qk_gemm *g, float *C, const float *A,
                             const qk_format *fa, const qk_quant_options *oa, const float *Bm,
                             const qk_format *fb, const qk_quant_options *ob, int M, int Ncol,
                             int K, float beta, qk_gemm_path *p, qs_error *err) {
    size_t ld = ((size_t)K + 15) / 16 * 16;
    size_t na = tr_up256((size_t)M * ld), nb = tr_up256((size_t)Ncol * ld);
    size_t ns = 2 * QK_CUDA_FP8_SCALE_FLOATS * sizeof(float);
    uint8_t *mem = NULL;
    qs_status st = qw_cuda_status(c, cudaMallocAsync((void **)&mem, na + nb + ns, c->stream),
                                  "gemm_abt_quant: fp8 operand buffers", err);
    if (st != QS_OK) return st;
    float *sa = (float *)(mem + na + nb), *sb = sa + QK_CUDA_FP8_SCALE_FLOATS;
    st = qk_cuda_quantize_fp8_async(fa, oa, A, (size_t)M, (size_t)K, ld, mem, sa, c->stream, err);
    if (st == QS_OK)
        st = qk_cuda_quantize_fp8_async(fb, ob, Bm, (size_t)Ncol, (size_t)K, ld, mem + na, sb,
                                        c->stream, err);
    qk_gemm_operand x, w;
    memset(&x, 0, sizeof x);
    memset(&w, 0, sizeof w);
    x.type = w.type = QK_GEMM_FP8_E4M3;
    x.data = mem;
    w.data = mem + na;
    x.ld = w.ld = ld;
    x.tensor_scale = w.tensor_scale = 1.0f;
    x.d_tensor_scale = sa;
    w.d_tensor_scale = sb;
    if (st == QS_OK)
        st = qk_gemm_linear(g, &x, &w, (size_t)M, (size_t)Ncol, ld, 1.0f, beta, C,
                            QK_GEMM_OUT_F32, (size_t)Ncol, c->stream, p, err);
    cudaError_t fe = cudaFreeAsync(mem, c->stream);
    if (st != QS_OK) return st;
    return qw_cuda_status(c, fe, "gemm_abt_quant: free fp8 operand buffers", err);
}

/* Whether gemm_abt_quant runs A in fa times B in fb with an output Ncol wide on c's handle g
 * (quant_gemm_route.h, tested on the CPU): 1 with the operands' type *t and the handle's path *p;
 * 0 with why (may be empty) where it declines. b may be a timed copy of the CUDA table. */
static int tr_route(qw_backend *b, qk_gemm *g, const qk_format *fa, const qk_format *fb, int Ncol,
                    qk_gemm_type *t, qk_gemm_path *p, qs_error *why) {
    if (!g || !qw_quant_gemm_operands(fa ? qk_format_name(fa) : NULL,
                                      fb ? qk_format_name(fb) : NULL, Ncol, t))
        return 0;
    /* the device's probe, read through the plain CUDA table */
    qw_backend self = *b;
    self.ops = qw_ops_cuda();
    qk_gemm_probe probe;
    int proved = qw_backend_cuda_gemm_probe(&self, &probe);
    return qw_quant_gemm_runs(*t, qk_gemm_path_for(g, *t, *t, p, why) == QS_OK, *p,
                              proved ? &probe : NULL);
}

static qs_status tr_declined(qk_gemm *g, const char *op, const qk_format *fa, const qk_format *fb,
                             int M, int Ncol, int K, const qs_error *why, qs_error *err) {
    return qs_error_set(err, QS_EUNSUPPORTED,
                        "cuda train op: %s: %s x %s, %d x %d x %d: not run here "
                        "(cuBLASLt handle %s%s%s)",
                        op, fa ? qk_format_name(fa) : "?", fb ? qk_format_name(fb) : "?", M, Ncol,
                        K, g ? "present" : "absent: gemm request fp32 or bf16",
                        why->msg[0] ? "; " : "", why->msg);
}

/* Bytes of an FP4 operand [rows x k] in mem: codes, block scales (each from a 256-byte
 * boundary), then the FP32 decode scale in a 256-byte tail. */
static size_t tr_fp4_bytes(const qk_lt_layout *l) {
    return tr_up256(l->codes_bytes) + tr_up256(l->scale_bytes) + 256;
}

/* The operand of an FP4 [rows x k] that tr_quant_operand wrote into mem (tr_fp4_bytes). */
static qs_status tr_kept_operand(const qk_format *f, size_t rows, size_t k, qk_gemm_type t,
                                 const void *mem, qk_gemm_operand *op, qs_error *err) {
    memset(op, 0, sizeof *op);
    qs_status st = qk_lt_layout_init(f, rows, k, &op->layout, err);
    if (st != QS_OK) return st;
    const uint8_t *codes = (const uint8_t *)mem;
    op->type = t;
    op->data = codes;
    op->scales = codes + tr_up256(op->layout.codes_bytes);
    op->tensor_scale = 1.0f;
    op->d_tensor_scale = (const float *)(op->scales + tr_up256(op->layout.scale_bytes));
    return QS_OK;
}

/* A's operand quantized into a stream-ordered buffer, then the GEMM with w: the common end of
 * gemm_abt_quant and gemm_abt_quant_kept for FP4 operands. */
static qs_status tr_fp4_gemm(cuda_ctx *c, qk_gemm *g, float *C, const float *A, const qk_format *fa,
                             const qk_quant_options *oa, int M, int Ncol, int K, float beta,
                             qk_gemm_type t, const qk_gemm_operand *w, qk_gemm_path *p,
                             qs_error *err) {
    qk_lt_layout la;
    qs_status st = qk_lt_layout_init(fa, (size_t)M, (size_t)K, &la, err);
    if (st != QS_OK) return st;
    uint8_t *mem = NULL;
    st = qw_cuda_status(c, cudaMallocAsync((void **)&mem, tr_fp4_bytes(&la), c->stream),
                        "gemm_abt_quant: operand buffers", err);
    if (st != QS_OK) return st;
    float *d_scale = (float *)(mem + tr_up256(la.codes_bytes) + tr_up256(la.scale_bytes));
    qk_gemm_operand x;
    st = tr_quant_operand(c, fa, oa, A, (size_t)M, (size_t)K, t, mem, d_scale, &x, err);
    if (st == QS_OK)
        st = qk_gemm_linear(g, &x, w, (size_t)M, (size_t)Ncol, (size_t)K, 1.0f, beta, C,
                            QK_GEMM_OUT_F32, (size_t)Ncol, c->stream, p, err);
    cudaError_t fe = cudaFreeAsync(mem, c->stream);
    if (st != QS_OK) return st;
    return qw_cuda_status(c, fe, "gemm_abt_quant: free operand buffers", err);
}

/* FP4 operands block-scaled (native or emulated, as the handle chose), FP8 operands on FP8
 * tensor cores where the handle has the FP8 path; anything else declined, and the caller
 * fake-quantizes. */
extern "C" qs_status qw_cuda_train_gemm_abt_quant(qw_backend *b, float *C, const float *A,
                                                  const qk_format *fa, const qk_quant_options *oa,
                                                  const float *Bm, const qk_format *fb,
                                                  const qk_quant_options *ob, int M, int Ncol,
                                                  int K, float beta, int *path, qs_error *err) {
    CTX;
    qk_gemm *g = (qk_gemm *)qw_cuda_lt_gemm(c);
    qk_gemm_type t = QK_GEMM_BF16;
    qk_gemm_path p = QK_GEMM_PATH_FP32;
    qs_error why = {};
    if (((uintptr_t)C & 15) != 0 || M <= 0 || K <= 0 || !tr_route(b, g, fa, fb, Ncol, &t, &p, &why))
        return tr_declined(g, "gemm_abt_quant", fa, fb, M, Ncol, K, &why, err);
    qs_status st;
    if (t == QK_GEMM_FP8_E4M3) {
        st = tr_fp8_gemm(c, g, C, A, fa, oa, Bm, fb, ob, M, Ncol, K, beta, &p, err);
        if (st != QS_OK) return st;
        if (path) *path = (int)p;
        return done(c, "gemm_abt_quant", err, C);
    }
    qk_lt_layout lb;
    st = qk_lt_layout_init(fb, (size_t)Ncol, (size_t)K, &lb, err);
    if (st != QS_OK) return st;
    uint8_t *mem = NULL;
    st = qw_cuda_status(c, cudaMallocAsync((void **)&mem, tr_fp4_bytes(&lb), c->stream),
                        "gemm_abt_quant: operand buffers", err);
    if (st != QS_OK) return st;
    float *d_scale = (float *)(mem + tr_up256(lb.codes_bytes) + tr_up256(lb.scale_bytes));
    qk_gemm_operand w;
    st = tr_quant_operand(c, fb, ob, Bm, (size_t)Ncol, (size_t)K, t, mem, d_scale, &w, err);
    if (st == QS_OK) st = tr_fp4_gemm(c, g, C, A, fa, oa, M, Ncol, K, beta, t, &w, &p, err);
    cudaError_t fe = cudaFreeAsync(mem, c->stream);
    if (st != QS_OK) return st;
    st = qw_cuda_status(c, fe, "gemm_abt_quant: free operand buffers", err);
    if (st != QS_OK) return st;
    if (path) *path = (int)p;
    return done(c, "gemm_abt_quant", err, C);
}

/* FP4 formats only: FP8 operands (padded codes, the scale pointers of tr_fp8_gemm) are made at
 * each call, so the fp8 recipe's weights are quantized per GEMM. */
extern "C" size_t qw_cuda_train_quant_operand_bytes(qw_backend *b, const qk_format *fmt,
                                                    size_t rows, size_t k) {
    qs_error err = {};
    cuda_ctx *c = ctx_or_err(b, &err);
    if (!c || rows == 0 || k == 0 || rows > INT32_MAX) return 0;
    qk_gemm_type t;
    qk_gemm_path p;
    if (!tr_route(b, (qk_gemm *)qw_cuda_lt_gemm(c), fmt, fmt, (int)rows, &t, &p, &err) ||
        t == QK_GEMM_FP8_E4M3)
        return 0;
    qk_lt_layout l;
    return qk_lt_layout_init(fmt, rows, k, &l, &err) == QS_OK ? tr_fp4_bytes(&l) : 0;
}

extern "C" qs_status qw_cuda_train_quant_operand(qw_backend *b, const qk_format *fmt,
                                                 const qk_quant_options *opt, void *mem,
                                                 const float *x, size_t rows, size_t k,
                                                 qs_error *err) {
    CTX;
    qk_gemm_type t = QK_GEMM_BF16;
    if (rows > INT32_MAX ||
        !qw_quant_gemm_operands(qk_format_name(fmt), qk_format_name(fmt), (int)rows, &t) ||
        t == QK_GEMM_FP8_E4M3)
        return qs_error_set(err, QS_EUNSUPPORTED, "cuda train op: quant_operand: %s [%zu x %zu]",
                            qk_format_name(fmt), rows, k);
    qk_lt_layout l;
    qs_status st = qk_lt_layout_init(fmt, rows, k, &l, err);
    if (st != QS_OK) return st;
    uint8_t *m = (uint8_t *)mem;
    float *d_scale = (float *)(m + tr_up256(l.codes_bytes) + tr_up256(l.scale_bytes));
    qk_gemm_operand op;
    st = tr_quant_operand(c, fmt, opt, x, rows, k, t, m, d_scale, &op, err);
    return st != QS_OK ? st : done(c, "quant_operand", err, mem);
}

extern "C" qs_status qw_cuda_train_gemm_abt_quant_kept(qw_backend *b, float *C, const float *A,
                                                       const qk_format *fa,
                                                       const qk_quant_options *oa, const void *bq,
                                                       const qk_format *fb, int M, int Ncol, int K,
                                                       float beta, int *path, qs_error *err) {
    CTX;
    qk_gemm *g = (qk_gemm *)qw_cuda_lt_gemm(c);
    qk_gemm_type t = QK_GEMM_BF16;
    qk_gemm_path p = QK_GEMM_PATH_FP32;
    qs_error why = {};
    if (((uintptr_t)C & 15) != 0 || M <= 0 || K <= 0 ||
        !tr_route(b, g, fa, fb, Ncol, &t, &p, &why) || t == QK_GEMM_FP8_E4M3)
        return tr_declined(g, "gemm_abt_quant_kept", fa, fb, M, Ncol, K, &why, err);
    qk_gemm_operand w;
    qs_status st = tr_kept_operand(fb, (size_t)Ncol, (size_t)K, t, bq, &w, err);
    if (st == QS_OK) st = tr_fp4_gemm(c, g, C, A, fa, oa, M, Ncol, K, beta, t, &w, &p, err);
    if (st != QS_OK) return st;
    if (path) *path = (int)p;
    return done(c, "gemm_abt_quant_kept", err, C);
}
#else
extern "C" qs_status qw_cuda_train_gemm_abt_quant(qw_backend *b, float *C, const float *A,
                                                  const qk_format *fa, const qk_quant_options *oa,
                                                  const float *Bm, const qk_format *fb,
                                                  const qk_quant_options *ob, int M, int Ncol,
                                                  int K, float beta, int *path, qs_error *err) {
    (void)b, (void)C, (void)A, (void)fa, (void)oa, (void)Bm, (void)fb, (void)ob, (void)M;
    (void)Ncol, (void)K, (void)beta, (void)path;
    return qs_error_set(err, QS_EUNSUPPORTED,
                        "cuda train op: gemm_abt_quant: built without kernels/cuda/qk_gemm.h");
}

extern "C" size_t qw_cuda_train_quant_operand_bytes(qw_backend *b, const qk_format *fmt,
                                                    size_t rows, size_t k) {
    (void)b, (void)fmt, (void)rows, (void)k;
    return 0; /* nothing is kept: gemm_abt_quant declines every GEMM */
}

extern "C" qs_status qw_cuda_train_quant_operand(qw_backend *b, const qk_format *fmt,
                                                 const qk_quant_options *opt, void *mem,
                                                 const float *x, size_t rows, size_t k,
                                                 qs_error *err) {
    (void)b, (void)fmt, (void)opt, (void)mem, (void)x, (void)rows, (void)k;
    return qs_error_set(err, QS_EUNSUPPORTED,
                        "cuda train op: quant_operand: built without kernels/cuda/qk_gemm.h");
}

extern "C" qs_status qw_cuda_train_gemm_abt_quant_kept(qw_backend *b, float *C, const float *A,
                                                       const qk_format *fa,
                                                       const qk_quant_options *oa, const void *bq,
                                                       const qk_format *fb, int M, int Ncol, int K,
                                                       float beta, int *path, qs_error *err) {
    (void)b, (void)C, (void)A, (void)fa, (void)oa, (void)bq, (void)fb, (void)M, (void)Ncol;
    (void)K, (void)beta, (void)path;
    return qs_error_set(err, QS_EUNSUPPORTED,
                        "cuda train op: gemm_abt_quant_kept: built without kernels/cuda/qk_gemm.h");
}
#endif

#define TR_SUMSQ_RANGES 64

/* One block per fixed range of n / 64 elements: strided double sums, then a shared-memory tree:
 * deterministic (the block size and the ranges are fixed), not the CPU's order. */
static __global__ void k_tr_sumsq(const float *g, size_t n, double *part) {
    __shared__ double sh[256];
    size_t a = n * (size_t)blockIdx.x / TR_SUMSQ_RANGES,
           e = n * (size_t)(blockIdx.x + 1) / TR_SUMSQ_RANGES;
    double s = 0.0;
    for (size_t i = a + threadIdx.x; i < e; i += blockDim.x)
        s += (double)g[i] * (double)g[i];
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int w = 128; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) part[blockIdx.x] = sh[0];
}

extern "C" qs_status qw_cuda_train_sumsq(qw_backend *b, const float *g, size_t n, double *out,
                                         qs_error *err) {
    CTX;
    qs_status st = qw_cuda_scratch_reserve(&c->partial, TR_SUMSQ_RANGES * sizeof(double), 0, err);
    if (st != QS_OK) return st;
    double *part = (double *)c->partial.p, host[TR_SUMSQ_RANGES];
    k_tr_sumsq<<<TR_SUMSQ_RANGES, 256, 0, c->stream>>>(g, n, part);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(host, part, sizeof host, cudaMemcpyDeviceToHost, c->stream);
    if (e == cudaSuccess) e = host_wait(c); /* host read: the partial sums of the norm */
    if ((st = qw_cuda_status(c, e, "sumsq", err)) != QS_OK) return st;
    double s = 0.0;
    for (int r = 0; r < TR_SUMSQ_RANGES; r++)
        s += host[r];
    *out = s;
    return QS_OK;
}

/* qw_train_adamw element by element (sqrtf and IEEE division: --prec-div=true, no FMA). */
static __global__ void k_tr_adamw(float *p, const float *g, float *m, float *v, size_t n,
                                  qw_adamw_hp h) {
    QW_GRID_STRIDE(j, n) {
        qw_adamw_update(&p[j], &m[j], &v[j], g[j], &h);
    }
}

extern "C" qs_status qw_cuda_train_adamw(qw_backend *b, float *p, const float *g, float *m,
                                         float *v, size_t n, float lr, float wd, float b1, float b2,
                                         float eps, float c1, float c2, float grad_scale,
                                         qs_error *err) {
    CTX;
    qw_adamw_hp h = {lr, wd, b1, b2, eps, c1, c2, grad_scale};
    k_tr_adamw<<<qw_grid_of(n, 256), 256, 0, c->stream>>>(p, g, m, v, n, h);
    return done(c, "adamw", err, p, m, v);
}
