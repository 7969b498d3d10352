/* The CUDA backend's linear through kernels/cuda's cuBLASLt GEMM (qk_gemm.h), the
 * QW_CUDA_GEMM_LT path of ops_cuda.h:
 * - a packed NVFP4 / NVFP4-2D / MXFP4 weight is repacked on the host into cuBLASLt's layout
 *   (qk_lt_pack: codes K-major padded to k_pad, block scales 128x4-tiled) and uploaded once per
 *   packed slot and version (qk_packed.version, as the device weight cache);
 * - an activation in the weight's FP4 family (NVFP4 with NVFP4, MXFP4 with MXFP4) is quantized
 *   on the device straight into that layout (qk_cuda_quantize_lt): W4A4 then runs natively on
 *   compute capability 10.x ("native_fp4"), dequantized-exactly to BF16 elsewhere
 *   ("emulated_bf16"); any other activation is fake-quantized (or left FP32) and rounded to
 *   BF16, so FP4 weights run W4A16 ("emulated_bf16");
 * - any other weight runs in its master's own precision (master_gemm.h), from one device copy:
 *   BF16 masters a BF16 GEMM ("bf16"), FP16 masters an FP16 tensor-core GEMM with FP32
 *   accumulation ("fp16"), FP32-valued masters an FP32 GEMM without TF32 ("fp32", BF16 when
 *   every value is exact in BF16), the activations rounded as that GEMM's operands are;
 * - the per-tensor decode scales go into alpha (qk_gemm folds them).
 * The path of each call is recorded; the backend reports the most specific one it ran
 * (native_fp4 > emulated_bf16 > fp8 > fp32 > fp16 > bf16). A linear is queued on the backend's
 * stream and returns: its buffers are allocated and freed in stream order (cudaMallocAsync,
 * cudaFreeAsync), and the host waits only where it reads or frees what queued work uses
 * (host_wait). Built with the rest of the backend; without kernels/cuda/qk_gemm.h
 * (QW_HAVE_QK_GEMM undefined) the path is refused at init. */
#include "ops_cuda_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef QW_HAVE_QK_GEMM
#include "qk_cuda.h"
#include "qk_gemm.h"
#include "qk_gemm_probe.h"

#include <atomic>
extern "C" {
#include "weights.h"
}

/* One FP4 weight in cuBLASLt's layout on the device. */
typedef struct lt_weight {
    const qk_packed *key;
    uint64_t version; /* key->version uploaded */
    qk_lt_layout layout;
    uint8_t *codes, *scales; /* device */
    float tensor_scale;
    int tensor_scale_exp2;
    qk_gemm_type type;
} lt_weight;

typedef struct lt_state {
    qk_gemm *g;
    lt_weight *w;
    size_t n, cap;
    cuda_scratch xcodes, xscales, x16, xr; /* xr: FP32 activations rounded to BF16 values */
    float *d_xscale; /* device [1]: the W4A4 activation's tensor decode scale (no host trip) */
    const char *best_name; /* NULL none yet, else the most specific path run (lt_rank) */
    qk_gemm_request req;   /* the table's request: auto, or emulated (QW_CUDA_GEMM_EMULATED) */
    char fb_status[40], fb_why[320]; /* the first native refusal since the reset ("" none) */
    qk_gemm_probe probe;             /* what the device proved at init (qk_gemm_probe.h) */
} lt_state;

static int is_fp4(const qk_format *f, qk_gemm_type *t) {
    if (!f) return 0;
    const char *n = qk_format_name(f);
    if (!strcmp(n, "nvfp4") || !strcmp(n, "nvfp4_2d")) {
        *t = QK_GEMM_NVFP4;
        return 1;
    }
    if (!strcmp(n, "mxfp4")) {
        *t = QK_GEMM_MXFP4;
        return 1;
    }
    return 0;
}

