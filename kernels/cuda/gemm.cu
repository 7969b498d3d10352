// cuBLASLt GEMMs for the engine's linear (contract, path table and layout mapping in
// qk_gemm.h and cublaslt_layout.h).
//
// One call, y[T x out] = alpha * x[T x in] * W^T + beta * y, becomes cuBLASLt's column-major
// D[m x n] = alpha * op(A) op(B) + beta * C with A = W (m = out, TRANSA = T: stored K x m with
// ld = lda), B = x (n = T, TRANSB = N: stored K x n), C = D = y (m x n, ldd = ldy). Plans
// (matmul descriptor, layouts, heuristic algorithm) are cached per key; scale pointers are
// per-call descriptor attributes, set before every matmul (a handle serves one thread).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qk_gemm.h"
#include "qk_gemm_probe.h"

// qk_lt_scale_mode carries cuBLASLt's own values (cublaslt_layout.h, docs/numerics.md 4.1)
static_assert((int)QK_LT_SCALE_VEC16_UE4M3 == (int)CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3,
              "VEC16_UE4M3");
static_assert((int)QK_LT_SCALE_VEC32_UE8M0 == (int)CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0,
              "VEC32_UE8M0");

namespace {

constexpr size_t kWorkspaceBytes = 32u << 20; // cuBLAS recommends >= 32 MiB on Hopper/Blackwell

struct plan_key {
    int path;           // qk_gemm_path
    int a_type, b_type; // cudaDataType_t of A (W) and B (x)
    int d_type;         // cudaDataType_t of C and D
    int scale_mode;     // 0, or the FP4 block-scale mode of both operands
    int fp8_scale_ptrs; // FP8: A/B_SCALE_POINTER set (device scales)
    int device_alpha;   // alpha and beta in device memory (an FP4 decode scale on the device)
    int beta_nonzero;   // cuBLASLt may pick another algorithm when C is read
    uint64_t m, n, k;
    int64_t lda, ldb, ldd;
    // Alignment in bytes of A, B and C = D (the largest power of two <= 256 dividing the
    // address), declared to the heuristic (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES, default
    // 256: cublasLt.h): an algorithm picked for 256-byte buffers may not run on 16-byte ones.
    uint32_t align_a, align_b, align_d;
};

struct plan {
    plan_key key;
    int refused; // cuBLASLt refused this key (any status, or no algorithm): not asked again
    char refused_status[40]; // the CUBLAS_STATUS_* name of the refusal
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
};

// The CUBLAS_STATUS_* name in an error message of lt_fail into out ("no_status" if none).
void status_name_of(const char *msg, char *out, size_t cap) {
    const char *p = msg ? strstr(msg, "CUBLAS_STATUS_") : nullptr;
    size_t n = 0;
    while (p && n + 1 < cap && ((p[n] >= 'A' && p[n] <= 'Z') || p[n] == '_'))
        n++;
    if (!n)
        snprintf(out, cap, "no_status");
    else
        snprintf(out, cap, "%.*s", (int)n, p);
}

qs_status cuda_fail(qs_error *err, cudaError_t e, const char *what) {
    return qs_error_set(err, QS_EIO, "kernels/cuda: gemm: %s: %s", what, cudaGetErrorString(e));
}

qs_status lt_fail(qs_error *err, cublasStatus_t s, const char *what, const plan_key &k) {
    return qs_error_set(err, s == CUBLAS_STATUS_NOT_SUPPORTED ? QS_EUNSUPPORTED : QS_EIO,
                        "kernels/cuda: gemm: %s: %s (%s) for path %d, m=%llu n=%llu k=%llu", what,
                        cublasLtGetStatusName(s), cublasLtGetStatusString(s), k.path,
                        (unsigned long long)k.m, (unsigned long long)k.n, (unsigned long long)k.k);
}

bool aligned16(const void *p) {
    return ((uintptr_t)p & 15u) == 0;
}

// The largest power of two <= 256 that divides p's address.
uint32_t alignment_of(const void *p) {
    uint32_t a = 256;
    while (a > 1 && ((uintptr_t)p & (a - 1)) != 0)
        a >>= 1;
    return a;
}

bool is_fp4(qk_gemm_type t) {
    return t == QK_GEMM_NVFP4 || t == QK_GEMM_MXFP4;
}

} // namespace

