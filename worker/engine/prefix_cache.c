/* The prefix cache (prefix_cache.h): a linear search over at most a few hundred entries, each
 * compared by its whole token sequence. */
#include "prefix_cache.h"

#include <stdlib.h>
#include <string.h>

void qw_prefix_cache_release(qw_prefix_cache *pc) {
    free(pc->entries);
    free(pc->pool);
    pc->entries = NULL;
    pc->pool = NULL;
    pc->n = 0;
    pc->cur = NULL;
}

qs_status qw_prefix_cache_set(qw_prefix_cache *pc, int n_layers, int max_ctx, int dim,
                              size_t max_bytes, qs_error *err) {
    qw_prefix_cache_release(pc);
    pc->n_layers = n_layers;
    pc->max_ctx = max_ctx;
    pc->dim = dim;
    pc->hits = pc->skipped = 0;
    if (max_bytes == 0) return QS_OK;
    size_t resid = (size_t)n_layers * max_ctx * dim;
    size_t per = resid * sizeof(float) + (size_t)max_ctx * sizeof(uint32_t);
    size_t n = max_bytes / per;
    if (n == 0)
        return qs_error_set(err, QS_EINVAL, "prefix cache: %zu bytes, one entry needs %zu",
                            max_bytes, per);
    if (n > 1u << 20) n = 1u << 20;
    pc->entries = calloc(n, sizeof *pc->entries);
    pc->pool = malloc(n * per);
    if (!pc->entries || !pc->pool) {
        qw_prefix_cache_release(pc);
        return qs_error_set(err, QS_ENOMEM, "prefix cache: %zu entries of %zu bytes", n, per);
    }
    float *f = pc->pool;
    uint32_t *t = (uint32_t *)(f + n * resid);
    for (size_t i = 0; i < n; i++) {
        pc->entries[i].resid = f + i * resid;
        pc->entries[i].tokens = t + i * (size_t)max_ctx;
    }
    pc->n = (int)n;
    return QS_OK;
}

/* The entry for tokens[n], or a free one claimed for them, or NULL. */
static qw_prefix_entry *lookup(qw_prefix_cache *pc, const uint32_t *tokens, int n, int *found) {
    *found = 0;
    for (int i = 0; i < pc->n; i++) {
        qw_prefix_entry *e = &pc->entries[i];
        if (e->n == n && memcmp(e->tokens, tokens, (size_t)n * sizeof *tokens) == 0) {
            *found = 1;
            return e;
        }
    }
    for (int i = 0; i < pc->n; i++) {
        qw_prefix_entry *e = &pc->entries[i];
        if (e->n == 0) {
            memcpy(e->tokens, tokens, (size_t)n * sizeof *tokens);
            e->n = n;
            e->valid = 0;
            return e;
        }
    }
    return NULL;
}

static float *boundary_of(const qw_prefix_cache *pc, qw_prefix_entry *e, int b) {
    return e->resid + (size_t)(b - 1) * pc->max_ctx * pc->dim;
}

qs_status qw_prefix_cache_begin(qw_prefix_cache *pc, qw_backend *b, const uint32_t *tokens, int T,
                                int fq, float *x, int *start, qs_error *err) {
    *start = 0;
    if (!pc) return QS_OK;
    int found = 0;
    pc->cur = fq > 0 && pc->n ? lookup(pc, tokens, T, &found) : NULL;
    pc->cur_T = T;
    qw_prefix_entry *pe = pc->cur;
    if (!found || pe->valid <= 0) return QS_OK;
    int s0 = fq < pe->valid ? fq : pe->valid;
    qs_status st =
        b->ops->upload(b, x, boundary_of(pc, pe, s0), (size_t)T * pc->dim * sizeof(float), err);
    if (st != QS_OK) return qs_error_wrap(err, "prefix cache: boundary %d", s0);
    pc->hits++;
    pc->skipped += (size_t)s0;
    *start = s0;
    return QS_OK;
}

qs_status qw_prefix_cache_reached(qw_prefix_cache *pc, qw_backend *b, int boundary, int fq,
                                  const float *x, qs_error *err) {
    if (!pc || !pc->cur) return QS_OK;
    qw_prefix_entry *pe = pc->cur;
    if (boundary > pe->valid && boundary <= fq) {
        qs_status st = b->ops->fetch(b, boundary_of(pc, pe, boundary), x,
                                     (size_t)pc->cur_T * pc->dim * sizeof(float), err);
        if (st != QS_OK) return qs_error_wrap(err, "prefix cache: boundary %d", boundary);
        pe->valid = boundary;
    }
    return QS_OK;
}