/* The one place this file waits for the stream: the host is about to read (or free) memory
 * that queued work writes (or reads). Each call names that read in a comment; ctest
 * engine_cuda_lt_syncs counts them. */
static cudaError_t host_wait(cuda_ctx *c) {
    return cudaStreamSynchronize(c->stream);
}

/* A linear is queued and returns; it waits only when y is managed memory, which the host may
 * read directly (cu_linear refuses host memory). A kernel's execution error surfaces at the
 * next wait, as for the other ops (ops_cuda.cu launched). */
static qs_status lt_done(cuda_ctx *c, const float *y, qs_error *err) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess && qw_cuda_host_reads(c, y))
        e = host_wait(c); /* host read: the output in managed memory */
    return qw_cuda_status(c, e, "linear", err);
}

/* s holds at least `bytes` of device memory, grown in stream order: the old buffer is freed
 * after the queued work that reads it. Errors: QS_ENOMEM. */
static qs_status lt_reserve(cuda_ctx *c, cuda_scratch *s, size_t bytes, qs_error *err) {
    if (s->bytes >= bytes) return QS_OK;
    if (s->p) (void)cudaFreeAsync(s->p, c->stream);
    s->p = NULL;
    s->bytes = 0;
    void *p = NULL;
    if (cudaMallocAsync(&p, bytes, c->stream) != cudaSuccess) {
        (void)cudaGetLastError();
        return qs_error_set(err, QS_ENOMEM, "cuda backend: linear scratch of %zu bytes", bytes);
    }
    s->p = p;
    s->bytes = bytes;
    return QS_OK;
}

static void lt_weight_free(cuda_ctx *c, qk_gemm *g, lt_weight *e) {
    if (e->codes) qk_gemm_forget(g, e->codes); /* its BF16 copy, if the GEMM made one */
    if (e->codes) (void)cudaFreeAsync(e->codes, c->stream);
    if (e->scales) (void)cudaFreeAsync(e->scales, c->stream);
    e->codes = e->scales = NULL;
}

/* The device FP4 operand of packed p (uploaded now when absent or changed). */
static qs_status lt_weight_of(cuda_ctx *c, lt_state *s, const qk_packed *p, qk_gemm_type type,
                              const lt_weight **out, qs_error *err) {
    lt_weight *e = NULL;
    for (size_t i = 0; i < s->n; i++)
        if (s->w[i].key == p) e = &s->w[i];
    if (e && e->version == p->version && e->codes) {
        c->stats.hits++;
        *out = e;
        return QS_OK;
    }
    if (!e) {
        if (s->n == s->cap) {
            size_t cap = s->cap ? s->cap * 2 : 64;
            lt_weight *w = (lt_weight *)realloc(s->w, cap * sizeof *w);
            if (!w) return qs_error_set(err, QS_ENOMEM, "cuda backend: FP4 weight cache");
            s->w = w;
            s->cap = cap;
        }
        e = &s->w[s->n++];
        memset(e, 0, sizeof *e);
        e->key = p;
    }
    lt_weight_free(c, s->g, e);
    qs_status st = qk_lt_layout_init(p->fmt, p->rows, p->k, &e->layout, err);
    if (st != QS_OK) return st;
    uint8_t *hc = (uint8_t *)malloc(e->layout.codes_bytes),
            *hs = (uint8_t *)malloc(e->layout.scale_bytes);
    if (!hc || !hs) {
        free(hc);
        free(hs);
        return qs_error_set(err, QS_ENOMEM, "cuda backend: FP4 repack of %zu bytes",
                            e->layout.codes_bytes);
    }
    st = qk_lt_pack(p, &e->layout, hc, e->layout.codes_bytes, hs, e->layout.scale_bytes, err);
    if (st == QS_OK)
        st =
            qw_cuda_status(c, cudaMallocAsync((void **)&e->codes, e->layout.codes_bytes, c->stream),
                           "FP4 weight", err);
    if (st == QS_OK)
        st = qw_cuda_status(c,
                            cudaMallocAsync((void **)&e->scales, e->layout.scale_bytes, c->stream),
                            "FP4 weight", err);
    if (st == QS_OK)
        st = qw_cuda_status(
            c,
            cudaMemcpyAsync(e->codes, hc, e->layout.codes_bytes, cudaMemcpyHostToDevice, c->stream),
            "FP4 weight upload", err);
    if (st == QS_OK)
        st = qw_cuda_status(c,
                            cudaMemcpyAsync(e->scales, hs, e->layout.scale_bytes,
                                            cudaMemcpyHostToDevice, c->stream),
                            "FP4 weight upload", err);
    /* once per upload: pageable copies may return before they have read their source */
    if (st == QS_OK)
        st = qw_cuda_status(c, host_wait(c), /* host read: hc, hs are freed below */
                            "FP4 weight upload", err);
    free(hc);
    free(hs);
    if (st != QS_OK) {
        lt_weight_free(c, s->g, e);
        return st;
    }
    e->version = p->version;
    e->tensor_scale = p->tensor_scale;
    e->tensor_scale_exp2 = p->tensor_scale_exp2;
    e->type = type;
    c->stats.uploads++;
    c->stats.bytes += e->layout.codes_bytes + e->layout.scale_bytes;
    *out = e;
    return QS_OK;
}