// One resident FP4 weight's BF16 copy (e2m1 x block scale, exact), [rows x round8(k)].
struct dq_entry {
    const void *data;
    const uint8_t *scales;
    size_t rows, k;
    int mode;
    uint16_t *bf16;
    size_t bytes;
    uint64_t used; // g->dq_clock at its last use (least recently used goes first)
};

struct qk_gemm {
    int device;
    int cc; // 10 * major + minor
    int force_emulation;
    cublasLtHandle_t lt;
    void *workspace;
    uint16_t *scratch; // BF16 dequantized operands of the emulated path
    size_t scratch_elems;
    plan *plans;
    size_t nplans, cap;
    float *alpha_beta;  // device [2]: alpha and beta of a call whose FP4 scale is on the device
    char fallback[320]; // why the last native GEMM ran emulated ("" none: qk_gemm_fallback)
    char fallback_status[40];   // its CUBLAS_STATUS_* name (qk_gemm_fallback_status)
    const qk_gemm_probe *probe; // what the device proved (qk_gemm_set_probe); NULL: the table
    dq_entry *dq;               // resident FP4 weights dequantized once (qk_gemm.h resident)
    size_t n_dq, cap_dq, dq_bytes, dq_budget;
    uint64_t dq_clock, dq_hits, dq_misses;
};

extern "C" qs_status qk_gemm_create(int device, qk_gemm **out, qs_error *err) {
    if (!out) return qs_error_set(err, QS_EINVAL, "kernels/cuda: gemm: out is NULL");
    *out = nullptr;
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess) return cuda_fail(err, e, "cudaSetDevice");
    cudaDeviceProp prop;
    e = cudaGetDeviceProperties(&prop, device);
    if (e != cudaSuccess) return cuda_fail(err, e, "cudaGetDeviceProperties");
    qk_gemm *g = (qk_gemm *)calloc(1, sizeof *g);
    if (!g) return qs_error_set(err, QS_ENOMEM, "kernels/cuda: gemm: handle");
    g->device = device;
    g->cc = prop.major * 10 + prop.minor;
    g->dq_budget = prop.totalGlobalMem / 4; // qk_gemm.h: a quarter of the device's memory
    cublasStatus_t s = cublasLtCreate(&g->lt);
    if (s != CUBLAS_STATUS_SUCCESS) {
        free(g);
        return qs_error_set(err, QS_EIO, "kernels/cuda: gemm: cublasLtCreate: %s",
                            cublasLtGetStatusString(s));
    }
    e = cudaMalloc(&g->workspace, kWorkspaceBytes);
    if (e == cudaSuccess) e = cudaMalloc((void **)&g->alpha_beta, 2 * sizeof(float));
    if (e != cudaSuccess) {
        cudaFree(g->workspace);
        cublasLtDestroy(g->lt);
        free(g);
        return cuda_fail(err, e, "cudaMalloc workspace");
    }
    *out = g;
    return QS_OK;
}

static void plan_free(plan *p) {
    if (p->a) cublasLtMatrixLayoutDestroy(p->a);
    if (p->b) cublasLtMatrixLayoutDestroy(p->b);
    if (p->d) cublasLtMatrixLayoutDestroy(p->d);
    if (p->desc) cublasLtMatmulDescDestroy(p->desc);
}

extern "C" void qk_gemm_destroy(qk_gemm *g) {
    if (!g) return;
    (void)cudaSetDevice(g->device);
    (void)cudaDeviceSynchronize();
    for (size_t i = 0; i < g->nplans; i++)
        plan_free(&g->plans[i]);
    free(g->plans);
    for (size_t i = 0; i < g->n_dq; i++)
        cudaFree(g->dq[i].bf16);
    free(g->dq);
    cudaFree(g->scratch);
    cudaFree(g->workspace);
    cudaFree(g->alpha_beta);
    cublasLtDestroy(g->lt);
    free(g);
}

