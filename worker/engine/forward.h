/* The Llama forward pass of evaluation over the ops table (ops.h) and the one block
 * definition (block.h), and what it reads: the
 * engine-internal view of a model (its tensors in their current form, its backend and run
 * state) as one or more ranks. model.c builds the single rank of an unsharded model; shard.c
 * builds the N ranks of a tensor-parallel one (Megatron-LM, arXiv 1909.08053). Not a public
 * header of the worker: jobs and the evaluation go through model.h.
 *
 * Shapes: T = tokens, D = dim, F = hidden_dim, H = heads, G = kv heads, E = head_dim,
 * V = vocab, all of the rank's shard (a rank of N holds H/N heads, G/N kv heads, F/N of the
 * hidden units and V/N of lm_head's rows; D is whole on every rank). */
#ifndef QW_FORWARD_H
#define QW_FORWARD_H

#include <stdint.h>

#include "checkpoint.h"
#include "comm.h"
#include "error.h"
#include "ops.h"
#include "policy.h"
#include "profile.h"
#include "quant.h"
#include "runstate.h"
#include "weights.h"

/* One quantizable tensor of a rank: a block linear, lm_head or the embeddings. */
typedef struct qw_linear {
    const qw_weight *master; /* the unquantized weight [out x in] (the rank's slice) */
    qw_weight w;             /* what the forward pass reads: *master, or over `packed` */
    qk_packed packed;        /* the quantized weights of the current policy (packed.storage_
                                NULL when none) */
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
    int probe;   /* SQNR probe on (unsharded models only) */
    float *ref;  /* [max_ctx x largest out] probe reference output while the probe is on, in
                    the backend's memory (model_internal.h qw_model_probe_remake) */
    /* where the forward's phases are timed (profile.h); NULL: untimed */
    qw_profile *prof;
} qw_rank;

/* The prefix cache of an unsharded model (model.c): the forward asks it where to start and
 * hands it the residual stream at each block boundary it reaches. */
typedef struct qw_prefix_cache qw_prefix_cache;

/* Looks tokens[T] up for a forward whose first quantized block is fq: sets *start to the
 * block to start at (0 = run from the embeddings) and, when > 0, has copied the stored residual
 * [T x D] at that boundary into x (b's memory, with b's upload: the entries are host memory).
 * pc NULL: *start 0. Errors: the upload's. */
qs_status qw_prefix_cache_begin(qw_prefix_cache *pc, qw_backend *b, const uint32_t *tokens, int T,
                                int fq, float *x, int *start, qs_error *err);

/* The residual x [T x D] (b's memory, copied out with b's fetch) at the input of block
 * `boundary` (n_layers: before the final norm) of the forward begun last: stored when
 * boundary <= fq and not stored yet. pc NULL: no-op. Errors: the fetch's (the entry is then
 * not extended). */
qs_status qw_prefix_cache_reached(qw_prefix_cache *pc, qw_backend *b, int boundary, int fq,
                                  const float *x, qs_error *err);

/* First block with a quantized linear (weights or activations) of rank r; 0 when the
 * embeddings are quantized, n_layers when no block is. */
int qw_forward_first_quantized_block(const qw_rank *r);

/* Runs tokens[0..T-1] over the n ranks in lockstep, op by op (one host thread: on GPUs each
 * op is queued on every rank's device before the next; on the CPU the ranks run one after
 * the other). n == 1 is the unsharded model: no all-reduce, the prefix cache pc may be used.
 * n > 1: the partial outputs of o_proj and down_proj are summed over the ranks with the
 * ranks' group (qw_rank.group, comm.h qw_group_allreduce), a sharded activation's amax is MAX-all-reduced before it is quantized, and
 * each rank's lm_head rows (a vocabulary slice) are gathered into `gathered`
 * [(T - row0) x V_full] host memory (NULL when n == 1). *logits is rank 0's logits (n == 1)
 * or `gathered`. name_of(index) names linear `index` in errors.
 * Errors: those of the ops (wrapped with the linear's name). */
qs_status qw_forward_ranks(qw_rank *const *ranks, int n, const uint32_t *tokens, int T, int row0,
                           qw_prefix_cache *pc, float *gathered, int vocab_full,
                           const char *(*name_of)(const void *ctx, int index, char *buf,
                                                  size_t cap),
                           const void *name_ctx, const float **logits, qs_error *err);

#endif