/* One line per device and process on stderr (the worker's log): its probe's outcomes,
 * "gemm_probe.<format>.<outcome>" (qk_gemm_probe.h), with the cuBLAS status of a refusal. */
static void log_probe(int device, const qk_gemm_probe *p) {
    static std::atomic_flag logged[64];
    if (device < 0 || device >= 64 || logged[device].test_and_set()) return;
    char line[512];
    int at = snprintf(line, sizeof line, "qsweep worker: CUDA device %d (cc %d.%d):", device,
                      p->cc / 10, p->cc % 10);
    for (int f = 0; f < QK_PROBE_FORMATS && at > 0 && (size_t)at < sizeof line; f++) {
        char m[64];
        qk_gemm_probe_metric(p, (qk_probe_format)f, m, sizeof m);
        at += snprintf(line + at, sizeof line - (size_t)at, " %s%s%s%s", m,
                       p->status[f][0] ? " (" : "", p->status[f], p->status[f][0] ? ")" : "");
    }
    fprintf(stderr, "%s\n", line);
}

qs_status qw_cuda_lt_init(cuda_ctx *c, qs_error *err) {
    lt_state *s = (lt_state *)calloc(1, sizeof *s);
    if (!s) return qs_error_set(err, QS_ENOMEM, "cuda backend: cuBLASLt state");
    s->best_name = NULL;
    s->req = c->gemm == QW_CUDA_GEMM_EMULATED ? QK_GEMM_REQ_EMULATED : QK_GEMM_REQ_AUTO;
    qs_status st = qk_gemm_create(c->device, &s->g, err);
    if (st != QS_OK) {
        free(s);
        return st;
    }
    /* the GEMM paths from what this device proves (once per device and process): its FP4
       W4A4 GEMMs run natively only where the probe ran and matched; the probe sets the
       handle's emulation switch itself, so the request's is set after it */
    st = qk_gemm_probe_run(s->g, c->device, &s->probe, err);
    if (st != QS_OK) {
        qk_gemm_destroy(s->g);
        free(s);
        return st;
    }
    qk_gemm_set_probe(s->g, &s->probe);
    log_probe(c->device, &s->probe);
    qk_gemm_force_emulation(s->g, s->req == QK_GEMM_REQ_EMULATED);
    st = qw_cuda_status(c, cudaMalloc((void **)&s->d_xscale, sizeof(float)), "cuBLASLt state", err);
    if (st != QS_OK) {
        qk_gemm_destroy(s->g);
        free(s);
        return st;
    }
    c->lt = s;
    return QS_OK;
}

