/* Private to the CUDA backend (ops_cuda*.cu): its context, the device weight cache and the
 * helpers the three files share. CUDA C++ only. */
#ifndef QW_OPS_CUDA_IMPL_H
#define QW_OPS_CUDA_IMPL_H

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stddef.h>
#include <stdint.h>

extern "C" {
#include "master_gemm.h"
#include "ops_cuda.h"
}

/* One cached device copy. kind: 0 master (key = host data pointer), 1 packed (key = the
 * qk_packed address, current while its version is the one uploaded: quant.h), 2 FP32 vector
 * (key = host pointer). */
typedef struct cuda_weight {
    int kind;
    const void *key;
    int64_t rows, cols;
    uint64_t version;    /* packed only: the qk_packed version uploaded */
    float *f32;          /* [rows x cols] device, gemm fp32 (and vectors, embeddings) */
    __nv_bfloat16 *bf16; /* [rows x cols] device, gemm bf16 */
    __half *f16;         /* [rows x cols] device, the auto path's FP16 masters */
    size_t bytes;
    int bf16_exact;      /* every value is exact in BF16 (its low 16 bits zero) */
    qw_master_gemm gemm; /* the auto path's GEMM of this master (master_gemm.h), set on upload */
} cuda_weight;

/* A device buffer that grows to the largest size asked for, never shrinks. */
typedef struct cuda_scratch {
    void *p;
    size_t bytes;
} cuda_scratch;

typedef struct cuda_ctx {
    int device;
    qw_cuda_gemm gemm;
    cudaStream_t stream;
    cublasHandle_t blas;
    cuda_weight *w; /* [n_w] */
    size_t n_w, cap_w;
    qw_cuda_cache_stats stats;
    cuda_scratch scores;  /* attention scores [H x T x T] */
    cuda_scratch act16;   /* BF16 activations of a linear [T x in] */
    cuda_scratch tokens;  /* uint32 tokens [T] */
    cuda_scratch wtmp;    /* host FP32 rows of a weight being uploaded */
    cuda_scratch rowbuf;  /* per-row results of the reductions */
    cuda_scratch partial; /* per-block partial sums (double) */
    cuda_scratch hostq;   /* host FP32 copy of a tensor the CPU quantizer fake-quantizes */
    char last_error[256]; /* first error of a void op since the last check */
    void *lt;             /* QW_CUDA_GEMM_LT: the qk_gemm handle and FP4 weights (ops_cuda_lt.cu) */
    /* buffers whose memory kind was asked (cudaPointerGetAttributes once per buffer, not per
     * call; the forward's buffers are the same every call), a ring of the last ones with their
     * kinds (ops_cuda.cu ptr_kind) */
    const void *seen[32];
    unsigned char seen_kind[32];
    int n_seen;
    /* the backend's own allocations (the table's alloc: device memory by construction), so
     * ptr_kind answers for a pointer into one without asking the driver: a training run
     * state is one allocation whose many tensors would overrun the ring above */
    const char *alloc_base[16];
    size_t alloc_bytes[16];
} cuda_ctx;

static inline cuda_ctx *cuda_ctx_of(const qw_backend *b) {
    return (cuda_ctx *)b->impl;
}

/* Records the first error of a void op (kept until qw_backend_cuda_check). */
void qw_cuda_note_error(cuda_ctx *c, const char *where, const char *what);

/* The context of b with its device made current in the calling thread: every entry point of
 * the table starts here, since jobs run in threads of their own and a cached model keeps its
 * backend (cudaSetDevice is per host thread; it costs next to nothing when the device is
 * current already). A failure is noted in the context (qw_backend_cuda_check). */
static inline cuda_ctx *cuda_enter(const qw_backend *b) {
    cuda_ctx *c = (cuda_ctx *)b->impl;
    int cur = -1;
    if (cudaGetDevice(&cur) != cudaSuccess || cur != c->device) {
        cudaError_t e = cudaSetDevice(c->device);
        if (e != cudaSuccess) qw_cuda_note_error(c, "set device", cudaGetErrorString(e));
    }
    return c;
}

/* Causal GQA attention without the T x T scores (ops_cuda_attention.cu): out [T x H*E] from q
 * [T x H*E], k, v [T x G*E] (device), head h on kv head h / (H/G), scale 1/sqrt(E); lse [H x T]
 * (NULL: not kept) the rows' logsumexp for a backward. Queued on c's stream. Errors: QS_EINVAL
 * (H not a multiple of G, E outside qw_cuda_flash_attention_fits), QS_EIO (launch). */
qs_status qw_cuda_flash_attention(cuda_ctx *c, float *out, float *lse, const float *q,
                                  const float *k, const float *v, int T, int H, int G, int E,
                                  qs_error *err);
/* 1 when qw_cuda_flash_attention takes head_dim E (1..128). */
int qw_cuda_flash_attention_fits(int E);
/* The backward of qw_cuda_flash_attention from its lse [H x T] (ops_cuda_train_attention.cu):
 * dq [T x H*E], dk, dv [T x G*E] overwritten, D [H x T] (scratch: each row's sum of p dp), every
 * probability recomputed, no T x T. Queued on c's stream. Errors: QS_EINVAL (H not a multiple
 * of G, E outside 1..128), QS_EIO (launch). */
