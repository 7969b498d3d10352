/* The engine's operations, as llm.c splits train_gpt2.c: free functions over raw float* (the CPU
 * reference, the same bits for any thread count nt) and one table (qw_ops) over backend memory
 * that evaluation and training both call, so CUDA (ops_cuda.h) plugs in with device pointers.
 * Shapes: B sequences of T tokens, N = B*T rows (row b*T + t); D dim, F hidden_dim, H heads,
 * G kv heads, E head_dim, V vocab; activations FP32 row-major, W [out x in] (y = x W^T). */
#ifndef QW_OPS_H
#define QW_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "quant.h"
#include "weights.h"

/* Query rows per attention tile: each tile's scores go only up to its last query, so the
 * masked triangle is mostly skipped and the scratch is QW_ATT_TILE x T per thread. */
#define QW_ATT_TILE 64

/* Output columns per GEMM piece, fixed by the shape and never by nt: OpenBLAS picks its kernel
 * from the call's dimensions, so an element's bits depend on its piece's shape. */
#define QW_GEMM_COLS 128

/* ---------------------------------------------------------------- CPU reference functions */

/* out[T x D] = FP32 rows tokens[0..T-1] of the table in any form (tokens < rows: caller). */
void qw_embedding_forward(float *out, const uint32_t *tokens, int T, const qw_weight *table,
                          int nt);

/* Rows whose double sums one thread runs side by side (the RMSNorm forward's sums of squares,
 * its backward's dot products): independent serial chains the core overlaps, each in its own
 * element order, so the bits are one row's alone. */
#define QW_NORM_ROWS 4

/* out[N x D] = x / sqrt(mean(x^2) + eps) * w per row (HF LlamaRMSNorm; sum of squares in
 * double); w [D]; rstd[N] = 1/rms kept for the backward unless NULL. out may equal x. */
void qw_rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int N, int D,
                        float eps, int nt);

/* Rotates x [B*T x nh*E] in place, HF rotate_half pairs (i, i+E/2) by angle pos*inv_freq[i]
 * (modeling_llama.apply_rotary_pos_emb), row r at position r % T; cosb, sinb [T x E/2]. */
void qw_rope_forward(float *x, const float *cosb, const float *sinb, int B, int T, int nh, int E,
                     int nt);

/* cosb, sinb [T x E/2] of angle t*inv_freq[i]: HF _compute_default_rope_parameters
 * (1/theta^(2i/E)), and _compute_llama3_parameters (Llama 3.1 scaling) when rope_factor > 0. */
void qw_rope_tables(const qw_config *c, int T, float *cosb, float *sinb);

/* Causal GQA attention of one sequence: att[T x H*E] = softmax(Q_h K_g^T / sqrt(E)) V_g, g =
 * h / (H/G), per (head, QW_ATT_TILE query tile): independent of nt. Softmax by
 * qw_cpu_causal_softmax (gemm_cpu.h). scores: [nt x QW_ATT_TILE x T] scratch. */
void qw_attention_forward(float *att, const float *q, const float *k, const float *v, float *scores,
                          int T, int H, int G, int E, int nt);

/* out[n] = silu(g) * u, silu(x) = x / (1 + exp(-x)) (qw_cpu_silu_mul). out may equal g. */
void qw_swiglu_forward(float *out, const float *g, const float *u, size_t n, int nt);

/* y[T x out] = x[T x in] W^T, W FP32: one single-threaded qw_cpu_sgemm per QW_GEMM_COLS piece
 * (the fixed-order GEMM also splits rows when pieces are few). */
void qw_matmul_forward(float *y, const float *x, const float *W, int T, int in, int out, int nt);

/* A linear's input format (W4A4); fmt NULL = FP32 input. opt.tensor_id gets the linear's
 * tensor_index added (stochastic rounding streams, policy.h). */
typedef struct qw_act_quant {
    const qk_format *fmt;
    qk_quant_options opt;
    /* [1] backend memory: a sharded input's MAX-all-reduced amax, so every rank uses the
     * unsharded tensor scale (tensor_amax_given); NULL: the input's own amax */
    const float *tensor_amax;
} qw_act_quant;

