/* The inside of qw_model (model.h) for model.c and apply_policy.c; nothing outside
 * worker/engine includes it. */
#ifndef QW_MODEL_INTERNAL_H
#define QW_MODEL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "forward.h"
#include "model.h"
#include "ops.h"
#include "prefix_cache.h"
#include "runstate.h"
#include "shard.h"
#include "weights.h"

struct qw_model {
    qw_checkpoint *ck; /* borrowed; NULL for a synthetic model */
    qw_weights wt;     /* the masters */
    qw_config cfg;
    int max_ctx, threads;
    qw_rank rank;   /* the unsharded model as the forward pass reads it (forward.h) */
    qw_linear *lin; /* = rank.lin [n_layers*7 + 2]: block linears, lm_head, the embeddings */
    qw_linear *lm_head, *embed;
    qw_prefix_cache prefix;
    struct qw_tp *tp; /* the tensor-parallel ranks (shard.h) when set to N > 1, else NULL */
    /* how its ranks get their backends (qw_model_set_tp_backends; init NULL: CPU backends) */
    qw_rank_backend_fn tp_init;
    void (*tp_release)(qw_backend *b);
    void *tp_ctx;
    qw_backend host; /* a CPU table for the gathered logits of its ranks (logits_backend) */
    qw_profile prof; /* where its forwards, evaluations and policies are timed (profile.h) */
    struct qw_convcache *convcache; /* FP32 weight pieces of its CPU linears (convcache.h) */
};

/* The probe's reference output lives in the rank's backend memory: whoever changes m->rank.be
 * releases it with the old backend (probe off) and remakes it on the new one when the probe
 * was on (sums kept). Errors: QS_ENOMEM naming the backend. */
void qw_model_probe_release(qw_model *m);
qs_status qw_model_probe_remake(qw_model *m, qs_error *err);

/* Floats converted at a time while a policy quantizes a master: 16 MiB, so each chunk's
 * OpenMP regions cost little beside its work. */
#define QW_APPLY_CHUNK_FLOATS ((size_t)1 << 22)

/* qw_model_apply_policy in chunks of about chunk_floats (whole 16-row chunks); the result does
 * not depend on it (tests/engine apply_policy). Errors: as qw_model_apply_policy. */
qs_status qw_model_apply_policy_chunked(qw_model *m, const qw_policy *p, size_t chunk_floats,
                                        qs_error *err);

#endif