qs_status qw_cuda_flash_attention_backward(cuda_ctx *c, float *dq, float *dk, float *dv, float *D,
                                           const float *dout, const float *q, const float *k,
                                           const float *v, const float *lse, int T, int H, int G,
                                           int E, qs_error *err);

/* 1 when the host may read p directly (managed or host memory: a test's buffer, a fetch's
 * destination), so an op writing p waits for its stream; 0 for device memory, which the host
 * reaches only through the table. The kind is asked once per buffer (ops_cuda.cu ptr_kind). */
int qw_cuda_host_reads(cuda_ctx *c, const void *p);
/* 1 when p is managed memory (the host may write it once a call returns). */
int qw_cuda_managed(cuda_ctx *c, const void *p);

/* QS_OK, or QS_EIO naming `where` and the CUDA error text (also noted in c). */
qs_status qw_cuda_status(cuda_ctx *c, cudaError_t e, const char *where, qs_error *err);

/* Ensures s holds at least `bytes` of device memory. Errors: QS_ENOMEM. */
qs_status qw_cuda_scratch_reserve(cuda_scratch *s, size_t bytes, int host, qs_error *err);

/* The device copy of w (uploaded now if absent or changed): FP32 or BF16 per the context's
 * gemm (both when want_f32: the embedding reads FP32 rows); on the auto path (LT, EMULATED)
 * one copy, FP32 when want_f32 asks for it (a tied embedding: its lm_head GEMM then reads the
 * FP32 copy), else the master's own GEMM type (master_gemm.h: BF16, F16 or FP32), in
 * (*out)->gemm. Errors: QS_ENOMEM, QS_EIO, those of qw_weight_rows_f32. */
qs_status qw_cuda_weight(cuda_ctx *c, const qw_weight *w, int want_f32, const cuda_weight **out,
                         qs_error *err);

/* A device view of n FP32 host values at p: p itself when it is device or managed memory, else
 * a cached upload keyed by p (for host vectors that do not change: norm weights, RoPE tables).
 * NULL on error (noted in c). */
const float *qw_cuda_vector(cuda_ctx *c, const float *p, size_t n);

/* Causal softmax in place of rows [rows x T] of scores (row % T = query position; zeros above
 * the diagonal), enqueued on c's stream: the one kernel of evaluation's and training's
 * attention. */
void qw_cuda_causal_softmax(cuda_ctx *c, float *S, size_t rows, int T);

/* *out (host) = the one float at d (device memory: a tensor-parallel group's all-reduced
 * amax), read once the stream's work before it is done. Errors: QS_EIO. */
qs_status qw_cuda_read_amax(cuda_ctx *c, const float *d, float *out, qs_error *err);

/* The CPU quantizer (qk_fake_quant) over x [rows x k] (device memory) in place: x fetched into
 * the host scratch c->hostq, quantized there, uploaded back, all on the stream and waited for;
 * for the options the device quantizer refuses (reference_only, tiny_amax exact), with the
 * same bits. Errors: QS_ENOMEM, QS_EIO, qk_fake_quant's. */
qs_status qw_cuda_host_fake_quant(cuda_ctx *c, const qk_format *fmt, const qk_quant_options *opt,
                                  float *x, size_t rows, size_t k, qs_error *err);

/* Fake-quantizes xq [T x in] (backend memory) in place with act: on the device where
 * qk_cuda_fake_quant has the format, through qw_cuda_host_fake_quant otherwise. */
qs_status qw_cuda_act_quant(cuda_ctx *c, const qw_act_quant *act, float *xq, size_t T, size_t in,
                            qs_error *err);

/* The QW_CUDA_GEMM_LT path (ops_cuda_lt.cu): set-up (QS_EUNSUPPORTED when built without
 * kernels/cuda/qk_gemm.h), release, forgetting the FP4 weights, the most specific path run so
 * far ("native_fp4", "emulated_bf16", "bf16") and its reset (none run yet), and the linear
 * y[T x out] = q(x) W^T. */
qs_status qw_cuda_lt_init(cuda_ctx *c, qs_error *err);
void qw_cuda_lt_release(cuda_ctx *c);
void qw_cuda_lt_forget(cuda_ctx *c);
const char *qw_cuda_lt_path(const cuda_ctx *c);
void qw_cuda_lt_path_reset(cuda_ctx *c);
int qw_cuda_lt_fallback(const cuda_ctx *c, char *status, size_t status_cap, char *why,
                        size_t why_cap);
qs_status qw_cuda_lt_linear(cuda_ctx *c, float *y, const float *x, int T, const qw_weight *w,
                            const qw_act_quant *act, float *xq, qs_error *err);
/* The QW_CUDA_GEMM_LT path's qk_gemm handle (probe set, qk_gemm.h), NULL without one: the
 * training op gemm_abt_quant runs its block-scaled GEMMs there (ops_cuda_train.cu). */
void *qw_cuda_lt_gemm(const cuda_ctx *c);

/* Frees every cached weight. */
void qw_cuda_weights_release(cuda_ctx *c);

/* Deterministic sums over n elements of y, ref (device): sum(ref^2), sum((y-ref)^2) in double,
 * fixed block partials then one ordered pass. */
qs_status qw_cuda_sqnr(cuda_ctx *c, const float *y, const float *ref, size_t n, double *signal,
                       double *noise, qs_error *err);

#endif
