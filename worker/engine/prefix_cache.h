/* The unsharded model's prefix cache (model.h qw_model_set_prefix_cache): residuals at the
 * block boundaries a forward's unquantized leading blocks reach, keyed by the exact tokens, so a
 * later forward of them starts there. Host memory, one allocation, never evicted.
 * Shapes: L = n_layers, T = tokens, D = dim. */
#ifndef QW_PREFIX_CACHE_H
#define QW_PREFIX_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "ops.h"

/* One sequence's residuals at boundaries 1..L (b = block b's input; L = before the final norm). */
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

/* Empties pc and sizes it for [n_layers][max_ctx x dim] residuals: as many entries as max_bytes
 * holds (0 = off). Errors: QS_EINVAL (below one entry), QS_ENOMEM; the cache is then off. */
qs_status qw_prefix_cache_set(qw_prefix_cache *pc, int n_layers, int max_ctx, int dim,
                              size_t max_bytes, qs_error *err);

/* Frees the entries; the cache is then off. */
void qw_prefix_cache_release(qw_prefix_cache *pc);

/* Start of a forward of tokens[T] whose first quantized block is fq: *start = 0, or a boundary
 * whose residual [T x D] is uploaded into x. pc NULL: 0. Errors: the upload's. */
qs_status qw_prefix_cache_begin(qw_prefix_cache *pc, qw_backend *b, const uint32_t *tokens, int T,
                                int fq, float *x, int *start, qs_error *err);

/* Stores x [T x D] (fetched from b) at `boundary` when boundary <= fq and not stored yet. pc
 * NULL: no-op. Errors: the fetch's (the entry is then not extended). */
qs_status qw_prefix_cache_reached(qw_prefix_cache *pc, qw_backend *b, int boundary, int fq,
                                  const float *x, qs_error *err);

#endif
