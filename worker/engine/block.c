/* One Llama decoder block, forward and backward (block.h), over the ops table. */
#include "block.h"

#include "clock.h"

/* A failing call returns from the function. */
#define TRY(call)                                                                                  \
    do {                                                                                           \
        qs_status st_ = (call);                                                                    \
        if (st_ != QS_OK) return st_;                                                              \
    } while (0)

/* Shapes of io's rank. */
#define SHAPE(io)                                                                                  \
    const qw_config *c = (io)->cfg;                                                                \
    qw_backend *be = (io)->be;                                                                     \
    const qw_ops *ops = be->ops;                                                                   \
    int B = (io)->B, T = (io)->T, N = B * T, D = c->dim, F = c->hidden_dim, H = c->n_heads,        \
        G = c->n_kv_heads, E = c->head_dim;                                                        \
    (void)ops, (void)D, (void)F, (void)H, (void)G, (void)E

/* ln = rms(x) * w; with save, 1/rms kept in rstd for the backward. */
static qs_status norm(const qw_block_io *io, float *ln, float *rstd, float *x, const float *w,
                      qs_error *err) {
    SHAPE(io);
    double t0 = qs_clock_s();
    TRY(ops->rmsnorm(be, ln, io->save ? rstd : NULL, x, w, N, D, c->norm_eps, err));
    qw_profile_add_since(io->prof, QW_PHASE_ELEMENTWISE, t0);
    return QS_OK;
}

/* q, k rotated, then causal GQA attention into att: with save the whole-T x T kernel that keeps
 * its probabilities, else the tiled one (ops.h says why they are two). */
static qs_status rope_attention(const qw_block_io *io, qs_error *err) {
    SHAPE(io);
    double t0 = qs_clock_s();
    TRY(ops->rope(be, io->q, io->rope_cos, io->rope_sin, B, T, H, E, err));
    TRY(ops->rope(be, io->k, io->rope_cos, io->rope_sin, B, T, G, E, err));
    qw_profile_add_since(io->prof, QW_PHASE_ELEMENTWISE, t0);
    if (io->save)
        return ops->attention_fwd(be, io->att, io->probs, io->scores, io->q, io->k, io->v, B, T, H,
                                  G, E, err);
    qw_tensor q = {io->q, N, H * E}, k = {io->k, N, G * E}, v = {io->v, N, G * E},
              att = {io->att, N, H * E};
    t0 = qs_clock_s();
    ops->attention(be, &att, &q, &k, &v, io->scores, H, G, E);
    qw_profile_add_since(io->prof, QW_PHASE_ATTENTION, t0);
    return QS_OK;
}

/* h = silu(g) * u. */
static qs_status swiglu(const qw_block_io *io, qs_error *err) {
    SHAPE(io);
    double t0 = qs_clock_s();
    TRY(ops->swiglu(be, io->h, io->g, io->u, (size_t)N * F, err));
    qw_profile_add_since(io->prof, QW_PHASE_ELEMENTWISE, t0);
    return QS_OK;
}

/* out = in + ybuf (without save in == out: in place). */
static qs_status residual(const qw_block_io *io, float *out, const float *in, qs_error *err) {
    SHAPE(io);
    double t0 = qs_clock_s();
    TRY(ops->add(be, out, in, io->ybuf, (size_t)N * D, err));
    qw_profile_add_since(io->prof, QW_PHASE_ELEMENTWISE, t0);
    return QS_OK;
}

/* A column-parallel linear of rank i (each rank its own output columns). */
static qs_status col_linear(const qw_block_hooks *h, int n, int i, int layer, int kind, float *y,
                            const float *x, int rows, qs_error *err) {
    qs_status st = h->linear(h->user, i, layer, kind, y, x, rows, err);
    if (st != QS_OK && n > 1) return qs_error_wrap(err, "rank %d", i);
    return st;
}

/* o_proj or down_proj over all ranks: the hook's row-parallel linear, or each rank's own. */
static qs_status row_linear(qw_block_io *const *io, int n, int layer, int kind,
                            const qw_block_hooks *h, qs_error *err) {
    int rows = io[0]->B * io[0]->T;
    if (!h->row_linear) {
        for (int i = 0; i < n; i++) {
            const float *x = kind == QW_BLOCK_O ? io[i]->att : io[i]->h;
            TRY(col_linear(h, n, i, layer, kind, io[i]->ybuf, x, rows, err));
        }
        return QS_OK;
    }
    float *y[n], *x[n];
    for (int i = 0; i < n; i++) {
        y[i] = io[i]->ybuf;
        x[i] = kind == QW_BLOCK_O ? io[i]->att : io[i]->h;
    }
    return h->row_linear(h->user, n, layer, kind, y, x, rows, err);
}