/* y[T x w->rows] = q(x)[T x w->cols] W^T; with act, x fake-quantized in xq [T x in]; W in any
 * form, non-FP32 pieces converted exactly into wscratch [nt x QW_GEMM_COLS x in] right before
 * their GEMM. Errors: those of qk_fake_quant and qk_dequantize. */
qs_status qw_linear_forward(float *y, const float *x, int T, const qw_weight *w,
                            const qw_act_quant *act, float *xq, float *wscratch, int nt,
                            qs_error *err);

/* *signal = sum(ref^2), *noise = sum((y - ref)^2) over [n], in double in element order. */
void qw_sqnr_sums_forward(const float *y, const float *ref, size_t n, double *signal,
                          double *noise);

/* lse = max + log(sum exp(l - max)) of l[V] in double; lp[i] = (float)(l[i] - lse) unless NULL. */
double qw_logsoftmax_row(const float *l, int V, float *lp);

/* lp[R x V] = qw_logsoftmax_row of each row of logits[R x V]. */
void qw_logsoftmax_forward(float *lp, const float *logits, int R, int V, int nt);

/* Row r of logits [R x V], lse by qw_logsoftmax_row (eval.h, after llama.cpp tools/perplexity):
 * nll[r] = lse - l[targets[r]]; argmax[r] first max; with ref_lp [R x V] kl[r] = sum exp(p_i)
 * (p_i - q_i) in double, q_i = (float)(l_i - lse), ref_argmax[r] (without: 0, -1). Outputs may
 * be NULL; kl NULL skips the KL's exponentials (ref_argmax alone), one pass a row finds the
 * maximum and argmax. Errors: QS_EINVAL (R or V < 1, a target >= V: names its row). */
qs_status qw_score_rows_forward(const float *logits, int R, int V, const uint32_t *targets,
                                const float *ref_lp, double *nll, double *kl, int32_t *argmax,
                                int32_t *ref_argmax, int nt, qs_error *err);

/* max |x| over x[n], NaN and Inf ignored (qk_joint_amax of one tensor); 0 for n == 0. */
float qw_amax_forward(const float *x, size_t n);

/* ---------------------------------------------------------------- CPU training functions */

/* ops_cpu_train.c, checked against PyTorch autograd (tests/train). Backward functions ADD into
 * parameter gradients (dw, dW, demb). Training GEMMs run in pieces of QW_TRAIN_GEMM_COLS. */
#define QW_TRAIN_GEMM_COLS 128

/* C[M x Ncol] = A[M x K] Bm[Ncol x K]^T + beta C ("TN"). */
void qw_train_gemm_abt(float *C, const float *A, const float *Bm, int M, int Ncol, int K,
                       float beta, int nt);
/* C[M x Ncol] = op(A) op(Bm) + beta C, op(X) = X^T where tX (cblas_sgemm's row-major operands:
 * A [M x K] (lda) or [K x M], Bm [K x Ncol] (ldb) or [Ncol x K]), in the pieces of
 * qw_train_gemm_abt: the same bits as qw_train_gemm_abt of the transposed copies on the
 * fixed-order GEMM, whose element is one FMA chain over k whatever the layout. */
void qw_train_gemm_tt(float *C, int ta, const float *A, int lda, int tb, const float *Bm, int ldb,
                      int M, int Ncol, int K, float beta, int nt);
/* dst[cols x rows] = src[rows x cols]^T. */
void qw_train_transpose(float *dst, const float *src, int rows, int cols, int nt);
/* dst[n] = qw_round_bf16(src[n]), one pass; dst may equal src. */
void qw_train_round_bf16_copy(float *dst, const float *src, size_t n, int nt);
/* out[N x D] = emb[tokens[i]], emb [V x D] FP32; tokens < V (callers check). */
void qw_train_embedding_forward(float *out, const uint32_t *tokens, const float *emb, int N, int D);
/* demb[V x D] += dout[N x D] scattered by token, rows added in token order. */
void qw_train_embedding_backward(float *demb, const float *dout, const uint32_t *tokens, int N,
                                 int D);
/* dx[N x D] += input gradient; dw[D] += weight gradient. */
void qw_train_rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x,
                               const float *w, const float *rstd, int N, int D, int nt);
