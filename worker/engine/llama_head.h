/* The two ends of the Llama model around its blocks (Hugging Face LlamaForCausalLM: the
 * embedding lookup before the first block; the final RMSNorm and lm_head after the last),
 * forward and backward, written once over the ops table (ops.h) for both users: the
 * evaluation forward (forward.c: one rank or the N ranks of a tensor-parallel model) and the
 * trainable model (worker/train/tmodel.c). block.h is the part in between.
 *
 *   x      = embed_tokens[tokens]                       (embedding lookup)
 *   logits = lm_head(rms(x) * norm)                     (final norm, lm_head)
 *
 * As in block.h, what differs between the users is a choice, not a second copy:
 * - qw_head_io.save selects the table's training entries: the lookup takes the tokens in
 *   backend memory and an FP32 table (the backward scatters its gradient by the same tokens),
 *   the final norm keeps 1/rms; without save the evaluation entries run: the lookup takes the
 *   tokens in host memory and the table in any weight form (weights.h), the norm keeps
 *   nothing and runs on the rows from row0 only (the rows whose logits are wanted);
 * - lm_head is the caller's linear (qw_block_hooks.linear / linear_bwd with kind
 *   QW_BLOCK_LM_HEAD): evaluation's policy linear with its probe, training's recipe linear;
 *   with N ranks each rank's lm_head holds a vocabulary slice, copied into the caller's
 *   host logits row (no all-reduce: every logit is computed whole on one rank).
 *
 * Shapes: N rows (B sequences of T tokens, or one of T), D dim, V vocab of the io's config (a
 * rank's vocabulary slice under tensor parallelism). */
#ifndef QW_LLAMA_HEAD_H
#define QW_LLAMA_HEAD_H

#include <stddef.h>
#include <stdint.h>

#include "block.h"
#include "checkpoint.h"
#include "error.h"
#include "ops.h"
#include "profile.h"

/* One rank's view of the model's ends: backend, shape, weights and buffers (backend memory
 * unless it says host). */
typedef struct qw_head_io {
    qw_backend *be;
    const qw_config *cfg;
    int N;    /* rows of the residual stream */
    int row0; /* first row the final norm and lm_head run on (save: 0) */
    int save;
    /* the lookup: save: tokens [N] backend memory, emb FP32 [V x D] backend memory;
     * no save: tokens [N] host memory, table the weight in any form */
    const uint32_t *tokens;
    const float *emb;
    const qw_weight *table;
    float *x;          /* [N x D] the lookup's output (the first block's input) */
    float *xf;         /* [N x D] the last block's output, the final norm's input */
    const float *norm; /* model.norm.weight [D] */
    float *ln;         /* [(N - row0) x D] the final norm's output, lm_head's input */
    float *rstd;       /* save: [N] 1/rms of each row */
    float *logits;     /* [(N - row0) x V] lm_head's output */
    /* n > 1 ranks: the host row [(N - row0) x ld] rank i's logits are copied into, from
     * column col0 (its vocabulary slice); NULL: the logits stay in backend memory */
    float *gathered;
    size_t ld;
    int col0;
    qw_profile *prof; /* no save: where the lookup and the norm are timed; NULL: untimed */
} qw_head_io;

/* The embedding lookup of ranks io[0..n-1] (each its own copy of the replicated residual
 * stream). The tokens must be < the table's rows (checked by the caller). Errors: the
 * backend's (save). */
qs_status qw_head_embed(qw_head_io *const *io, int n, qs_error *err);

/* The final norm and lm_head of ranks io[0..n-1], rank by rank: ln = rms(xf rows from row0),
 * logits = h->linear(rank, n_layers, QW_BLOCK_LM_HEAD, ln), and with `gathered` each rank's
 * logits copied into it. Errors: those of the hook (wrapped with the rank when n > 1) and the
 * backend's. */
qs_status qw_head_forward(qw_head_io *const *io, int n, const qw_block_hooks *h, qs_error *err);

/* Gradients of the final norm and lm_head for the activations a forward with save left in io
 * (one rank): dlogits [N x V] is d(loss)/d(logits); h->linear_bwd of QW_BLOCK_LM_HEAD writes
 * dln [N x D] (scratch) and adds the head weight's gradient; dres [N x D] is overwritten with
 * d(loss)/d(xf) and dnorm [D] added to. Errors: those of the hook and the backend. */
qs_status qw_head_backward(const qw_head_io *io, const float *dlogits, float *dln, float *dres,
                           float *dnorm, const qw_block_hooks *h, qs_error *err);

/* The lookup's backward (save): demb [V x D] += dx [N x D] scattered by the tokens, rows
 * added in token order. Errors: the backend's. */
qs_status qw_head_embed_backward(const qw_head_io *io, float *demb, const float *dx, qs_error *err);

#endif
