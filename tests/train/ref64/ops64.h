/* The test-side FP64 reference of the training ops (tests/train only): the CPU training
 * functions of worker/engine/ops.h (ops_cpu_train.c) in double, each layer a pair of free
 * functions, _forward and _backward, over raw arrays (llm.c's train_gpt2.c layout), for the
 * finite-difference check of the gradients, where FP32 rounding would swamp the differences.
 *
 * Shapes: B sequences of T tokens, N = B*T rows (sequence b's token t is row b*T + t); D dim,
 * F hidden_dim, H heads, G kv heads (H % G == 0), E head_dim (even), V vocab. Matrices are
 * row-major; linear weights W [out x in] in Hugging Face layout (y = x W^T).
 * Backward functions ADD into parameter gradients (dw, dW, demb: gradient accumulation) and
 * say per argument whether an input gradient is added to or overwritten.
 * Formulas: modeling_llama.py (transformers) for the forward; the backward is its derivative,
 * checked against PyTorch autograd and central differences (tests/train).
 * Nothing here allocates; every loop is bit-identical for any thread count nt >= 1. */
#ifndef QW_TRAIN_OPS64_H
#define QW_TRAIN_OPS64_H

#include <stddef.h>
#include <stdint.h>

/* Output columns per GEMM piece: GEMMs are cut into pieces fixed by the shape (one
 * single-threaded BLAS call each) so that thread count never changes a sum. */
#define QW_TRAIN64_GEMM_COLS 128

#define QW_TRAIN_OPS_DECLARE(R, NAME)                                                              \
    /* C[M x Ncol] = A[M x K] Bm[Ncol x K]^T + beta C (both operands K-contiguous, "TN"). */       \
    void NAME(gemm_abt)(R * C, const R *A, const R *Bm, int M, int Ncol, int K, R beta, int nt);   \
    /* dst[cols x rows] = src[rows x cols]^T. */                                                   \
    void NAME(transpose)(R * dst, const R *src, int rows, int cols, int nt);                       \
    /* out[N x D] = emb[tokens[i]] (emb [V x D]); token ids must be < V (callers check). */        \
    void NAME(embedding_forward)(R * out, const uint32_t *tokens, const R *emb, int N, int D);     \
    /* demb[V x D] += scatter of dout[N x D] by token. */                                          \
    void NAME(embedding_backward)(R * demb, const R *dout, const uint32_t *tokens, int N, int D);  \
    /* out[N x D] = w * x * rstd, rstd[N] = 1/sqrt(mean(x^2) + eps) (HF LlamaRMSNorm). */          \
    void NAME(rmsnorm_forward)(R * out, R * rstd, const R *x, const R *w, int N, int D, R eps,     \
                               int nt);                                                            \
    /* dx[N x D] += input gradient; dw[D] += weight gradient. */                                   \
    void NAME(rmsnorm_backward)(R * dx, R * dw, const R *dout, const R *x, const R *w,             \
                                const R *rstd, int N, int D, int nt);                              \
    /* Rotates x[N x nh*E] in place, HF rotate_half pairs (j, j + E/2) by the angle of the         \
     * row's position t = row % T: cosb/sinb [T x E/2]. */                                         \
    void NAME(rope_forward)(R * x, const R *cosb, const R *sinb, int B, int T, int nh, int E,      \
                            int nt);                                                               \
    /* Gradient of rope_forward, in place on dx[N x nh*E] (rotation by the opposite angle). */     \
    void NAME(rope_backward)(R * dx, const R *cosb, const R *sinb, int B, int T, int nh, int E,    \
                             int nt);                                                              \
    /* Causal grouped-query attention: q[N x H*E], k,v [N x G*E] (query head h reads kv head       \
     * h / (H/G)); probs[B x H x T x T] saved softmax(q k^T / sqrt(E)) (zeros above the            \
     * diagonal); out[N x H*E]. */                                                                 \
    void NAME(attention_forward)(R * out, R * probs, const R *q, const R *k, const R *v, int B,    \
                                 int T, int H, int G, int E, int nt);                              \
    /* dq[N x H*E], dk, dv [N x G*E] overwritten; dscratch [nt x T x T]. */                        \
    void NAME(attention_backward)(R * dq, R * dk, R * dv, R * dscratch, const R *dout, const R *q, \
                                  const R *k, const R *v, const R *probs, int B, int T, int H,     \
                                  int G, int E, int nt);                                           \
    /* h[n] = silu(g) * u. */                                                                      \
    void NAME(swiglu_forward)(R * h, const R *g, const R *u, size_t n, int nt);                    \
    /* dg, du [n] overwritten from dh. */                                                          \
    void NAME(swiglu_backward)(R * dg, R * du, const R *dh, const R *g, const R *u, size_t n,      \
                               int nt);                                                            \
    /* Softmax of logits[N x V] in place (becoming the probabilities) and losses[N] =              \
     * -log p(targets[i]) from the logits (log-sum-exp in double). */                              \
    void NAME(crossentropy_forward)(R * logits, R * losses, const uint32_t *targets, int N, int V, \
                                    int nt);                                                       \
    /* probs[N x V] becomes dlogits = (probs - onehot(target)) * scale in place (scale = 1 /       \
     * tokens averaged over). */                                                                   \
    void NAME(crossentropy_backward)(R * probs, const uint32_t *targets, int N, int V, R scale,    \
                                     int nt);                                                      \
    /* y[N x out] = x[N x in] W^T, unquantized. */                                                 \
    void NAME(linear_forward)(R * y, const R *x, const R *W, int N, int in, int out, int nt);      \
    /* dx[N x in] = (or += when dx_accumulate) dy W (skipped when dx is NULL);                     \
     * dW[out x in] += dy^T x. */                                                                  \
    void NAME(linear_backward)(R * dx, int dx_accumulate, R *dW, const R *dy, const R *x,          \
                               const R *W, int N, int in, int out, int nt);

#define QW_TRAIN_NAME_F64(x) qw_train_##x##_f64
QW_TRAIN_OPS_DECLARE(double, QW_TRAIN_NAME_F64)

#endif
