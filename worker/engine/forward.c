/* The Llama forward pass over the ops table (forward.h), for one rank (the unsharded model)
 * or the N ranks of a tensor-parallel one: embeddings, the blocks (block.c, the one block
 * definition, with the policy's linears, the SQNR probe and the row-parallel all-reduce as its
 * hooks), final norm and lm_head (llama_head.c, the model's ends, shared with training too). It
 * reads like modeling_llama.py; with N ranks it is Megatron-LM's layer (arXiv 1909.08053, section
 * 3): q/k/v and gate/up column-parallel (each rank its heads and hidden units, no communication),
 * o_proj and down_proj row-parallel (each rank a partial sum over its inputs), one all-reduce after
 * each row-parallel linear, the residual stream and the norms replicated. lm_head is
 * vocabulary-parallel: each rank its rows, the slices gathered into one logits row (no all-reduce:
 * every logit is computed whole on one rank).
 *
 * Ranks run concurrently, one host thread each (qw_ranks_run; rank 0 on the caller's thread), and
 * meet only at the all-reduces of the ranks' group (worker/comm/comm.h), CPU ranks or NCCL ranks
 * (one communicator per device, each rank's thread calling its own), the same calls for both.
 * CPU ranks reduce every element in rank order, so the bits do not depend on which rank gets
 * there first. n == 1 runs exactly the ops the unsharded model ran before tensor parallelism
 * existed, in the same order, on the caller's thread: no all-reduce, no amax, the same bits. */
#include "forward.h"

#include "block.h"
#include "llama_head.h"

#include "clock.h"

#include "format.h"
#include <stdio.h>
#include <string.h>

/* The ops table of rank r. */
#define OPS(r) ((r)->be.ops)

int qw_forward_first_quantized_block(const qw_rank *r) {
    const qw_config *c = &r->cfg;
    if (r->lin[c->n_layers * QW_LINEAR_KINDS + 1].quantized) return 0;
    for (int l = 0; l < c->n_layers; l++)
        for (int k = 0; k < QW_LINEAR_KINDS; k++)
            if (r->lin[l * QW_LINEAR_KINDS + k].quantized) return l;
    return c->n_layers;
}

typedef struct fwd_names {
    const char *(*name_of)(const void *ctx, int index, char *buf, size_t cap);
    const void *ctx;
} fwd_names;

/* One linear of one rank over the ops table: optional activation fake-quant of the input
 * (with the group's amax when `amax` is given), the GEMM on the weights in their form, and
 * with the probe on the unquantized reference on the same input (master weights, FP32 input)
 * and its SQNR sums, over the call's last probe_rows rows when the probe samples. */
static qs_status linear_forward(qw_rank *r, qw_linear *L, float *y, const float *x, int T,
                                const float *amax, const fwd_names *nm, qs_error *err) {
    const qw_ops *ops = OPS(r);
    const float *xm = x; /* the input as a method transforms it (worker/method) */
    if (L->in_hook) {
        qs_status hs = L->in_hook(L->in_hook_ctx, &r->be, x, T, &xm, err);
        if (hs != QS_OK) return hs;
    }
    qw_tensor ty = {y, T, L->out}, tm = {(float *)xm, T, L->in};
    qw_act_quant act = {L->spec.act, L->spec.act_opt, amax};
    act.opt.tensor_id += (uint32_t)L->tensor_index;
    /* Timed: the GEMM phase of its kind gets the call's wall time less what the backend spent
     * converting weights and quantizing activations in it (profile.h). */
    double t0 = qs_clock_s(), conv0 = r->be.convert_s, actq0 = r->be.act_quant_s;
    qs_status st = ops->linear(&r->be, &ty, &tm, &L->w, &act, r->rs.actq, err);
    if (r->prof) {
        int L7 = r->cfg.n_layers * QW_LINEAR_KINDS;
        qw_phase ph = L->tensor_index < L7 ? QW_PHASE_GEMM_Q + L->tensor_index % QW_LINEAR_KINDS
                                           : QW_PHASE_GEMM_LM_HEAD;
        double conv = r->be.convert_s - conv0, actq = r->be.act_quant_s - actq0;
        r->prof->s[ph] += qs_clock_s() - t0 - conv - actq;
        r->prof->s[QW_PHASE_CONVERT] += conv;
        r->prof->s[QW_PHASE_ACT_QUANT] += actq;
    }
    if (st != QS_OK) {
        char name[160];
        return qs_error_wrap(err, "%s of %s", L->spec.act ? "activations" : "weights",
                             nm->name_of(nm->ctx, L->tensor_index, name, sizeof name));
    }
    if (r->probe && L->quantized && r->ref) {
        /* The last R rows of the call (all of them unless probe_rows asks for fewer): rows of
         * the input and output, contiguous in any backend's memory. */
        int R = r->probe_rows > 0 && r->probe_rows < T ? r->probe_rows : T;
        size_t skip = (size_t)(T - R);
        qw_tensor sy = {y + skip * (size_t)L->out, R, L->out},
                  sx = {(float *)x + skip * (size_t)L->in, R, L->in}, tr = {r->ref, R, L->out};
        t0 = qs_clock_s();
        /* A linear that read its master without an activation format (the identity weight
         * format) just ran the reference's own call: the reference is y, bit for bit. */
        if (L->w.form != QW_WEIGHT_PACKED && !act.fmt && !L->method)
            tr = sy;
        else
            st = ops->linear(&r->be, &tr, &sx, L->master, NULL, NULL, err);
        if (st != QS_OK) return st;
        double sig = 0.0, noise = 0.0;
        ops->sqnr_sums(&r->be, &sy, &tr, &sig, &noise);
        L->sig += sig;
        L->noise += noise;
        qw_profile_add_since(r->prof, QW_PHASE_SQNR_PROBE, t0);
    }
    return QS_OK;
}

