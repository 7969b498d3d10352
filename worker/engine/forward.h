/* The evaluation's Llama forward pass over the ops table and block.h, for one rank (model.c) or N
 * tensor-parallel ranks (shard.c, Megatron-LM arXiv 1909.08053). Engine-internal: jobs go
 * through model.h. Shapes: T tokens, D dim, F hidden_dim, H heads, G kv heads, E head_dim, V
 * vocab, of the rank's shard (H/N heads, G/N kv heads, F/N hidden units, V/N lm_head rows). */
#ifndef QW_FORWARD_H
#define QW_FORWARD_H

#include <stdint.h>

#include "checkpoint.h"
#include "comm.h"
#include "error.h"
#include "ops.h"
#include "policy.h"
#include "prefix_cache.h"
#include "profile.h"
#include "quant.h"
#include "runstate.h"
#include "weights.h"

/* One quantizable tensor of a rank: a block linear, lm_head or the embeddings. */
typedef struct qw_linear {
    const qw_weight *master; /* the unquantized weight [out x in] (the rank's slice) */
    qw_weight w;             /* what the forward pass reads: *master, or over `packed` */
    qk_packed packed;        /* the current policy's packed form (storage_ NULL: none) */
    int out, in;
    qw_quant_spec spec; /* weight and activation formats of the current policy */
    int quantized;      /* spec has a weight or activation format */
    int tensor_index;   /* layer*7 + kind; n_layers*7 lm_head; n_layers*7+1 embeddings */
    double sig, noise;  /* SQNR probe sums */
    /* A quantization method's hold on the linear (worker/method), NULL/0 without one: in_hook
     * sees the input x [T x in] before the activation format and gives the input the linear
     * reads instead (x itself, or x rotated or smoothed); `method` says w is the method's
     * weight, not the master. apply_policy clears both. */
    qs_status (*in_hook)(void *ctx, const struct qw_backend *be, const float *x, int T,
                         const float **out, qs_error *err);
    void *in_hook_ctx;
    int method;
} qw_linear;

/* What one rank's forward pass reads and writes. */
typedef struct qw_rank {
    qw_config cfg;  /* the rank's shard shape (n_heads, n_kv_heads, hidden_dim divided) */
    qw_backend be;  /* the rank's backend (the CPU one, or one GPU) */
    qw_runstate rs; /* activations of the shard shape, from be */
    qw_linear *lin; /* [n_layers*7 + 2]: block linears, then lm_head, then the embeddings */
    const float *final_norm;       /* [D] */
    const float *const *attn_norm; /* [L] each [D] */
    const float *const *ffn_norm;  /* [L] each [D] */
    int vocab0;  /* first lm_head row (vocabulary id) of the rank's slice; 0 unsharded */
    float *amax; /* [1] backend memory: a sharded activation's global amax, or NULL */
    /* the tensor-parallel group's all-reduce (worker/comm/comm.h: CPU or NCCL ranks), shared
     * by the ranks; NULL unsharded */
    qw_group *group;
    int probe;  /* SQNR probe on (unsharded models only) */
    int probe_rows; /* > 0: the probe measures the last probe_rows rows of each linear's call
                       (model.h qw_model_set_sqnr_rows); 0: every row */
    float *ref; /* [max_ctx x largest out] probe reference output while the probe is on, in
                   the backend's memory (model_internal.h qw_model_probe_remake) */
    /* where the forward's phases are timed (profile.h); NULL: untimed */
    qw_profile *prof;
} qw_rank;

/* First block of rank r with a quantized linear; 0 when the embeddings are, n_layers when none. */
int qw_forward_first_quantized_block(const qw_rank *r);

/* Runs tokens[T] over the n ranks, one host thread each, meeting at the all-reduces. n == 1: the
 * unsharded model, prefix cache pc usable. n > 1: o_proj and down_proj partials summed by the
 * ranks' group (comm.h), a sharded activation's amax MAX-all-reduced first, lm_head slices
 * gathered into `gathered` [(T - row0) x V_full] host memory. *logits: rank 0's or `gathered`.
 * name_of names linears in errors. Errors: the ops' (wrapped with the linear's name). */
qs_status qw_forward_ranks(qw_rank *const *ranks, int n, const uint32_t *tokens, int T, int row0,
                           qw_prefix_cache *pc, float *gathered, int vocab_full,
                           const char *(*name_of)(const void *ctx, int index, char *buf,
                                                  size_t cap),
                           const void *name_ctx, const float **logits, qs_error *err);

/* Blocks first..end-1 of the unsharded rank r over tokens[T], without lm_head: the residual
 * stream starts as the embeddings (first == 0, prefix cache pc usable for the unquantized
 * leading blocks) or as `in` [T x D] host memory (first > 0), and `out` [T x D] (host, may be
 * `in`; NULL: not read back) gets block end's input. The blocks compute what they compute inside
 * a whole forward, bit for bit. Errors: QS_EINVAL (a range outside 0..n_layers), the ops' and
 * hooks' (QS_ECANCELLED from a hook ends the pass there). */
qs_status qw_forward_blocks(qw_rank *r, const uint32_t *tokens, int T, int first, int end,
                            const float *in, float *out, qw_prefix_cache *pc,
                            const char *(*name_of)(const void *ctx, int index, char *buf,
                                                   size_t cap),
                            const void *name_ctx, qs_error *err);

#endif
