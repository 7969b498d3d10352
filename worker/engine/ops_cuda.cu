/* The CUDA backend of the engine's operations (ops_cuda.h): the forward kernels, the table and
 * the backend's set-up. Each kernel mirrors the CPU reference function of ops.h named in its
 * comment (shapes: T tokens, D dim, H heads, G kv heads, E head_dim, V vocab). */
#include "ops_cuda_impl.h"
#include "ops_cuda_kern.cuh"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qk_cuda.h"

extern "C" {
#include "ops_cuda_method.h"
#include "ops_cuda_train.h"
#include "quant.h"
#include "weights.h"
}

/* Notes a launch error of the op `where`; returns 0 on success. The op stays queued on the
 * backend's stream: ops whose result only the device reads return without waiting, and the
 * stream's order keeps them in sequence. An error of the kernel's execution surfaces at the
 * next wait (a host read: download, fetch, score_rows, sqnr_sums; or a comm point). */
static int launched(cuda_ctx *c, const char *where) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        qw_cuda_note_error(c, where, cudaGetErrorString(e));
        return -1;
    }
    return 0;
}

/* The one place this file waits for the stream: the host is about to read (or free, or
 * overwrite) memory that queued work writes (or reads). Each call names that read in a comment;
 * ctest engine_cuda_ops_syncs counts them. */
static cudaError_t host_wait(cuda_ctx *c) {
    return cudaStreamSynchronize(c->stream);
}

/* Waits for the stream (the host is about to read what it computed) and notes an error of the
 * op `where`; returns 0 on success. */
static int finish(cuda_ctx *c, const char *where) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) e = host_wait(c); /* host read: what the caller reads next */
    if (e != cudaSuccess) {
        qw_cuda_note_error(c, where, cudaGetErrorString(e));
        return -1;
    }
    return 0;
}

/* Memory kinds of ptr_kind. */
enum { PTR_HOST = 0, PTR_DEVICE = 1, PTR_MANAGED = 2 };

/* The memory kind of p: device for a pointer into one of the backend's own allocations
 * (c->alloc_base); else asked of the driver the first time p is seen, then remembered
 * (c->seen). A remembered buffer freed and its address reused for another kind would pass; the
 * backend's buffers are its own allocations (cu_alloc), and cu_free forgets every remembered
 * one. */
static int ptr_kind(cuda_ctx *c, const void *p) {
    uintptr_t q = (uintptr_t)p;
    for (int i = 0; i < 16; i++)
        if (c->alloc_base[i] && q - (uintptr_t)c->alloc_base[i] < c->alloc_bytes[i])
            return PTR_DEVICE;
    int n = c->n_seen < 32 ? c->n_seen : 32;
    for (int i = 0; i < n; i++)
        if (c->seen[i] == p) return c->seen_kind[i];
    cudaPointerAttributes a;
    int kind = PTR_HOST;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess)
        (void)cudaGetLastError();
    else if (a.type == cudaMemoryTypeDevice)
        kind = PTR_DEVICE;
    else if (a.type == cudaMemoryTypeManaged)
        kind = PTR_MANAGED;
    c->seen[c->n_seen % 32] = p;
    c->seen_kind[c->n_seen % 32] = (unsigned char)kind;
    c->n_seen = c->n_seen + 1 < 64 ? c->n_seen + 1 : 32;
    return kind;
}

/* 1 when the GPU can read and write p (device or managed memory). */
static int device_visible(cuda_ctx *c, const void *p) {
    return ptr_kind(c, p) != PTR_HOST;
}

int qw_cuda_host_reads(cuda_ctx *c, const void *p) {
    return p && ptr_kind(c, p) != PTR_DEVICE;
}

int qw_cuda_managed(cuda_ctx *c, const void *p) {
    return p && ptr_kind(c, p) == PTR_MANAGED;
}

