/* The engine's operations: one table (qw_ops) of what the Llama forward pass of evaluation, the
 * training forward and backward, and the optimizer call, and the CPU backend's functions
 * behind it.
 *
 * Two levels, as llm.c splits train_gpt2.c:
 * - free functions qw_<op>_forward (evaluation) and qw_train_<op>_forward/_backward (training)
 *   over raw float*, the shapes in each comment (T = tokens, D = dim, F = hidden_dim, H = heads,
 *   G = kv heads, E = head_dim, V = vocab). They are the CPU reference: deterministic, and
 *   bit-identical for any thread count `nt`. Where training and evaluation compute the same
 *   thing (RMSNorm, RoPE, SwiGLU, the linear's GEMM pieces) the arithmetic is the same, bit for
 *   bit; training's attention keeps its probabilities for the backward.
 * - the table qw_ops, whose entries take backend memory (qw_tensor handles for evaluation, raw
 *   pointers for training) so that the CUDA backend (ops_cuda.h) plugs in with device pointers;
 *   the Llama block (block.c: forward and backward) is written once over the table, and the
 *   evaluation forward (forward.c) and the trainable model (worker/train/tmodel.c) both run it.
 *   The CPU table (qw_ops_cpu) calls the free functions.
 *
 * A backend owns its buffers: the run state (runstate.h) and the trainable model take their one
 * allocation from the backend's alloc, and the per-thread scratch a linear needs (weight pieces
 * converted from the checkpoint's dtype or dequantized from packed FP4) lives in the qw_backend
 * struct.
 *
 * Every float in an activation is FP32, row-major, rows = tokens. */
#ifndef QW_OPS_H
#define QW_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "quant.h"
#include "weights.h"

/* Query rows per attention tile: scores are computed tile by tile, each against the keys up to
 * its last query only, which skips most of the masked upper triangle and keeps the scores
 * buffer at QW_ATT_TILE x T per thread instead of T x T. */
#define QW_ATT_TILE 64

/* Output columns per GEMM piece. The pieces are fixed by the shape alone, never by the thread
 * count: OpenBLAS picks its kernel path from the call's dimensions (on Haswell/Zen kernels a
 * narrower call takes another path, and the sums change in the last bits), so every output
 * element must come from the same call, with the same dimensions, whatever the team size (the
 * fixed-order GEMM of gemm_fixed.h gives each element's bits whatever the call). A
 * weight that is not FP32 in place is converted (or dequantized) one piece of QW_GEMM_COLS rows
 * at a time into the calling thread's scratch, right before that piece's GEMM. */
#define QW_GEMM_COLS 128

/* ---------------------------------------------------------------- CPU reference functions */

/* out[T x D] = table rows tokens[0..T-1] as FP32 (an embedding lookup: the weight in any
 * form, qw_weight_rows_f32). tokens must be < table->rows (checked by the caller). */
void qw_embedding_forward(float *out, const uint32_t *tokens, int T, const qw_weight *table,
                          int nt);

/* out[T x D] = x / sqrt(mean(x^2) + eps) * w, per row (HF LlamaRMSNorm; the sum of squares in
 * double). w [D]. out may equal x. */
void qw_rmsnorm_forward(float *out, const float *x, const float *w, int T, int D, float eps,
                        int nt);

/* Rotates x [T x n_heads*E] in place, HF rotate_half layout: for i < E/2 the pair
 * (x[i], x[i+E/2]) turns by angle pos*inv_freq[i] (modeling_llama.apply_rotary_pos_emb).
 * cosb, sinb [T x E/2]: the tables of qw_rope_tables for positions 0..T-1. */
void qw_rope_forward(float *x, const float *cosb, const float *sinb, int T, int n_heads, int E,
                     int nt);

/* RoPE tables cos/sin [T x E/2] of angle t*inv_freq[i], inv_freq from the config: HF
 * _compute_default_rope_parameters (1/theta^(2i/E)) and, when rope_factor > 0,
 * _compute_llama3_parameters (Llama 3.1: long wavelengths divided by factor, a smooth blend
 * between low_freq and high_freq wavelengths). */