/* dx[N x nh*E] rotated back in place (the opposite angle). */
void qw_train_rope_backward(float *dx, const float *cosb, const float *sinb, int B, int T, int nh,
                            int E, int nt);
/* Causal GQA attention keeping probs[B x H x T x T] (zeros above the diagonal), each (sequence,
 * head) two whole T x T GEMMs: other GEMM shapes than the tiled evaluation kernel, so other
 * last bits; out[N x H*E]. */
void qw_train_attention_forward(float *out, float *probs, const float *q, const float *k,
                                const float *v, int B, int T, int H, int G, int E, int nt);
/* dq[N x H*E], dk, dv [N x G*E] overwritten; dscratch [nt x T x T]. */
void qw_train_attention_backward(float *dq, float *dk, float *dv, float *dscratch,
                                 const float *dout, const float *q, const float *k, const float *v,
                                 const float *probs, int B, int T, int H, int G, int E, int nt);
/* Query rows per tile of the tiled training attention below: a multiple of the fixed GEMM's
 * register tiles (6 and 8 rows) and of its 16-column panels, so that a tile's GEMMs have no edge
 * rows and, up to the last tile, no partial panel of keys. */
#define QW_TRAIN_ATT_TILE 48
/* Floats of saved for qw_train_attention_forward_tiled: per query row of every (sequence, head)
 * its softmax's max and 1/sum [B x H x T x 2]. */
size_t qw_train_attention_tiled_saved_floats(int B, int T, int H);
/* qw_train_attention_forward's out, bit for bit on the fixed-order GEMM, by query tiles of
 * QW_TRAIN_ATT_TILE rows: each tile's scores only up to its last query (key tiles above the
 * diagonal never computed), the same softmax of each row over the same keys in the same order,
 * and no T x T kept: the rows' max and 1/sum go to saved for the backward (FlashAttention-2,
 * arXiv 2307.08691, saves the logsumexp; its two parts give back the same bits). scratch:
 * qw_train_attention_tiled_scratch_floats(T, E, nt) floats. */
void qw_train_attention_forward_tiled(float *out, float *saved, float *scratch, const float *q,
                                      const float *k, const float *v, int B, int T, int H, int G,
                                      int E, int nt);
/* Floats of dscratch for qw_train_attention_backward_tiled, and of the forward's scratch: per
 * thread a tile's P and dS [2 x TILE x T] and K^T, V^T, K, Q, dO packed for the fixed GEMM
 * (5 x ~T x E); the forward uses a tile's P and K^T, V of each thread's share. */
size_t qw_train_attention_tiled_scratch_floats(int T, int E, int nt);
/* qw_train_attention_backward's dq, dk, dv, bit for bit on the fixed-order GEMM, from the saved
 * state of qw_train_attention_forward_tiled: each tile's probabilities recomputed, then its
 * dQ rows, and its dK, dV added in the query order of the whole-T x T backward. */
void qw_train_attention_backward_tiled(float *dq, float *dk, float *dv, float *dscratch,
                                       const float *dout, const float *q, const float *k,
                                       const float *v, const float *saved, int B, int T, int H,
                                       int G, int E, int nt);
/* dg, du [n] overwritten from dh (silu(g) = g s, s = 1/(1+e^-g), silu' = s (1 + g (1 - s))). */
void qw_train_swiglu_backward(float *dg, float *du, const float *dh, const float *g, const float *u,
                              size_t n, int nt);
/* logits[N x V] become softmax probabilities in place; losses[N] = -log p(target). */
void qw_train_crossentropy_forward(float *logits, float *losses, const uint32_t *targets, int N,
                                   int V, int nt);
/* probs[N x V] become dlogits = (probs - onehot(target)) * scale in place. */
void qw_train_crossentropy_backward(float *probs, const uint32_t *targets, int N, int V,
                                    float scale, int nt);
/* dx[N x in] = (or += when dx_accumulate; skipped when NULL) dy W; dW[out x in] += dy^T x. */
void qw_train_linear_backward(float *dx, int dx_accumulate, float *dW, const float *dy,
                              const float *x, const float *W, int N, int in, int out, int nt);
