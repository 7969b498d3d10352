/* The CUDA backend's device weight cache (ops_cuda.h, "Weights"): device copies of masters,
 * packed weights and host FP32 vectors, made on first use and kept with the backend. */
#include "ops_cuda_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "weights.h"
}

void qw_cuda_note_error(cuda_ctx *c, const char *where, const char *what) {
    if (c->last_error[0]) return;
    snprintf(c->last_error, sizeof c->last_error, "cuda backend: %s: %s", where, what);
}

qs_status qw_cuda_status(cuda_ctx *c, cudaError_t e, const char *where, qs_error *err) {
    if (e == cudaSuccess) return QS_OK;
    qw_cuda_note_error(c, where, cudaGetErrorString(e));
    return qs_error_set(err, QS_EIO, "cuda backend: %s: %s", where, cudaGetErrorString(e));
}

qs_status qw_cuda_scratch_reserve(cuda_scratch *s, size_t bytes, int host, qs_error *err) {
    if (s->bytes >= bytes) return QS_OK;
    if (host)
        free(s->p);
    else
        cudaFree(s->p);
    s->p = NULL;
    s->bytes = 0;
    void *p = NULL;
    if (host)
        p = malloc(bytes);
    else if (cudaMalloc(&p, bytes) != cudaSuccess)
        p = NULL;
    if (!p) return qs_error_set(err, QS_ENOMEM, "cuda backend: scratch of %zu bytes", bytes);
    s->p = p;
    s->bytes = bytes;
    return QS_OK;
}

/* The one place this file waits for the stream: the host is about to reuse or free memory that
 * a queued copy reads. Each call names it in a comment; ctest engine_cuda_weights_syncs counts
 * them. */
static cudaError_t host_wait(cuda_ctx *c) {
    return cudaStreamSynchronize(c->stream);
}

static const void *master_key(const qw_weight *w) {
    return w->form == QW_WEIGHT_F32 ? (const void *)w->f32 : (const void *)w->view.data;
}

static void entry_free(cuda_weight *e) {
    cudaFree(e->f32);
    cudaFree(e->bf16);
    cudaFree(e->f16);
    e->f32 = NULL;
    e->bf16 = NULL;
    e->f16 = NULL;
    e->bytes = 0;
}

__global__ void k_f32_to_bf16(__nv_bfloat16 *dst, const float *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16_rn(src[i]);
}

/* FP16 masters' values are exact in FP16: the rounding changes none of them. */
__global__ void k_f32_to_f16(__half *dst, const float *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2half_rn(src[i]);
}

/* The copies an entry holds: FP32, BF16, FP16. */
enum { HOLD_F32 = 1, HOLD_BF16 = 2, HOLD_F16 = 4 };

/* The checkpoint dtype of w's values: the stored dtype, F32 for FP32 in place and for a packed
 * weight's decoded values. */
static qw_dtype master_dtype(const qw_weight *w) {
    return w->form == QW_WEIGHT_STORED ? w->view.dtype : QW_DT_F32;
}

/* The copies w needs under the context's gemm: FP32 and/or BF16 for the fixed paths, one copy
 * on the auto path (FP32 when want_f32, else the master's GEMM type; 0 for an FP32-valued
 * master whose type waits for its values: upload decides). */
static int hold_wanted(const cuda_ctx *c, const qw_weight *w, int want_f32) {
    if (c->gemm == QW_CUDA_GEMM_FP32) return HOLD_F32;
    if (c->gemm == QW_CUDA_GEMM_BF16) return HOLD_BF16 | (want_f32 ? HOLD_F32 : 0);
    if (want_f32) return HOLD_F32;
    qw_dtype dt = master_dtype(w);
    if (dt == QW_DT_BF16) return HOLD_BF16;
    if (dt == QW_DT_F16) return HOLD_F16;
    return 0;
}

static int holds(const cuda_weight *e, int hold) {
    if (hold == 0) return e->f32 || e->bf16 || e->f16; /* an FP32-valued master, decided */
    return (!(hold & HOLD_F32) || e->f32) && (!(hold & HOLD_BF16) || e->bf16) &&
           (!(hold & HOLD_F16) || e->f16);
}

/* Uploads w's FP32 rows into e as the copies `hold` names, in pieces of at most 64 MiB of host
 * scratch; hold 0 (an FP32-valued master on the auto path) uploads FP32, then keeps BF16 (or
 * FP16) alone when every value is exact in it (master_gemm.h). */