extern "C" int qk_gemm_compute_capability(const qk_gemm *g) {
    return g ? g->cc : 0;
}

extern "C" int qk_gemm_native_fp4(const qk_gemm *g) {
    return g && qk_gemm_cc_native_fp4(g->cc);
}

extern "C" void qk_gemm_force_emulation(qk_gemm *g, int on) {
    if (g) g->force_emulation = on ? 1 : 0;
}

extern "C" const char *qk_gemm_fallback(const qk_gemm *g) {
    return g ? g->fallback : "";
}

extern "C" const char *qk_gemm_fallback_status(const qk_gemm *g) {
    return g ? g->fallback_status : "";
}

extern "C" void qk_gemm_fallback_clear(qk_gemm *g) {
    if (g) g->fallback[0] = g->fallback_status[0] = 0;
}

extern "C" size_t qk_gemm_plan_count(const qk_gemm *g) {
    return g ? g->nplans : 0;
}

extern "C" void qk_gemm_set_probe(qk_gemm *g, const qk_gemm_probe *probe) {
    if (g) g->probe = probe;
}

extern "C" qs_status qk_gemm_path_for(const qk_gemm *g, qk_gemm_type x_type, qk_gemm_type w_type,
                                      qk_gemm_path *path, qs_error *err) {
    if (!g) return qs_error_set(err, QS_EINVAL, "kernels/cuda: gemm: NULL handle");
    qs_status st = qk_gemm_path_select(g->cc, g->force_emulation, x_type, w_type, path, err);
    // with a probe, a W4A4 FP4 GEMM is native exactly where the device proved it
    // (qk_gemm_probe.h); FP8 keeps the table (qk_gemm_linear has no emulated FP8)
    if (!st && g->probe && !g->force_emulation && is_fp4(x_type) && x_type == w_type)
        *path = qk_gemm_probe_decide(g->probe, w_type, x_type, 1, QK_GEMM_REQ_AUTO).path;
    return st;
}

// --- plans -----------------------------------------------------------------------------------

static bool key_equal(const plan_key &a, const plan_key &b) {
    return memcmp(&a, &b, sizeof a) == 0; // plan_key is zero-filled before use (padding too)
}

static qs_status set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                          const void *v, size_t size, const plan_key &k, qs_error *err) {
    cublasStatus_t s = cublasLtMatmulDescSetAttribute(d, attr, v, size);
    return s == CUBLAS_STATUS_SUCCESS ? QS_OK
                                      : lt_fail(err, s, "cublasLtMatmulDescSetAttribute", k);
}

// Scale pointers of this call (attributes of the cached descriptor, set every call).
static qs_status set_scale_pointers(plan *p, const void *a_scale, const void *b_scale,
                                    qs_error *err) {
    if (!p->key.scale_mode && !p->key.fp8_scale_ptrs) return QS_OK;
    qs_status st = set_attr(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof a_scale,
                            p->key, err);
    if (st) return st;
    return set_attr(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof b_scale, p->key,
                    err);
}