/* An op that wrote out is queued: it returns at once when out is device memory, which the host
 * reaches only through the table (download, fetch, score_rows wait); it waits when out is
 * managed memory, which the host may read directly (tests, tools). Returns 0 on success. */
static int done(cuda_ctx *c, const char *where, const void *out) {
    if (launched(c, where) != 0) return -1;
    return ptr_kind(c, out) == PTR_MANAGED ? finish(c, where) : 0;
}

static const char *blas_text(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS:
        return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED:
        return "not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED:
        return "alloc failed";
    case CUBLAS_STATUS_INVALID_VALUE:
        return "invalid value";
    case CUBLAS_STATUS_ARCH_MISMATCH:
        return "arch mismatch";
    case CUBLAS_STATUS_EXECUTION_FAILED:
        return "execution failed";
    case CUBLAS_STATUS_NOT_SUPPORTED:
        return "not supported";
    default:
        return "cuBLAS error";
    }
}

/* ---------------------------------------------------------------- kernels */

/* qw_embedding_forward: out[t] = table[tokens[t]] (FP32 device copy of the table). */
__global__ void k_embedding(float *out, const uint32_t *tok, const float *table, int T, int64_t D) {
    QW_GRID_STRIDE(i, (size_t)T * D) {
        size_t t = i / (size_t)D, d = i % (size_t)D;
        out[i] = table[(size_t)tok[t] * (size_t)D + d];
    }
}

/* Causal softmax (gemm_cpu.h qw_cpu_causal_softmax) of S [rows x T], one block per row: row r
 * is query position t = r % T and keeps columns 0..t, zeros after. Float exp, double sum. */
__global__ void k_causal_softmax(float *S, int T) {
    __shared__ float shf[33];
    __shared__ double shd[33];
    int t = blockIdx.x % T;
    float *row = S + (size_t)blockIdx.x * T;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j <= t; j += blockDim.x)
        mx = fmaxf(mx, row[j]);
    mx = qw_block_max(mx, shf);
    double sum = 0.0;
    for (int j = threadIdx.x; j <= t; j += blockDim.x) {
        float e = expf(row[j] - mx);
        row[j] = e;
        sum += e;
    }
    sum = qw_block_sum(sum, shd);
    float inv = 1.0f / (float)sum;
    for (int j = threadIdx.x; j < T; j += blockDim.x)
        row[j] = j <= t ? row[j] * inv : 0.0f;
}

void qw_cuda_causal_softmax(cuda_ctx *c, float *S, size_t rows, int T) {
    k_causal_softmax<<<(unsigned)rows, 256, 0, c->stream>>>(S, T);
}

__global__ void k_to_bf16(__nv_bfloat16 *dst, const float *src, size_t n) {
    QW_GRID_STRIDE(i, n) {
        dst[i] = __float2bfloat16_rn(src[i]);
    }
}

/* qw_logsoftmax_forward: one block per row, max in float, sum of exp in double. */
__global__ void k_logsoftmax(float *lp, const float *l, int V) {
    __shared__ float shf[33];
    __shared__ double shd[33];
    const float *row = l + (size_t)blockIdx.x * V;
    float *o = lp + (size_t)blockIdx.x * V;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        mx = fmaxf(mx, row[j]);
    mx = qw_block_max(mx, shf);
    double sum = 0.0;
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        sum += exp((double)row[j] - mx);
    sum = qw_block_sum(sum, shd);
    double lse = (double)mx + log(sum);
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        o[j] = (float)((double)row[j] - lse);
}

/* ---------------------------------------------------------------- the table */

/* Plain device memory (cudaMalloc): the host reaches it only through the table's upload,
 * fetch, download and score_rows. Buffers are made once per model or job (run state, probe
 * reference, baseline rows), so cudaMalloc's device-wide synchronisation costs nothing in the
 * hot loop. A failure is noted (qw_backend_cuda_check) besides the NULL. */