void qw_rope_tables(const qw_config *c, int T, float *cosb, float *sinb);

/* Causal grouped-query attention: att[T x H*E] from q [T x H*E], k, v [T x G*E] (rotated).
 * Per head h (kv head g = h / (H/G)): att_h = softmax_causal(Q_h K_g^T / sqrt(E)) V_g,
 * computed per (head, query tile of QW_ATT_TILE rows); the work items are independent, so the
 * result does not depend on nt. A row's softmax is e^(s - max) by qw_cpu_exp_shift_sum
 * (gemm_cpu.h; on the fixed path the same bits on every x86-64 CPU), each times 1 / their
 * sum. scores: [nt x QW_ATT_TILE x T] scratch. */
void qw_attention_forward(float *att, const float *q, const float *k, const float *v,
                          float *scores, int T, int H, int G, int E, int nt);

/* out[i] = silu(g[i]) * u[i] over n elements (SwiGLU; silu(x) = x / (1 + exp(-x)), by
 * qw_cpu_silu_mul, gemm_cpu.h). out may equal g (the forward pass overwrites the gate; a
 * training forward keeps it). */
void qw_swiglu_forward(float *out, const float *g, const float *u, size_t n, int nt);

/* x[i] += y[i] over n elements (the residual connection). */
void qw_residual_forward(float *x, const float *y, size_t n, int nt);

/* y[T x out] = x[T x in] * W^T, W [out x in] FP32 row-major (HF layout): the GEMM pieces of
 * QW_GEMM_COLS output columns, one single-threaded qw_cpu_sgemm each (gemm_cpu.h: the
 * fixed-order GEMM or OpenBLAS; under the fixed-order GEMM a linear of few pieces also splits
 * its rows between the threads); bit-identical for any nt. */
void qw_matmul_forward(float *y, const float *x, const float *W, int T, int in, int out, int nt);

/* The activation format of a linear's input (W4A4); fmt NULL = FP32 input. The linear's
 * tensor_index is added to opt.tensor_id (stochastic rounding streams, policy.h). */
typedef struct qw_act_quant {
    const qk_format *fmt;
    qk_quant_options opt;
    /* A sharded input's global per-tensor amax (tensor parallel): when non-NULL, [1] float in
     * the backend's memory, the MAX-all-reduce of every rank's amax of its columns; the
     * format's tensor scale comes from it (qk_quant_options.tensor_amax_given), so every rank
     * quantizes with the scale the unsharded input has. NULL: the input's own amax. */
    const float *tensor_amax;
} qw_act_quant;

/* One linear: y[T x w->rows] = q(x)[T x w->cols] * W^T.
 * - act (may be NULL or have fmt NULL): x is first copied into xq [T x in] and fake-quantized
 *   there (rows = tokens, blocks along in), as the W4A4 sweeps of "Diagnosing FP4 Inference" do;
 * - W in any form (weights.h): FP32 in place goes straight to the GEMM; the checkpoint's dtype
 *   and packed FP4 are converted piece by piece into wscratch [nt x QW_GEMM_COLS x in], giving
 *   exactly the FP32 values a load-time FP32 copy (or a fake-quantized copy) would hold, so the
 *   GEMM's result is the same bits.
 * Errors: those of qk_fake_quant and qk_dequantize (the caller names the linear). */
qs_status qw_linear_forward(float *y, const float *x, int T, const qw_weight *w,
                            const qw_act_quant *act, float *xq, float *wscratch, int nt,
                            qs_error *err);

/* SQNR sums of y against the reference ref, both [n]: *signal = sum(ref^2),
 * *noise = sum((y - ref)^2), in double, added in element order by one thread: the same bits for
 * any team size (and those of the engine's single-threaded probe before the ops table). Cheap
 * next to the two GEMMs the probe runs per linear. */
void qw_sqnr_sums_forward(const float *y, const float *ref, size_t n, double *signal,
                          double *noise);

/* Log-softmax of one row of logits l[V]: returns lse = max + log(sum exp(l - max)) in double,
 * and when lp != NULL writes lp[i] = (float)(l[i] - lse). */
