/* One Llama decoder block (Hugging Face LlamaDecoderLayer), its forward and its backward,
 * written once over the ops table (ops.h) for every user: the evaluation forward (forward.c:
 * one rank or the N ranks of a tensor-parallel model, policies, prefix cache and probe) and the
 * trainable model (worker/train/tmodel.c: saved activations, the recipe's linear, backward).
 *
 *   mid = res + o(attn(rope(q(rms1(res))), rope(k(rms1(res))), v(rms1(res))))
 *   out = mid + down(silu(gate(rms2(mid))) * up(rms2(mid)))
 *
 * What differs between the users is a choice, not a second copy:
 * - the linears are the caller's (qw_block_hooks.linear: evaluation's policy linear with its
 *   probe, training's recipe linear), and o_proj / down_proj may go through a row-parallel hook
 *   that sees every rank at once (its all-reduce);
 * - qw_block_io.save selects the saving variant of each op: RMSNorm keeps 1/rms, attention
 *   keeps its probabilities (whole T x T per sequence) instead of the tiled evaluation kernel,
 *   and the residuals are written out of place so the backward finds their inputs. Without
 *   save the block runs the evaluation entries of the table in place (res == mid == out).
 *
 * Shapes: B sequences of T tokens, N = B*T rows; D dim, F hidden_dim, H heads, G kv heads,
 * E head_dim of the io's config (a rank's shard shape under tensor parallelism). */
#ifndef QW_BLOCK_H
#define QW_BLOCK_H

#include "checkpoint.h"
#include "error.h"
#include "ops.h"
#include "profile.h"

/* Linear kinds of a block, in Hugging Face order (the engine's QW_LINEAR_* and the trainer's
 * linear index l*7 + kind use the same numbers). */
enum { QW_BLOCK_Q, QW_BLOCK_K, QW_BLOCK_V, QW_BLOCK_O, QW_BLOCK_GATE, QW_BLOCK_UP, QW_BLOCK_DOWN };
/* The kind the model's ends (llama_head.h) pass the linear hooks for lm_head, with layer
 * n_layers (the engine's linear index n_layers*7, the trainer's lm_head index). */
#define QW_BLOCK_LM_HEAD 7

/* One rank's view of one block: its backend, shape, weights of the norms and every activation
 * buffer (backend memory). Without save: res, mid and out are the one residual stream x
 * [N x D] (updated in place), ln2 may equal ln1, h equals g, rstd1/rstd2/probs are unused and
 * scores is the tiled attention's scratch (ops.h). With save each buffer is its own and kept
 * for qw_block_backward. */
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
    float *probs;                     /* save: [B x H x T x T] */
    float *scores;                    /* no save: the tiled attention's scratch */
    float *att;                       /* [N x H*E] attention output, o_proj input */
    float *mid;                       /* [N x D] residual after attention */
    float *ln2, *rstd2;               /* [N x D], [N] */
    float *g, *u, *h;                 /* [N x F]: gate, up, silu(g) * u (down_proj input) */
    float *ybuf;                      /* [N x D] o_proj and down_proj outputs */
    float *out;                       /* [N x D] block output */
    qw_profile *prof;                 /* no save: where norms, RoPE, attention, SwiGLU and the
                                         residual adds are timed (profile.h); NULL: untimed */
} qw_block_io;

/* The caller's linears. rank: index into the io array; kind: QW_BLOCK_*; y [rows x out] =
 * linear(x [rows x in]). row_linear (may be NULL: linear on each rank) runs o_proj or down_proj
 * over all n ranks at once, y[i] and x[i] rank i's buffers (a row-parallel linear and its
 * all-reduce). linear_bwd (backward only): dx [rows x in] = (or += when acc) dy W, the weight's
 * gradient added, given the forward's input x. Each returns QS_OK or an error it has set. */
typedef struct qw_block_hooks {
    qs_status (*linear)(void *user, int rank, int layer, int kind, float *y, const float *x,
                        int rows, qs_error *err);
    qs_status (*row_linear)(void *user, int n, int layer, int kind, float *const *y,
                            float *const *x, int rows, qs_error *err);
    qs_status (*linear_bwd)(void *user, int layer, int kind, float *dx, int acc, const float *dy,
                            const float *x, int rows, qs_error *err);
    void *user;
} qw_block_hooks;

/* Runs block `layer` over ranks io[0..n-1] in lockstep, op by op (each op on every rank before
 * the next; n == 1: one model). Errors: those of the hooks and the ops. */
qs_status qw_block_forward(qw_block_io *const *io, int n, int layer, const qw_block_hooks *h,
                           qs_error *err);

/* Gradients of one block, backend memory: dres [N x D] holds d(loss)/d(out) on entry and
 * d(loss)/d(res) on return (the residual's gradient passes through, each sub-block adds its
 * part); dnorm1, dnorm2 [D] are added to; the rest is scratch: dln [N x D], datty, dq
 * [N x H*E], dk, dv [N x G*E], dh, dg, du [N x F], att_scratch
 * (qw_train_attention_scratch_floats). */
typedef struct qw_block_grads {
    float *dres, *dnorm1, *dnorm2;
    float *dln, *datty, *dq, *dk, *dv, *dh, *dg, *du, *att_scratch;
} qw_block_grads;

/* The backward of block `layer` for the activations a forward with save left in io (one
 * rank). Errors: those of the hooks and the ops. */
qs_status qw_block_backward(const qw_block_io *io, int layer, const qw_block_grads *g,
                            const qw_block_hooks *h, qs_error *err);

#endif