static void *cu_alloc(qw_backend *b, size_t bytes) {
    cuda_ctx *c = cuda_enter(b);
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        char what[160];
        snprintf(what, sizeof what, "%zu bytes: %s", bytes, cudaGetErrorString(e));
        qw_cuda_note_error(c, "alloc", what);
        return NULL;
    }
    for (int i = 0; i < 16; i++)
        if (!c->alloc_base[i]) { /* remembered while a slot is free (ptr_kind) */
            c->alloc_base[i] = (const char *)p;
            c->alloc_bytes[i] = bytes ? bytes : 1;
            break;
        }
    return p;
}

/* cudaFree waits for the device's work on p before it frees it. */
static void cu_free(qw_backend *b, void *p) {
    if (!p) return;
    cuda_ctx *c = cuda_enter(b);
    c->n_seen = 0; /* p, or a pointer into it, may be remembered (ptr_kind) */
    for (int i = 0; i < 16; i++)
        if (c->alloc_base[i] == (const char *)p) c->alloc_base[i] = NULL;
    cudaError_t e = cudaFree(p);
    if (e != cudaSuccess) qw_cuda_note_error(c, "free", cudaGetErrorString(e));
}

static void cu_embedding(qw_backend *b, qw_tensor *x, const uint32_t *tokens,
                         const qw_weight *table) {
    cuda_ctx *c = cuda_enter(b);
    qs_error err = {};
    const cuda_weight *w;
    int T = (int)x->rows;
    if (qw_cuda_weight(c, table, 1, &w, &err) != QS_OK) {
        qw_cuda_note_error(c, "embedding", err.msg);
        return;
    }
    if (qw_cuda_scratch_reserve(&c->tokens, (size_t)T * sizeof(uint32_t), 0, &err) != QS_OK) {
        qw_cuda_note_error(c, "embedding", err.msg);
        return;
    }
    cudaError_t e = cudaMemcpyAsync(c->tokens.p, tokens, (size_t)T * sizeof(uint32_t),
                                    cudaMemcpyHostToDevice, c->stream);
    if (e != cudaSuccess) {
        qw_cuda_note_error(c, "embedding: tokens to the device", cudaGetErrorString(e));
        return;
    }
    k_embedding<<<qw_grid_of((size_t)T * table->cols, 256), 256, 0, c->stream>>>(
        x->data, (const uint32_t *)c->tokens.p, w->f32, T, table->cols);
    done(c, "embedding", x->data);
}

static void cu_attention(qw_backend *b, qw_tensor *att, const qw_tensor *q, const qw_tensor *k,
                         const qw_tensor *v, float *scores, int H, int G, int E) {
    (void)scores;
    cuda_ctx *c = cuda_enter(b);
    qs_error err = {};
    int T = (int)q->rows, group = H / G;
    /* the blocked kernel (ops_cuda_attention.cu) writes no T x T; the scores below remain for
     * heads wider than it takes */
    if (qw_cuda_flash_attention_fits(E) && H % G == 0) {
        if (qw_cuda_flash_attention(c, att->data, NULL, q->data, k->data, v->data, T, H, G, E,
                                    &err) != QS_OK)
            qw_cuda_note_error(c, "attention", err.msg);
        done(c, "attention", att->data);
        return;
    }
    if (qw_cuda_scratch_reserve(&c->scores, (size_t)H * T * T * sizeof(float), 0, &err) != QS_OK) {
        qw_cuda_note_error(c, "attention", err.msg);
        return;
    }
    float *S = (float *)c->scores.p;
    float scale = 1.0f / sqrtf((float)E), one = 1.0f, zero = 0.0f;
    long long sT = (long long)T * T;
    /* Column-major view: S_h^T [T x T] (keys x queries) = K_g Q_h^T, i.e. row-major
     * S_h [queries x keys] = Q_h K_g^T. Head h = g*group + j: for a fixed j the heads of all
     * g are one strided batch (Q stride group*E, K stride E, S stride group*T*T). */
    for (int j = 0; j < group; j++) {
        cublasStatus_t s = cublasSgemmStridedBatched(
            c->blas, CUBLAS_OP_T, CUBLAS_OP_N, T, T, E, &scale, k->data, G * E, E,
            q->data + (size_t)j * E, H * E, (long long)group * E, &zero, S + (size_t)j * sT, T,
            (long long)group * sT, G);
        if (s != CUBLAS_STATUS_SUCCESS) {
            qw_cuda_note_error(c, "attention scores", blas_text(s));
            return;
        }
    }
    qw_cuda_causal_softmax(c, S, (size_t)H * T, T);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        qw_cuda_note_error(c, "attention softmax", cudaGetErrorString(e));
        return;
    }
    /* att_h [queries x E] = P_h V_g: column-major att_h^T [E x T] = V_g^T P_h^T. */
    for (int j = 0; j < group; j++) {
        cublasStatus_t s =
            cublasSgemmStridedBatched(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, E, T, T, &one, v->data,
                                      G * E, E, S + (size_t)j * sT, T, (long long)group * sT, &zero,
                                      att->data + (size_t)j * E, H * E, (long long)group * E, G);
        if (s != CUBLAS_STATUS_SUCCESS) {
            qw_cuda_note_error(c, "attention output", blas_text(s));
            return;
        }
    }
    done(c, "attention", att->data);
}