/* sum g^2 of g[n] in double over 64 fixed ranges, then in range order; NaN/Inf propagate. */
double qw_train_sumsq(const float *g, size_t n, int nt);
/* AdamW over n parameters (adamw.h qw_adamw_update); c1 = 1 - b1^t, c2 = 1 - b2^t. */
void qw_train_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float wd,
                    float b1, float b2, float eps, float c1, float c2, float grad_scale, int nt);
/* x to BF16, RNE, saturating to +-max finite: qk_codec_bf16's bits (tests/train), cheaper. */
float qw_round_bf16(float x);

/* ---------------------------------------------------------------- the table */

/* FP32 row-major [rows x cols] in the memory of the backend that allocated it. */
typedef struct qw_tensor {
    float *data;
    int64_t rows, cols;
} qw_tensor;

typedef struct qw_ops qw_ops;

/* One backend instance: its table, team size and its linear's scratch
 * (wscratch [threads x QW_GEMM_COLS x max_in] floats, owned). */
typedef struct qw_backend {
    const qw_ops *ops;
    int threads;
    float *wscratch;
    size_t wscratch_floats;
    void *impl; /* backend-private state (the CUDA context, ops_cuda.h); NULL on CPU */
    struct qw_convcache *convcache; /* CPU FP32 weight pieces kept (convcache.h); NULL: none */
    /* CPU seconds since init spent converting weight pieces and fake-quantizing activations
     * (the forward reads the difference around each call, profile.h); CUDA leaves them 0. */
    double convert_s, act_quant_s;
} qw_backend;

/* One entry per op for evaluation and training: saving for the backward is an argument
 * (rmsnorm's rstd). Two ops keep two entries: attention (the tiled kernel keeps no
 * probabilities; other GEMM shapes would change the goldens) and the embedding (host tokens and
 * any weight form vs backend tokens and an FP32 table). void entries note errors for score_rows. */
struct qw_ops {
    const char *name; /* "cpu" */
    /* bytes of backend memory, NULL on failure; free(NULL) is a no-op */
    void *(*alloc)(qw_backend *b, size_t bytes);
    void (*free)(qw_backend *b, void *p);
    void (*embedding)(qw_backend *b, qw_tensor *x, const uint32_t *tokens, const qw_weight *table);
    /* out [N x D] = RMSNorm(x) * w, rstd [N] kept unless NULL; out may equal x; w and the
     * RoPE tables may be host memory on every backend (CUDA keeps a device copy). */
    qs_status (*rmsnorm)(qw_backend *b, float *out, float *rstd, const float *x, const float *w,
                         int N, int D, float eps, qs_error *err);
    /* x [B*T x nh*E] rotated in place (qw_rope_forward). */
    qs_status (*rope)(qw_backend *b, float *x, const float *cosb, const float *sinb, int B, int T,
                      int nh, int E, qs_error *err);
    void (*attention)(qw_backend *b, qw_tensor *att, const qw_tensor *q, const qw_tensor *k,
                      const qw_tensor *v, float *scores, int H, int G, int E);
    /* h[n] = silu(g) * u; h may equal g. */
    qs_status (*swiglu)(qw_backend *b, float *h, const float *g, const float *u, size_t n,
                        qs_error *err);
    /* out[n] = x + y; out may equal x (the evaluation's in-place residual). */
    qs_status (*add)(qw_backend *b, float *out, const float *x, const float *y, size_t n,
                     qs_error *err);
    /* y [x->rows x w->rows]; xq scratch [x->rows x w->cols] for the activation format. */
    qs_status (*linear)(qw_backend *b, qw_tensor *y, const qw_tensor *x, const qw_weight *w,
                        const qw_act_quant *act, float *xq, qs_error *err);
    /* logits [x->rows x V] from the final-normed rows (separate so it may fuse the softmax). */
    qs_status (*lm_head)(qw_backend *b, qw_tensor *logits, const qw_tensor *x, const qw_weight *w,
                         const qw_act_quant *act, float *xq, qs_error *err);
    void (*logsoftmax)(qw_backend *b, qw_tensor *lp, const qw_tensor *logits);
    void (*sqnr_sums)(qw_backend *b, const qw_tensor *y, const qw_tensor *ref, double *signal,
                      double *noise);
    /* out[0] (backend memory) = qw_amax_forward of a rank's shard, before the MAX all-reduce
     * (which is the ranks' group's, worker/comm/comm.h, not the table's). */
    void (*amax)(qw_backend *b, const qw_tensor *x, float *out);
    /* dst[r*ld + c] (host) = src[r][c]: lm_head's vocabulary slices into one logits row. */
    void (*download)(qw_backend *b, float *dst, size_t ld, const qw_tensor *src);
    /* qw_score_rows_forward on logits and ref_lp in backend memory, targets and outputs [R] on
     * the host (CUDA reduces in another order); returns first the noted error of a void op
     * before it. Errors: QS_EINVAL (R or V < 1, a target >= V), the backend's. */
    qs_status (*score_rows)(qw_backend *b, const qw_tensor *logits, const uint32_t *targets,
                            const float *ref_lp, double *nll, double *kl, int32_t *argmax,
                            int32_t *ref_argmax, qs_error *err);

