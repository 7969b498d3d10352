/* The CUDA table's training entries and its shared forward ops (ops.h): same arguments and
 * formulas as the CPU functions, device (or managed) pointers, on the backend's stream; each
 * waits for it and returns QS_OK, QS_EIO with the CUDA/cuBLAS error, or QS_EINVAL for a
 * non-CUDA backend. tests/gpu/test_train_cuda.c states each tolerance: bit-identical for the
 * embedding, RoPE, RMSNorm's weight gradient and cross-entropy backward; float rounding for the
 * rest (double sums in another order, CUDA expf, cuBLAS SGEMM under CUBLAS_PEDANTIC_MATH). */
#ifndef QW_OPS_CUDA_TRAIN_H
#define QW_OPS_CUDA_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out[N x D] = emb[tokens[i]]; tokens: device [N], < V (callers check). */
qs_status qw_cuda_train_embedding_forward(qw_backend *b, float *out, const uint32_t *tokens,
                                          const float *emb, int N, int D, qs_error *err);
/* demb[V x D] += scatter of dout[N x D] by token, rows in token order. */
qs_status qw_cuda_train_embedding_backward(qw_backend *b, float *demb, const float *dout,
                                           const uint32_t *tokens, int N, int D, qs_error *err);
/* The forward ops evaluation and training share (the table's rmsnorm, rope, swiglu): out[N x D]
 * = w x rstd, rstd[N] = 1/sqrt(mean(x^2) + eps) unless NULL; w and the RoPE tables may be host
 * memory (a cached device copy, qw_cuda_vector). */
qs_status qw_cuda_rmsnorm_forward(qw_backend *b, float *out, float *rstd, const float *x,
                                  const float *w, int N, int D, float eps, qs_error *err);
/* dx[N x D] += input gradient; dw[D] += weight gradient. */
qs_status qw_cuda_train_rmsnorm_backward(qw_backend *b, float *dx, float *dw, const float *dout,
                                         const float *x, const float *w, const float *rstd, int N,
                                         int D, qs_error *err);
/* RoPE in place on x[N x nh*E] (position = row % T), and its gradient (opposite angle). */
qs_status qw_cuda_rope_forward(qw_backend *b, float *x, const float *cosb, const float *sinb, int B,
                               int T, int nh, int E, qs_error *err);
qs_status qw_cuda_train_rope_backward(qw_backend *b, float *dx, const float *cosb,
                                      const float *sinb, int B, int T, int nh, int E,
                                      qs_error *err);
/* Causal GQA attention, blocked (FlashAttention-2): out[N x H*E]; saved[B x H x T] each query
 * row's logsumexp, what the backward recomputes the probabilities from (no T x T); scratch
 * unused (the ops table's argument). head_dim 1..128 (QS_EINVAL otherwise). */
qs_status qw_cuda_train_attention_forward(qw_backend *b, float *out, float *saved, float *scratch,
                                          const float *q, const float *k, const float *v, int B,
                                          int T, int H, int G, int E, qs_error *err);
/* dq[N x H*E], dk, dv [N x G*E] overwritten from the forward's saved; dscratch: device [H x T]
 * floats. */
qs_status qw_cuda_train_attention_backward(qw_backend *b, float *dq, float *dk, float *dv,
                                           float *dscratch, const float *dout, const float *q,
                                           const float *k, const float *v, const float *saved,
                                           int B, int T, int H, int G, int E, qs_error *err);
/* h[n] = silu(g) u; dg, du [n] overwritten from dh. */
qs_status qw_cuda_swiglu_forward(qw_backend *b, float *h, const float *g, const float *u, size_t n,
                                 qs_error *err);
qs_status qw_cuda_train_swiglu_backward(qw_backend *b, float *dg, float *du, const float *dh,
                                        const float *g, const float *u, size_t n, qs_error *err);
/* logits[N x V] become softmax probabilities; losses[N] = -log p(target) from the logits;
 * targets: device [N]. Backward: probs become (probs - onehot) * scale. */
qs_status qw_cuda_train_crossentropy_forward(qw_backend *b, float *logits, float *losses,
                                             const uint32_t *targets, int N, int V, qs_error *err);
qs_status qw_cuda_train_crossentropy_backward(qw_backend *b, float *probs, const uint32_t *targets,
                                              int N, int V, float scale, qs_error *err);
/* y[N x out] = x W^T; dx (+)= dy W (skipped when dx is NULL), dW += dy^T x. */
qs_status qw_cuda_train_linear_forward(qw_backend *b, float *y, const float *x, const float *W,
                                       int N, int in, int out, qs_error *err);
qs_status qw_cuda_train_linear_backward(qw_backend *b, float *dx, int dx_accumulate, float *dW,
                                        const float *dy, const float *x, const float *W, int N,
                                        int in, int out, qs_error *err);