double qw_logsoftmax_row(const float *l, int V, float *lp);

/* lp[R x V] = log-softmax of each row of logits[R x V] (qw_logsoftmax_row). */
void qw_logsoftmax_forward(float *lp, const float *logits, int R, int V, int nt);

/* The evaluation's scores of the R rows of logits [R x V] (eval.h's definitions, after
 * llama.cpp's tools/perplexity/perplexity.cpp), one row per thread's turn, each row's result
 * independent of nt. For row r with lse = qw_logsoftmax_row(l_r) (double):
 * - targets [R] given: nll[r] = lse - l_r[targets[r]];
 * - argmax[r]: the first index of the row's maximum (the evaluated model's top-1);
 * - ref_lp [R x V] (a baseline's FP32 log-probabilities) given: kl[r] = sum_i exp(p_i)
 *   (p_i - q_i) in double in vocabulary order, q_i = (float)(l_i - lse) (the FP32 log-probs
 *   qw_logsoftmax_row stores), and ref_argmax[r] the first index of p's maximum; without it
 *   kl[r] = 0 and ref_argmax[r] = -1.
 * Any output [R] may be NULL. Errors: QS_EINVAL (R or V < 1, a target >= V: names its row). */
qs_status qw_score_rows_forward(const float *logits, int R, int V, const uint32_t *targets,
                                const float *ref_lp, double *nll, double *kl, int32_t *argmax,
                                int32_t *ref_argmax, int nt, qs_error *err);

/* Largest |x| over x[n], NaN and +-Inf ignored: qk_joint_amax of the one tensor, so a given
 * amax equals the own amax the quantizer would find. Serial; 0 for n == 0. */
float qw_amax_forward(const float *x, size_t n);

/* ---------------------------------------------------------------- CPU training functions */

/* The training half of the CPU reference (ops_cpu_train.c), llm.c's train_gpt2.c layout: each
 * layer a pair of free functions, _forward and _backward, over raw arrays. Shapes: B sequences of
 * T tokens, N = B*T rows (sequence b's token t is row b*T + t); D dim, H heads, G kv heads
 * (H % G == 0), E head_dim (even), V vocab; linear weights W [out x in] (y = x W^T). Backward
 * functions ADD into parameter gradients (dw, dW, demb: gradient accumulation) and say per
 * argument whether an input gradient is added to or overwritten. The forward formulas are the
 * evaluation's (modeling_llama.py: RMSNorm, RoPE and SwiGLU are the very functions above, per
 * row); the backward is their derivative, checked against PyTorch autograd and central
 * differences (tests/train). Nothing allocates; bit-identical for any thread count nt >= 1. */

/* Output columns per GEMM piece of the training GEMMs (one single-threaded BLAS call each). */
#define QW_TRAIN_GEMM_COLS 128

/* C[M x Ncol] = A[M x K] Bm[Ncol x K]^T + beta C (both operands K-contiguous, "TN"). */
void qw_train_gemm_abt(float *C, const float *A, const float *Bm, int M, int Ncol, int K,
                       float beta, int nt);
/* dst[cols x rows] = src[rows x cols]^T. */
void qw_train_transpose(float *dst, const float *src, int rows, int cols, int nt);
/* out[N x D] = emb[tokens[i]] (emb [V x D]); token ids must be < V (callers check). */
void qw_train_embedding_forward(float *out, const uint32_t *tokens, const float *emb, int N, int D);
/* demb[V x D] += scatter of dout[N x D] by token, rows added in token order. */
void qw_train_embedding_backward(float *demb, const float *dout, const uint32_t *tokens, int N,
                                 int D);
/* qw_rmsnorm_forward, also saving rstd[N] = 1/sqrt(mean(x^2) + eps). */
void qw_train_rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int N, int D,
                              float eps, int nt);
/* dx[N x D] += input gradient; dw[D] += weight gradient. */
void qw_train_rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x,
                               const float *w, const float *rstd, int N, int D, int nt);
