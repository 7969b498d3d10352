/* Every activation buffer of a forward over up to max_ctx tokens (T), carved from ONE backend
 * allocation (llm.c's ActivationTensors) per (model, ctx, threads); the forward allocates
 * nothing. nt = threads; other shapes as ops.h. */
#ifndef QW_RUNSTATE_H
#define QW_RUNSTATE_H

#include <stddef.h>

#include "checkpoint.h"
#include "error.h"
#include "ops.h"

typedef struct qw_runstate {
    int max_ctx, threads;
    float *rope_cos, *rope_sin; /* [T x E/2] RoPE tables of positions 0..T-1 */
    float *x;                   /* [T x D] residual stream */
    float *xb;                  /* [T x D] normalised input of a sub-block */
    float *q;                   /* [T x H*E] */
    float *k;                   /* [T x G*E] */
    float *v;                   /* [T x G*E] */
    float *att;                 /* [T x H*E] attention output before o_proj */
    float *scores;              /* [nt x QW_ATT_TILE x T] one query tile's scores per thread */
    float *hb;                  /* [T x F] gate, then silu(gate)*up */
    float *hb2;                 /* [T x F] up */
    float *ybuf;                /* [T x D] output of o_proj / down_proj before the residual add */
    float *actq;                /* [T x max(D, H*E, F)] fake-quantized copy of a linear's input */
    float *logits;              /* [T x V] */
    void *storage_;             /* the one allocation (backend memory) */
    size_t bytes;               /* its size */
} qw_runstate;

/* Bytes the run state of (c, max_ctx, threads) takes (64-byte aligned buffers). */
size_t qw_runstate_bytes(const qw_config *c, int max_ctx, int threads);

/* Carves s from one allocation of b and uploads the RoPE tables (qw_rope_tables). Errors:
 * QS_EINVAL (max_ctx or threads < 1), QS_ENOMEM naming the size, the upload's. */
qs_status qw_runstate_init(qw_runstate *s, qw_backend *b, const qw_config *c, int max_ctx,
                           int threads, qs_error *err);

/* Gives the allocation back to b; a zeroed struct is a no-op. */
void qw_runstate_release(qw_runstate *s, qw_backend *b);

#endif