/* The rest of the table's entries: copy (also upload and fetch, cudaMemcpyDefault), rht
 * (qk_cuda_rht, tiles 16 and 32), fake_quant (qk_cuda_fake_quant, else the CPU quantizer on a
 * host copy: the same bits), sumsq (64 fixed trees: deterministic, not the CPU's order), adamw
 * (adamw.h). */
qs_status qw_cuda_train_copy(qw_backend *b, void *dst, const void *src, size_t bytes,
                             qs_error *err);
qs_status qw_cuda_train_zero(qw_backend *b, void *p, size_t bytes, qs_error *err);
qs_status qw_cuda_train_add(qw_backend *b, float *out, const float *x, const float *y, size_t n,
                            qs_error *err);
qs_status qw_cuda_train_gemm_abt(qw_backend *b, float *C, const float *A, const float *Bm, int M,
                                 int Ncol, int K, float beta, qs_error *err);
/* BF16 copies of A and Bm in the backend's scratch, cublasGemmEx with CUBLAS_COMPUTE_32F.
 * Errors: QS_ENOMEM (the scratch), QS_EIO (a launch or cuBLAS call, named). */
qs_status qw_cuda_train_gemm_abt_bf16(qw_backend *b, float *C, const float *A, const float *Bm,
                                      int M, int Ncol, int K, float beta, qs_error *err);
qs_status qw_cuda_train_transpose(qw_backend *b, float *dst, const float *src, int rows, int cols,
                                  qs_error *err);
qs_status qw_cuda_train_round_bf16(qw_backend *b, float *x, size_t n, qs_error *err);
qs_status qw_cuda_train_rht(qw_backend *b, float *x, size_t rows, size_t k, int d, uint64_t seed,
                            qs_error *err);
qs_status qw_cuda_train_fake_quant(qw_backend *b, const qk_format *fmt, const qk_quant_options *opt,
                                   float *x, size_t rows, size_t k, qs_error *err);
/* ops.h gemm_abt_quant: A and Bm quantized along K on the device into cuBLASLt's layout
 * (qk_cuda_quantize_lt_async: the numeric core's codes and scales, SR streams included), then
 * qk_gemm_linear on the backend's cuBLASLt handle (native_fp4 where the probe proved the format,
 * else emulated_bf16), FP32 output, tensor scales folded into alpha on the device. Formats
 * nvfp4 / nvfp4_2d with nvfp4, mxfp4 with mxfp4. Errors: QS_EUNSUPPORTED, C untouched (no
 * cuBLASLt handle: request fp32 or bf16; another format; Ncol not a multiple of 4 or C not
 * 16-byte aligned), the quantizer's and the GEMM's otherwise. */
qs_status qw_cuda_train_gemm_abt_quant(qw_backend *b, float *C, const float *A, const qk_format *fa,
                                       const qk_quant_options *oa, const float *Bm,
                                       const qk_format *fb, const qk_quant_options *ob, int M,
                                       int Ncol, int K, float beta, int *path, qs_error *err);
/* ops.h quant_operand_bytes: the bytes of an FP4 operand [rows x k] in cuBLASLt's layout
 * (codes, block scales, the FP32 decode scale, each from a 256-byte boundary) where
 * gemm_abt_quant runs that format as B of an output rows wide; 0 otherwise (FP8, no cuBLASLt
 * handle, rows not a multiple of 4, another format). */
size_t qw_cuda_train_quant_operand_bytes(qw_backend *b, const qk_format *fmt, size_t rows,
                                         size_t k);
/* ops.h quant_operand: x [rows x k] quantized along k as gemm_abt_quant quantizes its B
 * (qk_cuda_quantize_lt_async) into mem [quant_operand_bytes]. Errors: QS_EUNSUPPORTED (a format
 * it does not keep), the quantizer's. */
qs_status qw_cuda_train_quant_operand(qw_backend *b, const qk_format *fmt,
                                      const qk_quant_options *opt, void *mem, const float *x,
                                      size_t rows, size_t k, qs_error *err);
/* ops.h gemm_abt_quant_kept: gemm_abt_quant with B the operand quant_operand wrote into bq; A
 * quantized on the device as there. Errors: as gemm_abt_quant (QS_EUNSUPPORTED for FP8). */
qs_status qw_cuda_train_gemm_abt_quant_kept(qw_backend *b, float *C, const float *A,
                                            const qk_format *fa, const qk_quant_options *oa,
                                            const void *bq, const qk_format *fb, int M, int Ncol,
                                            int K, float beta, int *path, qs_error *err);
qs_status qw_cuda_train_sumsq(qw_backend *b, const float *g, size_t n, double *out, qs_error *err);
qs_status qw_cuda_train_adamw(qw_backend *b, float *p, const float *g, float *m, float *v, size_t n,
                              float lr, float wd, float b1, float b2, float eps, float c1, float c2,
                              float grad_scale, qs_error *err);

#ifdef __cplusplus
}
#endif

#endif