/* qw_rope_forward over B sequences: row i has position i % T (cosb, sinb [T x E/2]). */
void qw_train_rope_forward(float *x, const float *cosb, const float *sinb, int B, int T, int nh,
                           int E, int nt);
/* Gradient of the rotation, in place on dx[N x nh*E] (rotation by the opposite angle). */
void qw_train_rope_backward(float *dx, const float *cosb, const float *sinb, int B, int T, int nh,
                            int E, int nt);
/* Causal GQA attention of B sequences saving what the backward needs: q[N x H*E], k, v
 * [N x G*E]; probs[B x H x T x T] the softmax(q k^T / sqrt(E)) (zeros above the diagonal),
 * one (sequence, head) per task as two whole T x T GEMMs (the evaluation's tiled
 * qw_attention_forward keeps no probabilities); out[N x H*E]. */
void qw_train_attention_forward(float *out, float *probs, const float *q, const float *k,
                                const float *v, int B, int T, int H, int G, int E, int nt);
/* dq[N x H*E], dk, dv [N x G*E] overwritten; dscratch [nt x T x T]. */
void qw_train_attention_backward(float *dq, float *dk, float *dv, float *dscratch,
                                 const float *dout, const float *q, const float *k, const float *v,
                                 const float *probs, int B, int T, int H, int G, int E, int nt);
/* dg, du [n] overwritten from dh (silu(g) = g s, s = 1/(1+e^-g), silu' = s (1 + g (1 - s))). */
void qw_train_swiglu_backward(float *dg, float *du, const float *dh, const float *g, const float *u,
                              size_t n, int nt);
/* Softmax of logits[N x V] in place (becoming the probabilities) and losses[N] =
 * -log p(targets[i]) from the logits (log-sum-exp in double). */
void qw_train_crossentropy_forward(float *logits, float *losses, const uint32_t *targets, int N,
                                   int V, int nt);
/* probs[N x V] becomes dlogits = (probs - onehot(target)) * scale in place. */
void qw_train_crossentropy_backward(float *probs, const uint32_t *targets, int N, int V,
                                    float scale, int nt);
/* dx[N x in] = (or += when dx_accumulate) dy W (skipped when dx is NULL); dW[out x in] +=
 * dy^T x. The unquantized linear's backward (its forward is qw_train_gemm_abt). */
void qw_train_linear_backward(float *dx, int dx_accumulate, float *dW, const float *dy,
                              const float *x, const float *W, int N, int in, int out, int nt);
/* sum g^2 over n elements, in double over 64 fixed contiguous ranges and then in range order,
 * so the bits do not depend on nt. NaN/Inf propagate. */
double qw_train_sumsq(const float *g, size_t n, int nt);
/* One AdamW update of n parameters p with gradients g * grad_scale and moments m, v (Loshchilov
 * & Hutter, ICLR 2019, Algorithm 2, as torch.optim.AdamW): m = b1 m + (1-b1) g; v = b2 v +
 * (1-b2) g^2; p -= lr wd p; p -= lr (m / c1) / (sqrt(v / c2) + eps), c1 = 1 - b1^t, c2 = 1 - b2^t
 * given by the caller. */
void qw_train_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float wd,
                    float b1, float b2, float eps, float c1, float c2, float grad_scale, int nt);
/* x rounded to BF16, RNE, saturating to +-max finite as the numeric core's BF16 codec does
 * (qk_codec_bf16 in element.h, bit-identical: tests/train): inline because the codec's general
 * minifloat encoder costs more than the GEMM it feeds. */
float qw_round_bf16(float x);

/* ---------------------------------------------------------------- the table */

/* A backend-neutral handle: `data` points into memory of the backend that allocated it (host
 * for the CPU backend, device for CUDA); FP32 row-major [rows x cols]. */
typedef struct qw_tensor {
    float *data;
    int64_t rows, cols;
} qw_tensor;

typedef struct qw_ops qw_ops;

/* One backend instance: its table, its team size, and the scratch its linear needs
 * (wscratch [threads x QW_GEMM_COLS x max_in] floats, owned by the backend). */
