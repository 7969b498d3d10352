/* The CUDA backend of the engine's operations (ops.h), plain C interface: callers need no CUDA
 * headers. Built only when the root found nvcc (QSWEEP_HAVE_CUDA); qw_cuda_available() tells
 * at run time whether a device is there.
 *
 * Memory. alloc() gives plain device memory (cudaMalloc): the run state (runstate.h), the
 * SQNR probe's reference and the evaluation's baseline rows are carved from it, and the host
 * reaches them only through the table's upload, fetch, download and score_rows (the RoPE
 * tables at init, the prefix cache's residuals, the logits' scores). An op is queued on the
 * backend's stream and returns; fetch, download and score_rows wait for the stream, so what
 * they read is complete. The ops also take managed memory (the GPU tests' buffers), never host
 * memory: an op whose output is managed memory waits before it returns.
 *
 * Weights. The backend keeps device copies of the weights it is given (qw_weight: FP32 in
 * place, the checkpoint's dtype, or packed), made on first use and kept until the backend is
 * released, so a model held in the worker's cache keeps its device weights across jobs:
 * - masters (FP32 in place or the checkpoint's dtype) are keyed by their host data pointer:
 *   the mapped checkpoint (or the synthetic builder's masters) never changes under a model;
 * - a packed weight is keyed by the address of its qk_packed; its contents change when a policy
 *   is applied, and every write gives it a new version (quant.h qk_packed.version), so each
 *   use compares the version uploaded with the weight's (no pass over its bytes) and uploads
 *   again when they differ: one device copy per packed slot, whatever the number of policies;
 * - host FP32 vectors the ops take as plain pointers (RMSNorm weights, RoPE tables when they
 *   are not in backend memory) are uploaded once per host pointer.
 * The device copy holds the FP32 values qw_weight_rows_f32 gives (the CPU reference's values
 * for every form), stored as FP32 (gemm "fp32") or rounded to BF16 (gemm "bf16").
 *
 * GEMMs (cuBLAS, column-major view of the row-major HF layout, y^T = W x^T):
 * - QW_CUDA_GEMM_FP32: cublasSgemm under CUBLAS_PEDANTIC_MATH (FP32 inputs, FP32 accumulate, no
 *   TF32): the CPU reference's arithmetic up to summation order. gemm_path "fp32".
 * - QW_CUDA_GEMM_BF16: weights and activations rounded to BF16, FP32 accumulate on the tensor
 *   cores (cublasGemmEx, CUBLAS_COMPUTE_32F). Exact weights when the masters are BF16 (Llama
 *   checkpoints, synthetic models); the activations lose their low bits. gemm_path "bf16".
 * - QW_CUDA_GEMM_LT ("auto", the worker's default): each linear's path from the GEMM path table
 *   (kernels/cuda/qk_gemm_path.h qk_gemm_decide) and kernels/cuda's cuBLASLt GEMM (qk_gemm.h,
 *   ops_cuda_lt.cu): packed NVFP4 / MXFP4 weights kept on the device in cuBLASLt's
 *   block-scaled layout, W4A4 activations of the same family quantized on the device into it:
 *   native FP4 GEMMs on compute capability 10.x ("native_fp4"), the exact BF16 dequantization
 *   elsewhere ("emulated_bf16"); other weights in their master's own precision from one
 *   device copy (master_gemm.h): BF16 ("bf16"), FP16 with FP32 accumulation ("fp16"), FP32
 *   without TF32 (cublasGemmEx CUBLAS_COMPUTE_32F_PEDANTIC, "fp32").
 *   QW_CUDA_GEMM_EMULATED: the same with FP4 never native. Refused (QS_EUNSUPPORTED) in a tree
 *   without qk_gemm.h.
 * Activation fake-quant (W4A4): on the device with qk_cuda_fake_quant (every format, bit-exact
 * with the CPU); what it refuses (reference_only, exact tiny-amax) goes through the CPU
 * quantizer on a host copy, fetched and uploaded again (ops_cuda_impl.h
 * qw_cuda_host_fake_quant).
 *
 * Attention: per head S = Q K^T / sqrt(E) and att = P V as cuBLAS strided-batched SGEMMs (one
 * call per position inside a GQA group, batched over the kv heads), causal softmax in between;
 * the scores buffer [H x T x T] is the backend's, grown on first need (the `scores` argument of
 * the table is ignored). */
#ifndef QW_OPS_CUDA_H
#define QW_OPS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "ops.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qw_cuda_gemm {
    QW_CUDA_GEMM_FP32 = 0, /* cublasSgemm, pedantic FP32: the reference-matching path */
    QW_CUDA_GEMM_BF16 = 1, /* BF16 operands, FP32 accumulate (tensor cores) */
    QW_CUDA_GEMM_LT = 2, /* "auto": each linear's path from the GEMM path table (qk_gemm_path.h) */
    QW_CUDA_GEMM_EMULATED = 3, /* as LT, FP4 never native (the table's request "emulated") */
} qw_cuda_gemm;