// Builds descriptor and layouts for key and asks the heuristic for one algorithm. The scale
// pointers are set first: a block-scale mode without them is INVALID_VALUE (docs/numerics.md 4.1).
static qs_status plan_build(qk_gemm *g, const plan_key &k, const void *a_scale, const void *b_scale,
                            plan *p, qs_error *err) {
    memset(p, 0, sizeof *p);
    p->key = k;
    cublasStatus_t s = cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (s != CUBLAS_STATUS_SUCCESS) return lt_fail(err, s, "cublasLtMatmulDescCreate", k);
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    qs_status st = set_attr(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta, k, err);
    if (!st) st = set_attr(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb, k, err);
    if (!st && k.device_alpha) {
        const int32_t pm = CUBLASLT_POINTER_MODE_DEVICE; // alpha, beta: device pointers
        st = set_attr(p->desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &pm, sizeof pm, k, err);
    }
    if (!st && k.scale_mode) {
        const int32_t mode =
            k.scale_mode; // cublasLtMatmulMatrixScale_t, int32 (docs/numerics.md 4.1)
        st = set_attr(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode, k, err);
        if (!st)
            st = set_attr(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode, k, err);
    }
    if (!st) st = set_scale_pointers(p, a_scale, b_scale, err);
    if (st) {
        plan_free(p);
        return st;
    }
    s = cublasLtMatrixLayoutCreate(&p->a, (cudaDataType_t)k.a_type, k.k, k.m, k.lda);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutCreate(&p->b, (cudaDataType_t)k.b_type, k.k, k.n, k.ldb);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutCreate(&p->d, (cudaDataType_t)k.d_type, k.m, k.n, k.ldd);
    if (s != CUBLAS_STATUS_SUCCESS) {
        plan_free(p);
        return lt_fail(err, s, "cublasLtMatrixLayoutCreate", k);
    }
    cublasLtMatmulPreference_t pref = nullptr;
    s = cublasLtMatmulPreferenceCreate(&pref);
    if (s == CUBLAS_STATUS_SUCCESS) {
        const uint64_t ws = kWorkspaceBytes;
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                 &ws, sizeof ws);
    }
    // the buffers' real alignment (uint32_t attributes, cublasLt.h): C and D are the same y
    const uint32_t al[4] = {k.align_a, k.align_b, k.align_d, k.align_d};
    const cublasLtMatmulPreferenceAttributes_t which[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4 && s == CUBLAS_STATUS_SUCCESS; i++)
        s = cublasLtMatmulPreferenceSetAttribute(pref, which[i], &al[i], sizeof al[i]);
    cublasLtMatmulHeuristicResult_t result;
    memset(&result, 0, sizeof result);
    int found = 0;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulAlgoGetHeuristic(g->lt, p->desc, p->a, p->b, p->d, p->d, pref, 1, &result,
                                           &found);
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (s == CUBLAS_STATUS_SUCCESS && (found == 0 || result.state != CUBLAS_STATUS_SUCCESS))
        s = found == 0 ? CUBLAS_STATUS_NOT_SUPPORTED : result.state;
    if (s != CUBLAS_STATUS_SUCCESS) {
        plan_free(p);
        return lt_fail(err, s, "cublasLtMatmulAlgoGetHeuristic (no algorithm)", k);
    }
    p->algo = result.algo;
    return QS_OK;
}

static qs_status plan_get(qk_gemm *g, const plan_key &k, const void *a_scale, const void *b_scale,
                          plan **out, qs_error *err) {
    for (size_t i = 0; i < g->nplans; i++)
        if (key_equal(g->plans[i].key, k)) {
            if (g->plans[i].refused)
                return qs_error_set(err, QS_EUNSUPPORTED,
                                    "kernels/cuda: gemm: cuBLASLt refused path %d, m=%llu n=%llu "
                                    "k=%llu before (%s)",
                                    k.path, (unsigned long long)k.m, (unsigned long long)k.n,
                                    (unsigned long long)k.k, g->plans[i].refused_status);
            qs_status st = set_scale_pointers(&g->plans[i], a_scale, b_scale, err);
            if (st) return st;
            *out = &g->plans[i];
            return QS_OK;
        }
    if (g->nplans == g->cap) {
        size_t cap = g->cap ? 2 * g->cap : 16;
        plan *np = (plan *)realloc(g->plans, cap * sizeof *np);
        if (!np) return qs_error_set(err, QS_ENOMEM, "kernels/cuda: gemm: plan cache");
        g->plans = np;
        g->cap = cap;
    }
    qs_status st = plan_build(g, k, a_scale, b_scale, &g->plans[g->nplans], err);
    if (st == QS_EUNSUPPORTED || (st == QS_EIO && k.path == QK_GEMM_PATH_NATIVE_FP4)) {
        // remembered, so a refused shape costs one heuristic query
        memset(&g->plans[g->nplans], 0, sizeof g->plans[g->nplans]);
        g->plans[g->nplans].key = k;
        g->plans[g->nplans].refused = 1;
        status_name_of(err ? err->msg : nullptr, g->plans[g->nplans].refused_status,
                       sizeof g->plans[g->nplans].refused_status);
        g->nplans++;
    }
    if (st) return st;
    *out = &g->plans[g->nplans++];
    return QS_OK;
}