    /* ---- training: backend memory unless it says host; formulas of qw_train_<op>. Each
     * returns QS_OK or the backend's error (the CPU's only from fake_quant and rht). */
    qs_status (*upload)(qw_backend *b, void *dst, const void *src_host, size_t bytes,
                        qs_error *err);
    qs_status (*fetch)(qw_backend *b, void *dst_host, const void *src, size_t bytes, qs_error *err);
    qs_status (*copy)(qw_backend *b, void *dst, const void *src, size_t bytes, qs_error *err);
    qs_status (*zero)(qw_backend *b, void *p, size_t bytes, qs_error *err);
    qs_status (*gemm_abt)(qw_backend *b, float *C, const float *A, const float *Bm, int M, int Ncol,
                          int K, float beta, qs_error *err);
    /* gemm_abt of inputs the caller promises are exact in BF16 (bf16_exact.h): CUDA runs BF16
     * tensor cores with FP32 accumulation; the CPU runs gemm_abt (same bits). */
    qs_status (*gemm_abt_bf16)(qw_backend *b, float *C, const float *A, const float *Bm, int M,
                               int Ncol, int K, float beta, qs_error *err);
    qs_status (*transpose)(qw_backend *b, float *dst, const float *src, int rows, int cols,
                           qs_error *err);
    /* x[n] to BF16 in place (qw_round_bf16's bits). */
    qs_status (*round_bf16)(qw_backend *b, float *x, size_t n, qs_error *err);
    /* qk_rht of x[rows x k] along k in tiles of d, signs from seed, in place. */
    qs_status (*rht)(qw_backend *b, float *x, size_t rows, size_t k, int d, uint64_t seed,
                     qs_error *err);
    /* qk_fake_quant of x[rows x k], blocks along k, in place. */
    qs_status (*fake_quant)(qw_backend *b, const qk_format *fmt, const qk_quant_options *opt,
                            float *x, size_t rows, size_t k, qs_error *err);
    /* C[M x Ncol] = Aq Bq^T + beta C, A [M x K] and Bm [Ncol x K] quantized along K under (fa,
     * oa), (fb, ob) as fake_quant would, by a block-scaled GEMM (worker/train/recipe_path.h:
     * native where the device proved it, else exact BF16 emulation, tensor scales in alpha);
     * *path the qk_gemm_path taken. NULL where the backend has none (the CPU). QS_EUNSUPPORTED,
     * C untouched: formats or a shape it does not run (the caller fake-quantizes instead). */
    qs_status (*gemm_abt_quant)(qw_backend *b, float *C, const float *A, const qk_format *fa,
                                const qk_quant_options *oa, const float *Bm, const qk_format *fb,
                                const qk_quant_options *ob, int M, int Ncol, int K, float beta,
                                int *path, qs_error *err);
    /* ---- kept operands: a GEMM input quantized once into memory the caller keeps (a weight
     * from one optimizer step to the next, worker/train/wcache.h); NULL where a backend has
     * none */
    /* Bytes of backend memory quant_operand writes for x [rows x k] under fmt; 0 where the
     * backend keeps no operand of that format and shape (CUDA: where gemm_abt_quant would
     * decline it as B of an output rows wide). */
    size_t (*quant_operand_bytes)(qw_backend *b, const qk_format *fmt, size_t rows, size_t k);
    /* mem = x [rows x k] quantized along k under (fmt, opt), in the form this backend's GEMMs
     * read: without gemm_abt_quant_kept (the CPU) the fake-quantized FP32 values [rows x k],
     * an FP32 input of any GEMM (qk_fake_quant_into's bits); with it (CUDA) codes, block scales
     * and decode scale in cuBLASLt's layout, read only by gemm_abt_quant_kept. Errors: those of
     * the quantizer. */
    qs_status (*quant_operand)(qw_backend *b, const qk_format *fmt, const qk_quant_options *opt,
                               void *mem, const float *x, size_t rows, size_t k, qs_error *err);
    /* gemm_abt_quant with B [Ncol x K] already quantized by quant_operand into bq under fb: the
     * same C bits as gemm_abt_quant of the source B with its options. QS_EUNSUPPORTED, C
     * untouched, where gemm_abt_quant would decline (the caller quantizes B anew). */
    qs_status (*gemm_abt_quant_kept)(qw_backend *b, float *C, const float *A, const qk_format *fa,
                                     const qk_quant_options *oa, const void *bq,
                                     const qk_format *fb, int M, int Ncol, int K, float beta,
                                     int *path, qs_error *err);
    /* tokens [N] backend memory. */
    qs_status (*embedding_fwd)(qw_backend *b, float *out, const uint32_t *tokens, const float *emb,
                               int N, int D, qs_error *err);
    qs_status (*embedding_bwd)(qw_backend *b, float *demb, const float *dout,
                               const uint32_t *tokens, int N, int D, qs_error *err);
    qs_status (*rmsnorm_bwd)(qw_backend *b, float *dx, float *dw, const float *dout, const float *x,
                             const float *w, const float *rstd, int N, int D, qs_error *err);
    qs_status (*rope_bwd)(qw_backend *b, float *dx, const float *cosb, const float *sinb, int B,
                          int T, int nh, int E, qs_error *err);
    /* scratch: qw_train_attention_scratch_floats(b, T, H, E) floats, the backward's (free
     * while the forward runs), so that a layer's saved state is only what the backward reads. */
    qs_status (*attention_fwd)(qw_backend *b, float *out, float *probs, float *scratch,
                               const float *q, const float *k, const float *v, int B, int T, int H,
                               int G, int E, qs_error *err);
    /* dscratch: qw_train_attention_scratch_floats(b, T, H, E) floats. */
    qs_status (*attention_bwd)(qw_backend *b, float *dq, float *dk, float *dv, float *dscratch,
                               const float *dout, const float *q, const float *k, const float *v,
                               const float *probs, int B, int T, int H, int G, int E,
                               qs_error *err);
    qs_status (*swiglu_bwd)(qw_backend *b, float *dg, float *du, const float *dh, const float *g,
                            const float *u, size_t n, qs_error *err);
    /* targets [N] backend memory. */
    qs_status (*crossentropy_fwd)(qw_backend *b, float *logits, float *losses,
                                  const uint32_t *targets, int N, int V, qs_error *err);
    qs_status (*crossentropy_bwd)(qw_backend *b, float *probs, const uint32_t *targets, int N,
                                  int V, float scale, qs_error *err);
    qs_status (*linear_bwd)(qw_backend *b, float *dx, int dx_accumulate, float *dW, const float *dy,
                            const float *x, const float *W, int N, int in, int out, qs_error *err);
    /* *out (host) = qw_train_sumsq of g[n] (a backend may sum in another order). */
    qs_status (*sumsq)(qw_backend *b, const float *g, size_t n, double *out, qs_error *err);
    qs_status (*adamw)(qw_backend *b, float *p, const float *g, float *m, float *v, size_t n,
                       float lr, float wd, float b1, float b2, float eps, float c1, float c2,
                       float grad_scale, qs_error *err);
    /* ---- optional (NULL where a backend has none; the caller then copies, transposes and
     * calls gemm_abt): operands prepared in their sources' layout, in one pass */
    /* qw_train_gemm_tt: gemm_abt of operands in either layout; bf16: the caller promises
     * BF16-exact inputs, as to gemm_abt_bf16 (the CPU: the same bits either way).
     * QS_EUNSUPPORTED, C untouched, where the backend does not run it now (the CPU on the
     * openblas path, whose kernels sum other layouts in other orders); a call with M, Ncol and
     * K 0 asks that and does nothing else. */
    qs_status (*gemm_tt)(qw_backend *b, int bf16, float *C, int ta, const float *A, int lda, int tb,
                         const float *Bm, int ldb, int M, int Ncol, int K, float beta,
                         qs_error *err);
    /* dst[n] = src[n] to BF16 (round_bf16's bits); dst may equal src. */
    qs_status (*round_bf16_copy)(qw_backend *b, float *dst, const float *src, size_t n,
                                 qs_error *err);
    /* qk_rht_from: dst [rows x k] = rht along k (tiles of d, signs from seed) of src [rows x k]
     * or, transpose 1, of src [k x rows]^T, in one pass; *amax its largest finite |value|
     * (may be NULL). NULL where the backend has none (CUDA: transpose, then rht). */
    qs_status (*rht_from)(qw_backend *b, float *dst, const float *src, size_t rows, size_t k,
                          int transpose, int d, uint64_t seed, float *amax, qs_error *err);
    /* qk_fake_quant_into: dst [rows x k] = fake_quant of src [rows x k], src unchanged, in one
     * pass where fake_quant would follow a copy. NULL where the backend has none (CUDA). */
    qs_status (*fake_quant_into)(qw_backend *b, const qk_format *fmt, const qk_quant_options *opt,
                                 float *dst, const float *src, size_t rows, size_t k,
                                 qs_error *err);
    /* ---- a quantization method's online input transform (worker/method) */
    /* y[T x K] = rotate_tile(x / s): every row divided by s [K] elementwise (s NULL: none), then
     * the block Hadamard of qk_block_hadamard along K in tiles of `tile` (0: none), exactly
     * qk_smooth_apply (divide) then qk_block_hadamard, so every backend gives the CPU's bits; y
     * may equal x. s backend memory. NULL where a backend has none. Errors: QS_EINVAL (T or K
     * < 1, tile not a power of two >= 2, K not a multiple of tile), QS_EUNSUPPORTED (a tile
     * larger than the backend holds: CUDA 8192), the backend's. */
    qs_status (*method_input)(qw_backend *b, float *y, const float *x, int T, int K, const float *s,
                              int tile, qs_error *err);
};