static qs_status upload(cuda_ctx *c, cuda_weight *e, const qw_weight *w, int hold, qs_error *err) {
    size_t n = (size_t)w->rows * (size_t)w->cols;
    int decide = hold == 0;
    if (decide) hold = HOLD_F32;
    entry_free(e);
    qs_status st = QS_OK;
    if ((hold & HOLD_F32) &&
        (st = qw_cuda_status(c, cudaMalloc(&e->f32, n * sizeof(float)), "weight", err)) != QS_OK)
        return st;
    if ((hold & HOLD_BF16) &&
        (st = qw_cuda_status(c, cudaMalloc(&e->bf16, n * sizeof(__nv_bfloat16)), "weight", err)) !=
            QS_OK) {
        entry_free(e);
        return st;
    }
    if ((hold & HOLD_F16) &&
        (st = qw_cuda_status(c, cudaMalloc(&e->f16, n * sizeof(__half)), "weight", err)) != QS_OK) {
        entry_free(e);
        return st;
    }
    /* A device FP32 staging piece when no FP32 copy is kept. */
    size_t piece_rows = (size_t)(64u << 20) / ((size_t)w->cols * sizeof(float));
    if (piece_rows < 1) piece_rows = 1;
    if (piece_rows > (size_t)w->rows) piece_rows = (size_t)w->rows;
    size_t piece = piece_rows * (size_t)w->cols;
    float *stage = NULL;
    if ((st = qw_cuda_scratch_reserve(&c->wtmp, piece * sizeof(float), 1, err)) != QS_OK) {
        entry_free(e);
        return st;
    }
    if (!e->f32 && (st = qw_cuda_status(c, cudaMalloc(&stage, piece * sizeof(float)),
                                        "weight staging", err)) != QS_OK) {
        entry_free(e);
        return st;
    }
    float *host = (float *)c->wtmp.p;
    int exact = 1, exact_f16 = 1;
    for (int64_t r0 = 0; r0 < w->rows && st == QS_OK; r0 += (int64_t)piece_rows) {
        int64_t nr = w->rows - r0 < (int64_t)piece_rows ? w->rows - r0 : (int64_t)piece_rows;
        size_t cnt = (size_t)nr * (size_t)w->cols, off = (size_t)r0 * (size_t)w->cols;
        st = qw_weight_rows_f32(w, r0, nr, host, err);
        if (st != QS_OK) break;
        for (size_t i = 0; i < cnt && exact; i++)
            exact = qw_f32_exact_bf16(host[i]);
        for (size_t i = 0; i < cnt && exact_f16 && decide; i++)
            exact_f16 = qw_f32_exact_f16(host[i]);
        float *dst = e->f32 ? e->f32 + off : stage;
        st = qw_cuda_status(
            c, cudaMemcpyAsync(dst, host, cnt * sizeof(float), cudaMemcpyHostToDevice, c->stream),
            "weight upload", err);
        if (st == QS_OK && e->bf16) {
            k_f32_to_bf16<<<1024, 256, 0, c->stream>>>(e->bf16 + off, dst, cnt);
            st = qw_cuda_status(c, cudaGetLastError(), "weight to bf16", err);
        }
        if (st == QS_OK && e->f16) {
            k_f32_to_f16<<<1024, 256, 0, c->stream>>>(e->f16 + off, dst, cnt);
            st = qw_cuda_status(c, cudaGetLastError(), "weight to fp16", err);
        }
        if (st == QS_OK)
            st = qw_cuda_status(c, host_wait(c), /* host read: the piece, reused next round */
                                "weight upload", err);
    }
    cudaFree(stage);
    e->gemm = qw_master_gemm_of(master_dtype(w), exact, exact_f16);
    if (st == QS_OK && decide && e->gemm.weight != QW_ELEM_F32) {
        /* FP32 values all exact in BF16 (or FP16): that copy alone, the FP32 one freed (one
           weight's FP32 for a moment) */
        int to_f16 = e->gemm.weight == QW_ELEM_F16;
        st = to_f16 ? qw_cuda_status(c, cudaMalloc(&e->f16, n * sizeof(__half)), "weight", err)
                    : qw_cuda_status(c, cudaMalloc(&e->bf16, n * sizeof(__nv_bfloat16)), "weight",
                                     err);
        if (st == QS_OK) {
            if (to_f16)
                k_f32_to_f16<<<1024, 256, 0, c->stream>>>(e->f16, e->f32, n);
            else
                k_f32_to_bf16<<<1024, 256, 0, c->stream>>>(e->bf16, e->f32, n);
            st = qw_cuda_status(c, cudaGetLastError(), "weight to 16 bits", err);
        }
        if (st == QS_OK)
            st = qw_cuda_status(c, host_wait(c), /* host read: the FP32 copy, freed below */
                                "weight to 16 bits", err);
        if (st == QS_OK) {
            cudaFree(e->f32);
            e->f32 = NULL;
        }
    }
    if (st != QS_OK) {
        entry_free(e);
        return st;
    }
    e->rows = w->rows;
    e->cols = w->cols;
    e->bf16_exact = exact;
    e->bytes = (e->f32 ? n * sizeof(float) : 0) + (e->bf16 ? n * sizeof(__nv_bfloat16) : 0) +
               (e->f16 ? n * sizeof(__half) : 0);
    c->stats.uploads++;
    return QS_OK;
}