typedef struct qw_backend {
    const qw_ops *ops;
    int threads;
    float *wscratch;
    size_t wscratch_floats;
    void *impl; /* backend-private state (the CUDA backend's context, ops_cuda.h); NULL on CPU */
    /* the CPU linear's FP32 weight pieces kept between calls (convcache.h), the owner's; NULL:
     * every piece converted on every call */
    struct qw_convcache *convcache;
    /* Seconds its linears spent, added up since init (the CPU backend; the CUDA one leaves
     * them 0): converting weight pieces to FP32 (the wall time of each linear's GEMM region in
     * the ratio of the team's summed conversion to conversion + GEMM seconds) and
     * fake-quantizing activations. The forward pass reads the difference around each call
     * (profile.h). */
    double convert_s, act_quant_s;
} qw_backend;

/* The operations of the forward pass. Every qw_tensor was allocated by this backend (alloc).
 * Shapes as the free functions above.
 *
 * The forward ops have two entry sets, and block.c / llama_head.c pick one by io.save: the
 * evaluation entries (embedding, rmsnorm, rope, attention, swiglu, residual: qw_tensor
 * handles, in place, no status; the CUDA backend keeps its error for the caller to read) and
 * the training forward entries (embedding_fwd, rmsnorm_fwd, rope_fwd, attention_fwd,
 * swiglu_fwd, add: raw pointers, a status, out of place, keeping what the backward needs).
 * They compute the same formulas. Attention's two kernels must differ: the evaluation's tiles
 * its queries (QW_ATT_TILE rows against the keys up to the tile's last query) and keeps no
 * probabilities; the training's computes each (sequence, head) as two whole T x T GEMMs and
 * keeps them. The BLAS calls have other dimensions, so their sums differ in the last bits, and
 * one kernel for both would change the goldens or the training finals. The embedding takes
 * the weight in any form and host tokens (evaluation) or an FP32 table and tokens in backend
 * memory (training, whose backward scatters by the same tokens). On the CPU, RMSNorm, RoPE and
 * SwiGLU run the same functions in both sets, and the residual the same one addition. */
struct qw_ops {
    const char *name; /* "cpu" */
    /* Buffers: bytes of backend memory, NULL on failure; free(NULL) is a no-op. */
    void *(*alloc)(qw_backend *b, size_t bytes);
    void (*free)(qw_backend *b, void *p);
    void (*embedding)(qw_backend *b, qw_tensor *x, const uint32_t *tokens, const qw_weight *table);
    void (*rmsnorm)(qw_backend *b, qw_tensor *out, const qw_tensor *x, const float *w, float eps);
    void (*rope)(qw_backend *b, qw_tensor *x, const float *cosb, const float *sinb, int n_heads,
                 int E);
    void (*attention)(qw_backend *b, qw_tensor *att, const qw_tensor *q, const qw_tensor *k,
                      const qw_tensor *v, float *scores, int H, int G, int E);
    void (*swiglu)(qw_backend *b, qw_tensor *out, const qw_tensor *g, const qw_tensor *u);
    void (*residual)(qw_backend *b, qw_tensor *x, const qw_tensor *y);
    /* y [x->rows x w->rows]; xq scratch [x->rows x w->cols] for the activation format. */
    qs_status (*linear)(qw_backend *b, qw_tensor *y, const qw_tensor *x, const qw_weight *w,
                        const qw_act_quant *act, float *xq, qs_error *err);
    /* lm_head: logits [x->rows x V] from the final-normed rows x (a linear over the head's
     * weight, kept separate so a backend can fuse it with the log-softmax). */
    qs_status (*lm_head)(qw_backend *b, qw_tensor *logits, const qw_tensor *x, const qw_weight *w,
                         const qw_act_quant *act, float *xq, qs_error *err);
    void (*logsoftmax)(qw_backend *b, qw_tensor *lp, const qw_tensor *logits);
    void (*sqnr_sums)(qw_backend *b, const qw_tensor *y, const qw_tensor *ref, double *signal,
                      double *noise);
    /* out[0] (backend memory, one float) = qw_amax_forward of x: the local amax of a rank's
     * shard of a tensor, before the MAX all-reduce. The all-reduces of a tensor-parallel
     * group are no entry of the table: the ranks share one group of the ranks interface
     * (worker/comm/comm.h: CPU or NCCL ranks, qw_rank.group), whatever their backend. */
    void (*amax)(qw_backend *b, const qw_tensor *x, float *out);
    /* dst[r*ld + c] = src[r][c] for the rows and columns of src: src copied to host memory
     * with row stride ld floats (lm_head's vocabulary slices gathered into one logits row). */
    void (*download)(qw_backend *b, float *dst, size_t ld, const qw_tensor *src);
    /* The evaluation's scores of the rows of logits [R x V] (qw_score_rows_forward's
     * definitions): logits and ref_lp (the baseline's log-probs [R x V], or NULL) in backend
     * memory, targets [R] and the outputs [R] (each may be NULL) in host memory. The CPU's
     * are qw_score_rows_forward's bits; the CUDA backend's (ops_cuda.h qw_cuda_score_rows)
     * reduce in another order. A backend also returns here the first error of a void op of
     * the forward pass before it (the CUDA backend's noted error). Errors: QS_EINVAL (R or
     * V < 1, a target >= V), the backend's. */
    qs_status (*score_rows)(qw_backend *b, const qw_tensor *logits, const uint32_t *targets,
                            const float *ref_lp, double *nll, double *kl, int32_t *argmax,
                            int32_t *ref_argmax, qs_error *err);