void qw_cuda_lt_release(cuda_ctx *c) {
    lt_state *s = (lt_state *)c->lt;
    if (!s) return;
    for (size_t i = 0; i < s->n; i++)
        lt_weight_free(c, s->g, &s->w[i]);
    free(s->w);
    cuda_scratch *scratch[] = {&s->xcodes, &s->xscales, &s->x16, &s->xr};
    for (size_t i = 0; i < sizeof scratch / sizeof *scratch; i++)
        if (scratch[i]->p) (void)cudaFreeAsync(scratch[i]->p, c->stream);
    cudaFree(s->d_xscale);
    qk_gemm_destroy(s->g);
    free(s);
    c->lt = NULL;
}

void qw_cuda_lt_forget(cuda_ctx *c) {
    lt_state *s = (lt_state *)c->lt;
    if (!s) return;
    for (size_t i = 0; i < s->n; i++)
        lt_weight_free(c, s->g, &s->w[i]);
    s->n = 0;
}

const char *qw_cuda_lt_path(const cuda_ctx *c) {
    const lt_state *s = (const lt_state *)c->lt;
    if (!s || !s->best_name) return "bf16";
    return s->best_name;
}

void qw_cuda_lt_path_reset(cuda_ctx *c) {
    lt_state *s = (lt_state *)c->lt;
    if (!s) return;
    s->best_name = NULL;
    s->fb_status[0] = s->fb_why[0] = 0;
    qk_gemm_fallback_clear(s->g);
}

extern "C" int qw_backend_cuda_gemm_probe(const qw_backend *b, qk_gemm_probe *out) {
    const cuda_ctx *c = b && b->ops == qw_ops_cuda() ? cuda_ctx_of(b) : NULL;
    const lt_state *s = c ? (const lt_state *)c->lt : NULL;
    if (!s) return 0;
    *out = s->probe;
    return 1;
}

int qw_cuda_lt_fallback(const cuda_ctx *c, char *status, size_t status_cap, char *why,
                        size_t why_cap) {
    const lt_state *s = (const lt_state *)c->lt;
    if (!s || !s->fb_status[0]) return 0;
    snprintf(status, status_cap, "%s", s->fb_status);
    snprintf(why, why_cap, "%s", s->fb_why);
    return 1;
}

/* y[T x out] = x W^T, FP32 accumulation, from operands of type `type` (CUDA_R_16BF, CUDA_R_16F
 * or CUDA_R_32F) under `compute`: CUBLAS_COMPUTE_32F for the 16-bit types (tensor cores),
 * CUBLAS_COMPUTE_32F_PEDANTIC for FP32 (no TF32; cuBLAS documentation cublasComputeType_t). */
static qs_status lt_blas_linear(cuda_ctx *c, float *y, const void *x, const void *w,
                                cudaDataType_t type, cublasComputeType_t compute, int T, int in,
                                int out, const char *name, qs_error *err) {
    float one = 1.0f, zero = 0.0f;
    cublasStatus_t s =
        cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, out, T, in, &one, w, type, in, x, type, in,
                     &zero, y, CUDA_R_32F, out, compute, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS)
        return qs_error_set(err, QS_EIO, "cuda backend: linear [%d x %d] x [%d x %d]^T %s: %s", T,
                            in, out, in, name, cublasGetStatusName(s));
    return QS_OK;
}

__global__ void k_lt_to_bf16(uint16_t *dst, const float *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        __nv_bfloat16 h = __float2bfloat16_rn(src[i]);
        dst[i] = *(const uint16_t *)&h;
    }
}

/* dst[i] = src[i] rounded to the nearest FP16 value (ties to even; beyond 65504 infinite, as an
 * FP16 model's own activations would be): the FP16 GEMM's operand. */
__global__ void k_lt_to_f16(__half *dst, const float *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2half_rn(src[i]);
}