/* Each statement once per rank, in rank order. */
#define EACH(stmt)                                                                                 \
    for (int i = 0; i < n; i++) {                                                                  \
        const qw_block_io *r = io[i];                                                              \
        int rows = r->B * r->T;                                                                    \
        (void)rows;                                                                                \
        stmt;                                                                                      \
    }

qs_status qw_block_forward(qw_block_io *const *io, int n, int layer, const qw_block_hooks *h,
                           qs_error *err) {
    /* attention sub-block */
    EACH({
        TRY(norm(r, r->ln1, r->rstd1, r->res, r->norm1, err));
        TRY(col_linear(h, n, i, layer, QW_BLOCK_Q, r->q, r->ln1, rows, err));
        TRY(col_linear(h, n, i, layer, QW_BLOCK_K, r->k, r->ln1, rows, err));
        TRY(col_linear(h, n, i, layer, QW_BLOCK_V, r->v, r->ln1, rows, err));
        TRY(rope_attention(r, err));
    });
    TRY(row_linear(io, n, layer, QW_BLOCK_O, h, err));
    EACH(TRY(residual(r, r->mid, r->res, err)));
    /* MLP sub-block */
    EACH({
        TRY(norm(r, r->ln2, r->rstd2, r->mid, r->norm2, err));
        TRY(col_linear(h, n, i, layer, QW_BLOCK_GATE, r->g, r->ln2, rows, err));
        TRY(col_linear(h, n, i, layer, QW_BLOCK_UP, r->u, r->ln2, rows, err));
        TRY(swiglu(r, err));
    });
    TRY(row_linear(io, n, layer, QW_BLOCK_DOWN, h, err));
    EACH(TRY(residual(r, r->out, r->mid, err)));
    return QS_OK;
}
#undef EACH

qs_status qw_block_backward(const qw_block_io *io, int layer, const qw_block_grads *g,
                            const qw_block_hooks *h, qs_error *err) {
    SHAPE(io);
    void *u = h->user;
    /* MLP: out = mid + down(h) */
    TRY(h->linear_bwd(u, layer, QW_BLOCK_DOWN, g->dh, 0, g->dres, io->h, N, err));
    TRY(ops->swiglu_bwd(be, g->dg, g->du, g->dh, io->g, io->u, (size_t)N * F, err));
    TRY(h->linear_bwd(u, layer, QW_BLOCK_GATE, g->dln, 0, g->dg, io->ln2, N, err));
    TRY(h->linear_bwd(u, layer, QW_BLOCK_UP, g->dln, 1, g->du, io->ln2, N, err));
    TRY(ops->rmsnorm_bwd(be, g->dres, g->dnorm2, g->dln, io->mid, io->norm2, io->rstd2, N, D, err));
    /* attention: mid = res + o(att) */
    TRY(h->linear_bwd(u, layer, QW_BLOCK_O, g->datty, 0, g->dres, io->att, N, err));
    TRY(ops->attention_bwd(be, g->dq, g->dk, g->dv, g->att_scratch, g->datty, io->q, io->k, io->v,
                           io->probs, B, T, H, G, E, err));
    TRY(ops->rope_bwd(be, g->dq, io->rope_cos, io->rope_sin, B, T, H, E, err));
    TRY(ops->rope_bwd(be, g->dk, io->rope_cos, io->rope_sin, B, T, G, E, err));
    TRY(h->linear_bwd(u, layer, QW_BLOCK_Q, g->dln, 0, g->dq, io->ln1, N, err));
    TRY(h->linear_bwd(u, layer, QW_BLOCK_K, g->dln, 1, g->dk, io->ln1, N, err));
    TRY(h->linear_bwd(u, layer, QW_BLOCK_V, g->dln, 1, g->dv, io->ln1, N, err));
    return ops->rmsnorm_bwd(be, g->dres, g->dnorm1, g->dln, io->res, io->norm1, io->rstd1, N, D,
                            err);
}