/* Rank i's part of a row-parallel linear (o_proj, down_proj) over the n ranks, on rank i's
 * thread: it multiplies its input columns x [T x in/n] by its weight columns, giving a partial
 * y [T x D] that the all-reduce sums over the ranks. With an activation format, the local amax
 * of x is MAX-all-reduced first so each rank's quantizer uses the unsharded input's tensor
 * scale. n == 1: the linear. */
static qs_status row_parallel(qw_rank *r, int i, int n, int index, float *y, const float *x, int T,
                              const fwd_names *nm, qs_error *err) {
    if (n == 1) return linear_forward(r, &r->lin[index], y, x, T, NULL, nm, err);
    qw_group *g = r->group;
    if (!g || g->n != n)
        return qs_error_set(err, QS_EINVAL, "linear %d: %d ranks without a group of %d", index, n,
                            n);
    /* Only a per-tensor-scaled format (NVFP4, FP8 per tensor) has a scale to share; MX and INT
     * scales are per block, and the blocks do not straddle ranks (shard.h). */
    const qk_format *af = r->lin[index].spec.act;
    int act = af && af->tensor_scale;
    qs_status st;
    if (act) {
        qw_tensor tx = {(float *)x, T, r->lin[index].in};
        OPS(r)->amax(&r->be, &tx, r->amax);
        st = qw_group_allreduce_rank(g, i, r->amax, 1, QW_GROUP_MAX, err);
        if (st != QS_OK) return qs_error_wrap(err, "amax all-reduce of linear %d", index);
    }
    st = linear_forward(r, &r->lin[index], y, x, T, act ? r->amax : NULL, nm, err);
    if (st != QS_OK) return st;
    st = qw_group_allreduce_rank(g, i, y, (size_t)T * (size_t)r->lin[index].out, QW_GROUP_SUM, err);
    if (st != QS_OK) return qs_error_wrap(err, "all-reduce of linear %d", index);
    return QS_OK;
}

_Static_assert((int)QW_BLOCK_Q == (int)QW_LINEAR_Q && (int)QW_BLOCK_O == (int)QW_LINEAR_O &&
                   (int)QW_BLOCK_GATE == (int)QW_LINEAR_GATE &&
                   (int)QW_BLOCK_DOWN == (int)QW_LINEAR_DOWN,
               "block kinds are the policy's linear kinds");

/* The block's linears (block.h hooks) for rank i of n, on its own thread: the block runs one
 * rank (its rank argument is 0) and the row-parallel hook meets the other ranks' threads. */
typedef struct fwd_hooks {
    qw_rank *rank;
    int i, n;
    const fwd_names *nm;
} fwd_hooks;