qs_status qw_cuda_read_amax(cuda_ctx *c, const float *d, float *out, qs_error *err) {
    qs_status st =
        qw_cuda_status(c, cudaMemcpyAsync(out, d, sizeof *out, cudaMemcpyDeviceToHost, c->stream),
                       "amax read", err);
    if (st != QS_OK) return st;
    return qw_cuda_status(c, host_wait(c), "amax read", err); /* host read: the amax */
}

qs_status qw_cuda_host_fake_quant(cuda_ctx *c, const qk_format *fmt, const qk_quant_options *opt,
                                  float *x, size_t rows, size_t k, qs_error *err) {
    size_t bytes = rows * k * sizeof(float);
    qs_status st = qw_cuda_scratch_reserve(&c->hostq, bytes ? bytes : 1, 1, err);
    if (st != QS_OK) return st;
    float *h = (float *)c->hostq.p;
    if ((st = qw_cuda_status(c, cudaMemcpyAsync(h, x, bytes, cudaMemcpyDeviceToHost, c->stream),
                             "host quantizer: fetch", err)) != QS_OK ||
        (st = qw_cuda_status(c, host_wait(c), /* host read: the fetched tensor */
                             "host quantizer: fetch", err)) != QS_OK)
        return st;
    if ((st = qk_fake_quant(fmt, opt, h, rows, k, NULL, err)) != QS_OK) return st;
    if ((st = qw_cuda_status(c, cudaMemcpyAsync(x, h, bytes, cudaMemcpyHostToDevice, c->stream),
                             "host quantizer: upload", err)) != QS_OK)
        return st;
    return qw_cuda_status(c, host_wait(c), /* host read: the scratch, reused by the next call */
                          "host quantizer: upload", err);
}

/* Fake-quantizes xq [T x in] (backend memory) with act: on the device (qk_cuda_fake_quant has
 * every format), through the CPU quantizer (qw_cuda_host_fake_quant) for what it refuses (the
 * options reference_only and tiny_amax exact). */
qs_status qw_cuda_act_quant(cuda_ctx *c, const qw_act_quant *act, float *xq, size_t T, size_t in,
                            qs_error *err) {
    qs_error e2 = {};
    qk_quant_options opt = act->opt;
    qs_status st;
    if (act->tensor_amax) { /* the group's amax (tensor parallel), in device memory */
        if ((st = qw_cuda_read_amax(c, act->tensor_amax, &opt.tensor_amax, err)) != QS_OK)
            return st;
        opt.tensor_amax_given = 1;
    }
    st = qk_cuda_fake_quant(act->fmt, &opt, xq, T, in, c->stream, &e2);
    if (st != QS_EUNSUPPORTED) {
        if (st != QS_OK) return qs_error_set(err, st, "%s", e2.msg);
        return QS_OK;
    }
    return qw_cuda_host_fake_quant(c, act->fmt, &opt, xq, T, in, err);
}