/* dst[i] = src[i] rounded to the nearest BF16 (f16 0) or FP16 (f16 1) value, ties to even, kept
 * in FP32: the activations an FP32 GEMM over such a master reads (master_gemm.h). */
__global__ void k_lt_round(float *dst, const float *src, size_t n, int f16) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = f16 ? __half2float(__float2half_rn(src[i]))
                     : __bfloat162float(__float2bfloat16_rn(src[i]));
}

/* native_fp4 > emulated_bf16 > fp8 > fp32 > fp16 > bf16: the path ranks of ops_cuda.h with
 * "fp16" (an FP16 master's GEMM, master_gemm.h) between bf16 and fp32. */
static int lt_rank(const char *name) {
    return strcmp(name, "fp16") == 0 ? 3 : 2 * qw_gemm_path_rank(name);
}

static void lt_note_path(lt_state *s, const char *name) {
    if (!s->best_name || lt_rank(name) > lt_rank(s->best_name)) s->best_name = name;
}

/* An unquantized (or non-FP4 packed) weight's linear: its one device copy in the master's own
 * GEMM type (master_gemm.h), the activations fake-quantized when act asks, then rounded as that
 * GEMM's operands round them. A baseline runs exactly this for every linear. */
static qs_status lt_master_linear(cuda_ctx *c, lt_state *s, float *y, const float *x, int T,
                                  const qw_weight *w, const qw_act_quant *act, float *xq,
                                  qs_error *err) {
    size_t in = (size_t)w->cols, out = (size_t)w->rows, n = (size_t)T * in;
    const cuda_weight *e = NULL;
    qs_status st;
    if ((st = qw_cuda_weight(c, w, 0, &e, err)) != QS_OK) return st;
    const float *xin = x;
    if (act && act->fmt) {
        if ((st = qw_cuda_status(
                 c, cudaMemcpyAsync(xq, x, n * sizeof(float), cudaMemcpyDeviceToDevice, c->stream),
                 "linear", err)) != QS_OK)
            return st;
        if ((st = qw_cuda_act_quant(c, act, xq, (size_t)T, in, err)) != QS_OK) return st;
        xin = xq;
    }
    int f16 = e->gemm.act == QW_ELEM_F16;
    if (e->f32) {
        /* FP32 values (or a tied embedding's FP32 copy): the FP32 GEMM, no TF32, over the
           activations rounded as the master's GEMM rounds them; with BF16 or FP16 weights the
           products are those of the 16-bit GEMM, exact in FP32 */
        if ((st = lt_reserve(c, &s->xr, n * sizeof(float), err)) != QS_OK) return st;
        k_lt_round<<<1024, 256, 0, c->stream>>>((float *)s->xr.p, xin, n, f16);
        if ((st = qw_cuda_status(c, cudaGetLastError(), "linear: activation rounding", err)) !=
            QS_OK)
            return st;
        if ((st = lt_blas_linear(c, y, s->xr.p, e->f32, CUDA_R_32F, CUBLAS_COMPUTE_32F_PEDANTIC, T,
                                 (int)in, (int)out, "fp32", err)) != QS_OK)
            return st;
        lt_note_path(s, e->gemm.path);
        return lt_done(c, y, err);
    }
    if ((st = lt_reserve(c, &s->x16, n * sizeof(uint16_t), err)) != QS_OK) return st;
    if (f16)
        k_lt_to_f16<<<1024, 256, 0, c->stream>>>((__half *)s->x16.p, xin, n);
    else
        k_lt_to_bf16<<<1024, 256, 0, c->stream>>>((uint16_t *)s->x16.p, xin, n);
    if ((st = qw_cuda_status(c, cudaGetLastError(), "linear: activation rounding", err)) != QS_OK)
        return st;
    if (e->f16) {
        /* an FP16 master: FP16 operands on the tensor cores, FP32 accumulation */
        st = lt_blas_linear(c, y, s->x16.p, e->f16, CUDA_R_16F, CUBLAS_COMPUTE_32F, T, (int)in,
                            (int)out, "fp16", err);
    } else if (in % 8 != 0) {
        /* rows of no multiple of 16 bytes, which cuBLASLt's BF16 operands need (qk_gemm.h):
           cuBLAS's BF16 GEMM */
        st = lt_blas_linear(c, y, s->x16.p, e->bf16, CUDA_R_16BF, CUBLAS_COMPUTE_32F, T, (int)in,
                            (int)out, "bf16", err);
    } else {
        qk_gemm_operand wo, xo;
        memset(&wo, 0, sizeof wo);
        memset(&xo, 0, sizeof xo);
        wo.type = xo.type = QK_GEMM_BF16;
        wo.data = e->bf16;
        xo.data = s->x16.p;
        wo.ld = xo.ld = in;
        wo.tensor_scale = xo.tensor_scale = 1.0f;
        qk_gemm_path path;
        st = qk_gemm_linear(s->g, &xo, &wo, (size_t)T, out, in, 1.0f, 0.0f, y, QK_GEMM_OUT_F32, out,
                            c->stream, &path, err);
    }
    if (st != QS_OK) return st;
    lt_note_path(s, e->gemm.path);
    return lt_done(c, y, err);
}