// --- the GEMM --------------------------------------------------------------------------------

static qs_status check_operand(const qk_gemm_operand *op, const char *name, size_t rows, size_t k,
                               qs_error *err) {
    if (!op->data) return qs_error_set(err, QS_EINVAL, "kernels/cuda: gemm: %s.data is NULL", name);
    if (!aligned16(op->data))
        return qs_error_set(err, QS_EINVAL, "kernels/cuda: gemm: %s.data is not 16-byte aligned",
                            name);
    if (is_fp4(op->type)) {
        const qk_lt_layout &l = op->layout;
        qk_lt_scale_mode want =
            op->type == QK_GEMM_NVFP4 ? QK_LT_SCALE_VEC16_UE4M3 : QK_LT_SCALE_VEC32_UE8M0;
        if (l.mode != want || l.rows != rows || l.k != k || l.k_pad % (4 * l.vec) != 0 ||
            l.k_pad < k || l.ld_bytes * 2 != l.k_pad)
            return qs_error_set(err, QS_EINVAL,
                                "kernels/cuda: gemm: %s.layout is [%zu x %zu] mode %d, the call "
                                "needs [%zu x %zu] mode %d (qk_lt_layout_init)",
                                name, l.rows, l.k, (int)l.mode, rows, k, (int)want);
        if (!op->scales || !aligned16(op->scales))
            return qs_error_set(err, QS_EINVAL,
                                "kernels/cuda: gemm: %s.scales is NULL or not 16-byte aligned",
                                name);
        return QS_OK;
    }
    size_t mult = op->type == QK_GEMM_BF16 ? 8 : 16; // 16 bytes
    if (op->ld < k || op->ld % mult != 0)
        return qs_error_set(err, QS_EINVAL,
                            "kernels/cuda: gemm: %s.ld %zu must be >= k %zu and a multiple of %zu",
                            name, op->ld, k, mult);
    if (op->type == QK_GEMM_FP8_E4M3 && op->d_tensor_scale && op->tensor_scale != 1.0f)
        return qs_error_set(err, QS_EINVAL,
                            "kernels/cuda: gemm: %s: tensor_scale must be 1 when d_tensor_scale "
                            "is given",
                            name);
    return QS_OK;
}

// Grows the BF16 scratch to n elements (cudaFree/cudaMalloc synchronise the device).
static qs_status scratch_reserve(qk_gemm *g, size_t n, qs_error *err) {
    if (n <= g->scratch_elems) return QS_OK;
    cudaFree(g->scratch);
    g->scratch = nullptr;
    g->scratch_elems = 0;
    cudaError_t e = cudaMalloc((void **)&g->scratch, n * sizeof(uint16_t));
    if (e != cudaSuccess) return cuda_fail(err, e, "cudaMalloc emulation scratch");
    g->scratch_elems = n;
    return QS_OK;
}

static size_t round8(size_t v) {
    return (v + 7) / 8 * 8;
}

static void dq_drop(qk_gemm *g, size_t i) {
    cudaFree(g->dq[i].bf16); // synchronises the device: no GEMM still reads it
    g->dq_bytes -= g->dq[i].bytes;
    g->dq[i] = g->dq[--g->n_dq];
}