static qs_status cu_linear(qw_backend *b, qw_tensor *y, const qw_tensor *x, const qw_weight *w,
                           const qw_act_quant *act, float *xq, qs_error *err) {
    cuda_ctx *c = cuda_enter(b);
    int T = (int)x->rows, in = (int)w->cols, out = (int)w->rows;
    const float *xin = x->data;
    qs_status st;
    /* A host buffer is refused, not written by the GPU: every buffer of the forward pass,
     * the SQNR probe's reference output included (model_internal.h), is the backend's. */
    if (!device_visible(c, y->data) || !device_visible(c, x->data) ||
        (act && act->fmt && !device_visible(c, xq)))
        return qs_error_set(err, QS_EINVAL,
                            "cuda backend: linear [%d x %d] -> %d: a buffer is host memory, not "
                            "the backend's",
                            T, in, out);
    if (c->gemm == QW_CUDA_GEMM_LT || c->gemm == QW_CUDA_GEMM_EMULATED)
        return qw_cuda_lt_linear(c, y->data, x->data, T, w, act, xq, err);
    if (act && act->fmt) {
        if ((st = qw_cuda_status(c,
                                 cudaMemcpyAsync(xq, x->data, (size_t)T * in * sizeof(float),
                                                 cudaMemcpyDeviceToDevice, c->stream),
                                 "linear", err)) != QS_OK)
            return st;
        if ((st = qw_cuda_act_quant(c, act, xq, (size_t)T, (size_t)in, err)) != QS_OK) return st;
        xin = xq;
    }
    const cuda_weight *dw;
    if ((st = qw_cuda_weight(c, w, 0, &dw, err)) != QS_OK) return st;
    float one = 1.0f, zero = 0.0f;
    cublasStatus_t s;
    if (c->gemm == QW_CUDA_GEMM_FP32) {
        s = cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, out, T, in, &one, dw->f32, in, xin, in,
                        &zero, y->data, out);
    } else {
        size_t n = (size_t)T * in;
        if ((st = qw_cuda_scratch_reserve(&c->act16, n * sizeof(__nv_bfloat16), 0, err)) != QS_OK)
            return st;
        __nv_bfloat16 *x16 = (__nv_bfloat16 *)c->act16.p;
        k_to_bf16<<<qw_grid_of(n, 256), 256, 0, c->stream>>>(x16, xin, n);
        if ((st = qw_cuda_status(c, cudaGetLastError(), "linear: activation to bf16", err)) !=
            QS_OK)
            return st;
        s = cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, out, T, in, &one, dw->bf16, CUDA_R_16BF,
                         in, x16, CUDA_R_16BF, in, &zero, y->data, CUDA_R_32F, out,
                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    }
    if (s != CUBLAS_STATUS_SUCCESS) {
        qw_cuda_note_error(c, "linear", blas_text(s));
        return qs_error_set(err, QS_EIO, "cuda backend: linear [%d x %d] x [%d x %d]^T: %s", T, in,
                            out, in, blas_text(s));
    }
    if (done(c, "linear", y->data) != 0) return qs_error_set(err, QS_EIO, "%s", c->last_error);
    return QS_OK;
}

static void cu_logsoftmax(qw_backend *b, qw_tensor *lp, const qw_tensor *logits) {
    cuda_ctx *c = cuda_enter(b);
    k_logsoftmax<<<(unsigned)logits->rows, 256, 0, c->stream>>>(lp->data, logits->data,
                                                                (int)logits->cols);
    done(c, "logsoftmax", lp->data);
}

