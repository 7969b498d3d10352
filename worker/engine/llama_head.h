/* The Llama model's two ends around its blocks (HF LlamaForCausalLM), forward and backward, over
 * the ops table for evaluation (forward.c) and training (worker/train/tmodel.c); block.h is the
 * part in between:
 *   x = embed_tokens[tokens];  logits = lm_head(rms(x) * norm)
 * save picks the training embedding (backend tokens, FP32 table) and keeps 1/rms; without it the
 * norm and lm_head run only on the rows from row0. lm_head is the caller's linear hook
 * (QW_BLOCK_LM_HEAD); with N ranks each holds a vocabulary slice, copied into one host row.
 * Shapes: N rows, D dim, V vocab of the io's config (a rank's slice). */
#ifndef QW_LLAMA_HEAD_H
#define QW_LLAMA_HEAD_H

#include <stddef.h>
#include <stdint.h>

#include "block.h"
#include "checkpoint.h"
#include "error.h"
#include "ops.h"
#include "profile.h"

/* One rank's ends: backend, shape, weights and buffers (backend memory unless it says host). */
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
    qw_profile *prof; /* where the lookup and the norm are timed; NULL: untimed */
} qw_head_io;

/* The embedding lookup on every rank (tokens < table rows: caller). Errors: the backend's. */
qs_status qw_head_embed(qw_head_io *const *io, int n, qs_error *err);

/* ln = rms(xf rows from row0), logits = h->linear(QW_BLOCK_LM_HEAD, ln) on every rank, copied
 * into `gathered` when set. Errors: the hook's (wrapped with the rank when n > 1), the backend's.
 */
qs_status qw_head_forward(qw_head_io *const *io, int n, const qw_block_hooks *h, qs_error *err);

/* Backward of a saved forward (one rank): dlogits [N x V] in; h->linear_bwd writes dln [N x D]
 * (scratch) and adds lm_head's gradient; dres [N x D] = d(loss)/d(xf); dnorm [D] added to. */
qs_status qw_head_backward(const qw_head_io *io, const float *dlogits, float *dln, float *dres,
                           float *dnorm, const qw_block_hooks *h, qs_error *err);

/* demb [V x D] += dx [N x D] scattered by the tokens, in token order. Errors: the backend's. */
qs_status qw_head_embed_backward(const qw_head_io *io, float *demb, const float *dx, qs_error *err);

#endif