// The BF16 copy of resident FP4 weight w ([out x round8(in)]), made on the first GEMM that
// reads it; NULL (the caller dequantizes into the scratch) when it does not fit the budget even
// after the least recently used copies are dropped.
static const uint16_t *dq_weight(qk_gemm *g, const qk_gemm_operand *w, size_t out, size_t in,
                                 cudaStream_t stream, qs_error *err, qs_status *st) {
    *st = QS_OK;
    g->dq_clock++;
    for (size_t i = 0; i < g->n_dq; i++) {
        dq_entry *e = &g->dq[i];
        if (e->data == w->data && e->scales == w->scales && e->rows == out && e->k == in &&
            e->mode == (int)w->layout.mode) {
            e->used = g->dq_clock;
            g->dq_hits++;
            return e->bf16;
        }
    }
    size_t bytes = out * round8(in) * sizeof(uint16_t);
    if (bytes > g->dq_budget) return nullptr;
    while (g->n_dq && g->dq_bytes + bytes > g->dq_budget) {
        size_t lru = 0;
        for (size_t i = 1; i < g->n_dq; i++)
            if (g->dq[i].used < g->dq[lru].used) lru = i;
        dq_drop(g, lru);
    }
    if (g->n_dq == g->cap_dq) {
        size_t cap = g->cap_dq ? 2 * g->cap_dq : 16;
        dq_entry *n = (dq_entry *)realloc(g->dq, cap * sizeof *n);
        if (!n) {
            *st = qs_error_set(err, QS_ENOMEM, "kernels/cuda: gemm: resident weight table");
            return nullptr;
        }
        g->dq = n;
        g->cap_dq = cap;
    }
    uint16_t *p = nullptr;
    cudaError_t e = cudaMalloc((void **)&p, bytes);
    if (e != cudaSuccess) { // no memory now: the per-call scratch instead
        (void)cudaGetLastError();
        return nullptr;
    }
    *st = qk_gemm_dequant_bf16(w, p, round8(in), stream, err);
    if (*st != QS_OK) {
        cudaFree(p);
        return nullptr;
    }
    g->dq[g->n_dq++] =
        dq_entry{w->data, w->scales, out, in, (int)w->layout.mode, p, bytes, g->dq_clock};
    g->dq_bytes += bytes;
    g->dq_misses++;
    return p;
}

extern "C" void qk_gemm_forget(qk_gemm *g, const void *data) {
    if (!g) return;
    (void)cudaSetDevice(g->device);
    for (size_t i = g->n_dq; i-- > 0;)
        if (g->dq[i].data == data) dq_drop(g, i);
}

extern "C" void qk_gemm_set_dequant_budget(qk_gemm *g, size_t bytes) {
    if (!g) return;
    g->dq_budget = bytes;
    (void)cudaSetDevice(g->device);
    while (g->n_dq && g->dq_bytes > g->dq_budget) {
        size_t lru = 0;
        for (size_t i = 1; i < g->n_dq; i++)
            if (g->dq[i].used < g->dq[lru].used) lru = i;
        dq_drop(g, lru);
    }
}

extern "C" void qk_gemm_dequant_stats(const qk_gemm *g, qk_gemm_dq_stats *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!g) return;
    out->hits = g->dq_hits;
    out->misses = g->dq_misses;
    out->weights = g->n_dq;
    out->bytes = g->dq_bytes;
    out->budget = g->dq_budget;
}

// ab[0] = alpha x (the x scale) x (the W scale) x 2^(ex + ew), as qk_lt_fold_alpha rounds it
// (the product in double, one rounding to FP32), each scale read from the device when its
// pointer is given; ab[1] = beta. One thread: stream-ordered after the quantizer that wrote the
// scale, no host round trip.
static __global__ void k_fold_alpha(float *ab, float alpha, float beta, const float *dsx, float sx,
                                    int ex, const float *dsw, float sw, int ew) {
    double v = (double)alpha * ((double)(dsx ? dsx[0] : sx) * (double)(dsw ? dsw[0] : sw));
    ab[0] = (float)ldexp(v, ex + ew);
    ab[1] = beta;
}

