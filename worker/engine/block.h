/* One Llama decoder block (HF LlamaDecoderLayer), forward and backward, written once over the
 * ops table for evaluation (forward.c: one rank or N tensor-parallel ranks) and training
 * (worker/train/tmodel.c):
 *   mid = res + o(attn(rope(q(rms1(res))), rope(k(rms1(res))), v(rms1(res))))
 *   out = mid + down(silu(gate(rms2(mid))) * up(rms2(mid)))
 * The linears are the caller's hooks (policy linear and probe, or recipe linear; o_proj and
 * down_proj may go through a row-parallel hook that sees every rank). qw_block_io.save keeps
 * what the backward needs: 1/rms, attention's probabilities, out-of-place residuals.
 * Shapes: N = B*T rows, D dim, F hidden_dim, H heads, G kv heads, E head_dim of the io's config
 * (a rank's shard under tensor parallelism). */
#ifndef QW_BLOCK_H
#define QW_BLOCK_H

#include "checkpoint.h"
#include "error.h"
#include "ops.h"
#include "profile.h"

/* Linear kinds of a block in HF order (the engine's QW_LINEAR_* and the trainer's l*7 + kind). */
enum { QW_BLOCK_Q, QW_BLOCK_K, QW_BLOCK_V, QW_BLOCK_O, QW_BLOCK_GATE, QW_BLOCK_UP, QW_BLOCK_DOWN };
/* The kind llama_head.h passes the linear hooks for lm_head, with layer n_layers. */
#define QW_BLOCK_LM_HEAD 7

/* One rank's block buffers (backend memory). Without save res, mid and out are one residual
 * stream x [N x D] updated in place, ln2 may equal ln1, h equals g, and scores is the tiled
 * attention's scratch; with save each is its own and kept for qw_block_backward, scores
 * excepted (the backward's attention scratch, free while the forward runs). */
typedef struct qw_block_io {
    qw_backend *be;
    const qw_config *cfg;
    int B, T;
    int save;
    const float *norm1, *norm2;       /* input_layernorm, post_attention_layernorm weights [D] */
    const float *rope_cos, *rope_sin; /* [T x E/2] (qw_rope_tables) */
    float *res;                       /* [N x D] block input */
    float *ln1, *rstd1;               /* [N x D], [N] */
    float *q, *k, *v;                 /* [N x H*E], [N x G*E] x2; q and k after RoPE */
    float *probs;                     /* save: attention_fwd's state (ops.h saved_floats) */
    float *scores;                    /* the attention's scratch (no save: the tiled kernel's;
                                       * save: attention_fwd's, qw_train_attention_scratch_floats) */
    float *att;                       /* [N x H*E] attention output, o_proj input */
    float *mid;                       /* [N x D] residual after attention */
    float *ln2, *rstd2;               /* [N x D], [N] */
    float *g, *u, *h;                 /* [N x F]: gate, up, silu(g) * u (down_proj input) */
    float *ybuf;                      /* [N x D] o_proj and down_proj outputs */
    float *out;                       /* [N x D] block output */
    qw_profile *prof;                 /* where the elementwise ops and attention are timed */
} qw_block_io;

/* The caller's linears, y [rows x out] = x [rows x in] W^T; rank indexes io, kind QW_BLOCK_*.
 * row_linear (NULL: linear per rank) runs o_proj/down_proj over all n ranks with its all-reduce.
 * linear_bwd: dx [rows x in] = (+= when acc) dy W, the weight gradient added. */
typedef struct qw_block_hooks {
    qs_status (*linear)(void *user, int rank, int layer, int kind, float *y, const float *x,
                        int rows, qs_error *err);
    qs_status (*row_linear)(void *user, int n, int layer, int kind, float *const *y,
                            float *const *x, int rows, qs_error *err);
    qs_status (*linear_bwd)(void *user, int layer, int kind, float *dx, int acc, const float *dy,
                            const float *x, int rows, qs_error *err);
    void *user;
} qw_block_hooks;

/* Block `layer` on ranks io[0..n-1], op by op across ranks. Errors: the hooks' and the ops'. */
qs_status qw_block_forward(qw_block_io *const *io, int n, int layer, const qw_block_hooks *h,
                           qs_error *err);

/* Block gradients (backend memory): dres [N x D] is d/d(out) on entry, d/d(res) on return;
 * dnorm1, dnorm2 [D] added to; scratch dln [N x D], datty, dq [N x H*E], dk, dv [N x G*E],
 * dh, dg, du [N x F], att_scratch (qw_train_attention_scratch_floats). */
typedef struct qw_block_grads {
    float *dres, *dnorm1, *dnorm2;
    float *dln, *datty, *dq, *dk, *dv, *dh, *dg, *du, *att_scratch;
} qw_block_grads;

/* Backward of block `layer` from a saved forward (one rank). Errors: the hooks' and the ops'. */
qs_status qw_block_backward(const qw_block_io *io, int layer, const qw_block_grads *g,
                            const qw_block_hooks *h, qs_error *err);

#endif