static void cu_sqnr_sums(qw_backend *b, const qw_tensor *y, const qw_tensor *ref, double *signal,
                         double *noise) {
    cuda_ctx *c = cuda_enter(b);
    qs_error err = {};
    if (qw_cuda_sqnr(c, y->data, ref->data, (size_t)y->rows * (size_t)y->cols, signal, noise,
                     &err) != QS_OK) {
        *signal = *noise = NAN;
        qw_cuda_note_error(c, "sqnr", err.msg);
    }
}

/* qw_amax_forward: max |x| over finite elements (NaN, +-Inf ignored); order-free, so exact. One
 * block of 1024 threads. */
__global__ void k_amax(const float *x, size_t n, float *out) {
    __shared__ float sh[1024];
    float m = 0.0f;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
        float a = fabsf(x[i]);
        if (isfinite(a) && a > m) m = a;
    }
    sh[threadIdx.x] = m;
    __syncthreads();
    for (int s = 512; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = sh[0];
}

static void cu_amax(qw_backend *b, const qw_tensor *x, float *out) {
    cuda_ctx *c = cuda_enter(b);
    k_amax<<<1, 1024, 0, c->stream>>>(x->data, (size_t)x->rows * (size_t)x->cols, out);
    done(c, "amax", out);
}

static void cu_download(qw_backend *b, float *dst, size_t ld, const qw_tensor *src) {
    cuda_ctx *c = cuda_enter(b);
    cudaError_t e = cudaMemcpy2DAsync(
        dst, ld * sizeof(float), src->data, (size_t)src->cols * sizeof(float),
        (size_t)src->cols * sizeof(float), (size_t)src->rows, cudaMemcpyDefault, c->stream);
    if (e != cudaSuccess) {
        qw_cuda_note_error(c, "download", cudaGetErrorString(e));
        return;
    }
    finish(c, "download");
}

/* The table's score_rows: first the noted error of a void op of the forward pass before it
 * (ops.h), then the device reduction (ops_cuda_reduce.cu). */
static qs_status cu_score_rows(qw_backend *b, const qw_tensor *logits, const uint32_t *targets,
                               const float *ref_lp, double *nll, double *kl, int32_t *argmax,
                               int32_t *ref_argmax, qs_error *err) {
    qs_status st = qw_backend_cuda_check(b, err);
    if (st != QS_OK) return st;
    return qw_cuda_score_rows(b, logits, targets, ref_lp, nll, kl, argmax, ref_argmax, err);
}

static const qw_ops cuda_ops = {
    .name = "cuda",
    .alloc = cu_alloc,
    .free = cu_free,
    .embedding = cu_embedding,
    .rmsnorm = qw_cuda_rmsnorm_forward,
    .rope = qw_cuda_rope_forward,
    .attention = cu_attention,
    .swiglu = qw_cuda_swiglu_forward,
    .add = qw_cuda_train_add,
    .linear = cu_linear,
    .lm_head = cu_linear,
    .logsoftmax = cu_logsoftmax,
    .sqnr_sums = cu_sqnr_sums,
    .amax = cu_amax,
    .download = cu_download,
    .score_rows = cu_score_rows,
    /* training (ops_cuda_train.h) */
    .upload = qw_cuda_train_copy,
    .fetch = qw_cuda_train_copy,
    .copy = qw_cuda_train_copy,
    .zero = qw_cuda_train_zero,
    .gemm_abt = qw_cuda_train_gemm_abt,
    .gemm_abt_bf16 = qw_cuda_train_gemm_abt_bf16,
    .transpose = qw_cuda_train_transpose,
    .round_bf16 = qw_cuda_train_round_bf16,
    .rht = qw_cuda_train_rht,
    .fake_quant = qw_cuda_train_fake_quant,
    .gemm_abt_quant = qw_cuda_train_gemm_abt_quant,
    .quant_operand_bytes = qw_cuda_train_quant_operand_bytes,
    .quant_operand = qw_cuda_train_quant_operand,
    .gemm_abt_quant_kept = qw_cuda_train_gemm_abt_quant_kept,
    .embedding_fwd = qw_cuda_train_embedding_forward,
    .embedding_bwd = qw_cuda_train_embedding_backward,
    .rmsnorm_bwd = qw_cuda_train_rmsnorm_backward,
    .rope_bwd = qw_cuda_train_rope_backward,
    .attention_fwd = qw_cuda_train_attention_forward,
    .attention_bwd = qw_cuda_train_attention_backward,
    .swiglu_bwd = qw_cuda_train_swiglu_backward,
    .crossentropy_fwd = qw_cuda_train_crossentropy_forward,
    .crossentropy_bwd = qw_cuda_train_crossentropy_backward,
    .linear_bwd = qw_cuda_train_linear_backward,
    .sumsq = qw_cuda_train_sumsq,
    .adamw = qw_cuda_train_adamw,
    .gemm_tt = NULL, /* optional (ops.h): the trainer copies, transposes and calls gemm_abt */
    .round_bf16_copy = NULL,
    .rht_from = NULL, /* optional: the trainer transposes, then calls rht */
    .fake_quant_into = NULL, /* optional: the trainer copies, then calls fake_quant */
    .method_input = qw_cuda_method_input,
};