extern "C" qs_status qk_gemm_linear(qk_gemm *g, const qk_gemm_operand *x, const qk_gemm_operand *w,
                                    size_t T, size_t out, size_t in, float alpha, float beta,
                                    void *y, qk_gemm_out y_type, size_t ldy, void *stream_,
                                    qk_gemm_path *path_out, qs_error *err) {
    if (!g || !x || !w || !y)
        return qs_error_set(err, QS_EINVAL, "kernels/cuda: gemm: NULL handle, operand or y");
    if (T == 0 || out == 0 || in == 0)
        return qs_error_set(err, QS_EINVAL, "kernels/cuda: gemm: empty shape T=%zu out=%zu in=%zu",
                            T, out, in);
    if (y_type != QK_GEMM_OUT_F32 && y_type != QK_GEMM_OUT_BF16)
        return qs_error_set(err, QS_EINVAL, "kernels/cuda: gemm: unknown y_type %d", (int)y_type);
    size_t ymult = y_type == QK_GEMM_OUT_F32 ? 4 : 8;
    if (ldy < out || ldy % ymult != 0 || !aligned16(y))
        return qs_error_set(err, QS_EINVAL,
                            "kernels/cuda: gemm: ldy %zu must be >= out %zu and a multiple of %zu, "
                            "y 16-byte aligned",
                            ldy, out, ymult);
    qk_gemm_path path;
    qs_status st = qk_gemm_path_for(g, x->type, w->type, &path, err);
    if (st) return st;
    st = check_operand(x, "x", T, in, err);
    if (!st) st = check_operand(w, "w", out, in, err);
    if (st) return st;
    // host tensor scales folded into alpha: 1 for BF16 operands and for FP8 scales on the device
    float sx = 1.0f, sw = 1.0f, a = alpha;
    int ex = 0, ew = 0;
    if (x->type != QK_GEMM_BF16 && !x->d_tensor_scale) {
        sx = x->tensor_scale;
        ex = x->tensor_scale_exp2;
    }
    if (w->type != QK_GEMM_BF16 && !w->d_tensor_scale) {
        sw = w->tensor_scale;
        ew = w->tensor_scale_exp2;
    }
    // an FP4 operand's decode scale on the device: alpha is folded there (pointer mode device)
    const float *dsx = is_fp4(x->type) ? x->d_tensor_scale : nullptr;
    const float *dsw = is_fp4(w->type) ? w->d_tensor_scale : nullptr;
    if (dsx) ex = x->tensor_scale_exp2;
    if (dsw) ew = w->tensor_scale_exp2;
    if (!(sx > 0.0f) || !(sw > 0.0f))
        return qs_error_set(err, QS_EINVAL,
                            "kernels/cuda: gemm: tensor_scale of x (%g) or w (%g) is not > 0 (set "
                            "it from the quantizer: qk_cuda_quantize_lt or qk_packed)",
                            (double)sx, (double)sw);
    if (!dsx && !dsw) {
        st = qk_lt_fold_alpha(alpha, sx, ex, sw, ew, &a, err);
        if (st) return st;
    }
    cudaError_t e = cudaSetDevice(g->device);
    if (e != cudaSuccess) return cuda_fail(err, e, "cudaSetDevice");
    cudaStream_t stream = (cudaStream_t)stream_;
    const void *alpha_p = &a, *beta_p = &beta;
    if (dsx || dsw) {
        k_fold_alpha<<<1, 1, 0, stream>>>(g->alpha_beta, alpha, beta, dsx, sx, ex, dsw, sw, ew);
        e = cudaGetLastError();
        if (e != cudaSuccess) return cuda_fail(err, e, "alpha on the device");
        alpha_p = g->alpha_beta;
        beta_p = g->alpha_beta + 1;
    }

    plan_key k;
    memset(&k, 0, sizeof k);
    k.d_type = y_type == QK_GEMM_OUT_F32 ? CUDA_R_32F : CUDA_R_16BF;
    k.beta_nonzero = beta != 0.0f;
    k.m = out;
    k.n = T;
    k.ldd = (int64_t)ldy;
    const void *a_ptr = w->data, *b_ptr = x->data; // A = W, B = x
    const void *a_scale = nullptr, *b_scale = nullptr;

    for (int attempt = 0; attempt < 2; attempt++) {
        k.path = path;
        k.device_alpha = dsx || dsw;
        if (path == QK_GEMM_PATH_NATIVE_FP4) {
            k.a_type = k.b_type = CUDA_R_4F_E2M1;
            k.scale_mode = (int)w->layout.mode; // == cublasLtMatmulMatrixScale_t values
            k.k = w->layout.k_pad;
            k.lda = k.ldb = (int64_t)w->layout.k_pad;
            a_scale = w->scales;
            b_scale = x->scales;
        } else if (path == QK_GEMM_PATH_FP8) {
            k.a_type = k.b_type = CUDA_R_8F_E4M3;
            k.k = in;
            k.lda = (int64_t)w->ld;
            k.ldb = (int64_t)x->ld;
            k.fp8_scale_ptrs = x->d_tensor_scale || w->d_tensor_scale;
            a_scale = w->d_tensor_scale; // NULL: cuBLASLt's default of 1
            b_scale = x->d_tensor_scale;
        } else {
            // BF16, or the emulated path: FP4 operands dequantized to BF16 in the scratch
            k.a_type = k.b_type = CUDA_R_16BF;
            k.scale_mode = 0;
            k.k = in;
            size_t ldx = is_fp4(x->type) ? round8(in) : x->ld;
            size_t ldw = is_fp4(w->type) ? round8(in) : w->ld;
            k.lda = (int64_t)ldw;
            k.ldb = (int64_t)ldx;
            // a resident FP4 weight: its BF16 copy, made once (qk_gemm.h resident)
            const uint16_t *wres = nullptr;
            if (is_fp4(w->type) && w->resident) {
                wres = dq_weight(g, w, out, in, stream, err, &st);
                if (st) return st;
            }
            size_t need =
                (is_fp4(x->type) ? T * ldx : 0) + (is_fp4(w->type) && !wres ? out * ldw : 0);
            if (need) {
                st = scratch_reserve(g, need, err);
                if (st) return st;
            }
            uint16_t *s = g->scratch;
            if (wres) {
                a_ptr = wres;
            } else if (is_fp4(w->type)) {
                st = qk_gemm_dequant_bf16(w, s, ldw, stream, err);
                if (st) return st;
                a_ptr = s;
                s += out * ldw; // out * round8(in) elements: 16-byte aligned
            }
            if (is_fp4(x->type)) {
                st = qk_gemm_dequant_bf16(x, s, ldx, stream, err);
                if (st) return st;
                b_ptr = s;
            }
        }
        k.align_a = alignment_of(a_ptr);
        k.align_b = alignment_of(b_ptr);
        k.align_d = alignment_of(y);
        plan *p = nullptr;
        st = plan_get(g, k, a_scale, b_scale, &p, err);
        cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
        if (st == QS_OK)
            s = cublasLtMatmul(g->lt, p->desc, alpha_p, a_ptr, p->a, b_ptr, p->b, beta_p, y, p->d,
                               y, p->d, &p->algo, g->workspace, kWorkspaceBytes, stream);
        if (st == QS_OK && s != CUBLAS_STATUS_SUCCESS) {
            st = lt_fail(err, s, "cublasLtMatmul", k);
            if (path == QK_GEMM_PATH_NATIVE_FP4) { // not tried again
                p->refused = 1;
                snprintf(p->refused_status, sizeof p->refused_status, "%s",
                         cublasLtGetStatusName(s));
            }
        }
        if (st != QS_OK && st != QS_ENOMEM && path == QK_GEMM_PATH_NATIVE_FP4) {
            // cuBLASLt refused the native GEMM for this shape, whatever the status (an
            // unverified MXFP4 shape can answer INVALID_VALUE): the emulated path, which gives
            // the same values up to summation order; why is kept for the result's gemm_path
            snprintf(g->fallback, sizeof g->fallback, "native_fp4 refused, ran emulated_bf16: %.*s",
                     (int)(sizeof g->fallback - 40), err ? err->msg : "cuBLASLt refused the shape");
            status_name_of(err ? err->msg : nullptr, g->fallback_status, sizeof g->fallback_status);
            path = QK_GEMM_PATH_EMULATED_BF16;
            memset(&k, 0, sizeof k);
            k.d_type = y_type == QK_GEMM_OUT_F32 ? CUDA_R_32F : CUDA_R_16BF;
            k.beta_nonzero = beta != 0.0f;
            k.m = out;
            k.n = T;
            k.ldd = (int64_t)ldy;
            a_scale = b_scale = nullptr;
            continue;
        }
        if (st) return st;
        if (path_out) *path_out = path;
        return QS_OK;
    }
    return qs_error_set(err, QS_EUNSUPPORTED, "kernels/cuda: gemm: no path for m=%zu n=%zu k=%zu",
                        out, T, in);
}
