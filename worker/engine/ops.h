/* The engine's operations: one table (qw_ops) of what the Llama forward pass (and, later, the
 * backward pass and the optimizer) calls, and the CPU backend's functions behind it.
 *
 * Two levels, as llm.c splits train_gpt2.c:
 * - free functions qw_<op>_forward over raw float*, the shapes in each comment (T = tokens,
 *   D = dim, F = hidden_dim, H = heads, G = kv heads, E = head_dim, V = vocab). They are the
 *   CPU reference: deterministic, and bit-identical for any thread count `nt`. Backward
 *   functions (qw_<op>_backward) go beside them in files of their own (worker/engine/<op>_backward.c).
 * - the table qw_ops, whose entries take backend-neutral handles (qw_tensor: a pointer into
 *   memory the backend allocated, with its shape) so that a CUDA backend can plug in
 *   with device pointers; the forward pass (forward.c) is written once over the table. The CPU
 *   table (qw_ops_cpu) calls the free functions.
 *
 * A backend owns its buffers: the run state (runstate.h) takes its one allocation from the
 * backend's alloc, and the per-thread scratch a linear needs (weight pieces converted from the
 * checkpoint's dtype or dequantized from packed FP4) lives in the qw_backend struct.
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
 * element must come from the same call, with the same dimensions, whatever the team size. A
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
 * result does not depend on nt. scores: [nt x QW_ATT_TILE x T] scratch. */
void qw_attention_forward(float *att, const float *q, const float *k, const float *v,
                          float *scores, int T, int H, int G, int E, int nt);

/* out[i] = silu(g[i]) * u[i] over n elements (SwiGLU; silu(x) = x / (1 + exp(-x))). out may
 * equal g (the forward pass overwrites the gate; a training forward keeps it). */
void qw_swiglu_forward(float *out, const float *g, const float *u, size_t n, int nt);

/* x[i] += y[i] over n elements (the residual connection). */
void qw_residual_forward(float *x, const float *y, size_t n, int nt);

/* y[T x out] = x[T x in] * W^T, W [out x in] FP32 row-major (HF layout): the GEMM pieces of
 * QW_GEMM_COLS output columns, one single-threaded cblas_sgemm each; bit-identical for any nt. */
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

/* Largest |x| over x[n], NaN and +-Inf ignored: qk_joint_amax of the one tensor, so a given
 * amax equals the own amax the quantizer would find. Serial; 0 for n == 0. */
float qw_amax_forward(const float *x, size_t n);

/* ---------------------------------------------------------------- the table */

/* A backend-neutral handle: `data` points into memory of the backend that allocated it (host
 * for the CPU backend, device for CUDA); FP32 row-major [rows x cols]. */
typedef struct qw_tensor {
    float *data;
    int64_t rows, cols;
} qw_tensor;

typedef struct qw_ops qw_ops;

/* Reductions of an all-reduce over the ranks of a tensor-parallel group. */
typedef enum qw_reduce {
    QW_REDUCE_SUM = 0, /* partial outputs of a row-parallel linear (o_proj, down_proj) */
    QW_REDUCE_MAX = 1, /* per-tensor amax of a sharded tensor (FP4 tensor scale) */
} qw_reduce;

/* One backend instance: its table, its team size, and the scratch its linear needs
 * (wscratch [threads x QW_GEMM_COLS x max_in] floats, owned by the backend). */
typedef struct qw_backend {
    const qw_ops *ops;
    int threads;
    float *wscratch;
    size_t wscratch_floats;
    void *impl; /* backend-private state (the CUDA backend's context, ops_cuda.h); NULL on CPU */
} qw_backend;

/* The operations of the forward pass. Every qw_tensor was allocated by this backend (alloc).
 * Shapes as the free functions above. */
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
     * shard of a tensor, before the MAX all-reduce. */
    void (*amax)(qw_backend *b, const qw_tensor *x, float *out);
    /* In place over a tensor-parallel group: ranks[0..n-1] are the backends of the group's
     * ranks (each of this table) and x[i] rank i's tensor, all of one shape; afterwards every
     * x[i] holds the elementwise reduction over the n ranks. CPU: one sum (or max) per
     * element in rank order 0, 1, ..., n-1, so the result is deterministic and the same on
     * every rank; NCCL: ncclAllReduce in a group call. Errors: QS_EINVAL (n < 1, shapes
     * differ), the communicator's errors. */
    qs_status (*allreduce)(qw_backend *const *ranks, int n, qw_tensor *const *x, qw_reduce op,
                           qs_error *err);
    /* dst[r*ld + c] = src[r][c] for the rows and columns of src: src copied to host memory
     * with row stride ld floats (lm_head's vocabulary slices gathered into one logits row). */
    void (*download)(qw_backend *b, float *dst, size_t ld, const qw_tensor *src);
};

/* The CPU backend's table (the reference every other backend is checked against). */
const qw_ops *qw_ops_cpu(void);

/* Sets up b for the CPU backend with `threads` (>= 1) threads and the weight-piece scratch for
 * linears of up to max_in inputs. Errors: QS_EINVAL (threads < 1, max_in < 1), QS_ENOMEM. */
qs_status qw_backend_cpu_init(qw_backend *b, int threads, int max_in, qs_error *err);

/* Frees the backend's scratch; a zeroed struct is a no-op. */
void qw_backend_release(qw_backend *b);

#endif