qs_status qw_cuda_lt_linear(cuda_ctx *c, float *y, const float *x, int T, const qw_weight *w,
                            const qw_act_quant *act, float *xq, qs_error *err) {
    lt_state *s = (lt_state *)c->lt;
    size_t in = (size_t)w->cols, out = (size_t)w->rows;
    qk_gemm_operand wo, xo;
    memset(&wo, 0, sizeof wo);
    memset(&xo, 0, sizeof xo);
    qk_gemm_type wt = QK_GEMM_BF16;
    qs_status st;
    if (!(w->form == QW_WEIGHT_PACKED && is_fp4(w->packed->fmt, &wt)))
        return lt_master_linear(c, s, y, x, T, w, act, xq, err);
    const lt_weight *e = NULL;
    if ((st = lt_weight_of(c, s, w->packed, wt, &e, err)) != QS_OK) return st;
    wo.type = e->type;
    wo.data = e->codes;
    wo.scales = e->scales;
    wo.layout = e->layout;
    wo.tensor_scale = e->tensor_scale;
    wo.tensor_scale_exp2 = e->tensor_scale_exp2;
    wo.resident = 1; /* emulated: dequantized to BF16 once (qk_gemm.h), forgotten on free */
    qk_gemm_type at = QK_GEMM_BF16;
    if (act && act->fmt && is_fp4(act->fmt, &at) && at == wt) {
        /* W4A4: x quantized on the device straight into cuBLASLt's layout. */
        if ((st = qk_lt_layout_init(act->fmt, (size_t)T, in, &xo.layout, err)) != QS_OK) return st;
        if ((st = lt_reserve(c, &s->xcodes, xo.layout.codes_bytes, err)) != QS_OK ||
            (st = lt_reserve(c, &s->xscales, xo.layout.scale_bytes, err)) != QS_OK)
            return st;
        qk_quant_options o = act->opt;
        if (act->tensor_amax) { /* the group's amax (tensor parallel), in device memory */
            if ((st = qw_cuda_read_amax(c, act->tensor_amax, &o.tensor_amax, err)) != QS_OK)
                return st;
            o.tensor_amax_given = 1;
        }
        /* codes, block scales and the tensor decode scale stay on the device: stream-ordered,
           alpha folded on the device (qk_gemm.h d_tensor_scale) */
        st = qk_cuda_quantize_lt_async(act->fmt, &o, x, (size_t)T, in, &xo.layout,
                                       (uint8_t *)s->xcodes.p, (uint8_t *)s->xscales.p, s->d_xscale,
                                       c->stream, err);
        if (st != QS_OK) return st;
        xo.type = at;
        xo.data = s->xcodes.p;
        xo.scales = (const uint8_t *)s->xscales.p;
        xo.tensor_scale = 1.0f; /* ignored: d_tensor_scale */
        xo.d_tensor_scale = s->d_xscale;
    } else {
        const float *xin = x;
        if (act && act->fmt) {
            if ((st = qw_cuda_status(c,
                                     cudaMemcpyAsync(xq, x, (size_t)T * in * sizeof(float),
                                                     cudaMemcpyDeviceToDevice, c->stream),
                                     "linear", err)) != QS_OK)
                return st;
            if ((st = qw_cuda_act_quant(c, act, xq, (size_t)T, in, err)) != QS_OK) return st;
            xin = xq;
        }
        size_t n = (size_t)T * in;
        if ((st = lt_reserve(c, &s->x16, n * sizeof(uint16_t), err)) != QS_OK) return st;
        k_lt_to_bf16<<<1024, 256, 0, c->stream>>>((uint16_t *)s->x16.p, xin, n);
        if ((st = qw_cuda_status(c, cudaGetLastError(), "linear: activation to bf16", err)) !=
            QS_OK)
            return st;
        xo.type = QK_GEMM_BF16;
        xo.data = s->x16.p;
        xo.ld = in;
        xo.tensor_scale = 1.0f;
    }
    qk_gemm_path path;
    st = qk_gemm_linear(s->g, &xo, &wo, (size_t)T, out, in, 1.0f, 0.0f, y, QK_GEMM_OUT_F32, out,
                        c->stream, &path, err);
    if (st != QS_OK) return st;
    lt_note_path(s, qk_gemm_path_name(path));
    if (!s->fb_status[0] && qk_gemm_fallback(s->g)[0]) { /* the first refusal since the reset */
        snprintf(s->fb_status, sizeof s->fb_status, "%s", qk_gemm_fallback_status(s->g));
        snprintf(s->fb_why, sizeof s->fb_why, "%s", qk_gemm_fallback(s->g));
    }
    return lt_done(c, y, err);
}