static cuda_weight *find(cuda_ctx *c, int kind, const void *key) {
    for (size_t i = 0; i < c->n_w; i++)
        if (c->w[i].kind == kind && c->w[i].key == key) return &c->w[i];
    return NULL;
}

static cuda_weight *add(cuda_ctx *c, int kind, const void *key) {
    if (c->n_w == c->cap_w) {
        size_t cap = c->cap_w ? c->cap_w * 2 : 64;
        cuda_weight *w = (cuda_weight *)realloc(c->w, cap * sizeof *w);
        if (!w) return NULL;
        c->w = w;
        c->cap_w = cap;
    }
    cuda_weight *e = &c->w[c->n_w++];
    memset(e, 0, sizeof *e);
    e->kind = kind;
    e->key = key;
    return e;
}

static size_t cache_bytes(const cuda_ctx *c) {
    size_t b = 0;
    for (size_t i = 0; i < c->n_w; i++)
        b += c->w[i].bytes;
    return b;
}

qs_status qw_cuda_weight(cuda_ctx *c, const qw_weight *w, int want_f32, const cuda_weight **out,
                         qs_error *err) {
    int kind = w->form == QW_WEIGHT_PACKED ? 1 : 0;
    const void *key = kind ? (const void *)w->packed : master_key(w);
    uint64_t version = kind ? w->packed->version : w->version;
    cuda_weight *e = find(c, kind, key);
    int hold = hold_wanted(c, w, want_f32);
    /* on the auto path an FP32 copy serves every use: a tied lm_head reads its embedding's */
    int auto_path = c->gemm == QW_CUDA_GEMM_LT || c->gemm == QW_CUDA_GEMM_EMULATED;
    if (e && e->rows == w->rows && e->cols == w->cols && e->version == version &&
        (holds(e, hold) || (auto_path && e->f32))) {
        c->stats.hits++;
        *out = e;
        return QS_OK;
    }
    if (!e && !(e = add(c, kind, key)))
        return qs_error_set(err, QS_ENOMEM, "cuda backend: weight cache entry");
    qs_status st = upload(c, e, w, hold, err);
    if (st != QS_OK) {
        /* A failed slot stays empty (rows 0): the next use tries again. */
        e->rows = e->cols = 0;
        c->stats.bytes = cache_bytes(c);
        return st;
    }
    e->version = version;
    c->stats.bytes = cache_bytes(c);
    *out = e;
    return QS_OK;
}

const float *qw_cuda_vector(cuda_ctx *c, const float *p, size_t n) {
    /* a vector uploaded before is a host pointer: its copy is found without asking the driver;
       any other pointer's kind is asked once (ops_cuda.cu ptr_kind) */
    cuda_weight *e = find(c, 2, p);
    if (e && e->rows == (int64_t)n) {
        c->stats.hits++;
        return e->f32;
    }
    if (p && (!qw_cuda_host_reads(c, p) || qw_cuda_managed(c, p))) return p;
    if (!e && !(e = add(c, 2, p))) {
        qw_cuda_note_error(c, "vector", "out of host memory");
        return NULL;
    }
    entry_free(e);
    e->rows = e->cols = 0;
    qs_error err = {};
    if (qw_cuda_status(c, cudaMalloc(&e->f32, n * sizeof(float)), "vector", &err) != QS_OK)
        return NULL;
    /* on the backend's stream, ahead of the op that reads it: the backend's non-blocking stream
       does not wait for a cudaMemcpy's DMA on the legacy stream; p lives as long as the model */
    if (qw_cuda_status(
            c, cudaMemcpyAsync(e->f32, p, n * sizeof(float), cudaMemcpyHostToDevice, c->stream),
            "vector upload", &err) != QS_OK) {
        entry_free(e);
        return NULL;
    }
    e->rows = (int64_t)n;
    e->cols = 1;
    e->bytes = n * sizeof(float);
    c->stats.uploads++;
    c->stats.bytes = cache_bytes(c);
    return e->f32;
}

void qw_cuda_weights_release(cuda_ctx *c) {
    for (size_t i = 0; i < c->n_w; i++)
        entry_free(&c->w[i]);
    free(c->w);
    c->w = NULL;
    c->n_w = c->cap_w = 0;
    c->stats.bytes = 0;
}