/* Number of usable CUDA devices; 0 when there is none or no driver (never an error). */
int qw_cuda_available(void);

/* The CUDA backend's table. */
const qw_ops *qw_ops_cuda(void);

/* Sets up b on CUDA device `device` with the GEMM path `gemm`: a stream, a cuBLAS handle, an
 * empty weight cache. b->threads is 1 (the host loops it still runs are serial).
 * Errors: QS_EINVAL (device out of range, unknown gemm), QS_EUNSUPPORTED (no device), QS_EIO
 * (a CUDA or cuBLAS error, with its text), QS_ENOMEM. On error b is zeroed. */
qs_status qw_backend_cuda_init(qw_backend *b, int device, qw_cuda_gemm gemm, qs_error *err);

/* Frees every device buffer and cached weight, the handle and the stream; zeroes b. A zeroed
 * struct is a no-op. */
void qw_backend_cuda_release(qw_backend *b);

/* The GEMM path of b as recorded in results: "fp32" or "bf16"; for QW_CUDA_GEMM_LT / _EMULATED
 * the most specific path its linears ran ("native_fp4" > "emulated_bf16" > "fp8" > "fp32" >
 * "bf16"); "cpu" for a CPU backend. */
const char *qw_backend_gemm_path(const qw_backend *b);

/* How specific a GEMM path name of results is: native_fp4 5 > emulated_bf16 4 > fp8 3 > fp32 2
 * > bf16 1; 0 for anything else ("cpu", "none"). A result names the most specific path its
 * linears ran, over every rank of a tensor-parallel group too (model_cuda.h). */
int qw_gemm_path_rank(const char *name);

/* Why a native FP4 GEMM of b ran emulated since the last reset: the CUBLAS_STATUS_* name of
 * cuBLASLt's refusal into status (status_cap bytes) and the whole message into why (why_cap);
 * returns 1, or 0 (both "") when none did or b is not a CUDA backend. */
int qw_backend_cuda_gemm_fallback(const qw_backend *b, char *status, size_t status_cap, char *why,
                                  size_t why_cap);

/* What b's device proved at b's start (kernels/cuda/qk_gemm_probe.h) into *out: 1 for a CUDA
 * backend of the auto or emulated request (QW_CUDA_GEMM_LT, _EMULATED), else 0. */
struct qk_gemm_probe;
int qw_backend_cuda_gemm_probe(const qw_backend *b, struct qk_gemm_probe *out);

/* Forgets which paths b's linears ran so far, so qw_backend_gemm_path says what runs after
 * (a job's own path: the worker's cached model serves many jobs). A no-op on other backends. */
void qw_backend_cuda_gemm_path_reset(qw_backend *b);

/* Weight-cache counters: device copies made (uploads, re-uploads of a changed packed slot
 * included), uses served from the cache, and device bytes the cache holds. */
typedef struct qw_cuda_cache_stats {
    size_t uploads, hits, bytes;
} qw_cuda_cache_stats;

/* Fills *out with b's counters since it was made; zeros when b is not a CUDA backend. */
void qw_backend_cuda_cache_stats(const qw_backend *b, qw_cuda_cache_stats *out);

/* Drops every cached device copy (masters, packed, vectors): a caller that frees weights whose
 * host addresses may be reused by other weights calls it first. */
void qw_backend_cuda_forget_weights(qw_backend *b);

/* Waits for b's queued ops (they return before their kernels finish) and returns QS_EIO with
 * the first CUDA error of b's ops that return void (table entries cannot report) or of the
 * queued kernels' execution (and clears it), or QS_OK. */
qs_status qw_backend_cuda_check(qw_backend *b, qs_error *err);

/* Per-row scores of logits [R x V] (backend memory), on the device, as eval.h defines them:
 * lse_r = max + log(sum exp(l - max)) in double; when targets (host, [R]) is not NULL,
 * nll[r] = lse_r - l[r][targets[r]]; argmax[r] = first index of the row's maximum; when ref_lp
 * (backend memory, [R x V] FP32 baseline log-probabilities) is not NULL,
 * kl[r] = sum_i exp(p_i) (p_i - q_i) with q_i = (float)(l_i - lse_r) (the FP32 log-prob the CPU
 * path stores), summed in double, and ref_argmax[r] = argmax of the baseline's row.
 * Output arrays are host memory, [R] each; any of them may be NULL when not wanted.
 * Errors: QS_EINVAL (R or V < 1, a target >= V: names its row), QS_EIO, QS_ENOMEM. */
qs_status qw_cuda_score_rows(qw_backend *b, const qw_tensor *logits, const uint32_t *targets,
                             const float *ref_lp, double *nll, double *kl, int32_t *argmax,
                             int32_t *ref_argmax, qs_error *err);

#ifdef __cplusplus
}
#endif

#endif