/* Floats of the attention backward's scratch: CPU qw_train_attention_tiled_scratch_floats
 * (on the openblas path, which runs the whole-T kernels, [max(threads, H) x T x T], one T x T
 * per thread or head); CUDA [H x T], each row's D of one sequence. */
size_t qw_train_attention_scratch_floats(const qw_backend *b, int T, int H, int E);

/* Floats of what attention_fwd saves for attention_bwd (its probs argument) for B sequences of
 * T and H heads: CPU qw_train_attention_tiled_saved_floats, the CPU's openblas path the
 * probabilities [B x H x T x T], CUDA each row's logsumexp [B x H x T]. */
size_t qw_train_attention_saved_floats(const qw_backend *b, int B, int T, int H);

/* The CPU backend's table, the reference every other backend is checked against. */
const qw_ops *qw_ops_cpu(void);

/* b on the CPU with `threads` threads and scratch for linears of up to max_in inputs.
 * Errors: QS_EINVAL (threads < 1, max_in < 1), QS_ENOMEM. */
qs_status qw_backend_cpu_init(qw_backend *b, int threads, int max_in, qs_error *err);

/* The CPU numerics path recorded beside gemm_path: "cpu-qsweep-fixed2" (gemm_cpu.h: the same bits
 * on every x86-64 CPU; "fixed1" had libc's expf), or with QSWEEP_CPU_GEMM=openblas
 * "cpu-openblas-<version>-<core>" (e.g. "cpu-openblas-0.3.21-haswell"). Thread-safe. */
const char *qw_backend_cpu_path(void);

/* OpenBLAS's build configuration (openblas_get_config). */
const char *qw_backend_cpu_blas_config(void);

/* Frees the backend's scratch; a zeroed struct is a no-op. */
void qw_backend_release(qw_backend *b);

#endif
