/* The prefix cache of an unsharded model (model.h qw_model_set_prefix_cache): the residual
 * stream at each block boundary that a forward's unquantized leading blocks reach, keyed by the
 * exact token sequence, so a later forward of the same tokens whose first quantized block is
 * later starts there instead of at the embeddings. Host memory, one allocation made once;
 * entries are never evicted. The forward is deterministic, so logits are the same bits with or
 * without it. Shapes: L = n_layers, T = tokens, D = dim. */
#ifndef QW_PREFIX_CACHE_H
#define QW_PREFIX_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "ops.h"

/* One token sequence's residuals at boundaries 1..L (boundary b = the input of block b;
 * boundary L = before the final norm). */
typedef struct qw_prefix_entry {
    uint32_t *tokens; /* [max_ctx] */
    int n;            /* tokens; 0 = free entry */
    int valid;        /* boundaries 1..valid hold unquantized-prefix residuals */
    float *resid;     /* [L][max_ctx x D] */
} qw_prefix_entry;

typedef struct qw_prefix_cache {
    int n_layers, max_ctx, dim;
    qw_prefix_entry *entries; /* [n] */
    int n;
    void *pool;           /* one allocation for all entries' tokens and residuals */
    qw_prefix_entry *cur; /* the entry of the forward running now, or NULL */
    int cur_T;            /* its tokens */
    size_t hits, skipped; /* forwards that started from a stored residual; blocks skipped */
} qw_prefix_cache;

/* Empties pc and sizes it for residuals [n_layers][max_ctx x dim]: as many entries as max_bytes
 * holds (0 = off). Errors: QS_EINVAL (max_bytes below one entry), QS_ENOMEM; the cache is then
 * off. */
qs_status qw_prefix_cache_set(qw_prefix_cache *pc, int n_layers, int max_ctx, int dim,
                              size_t max_bytes, qs_error *err);

/* Frees the entries; the cache is then off. */
void qw_prefix_cache_release(qw_prefix_cache *pc);

/* Where a forward of tokens[T] whose first quantized block is fq starts: *start = 0 (the
 * embeddings) or a boundary whose stored residual [T x D] is copied into x with b's upload.
 * pc NULL: *start 0. Errors: the upload's. */
qs_status qw_prefix_cache_begin(qw_prefix_cache *pc, qw_backend *b, const uint32_t *tokens, int T,
                                int fq, float *x, int *start, qs_error *err);

/* Stores x [T x D] (b's memory, read with b's fetch) as the begun forward's residual at
 * `boundary` when boundary <= fq and it is not stored yet. pc NULL: no-op. Errors: the fetch's
 * (the entry is then not extended). */
qs_status qw_prefix_cache_reached(qw_prefix_cache *pc, qw_backend *b, int boundary, int fq,
                                  const float *x, qs_error *err);

#endif