/* ---------------------------------------------------------------- set-up */

extern "C" const qw_ops *qw_ops_cuda(void) {
    return &cuda_ops;
}

extern "C" int qw_cuda_available(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

extern "C" qs_status qw_backend_cuda_init(qw_backend *b, int device, qw_cuda_gemm gemm,
                                          qs_error *err) {
    memset(b, 0, sizeof *b);
    if (gemm != QW_CUDA_GEMM_FP32 && gemm != QW_CUDA_GEMM_BF16 && gemm != QW_CUDA_GEMM_LT &&
        gemm != QW_CUDA_GEMM_EMULATED)
        return qs_error_set(err, QS_EINVAL, "backend cuda: gemm path %d", (int)gemm);
    int n = qw_cuda_available();
    if (n == 0) return qs_error_set(err, QS_EUNSUPPORTED, "backend cuda: no CUDA device");
    if (device < 0 || device >= n)
        return qs_error_set(err, QS_EINVAL, "backend cuda: device %d, %d visible", device, n);
    cuda_ctx *c = (cuda_ctx *)calloc(1, sizeof *c);
    if (!c) return qs_error_set(err, QS_ENOMEM, "backend cuda: context");
    c->device = device;
    c->gemm = gemm;
    b->impl = c;
    b->ops = &cuda_ops;
    b->threads = 1;
    qs_status st = qw_cuda_status(c, cudaSetDevice(device), "set device", err);
    if (st == QS_OK)
        st = qw_cuda_status(c, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking),
                            "stream", err);
    if (st == QS_OK) {
        cublasStatus_t s = cublasCreate(&c->blas);
        if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetStream(c->blas, c->stream);
        /* Pedantic: no TF32 in the FP32 path, whatever NVIDIA_TF32_OVERRIDE says. */
        if (s == CUBLAS_STATUS_SUCCESS)
            s = cublasSetMathMode(c->blas, gemm == QW_CUDA_GEMM_FP32 ? CUBLAS_PEDANTIC_MATH
                                                                     : CUBLAS_DEFAULT_MATH);
        if (s != CUBLAS_STATUS_SUCCESS)
            st = qs_error_set(err, QS_EIO, "backend cuda: cuBLAS: %s", blas_text(s));
    }
    if (st == QS_OK && (gemm == QW_CUDA_GEMM_LT || gemm == QW_CUDA_GEMM_EMULATED))
        st = qw_cuda_lt_init(c, err);
    if (st != QS_OK) qw_backend_cuda_release(b);
    return st;
}

