/* The Llama forward pass over the ops table (forward.h), for one rank (the unsharded model)
 * or the N ranks of a tensor-parallel one. It reads like modeling_llama.py; with N ranks it is
 * Megatron-LM's layer (arXiv 1909.08053, section 3): q/k/v and gate/up column-parallel (each
 * rank its heads and hidden units, no communication), o_proj and down_proj row-parallel (each
 * rank a partial sum over its inputs), one all-reduce after each row-parallel linear, the
 * residual stream and the norms replicated. lm_head is vocabulary-parallel: each rank its
 * rows, the slices gathered into one logits row (no all-reduce: every logit is computed
 * whole on one rank).
 *
 * Ranks run in lockstep, op by op, from one host thread: with one process driving the GPUs of
 * its node (ncclCommInitAll) each op is queued on every device before the next, and NCCL's
 * group calls reduce them together. n == 1 runs exactly the ops the unsharded model ran before
 * tensor parallelism existed, in the same order: no all-reduce, no amax, the same bits. */
#include "forward.h"

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
 * and its SQNR sums. */
static qs_status linear_forward(qw_rank *r, qw_linear *L, float *y, const float *x, int T,
                                const float *amax, const fwd_names *nm, qs_error *err) {
    const qw_ops *ops = OPS(r);
    qw_tensor ty = {y, T, L->out}, tx = {(float *)x, T, L->in};
    qw_act_quant act = {L->spec.act, L->spec.act_opt, amax};
    act.opt.tensor_id += (uint32_t)L->tensor_index;
    qs_status st = ops->linear(&r->be, &ty, &tx, &L->w, &act, r->rs.actq, err);
    if (st != QS_OK) {
        char name[160];
        return qs_error_wrap(err, "%s of %s", L->spec.act ? "activations" : "weights",
                             nm->name_of(nm->ctx, L->tensor_index, name, sizeof name));
    }
    if (r->probe && L->quantized && r->ref) {
        qw_tensor tr = {r->ref, T, L->out};
        st = ops->linear(&r->be, &tr, &tx, L->master, NULL, NULL, err);
        if (st != QS_OK) return st;
        double sig = 0.0, noise = 0.0;
        ops->sqnr_sums(&r->be, &ty, &tr, &sig, &noise);
        L->sig += sig;
        L->noise += noise;
    }
    return QS_OK;
}

/* A row-parallel linear (o_proj, down_proj) over the n ranks: rank i multiplies its input
 * columns x_i [T x in/n] by its weight columns, giving a partial y_i [T x D]; the all-reduce
 * sums the partials. With an activation format, the local amax of every x_i is MAX-all-reduced
 * first so each rank's quantizer uses the unsharded input's tensor scale. n == 1: the linear. */
static qs_status row_parallel(qw_rank *const *ranks, int n, int index, float *(*ybuf)(qw_rank *),
                              float *(*xbuf)(qw_rank *), int T, const fwd_names *nm,
                              qs_error *err) {
    qs_status st;
    if (n == 1) {
        qw_rank *r = ranks[0];
        return linear_forward(r, &r->lin[index], ybuf(r), xbuf(r), T, NULL, nm, err);
    }
    qw_backend *be[n];
    qw_tensor t[n];
    qw_tensor *tp[n];
    for (int i = 0; i < n; i++)
        be[i] = &ranks[i]->be;
    /* Only a per-tensor-scaled format (NVFP4, FP8 per tensor) has a scale to share; MX and INT
     * scales are per block, and the blocks do not straddle ranks (shard.h). */
    const qk_format *af = ranks[0]->lin[index].spec.act;
    int act = af && af->tensor_scale;
    if (act) {
        for (int i = 0; i < n; i++) {
            qw_rank *r = ranks[i];
            qw_tensor tx = {xbuf(r), T, r->lin[index].in};
            OPS(r)->amax(&r->be, &tx, r->amax);
            t[i] = (qw_tensor){r->amax, 1, 1};
            tp[i] = &t[i];
        }
        st = OPS(ranks[0])->allreduce(be, n, tp, QW_REDUCE_MAX, err);
        if (st != QS_OK) return qs_error_wrap(err, "amax all-reduce of linear %d", index);
    }
    for (int i = 0; i < n; i++) {
        qw_rank *r = ranks[i];
        st = linear_forward(r, &r->lin[index], ybuf(r), xbuf(r), T, act ? r->amax : NULL, nm, err);
        if (st != QS_OK) return qs_error_wrap(err, "rank %d", i);
        t[i] = (qw_tensor){ybuf(r), T, r->lin[index].out};
        tp[i] = &t[i];
    }
    st = OPS(ranks[0])->allreduce(be, n, tp, QW_REDUCE_SUM, err);
    if (st != QS_OK) return qs_error_wrap(err, "all-reduce of linear %d", index);
    return QS_OK;
}

static float *rs_ybuf(qw_rank *r) {
    return r->rs.ybuf;
}
static float *rs_att(qw_rank *r) {
    return r->rs.att;
}
static float *rs_hb(qw_rank *r) {
    return r->rs.hb;
}