    /* ---- training: the forward that saves activations, the backward, the optimizer and the
     * recipe linear's quantization points. Every pointer is backend memory (host for the CPU
     * backend, device for CUDA) unless it says host; shapes and formulas are those of the CPU
     * training functions above (qw_train_<op>). Each returns QS_OK or the backend's error (the
     * CPU backend cannot fail, except fake_quant and rht with the numeric core's errors). */
    /* dst (backend) = src_host, bytes. */
    qs_status (*upload)(qw_backend *b, void *dst, const void *src_host, size_t bytes,
                        qs_error *err);
    /* dst_host = src (backend), bytes. */
    qs_status (*fetch)(qw_backend *b, void *dst_host, const void *src, size_t bytes, qs_error *err);
    /* dst = src, both backend memory; zero: bytes of p set to 0. */
    qs_status (*copy)(qw_backend *b, void *dst, const void *src, size_t bytes, qs_error *err);
    qs_status (*zero)(qw_backend *b, void *p, size_t bytes, qs_error *err);
    /* out[n] = a + b (the residual of the training forward, which keeps both inputs). */
    qs_status (*add)(qw_backend *b, float *out, const float *x, const float *y, size_t n,
                     qs_error *err);
    qs_status (*gemm_abt)(qw_backend *b, float *C, const float *A, const float *Bm, int M, int Ncol,
                          int K, float beta, qs_error *err);
    /* gemm_abt whose two inputs the caller promises are exact in BF16 (every value a BF16
     * number: worker/train/bf16_exact.h), so a backend may run it with BF16 operands and FP32
     * accumulation. The CPU entry is gemm_abt itself (same bits); CUDA converts both inputs to
     * BF16 on the device (no rounding) and runs cublasGemmEx on the tensor cores. */
    qs_status (*gemm_abt_bf16)(qw_backend *b, float *C, const float *A, const float *Bm, int M,
                               int Ncol, int K, float beta, qs_error *err);
    qs_status (*transpose)(qw_backend *b, float *dst, const float *src, int rows, int cols,
                           qs_error *err);
    /* x[n] rounded to BF16 in place (qw_round_bf16's bits). */
    qs_status (*round_bf16)(qw_backend *b, float *x, size_t n, qs_error *err);
    /* The randomized Hadamard transform of x[rows x k] along k in tiles of d (qk_rht, signs
     * from seed), in place. */
    qs_status (*rht)(qw_backend *b, float *x, size_t rows, size_t k, int d, uint64_t seed,
                     qs_error *err);
    /* Fake quantization of x[rows x k], blocks along k (qk_fake_quant), in place. */
    qs_status (*fake_quant)(qw_backend *b, const qk_format *fmt, const qk_quant_options *opt,
                            float *x, size_t rows, size_t k, qs_error *err);
    /* tokens: backend memory [N]. */
    qs_status (*embedding_fwd)(qw_backend *b, float *out, const uint32_t *tokens, const float *emb,
                               int N, int D, qs_error *err);
    qs_status (*embedding_bwd)(qw_backend *b, float *demb, const float *dout,
                               const uint32_t *tokens, int N, int D, qs_error *err);
    qs_status (*rmsnorm_fwd)(qw_backend *b, float *out, float *rstd, const float *x, const float *w,
                             int N, int D, float eps, qs_error *err);
    qs_status (*rmsnorm_bwd)(qw_backend *b, float *dx, float *dw, const float *dout, const float *x,
                             const float *w, const float *rstd, int N, int D, qs_error *err);
    qs_status (*rope_fwd)(qw_backend *b, float *x, const float *cosb, const float *sinb, int B,
                          int T, int nh, int E, qs_error *err);
    qs_status (*rope_bwd)(qw_backend *b, float *dx, const float *cosb, const float *sinb, int B,
                          int T, int nh, int E, qs_error *err);
    qs_status (*attention_fwd)(qw_backend *b, float *out, float *probs, const float *q,
                               const float *k, const float *v, int B, int T, int H, int G, int E,
                               qs_error *err);
    /* dscratch: qw_train_attention_scratch_floats(b, T, H) floats. */
    qs_status (*attention_bwd)(qw_backend *b, float *dq, float *dk, float *dv, float *dscratch,
                               const float *dout, const float *q, const float *k, const float *v,
                               const float *probs, int B, int T, int H, int G, int E,
                               qs_error *err);
    qs_status (*swiglu_fwd)(qw_backend *b, float *h, const float *g, const float *u, size_t n,
                            qs_error *err);
    qs_status (*swiglu_bwd)(qw_backend *b, float *dg, float *du, const float *dh, const float *g,
                            const float *u, size_t n, qs_error *err);
    /* targets: backend memory [N]. */
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
};