extern "C" void qw_backend_cuda_release(qw_backend *b) {
    if (!b) return;
    cuda_ctx *c = b->impl ? cuda_enter(b) : NULL;
    if (c) {
        if (c->stream) (void)host_wait(c); /* host read: every buffer is freed below */
        qw_cuda_weights_release(c);
        qw_cuda_lt_release(c);
        cudaFree(c->scores.p);
        cudaFree(c->act16.p);
        cudaFree(c->tokens.p);
        cudaFree(c->rowbuf.p);
        cudaFree(c->partial.p);
        free(c->wtmp.p);
        free(c->hostq.p);
        if (c->blas) cublasDestroy(c->blas);
        if (c->stream) cudaStreamDestroy(c->stream);
        free(c);
    }
    memset(b, 0, sizeof *b);
}

extern "C" const char *qw_backend_gemm_path(const qw_backend *b) {
    const cuda_ctx *c = b && b->ops == &cuda_ops ? cuda_ctx_of(b) : NULL;
    if (!c) return "cpu";
    if (c->gemm == QW_CUDA_GEMM_LT || c->gemm == QW_CUDA_GEMM_EMULATED) return qw_cuda_lt_path(c);
    return c->gemm == QW_CUDA_GEMM_BF16 ? "bf16" : "fp32";
}

extern "C" int qw_gemm_path_rank(const char *name) {
    static const char *const order[] = {"bf16",          "fp16",      "fp32", "fp8",
                                        "emulated_bf16", "native_fp4"};
    for (int i = 0; name && i < (int)(sizeof order / sizeof *order); i++)
        if (strcmp(name, order[i]) == 0) return i + 1;
    return 0;
}

extern "C" void qw_backend_cuda_gemm_path_reset(qw_backend *b) {
    cuda_ctx *c = b && b->ops == &cuda_ops ? cuda_ctx_of(b) : NULL;
    if (c && (c->gemm == QW_CUDA_GEMM_LT || c->gemm == QW_CUDA_GEMM_EMULATED))
        qw_cuda_lt_path_reset(c);
}

extern "C" int qw_backend_cuda_gemm_fallback(const qw_backend *b, char *status, size_t status_cap,
                                             char *why, size_t why_cap) {
    const cuda_ctx *c = b && b->ops == &cuda_ops ? cuda_ctx_of(b) : NULL;
    if (status_cap) status[0] = 0;
    if (why_cap) why[0] = 0;
    if (!c || !(c->gemm == QW_CUDA_GEMM_LT || c->gemm == QW_CUDA_GEMM_EMULATED)) return 0;
    return qw_cuda_lt_fallback(c, status, status_cap, why, why_cap);
}

extern "C" void qw_backend_cuda_cache_stats(const qw_backend *b, qw_cuda_cache_stats *out) {
    memset(out, 0, sizeof *out);
    const cuda_ctx *c = b && b->ops == &cuda_ops ? cuda_ctx_of(b) : NULL;
    if (c) *out = c->stats;
}

extern "C" void qw_backend_cuda_forget_weights(qw_backend *b) {
    cuda_ctx *c = b && b->ops == &cuda_ops ? cuda_enter(b) : NULL;
    if (!c) return;
    (void)host_wait(c); /* host read: the cached weights are freed below */
    qw_cuda_weights_release(c);
    qw_cuda_lt_forget(c);
}

extern "C" qs_status qw_backend_cuda_check(qw_backend *b, qs_error *err) {
    cuda_ctx *c = b && b->ops == &cuda_ops ? cuda_enter(b) : NULL;
    if (!c) return QS_OK;
    /* the queued ops' execution errors surface when they are waited for */
    if (!c->last_error[0]) finish(c, "queued ops");
    if (!c->last_error[0]) return QS_OK;
    qs_status st = qs_error_set(err, QS_EIO, "%s", c->last_error);
    c->last_error[0] = '\0';
    return st;
}