qs_status qw_forward_ranks(qw_rank *const *ranks, int n, const uint32_t *tokens, int T, int row0,
                           qw_prefix_cache *pc, float *gathered, int vocab_full,
                           const char *(*name_of)(const void *ctx, int index, char *buf,
                                                  size_t cap),
                           const void *name_ctx, const float **logits, qs_error *err) {
    const qw_config *c0 = &ranks[0]->cfg;
    int D = c0->dim, L = c0->n_layers;
    fwd_names nm = {name_of, name_ctx};
    if (n > 1) pc = NULL; /* the prefix cache belongs to the unsharded model */
    /* Blocks before the first quantized one compute what the unquantized model computes: start
     * from the cached residual where there is one, and store the boundaries this run reaches. */
    int fq = qw_forward_first_quantized_block(ranks[0]);
    int start = qw_prefix_cache_begin(pc, tokens, T, fq, ranks[0]->rs.x);
    if (start == 0)
        for (int i = 0; i < n; i++) {
            qw_rank *r = ranks[i];
            qw_tensor x = {r->rs.x, T, D};
            OPS(r)->embedding(&r->be, &x, tokens, &r->lin[L * QW_LINEAR_KINDS + 1].w);
        }
    qs_status st;
/* Each statement once per rank. */
#define EACH(stmt)                                                                                 \
    for (int i = 0; i < n; i++) {                                                                  \
        qw_rank *r = ranks[i];                                                                     \
        const qw_config *c = &r->cfg;                                                              \
        qw_runstate *rs = &r->rs;                                                                  \
        int H = c->n_heads, G = c->n_kv_heads, E = c->head_dim, F = c->hidden_dim;                 \
        qw_tensor x = {rs->x, T, D}, xb = {rs->xb, T, D}, q = {rs->q, T, H * E},                   \
                  k = {rs->k, T, G * E}, v = {rs->v, T, G * E}, att = {rs->att, T, H * E},         \
                  hb = {rs->hb, T, F}, hb2 = {rs->hb2, T, F}, ybuf = {rs->ybuf, T, D};             \
        (void)c, (void)x, (void)xb, (void)q, (void)k, (void)v, (void)att, (void)hb, (void)hb2,     \
            (void)ybuf, (void)F;                                                                   \
        stmt;                                                                                      \
    }
#define LIN(kind, y, in)                                                                           \
    do {                                                                                           \
        st = linear_forward(r, &lin[kind], (y).data, (in).data, T, NULL, &nm, err);                \
        if (st != QS_OK) return n > 1 ? qs_error_wrap(err, "rank %d", i) : st;                     \
    } while (0)
#define ROW(kind, in)                                                                              \
    do {                                                                                           \
        st = row_parallel(ranks, n, l * QW_LINEAR_KINDS + (kind), rs_ybuf, in, T, &nm, err);       \
        if (st != QS_OK) return st;                                                                \
    } while (0)
    for (int l = start; l < L; l++) {
        qw_prefix_cache_reached(pc, l, fq, ranks[0]->rs.x);
        /* attention sub-block */
        EACH({
            qw_linear *lin = &r->lin[l * QW_LINEAR_KINDS];
            OPS(r)->rmsnorm(&r->be, &xb, &x, r->attn_norm[l], c->norm_eps);
            LIN(QW_LINEAR_Q, q, xb);
            LIN(QW_LINEAR_K, k, xb);
            LIN(QW_LINEAR_V, v, xb);
            OPS(r)->rope(&r->be, &q, rs->rope_cos, rs->rope_sin, H, E);
            OPS(r)->rope(&r->be, &k, rs->rope_cos, rs->rope_sin, G, E);
            OPS(r)->attention(&r->be, &att, &q, &k, &v, rs->scores, H, G, E);
        });
        ROW(QW_LINEAR_O, rs_att);
        EACH(OPS(r)->residual(&r->be, &x, &ybuf));
        /* MLP sub-block */
        EACH({
            qw_linear *lin = &r->lin[l * QW_LINEAR_KINDS];
            OPS(r)->rmsnorm(&r->be, &xb, &x, r->ffn_norm[l], c->norm_eps);
            LIN(QW_LINEAR_GATE, hb, xb);
            LIN(QW_LINEAR_UP, hb2, xb);
            OPS(r)->swiglu(&r->be, &hb, &hb, &hb2);
        });
        ROW(QW_LINEAR_DOWN, rs_hb);
        EACH(OPS(r)->residual(&r->be, &x, &ybuf));
    }
#undef LIN
#undef ROW
    qw_prefix_cache_reached(pc, L, fq, ranks[0]->rs.x);
    int R = T - row0; /* rows of logits wanted */
    for (int i = 0; i < n; i++) {
        qw_rank *r = ranks[i];
        qw_runstate *rs = &r->rs;
        qw_tensor xr = {rs->x + (size_t)row0 * D, R, D}, xbr = {rs->xb, R, D};
        OPS(r)->rmsnorm(&r->be, &xbr, &xr, r->final_norm, r->cfg.norm_eps);
        st = linear_forward(r, &r->lin[L * QW_LINEAR_KINDS], rs->logits, rs->xb, R, NULL, &nm, err);
        if (st != QS_OK) return n > 1 ? qs_error_wrap(err, "rank %d", i) : st;
        if (n > 1) {
            qw_tensor lg = {rs->logits, R, r->cfg.vocab_size};
            OPS(r)->download(&r->be, gathered + r->vocab0, (size_t)vocab_full, &lg);
        }
    }
#undef EACH
    *logits = n > 1 ? gathered : ranks[0]->rs.logits;
    return QS_OK;
}