static qs_status hook_linear(void *user, int rank, int layer, int kind, float *y, const float *x,
                             int rows, qs_error *err) {
    const fwd_hooks *fh = user;
    (void)rank;
    qw_rank *r = fh->rank;
    /* lm_head (layer n_layers) is linear n_layers*7 */
    int index = layer * QW_LINEAR_KINDS + (kind == QW_BLOCK_LM_HEAD ? 0 : kind);
    return linear_forward(r, &r->lin[index], y, x, rows, NULL, fh->nm, err);
}

static qs_status hook_row_linear(void *user, int n, int layer, int kind, float *const *y,
                                 float *const *x, int rows, qs_error *err) {
    const fwd_hooks *fh = user;
    (void)n;
    return row_parallel(fh->rank, fh->i, fh->n, layer * QW_LINEAR_KINDS + kind, y[0], x[0], rows,
                        fh->nm, err);
}

/* One forward's state shared by its rank threads (each reads its own entries): blocks
 * start..end-1, then the final norm and lm_head when head is set. */
typedef struct fwd_run {
    qw_rank *const *ranks;
    int n, end, head, fq, start;
    qw_prefix_cache *pc;
    const fwd_names *nm;
    qw_head_io *hio;
    qw_block_io *io;
} fwd_run;

/* Rank i's part: embeddings (from block 0), the blocks, the final norm and its lm_head slice. */
static qs_status rank_forward(void *ctx, int i, qs_error *err) {
    const fwd_run *fr = ctx;
    qw_rank *r = fr->ranks[i];
    qw_head_io *hio = &fr->hio[i];
    qw_block_io *io = &fr->io[i];
    fwd_hooks fh = {r, i, fr->n, fr->nm};
    qw_block_hooks hooks = {hook_linear, hook_row_linear, NULL, &fh};
    qs_status st;
    if (fr->start == 0) {
        st = qw_head_embed(&hio, 1, err);
        if (st != QS_OK) return st;
    }
    for (int l = fr->start; l < fr->end; l++) {
        st = qw_prefix_cache_reached(fr->pc, &r->be, l, fr->fq, r->rs.x, err);
        if (st != QS_OK) return st;
        io->norm1 = r->attn_norm[l];
        io->norm2 = r->ffn_norm[l];
        st = qw_block_forward(&io, 1, l, &hooks, err);
        if (st != QS_OK) return st;
    }
    st = qw_prefix_cache_reached(fr->pc, &r->be, fr->end, fr->fq, r->rs.x, err);
    if (st != QS_OK || !fr->head) return st;
    return qw_head_forward(&hio, 1, &hooks, err);
}

/* The model's ends (llama_head.h) on rank r: the host tokens, the embeddings in their form, the
 * final norm of the rows from row0 into xb, lm_head's vocabulary slice. */
static qw_head_io head_io(qw_rank *r, const uint32_t *tokens, int T, int row0, float *gathered,
                          int vocab_full) {
    int L = r->cfg.n_layers;
    return (qw_head_io){.be = &r->be,
                        .cfg = &r->cfg,
                        .N = T,
                        .row0 = row0,
                        .tokens = tokens,
                        .table = &r->lin[L * QW_LINEAR_KINDS + 1].w,
                        .x = r->rs.x,
                        .xf = r->rs.x,
                        .norm = r->final_norm,
                        .ln = r->rs.xb,
                        .logits = r->rs.logits,
                        .gathered = gathered,
                        .ld = (size_t)vocab_full,
                        .col0 = r->vocab0,
                        .prof = r->prof};
}

/* The block's buffers on rank r: the evaluation's in-place residual stream. */
static qw_block_io block_io(qw_rank *r, int T) {
    qw_runstate *rs = &r->rs;
    return (qw_block_io){.be = &r->be,
                         .cfg = &r->cfg,
                         .B = 1,
                         .T = T,
                         .rope_cos = rs->rope_cos,
                         .rope_sin = rs->rope_sin,
                         .res = rs->x,
                         .ln1 = rs->xb,
                         .q = rs->q,
                         .k = rs->k,
                         .v = rs->v,
                         .scores = rs->scores,
                         .att = rs->att,
                         .mid = rs->x,
                         .ln2 = rs->xb,
                         .g = rs->hb,
                         .u = rs->hb2,
                         .h = rs->hb,
                         .ybuf = rs->ybuf,
                         .out = rs->x,
                         .prof = r->prof};
}