void *qw_cuda_lt_gemm(const cuda_ctx *c) {
    const lt_state *s = c ? (const lt_state *)c->lt : NULL;
    return s ? s->g : NULL;
}

#else /* no qk_gemm.h in this tree: the path is refused at init */

qs_status qw_cuda_lt_init(cuda_ctx *c, qs_error *err) {
    (void)c;
    return qs_error_set(err, QS_EUNSUPPORTED,
                        "backend cuda: gemm lt: built without kernels/cuda/qk_gemm.h");
}

void qw_cuda_lt_release(cuda_ctx *c) {
    (void)c;
}

void qw_cuda_lt_forget(cuda_ctx *c) {
    (void)c;
}

const char *qw_cuda_lt_path(const cuda_ctx *c) {
    (void)c;
    return "bf16";
}

void qw_cuda_lt_path_reset(cuda_ctx *c) {
    (void)c;
}

extern "C" int qw_backend_cuda_gemm_probe(const qw_backend *b, struct qk_gemm_probe *out) {
    (void)b, (void)out;
    return 0;
}

int qw_cuda_lt_fallback(const cuda_ctx *c, char *status, size_t status_cap, char *why,
                        size_t why_cap) {
    (void)c, (void)status, (void)status_cap, (void)why, (void)why_cap;
    return 0;
}

qs_status qw_cuda_lt_linear(cuda_ctx *c, float *y, const float *x, int T, const qw_weight *w,
                            const qw_act_quant *act, float *xq, qs_error *err) {
    (void)c, (void)y, (void)x, (void)T, (void)w, (void)act, (void)xq;
    return qs_error_set(err, QS_EUNSUPPORTED, "backend cuda: gemm lt not built");
}

void *qw_cuda_lt_gemm(const cuda_ctx *c) {
    (void)c;
    return NULL;
}

#endif