/* Floats of the attention backward's scratch on backend b for T tokens and H heads:
 * [max(threads, H) x T x T] (the CPU uses one T x T per thread, CUDA one per head). */
size_t qw_train_attention_scratch_floats(const qw_backend *b, int T, int H);

/* The CPU backend's table (the reference every other backend is checked against). */
const qw_ops *qw_ops_cpu(void);

/* Sets up b for the CPU backend with `threads` (>= 1) threads and the weight-piece scratch for
 * linears of up to max_in inputs. Errors: QS_EINVAL (threads < 1, max_in < 1), QS_ENOMEM. */
qs_status qw_backend_cpu_init(qw_backend *b, int threads, int max_in, qs_error *err);

/* The CPU backend's numerics path, recorded in results beside gemm_path. On the fixed path (the
 * default, gemm_cpu.h: the fixed-order GEMM and exponential): "cpu-qsweep-fixed2", the same
 * bits on every x86-64 CPU (gemm_fixed.h, expf_fixed.h), so it names no CPU ("fixed1" was the
 * fixed-order GEMM with the C library's expf, whose results differ in the last bits). With QSWEEP_CPU_GEMM=openblas: the GEMM library, its
 * version and the kernel family it picked for this CPU, "cpu-openblas-<version>-<core>" in
 * lower case (the version from openblas_get_config, the core from openblas_get_corename: e.g.
 * "cpu-openblas-0.3.21-haswell"); OpenBLAS's kernel families sum in different orders, so two
 * paths' results differ in the last bits. Thread-safe. */
const char *qw_backend_cpu_path(void);

/* OpenBLAS's build configuration (openblas_get_config: version, DYNAMIC_ARCH, core, ...). */
const char *qw_backend_cpu_blas_config(void);

/* Frees the backend's scratch; a zeroed struct is a no-op. */
void qw_backend_release(qw_backend *b);

#endif
