/* Private to the engine: the inside of qw_model (model.h), shared by the files that make up the
 * model (model.c: setup, probe, prefix cache, forward pass; apply_policy.c: quantization
 * policies). Nothing outside worker/engine includes it. */
#ifndef QW_MODEL_INTERNAL_H
#define QW_MODEL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "ops.h"
#include "runstate.h"
#include "weights.h"

/* One quantizable tensor: a block linear, lm_head or the embeddings. */
typedef struct linear {
    const qw_weight *master; /* the unquantized weight, in the checkpoint's dtype */
    qw_weight w;             /* what the forward pass reads: *master, or over `packed` */
    qk_packed packed;        /* the quantized weights of the current policy (packed.storage_
                                NULL when none) */
    int out, in;
    qw_quant_spec spec; /* weight and activation formats of the current policy */
    int quantized;      /* spec has a weight or activation format */
    int tensor_index;   /* layer*7 + kind; n_layers*7 lm_head; n_layers*7+1 embeddings */
    double sig, noise;  /* SQNR probe sums */
} linear;

/* One prefix-cache entry: the residual stream at the input of blocks 1..n_layers (boundary b
 * = after block b-1; boundary n_layers = before the final norm) for one token sequence. */
typedef struct prefix_entry {
    uint32_t *tokens; /* [max_ctx] */
    int n;            /* tokens; 0 = free entry */
    int valid;        /* boundaries 1..valid hold unquantized-prefix residuals */
    float *resid;     /* [n_layers][max_ctx x D] */
} prefix_entry;

struct qw_model {
    qw_checkpoint *ck; /* borrowed; NULL for a synthetic model */
    qw_weights wt;     /* the masters */
    qw_config cfg;
    int max_ctx, threads;
    qw_backend be;
    qw_runstate rs;
    linear *lin; /* [n_layers*7 + 2]: block linears, then lm_head, then the embeddings */
    linear *lm_head, *embed;
    int probe;
    float *ref; /* [max_ctx x largest out] SQNR probe reference output, while the probe is on */
    prefix_entry *prefix; /* [n_prefix] */
    int n_prefix;
    void *prefix_pool; /* one allocation for all entries' tokens and residuals */
    size_t prefix_hits, prefix_skipped;
};

/* Floats of a master converted to FP32 at a time while a policy quantizes it: 16 MiB, large
 * enough that the OpenMP regions of each chunk cost little beside its work, small beside any
 * model that needs it. */
#define QW_APPLY_CHUNK_FLOATS ((size_t)1 << 22)

/* qw_model_apply_policy (model.h) with masters converted and quantized about chunk_floats
 * floats at a time (rounded to whole 16-row chunks, at least 16 rows; apply_policy.c): the
 * result does not depend on it (tests/engine apply_policy checks that). Errors: as
 * qw_model_apply_policy. */
qs_status qw_model_apply_policy_chunked(qw_model *m, const qw_policy *p, size_t chunk_floats,
                                        qs_error *err);

#endif