qs_status qw_forward_ranks(qw_rank *const *ranks, int n, const uint32_t *tokens, int T, int row0,
                           qw_prefix_cache *pc, float *gathered, int vocab_full,
                           const char *(*name_of)(const void *ctx, int index, char *buf,
                                                  size_t cap),
                           const void *name_ctx, const float **logits, qs_error *err) {
    if (n < 1 || n > QW_GROUP_MAX_RANKS)
        return qs_error_set(err, QS_EINVAL, "forward: %d ranks", n);
    const qw_config *c0 = &ranks[0]->cfg;
    int L = c0->n_layers;
    fwd_names nm = {name_of, name_ctx};
    if (n > 1) pc = NULL; /* the prefix cache belongs to the unsharded model */
    /* Blocks before the first quantized one compute what the unquantized model computes: start
     * from the cached residual where there is one, and store the boundaries this run reaches. */
    int fq = qw_forward_first_quantized_block(ranks[0]);
    int start = 0;
    qs_status st =
        qw_prefix_cache_begin(pc, &ranks[0]->be, tokens, T, fq, ranks[0]->rs.x, &start, err);
    if (st != QS_OK) return st;
    /* Concurrent ranks time their phases apart, added to the shared profile in rank order. */
    qw_profile *shared = ranks[0]->prof, local[n];
    if (n > 1 && shared)
        for (int i = 0; i < n; i++) {
            qw_profile_reset(&local[i]);
            ranks[i]->prof = &local[i];
        }
    qw_head_io hio[n];
    qw_block_io io[n];
    for (int i = 0; i < n; i++) {
        hio[i] = head_io(ranks[i], tokens, T, row0, n > 1 ? gathered : NULL, vocab_full);
        io[i] = block_io(ranks[i], T);
    }
    /* One host thread per rank (rank 0 on this one), meeting at the all-reduces. */
    fwd_run fr = {ranks, n, L, 1, fq, start, pc, &nm, hio, io};
    st = qw_ranks_run(ranks[0]->group, n, rank_forward, &fr, err);
    if (n > 1 && shared)
        for (int i = 0; i < n; i++) {
            ranks[i]->prof = shared;
            for (int p = 0; p < QW_PHASES; p++)
                shared->s[p] += local[i].s[p];
        }
    if (st != QS_OK) return st;
    *logits = n > 1 ? gathered : ranks[0]->rs.logits;
    return QS_OK;
}

qs_status qw_forward_blocks(qw_rank *r, const uint32_t *tokens, int T, int first, int end,
                            const float *in, float *out, qw_prefix_cache *pc,
                            const char *(*name_of)(const void *ctx, int index, char *buf,
                                                   size_t cap),
                            const void *name_ctx, qs_error *err) {
    int L = r->cfg.n_layers;
    if (first < 0 || end < first || end > L || (first > 0 && !in))
        return qs_error_set(err, QS_EINVAL, "forward: blocks %d..%d of %d%s", first, end, L,
                            first > 0 && !in ? " without the residual at the first" : "");
    fwd_names nm = {name_of, name_ctx};
    size_t bytes = (size_t)T * (size_t)r->cfg.dim * sizeof(float);
    int fq = qw_forward_first_quantized_block(r), start = first;
    if (fq > end) fq = end; /* boundaries past `end` are not this forward's to store */
    qs_status st;
    if (first == 0) {
        st = qw_prefix_cache_begin(pc, &r->be, tokens, T, fq, r->rs.x, &start, err);
    } else {
        pc = NULL; /* the cache holds unquantized prefixes from the embeddings, not this one */
        st = r->be.ops->upload(&r->be, r->rs.x, in, bytes, err);
    }
    if (st != QS_OK) return st;
    qw_head_io hio = head_io(r, tokens, T, 0, NULL, r->cfg.vocab_size);
    qw_block_io io = block_io(r, T);
    fwd_run fr = {&r, 1, end, 0, fq, start, pc, &nm, &hio, &io};
    st = rank_forward(&fr, 0, err);
    if (st == QS_OK && out) st = r->be.ops->fetch(&r->be, out, r->rs.x, bytes, err);
    return st;
}
