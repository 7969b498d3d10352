/* The model's ends, forward and backward (llama_head.h), over the ops table. */
#include "llama_head.h"

#include "clock.h"

/* A failing call returns from the function. */
#define TRY(call)                                                                                  \
    do {                                                                                           \
        qs_status st_ = (call);                                                                    \
        if (st_ != QS_OK) return st_;                                                              \
    } while (0)

qs_status qw_head_embed(qw_head_io *const *io, int n, qs_error *err) {
    for (int i = 0; i < n; i++) {
        const qw_head_io *r = io[i];
        qw_backend *be = r->be;
        int D = r->cfg->dim;
        if (r->save) {
            TRY(be->ops->embedding_fwd(be, r->x, r->tokens, r->emb, r->N, D, err));
            continue;
        }
        qw_tensor x = {r->x, r->N, D};
        double t0 = qs_clock_s();
        be->ops->embedding(be, &x, r->tokens, r->table);
        qw_profile_add_since(r->prof, QW_PHASE_ELEMENTWISE, t0);
    }
    return QS_OK;
}

qs_status qw_head_forward(qw_head_io *const *io, int n, const qw_block_hooks *h, qs_error *err) {
    for (int i = 0; i < n; i++) {
        const qw_head_io *r = io[i];
        qw_backend *be = r->be;
        const qw_config *c = r->cfg;
        int D = c->dim, R = r->N - r->row0;
        double t0 = qs_clock_s();
        TRY(be->ops->rmsnorm(be, r->ln, r->save ? r->rstd : NULL, r->xf + (size_t)r->row0 * D,
                             r->norm, R, D, c->norm_eps, err));
        qw_profile_add_since(r->prof, QW_PHASE_ELEMENTWISE, t0);
        qs_status st =
            h->linear(h->user, i, c->n_layers, QW_BLOCK_LM_HEAD, r->logits, r->ln, R, err);
        if (st != QS_OK) return n > 1 ? qs_error_wrap(err, "rank %d", i) : st;
        if (r->gathered) {
            qw_tensor lg = {r->logits, R, c->vocab_size};
            be->ops->download(be, r->gathered + r->col0, r->ld, &lg);
        }
    }
    return QS_OK;
}

qs_status qw_head_backward(const qw_head_io *io, const float *dlogits, float *dln, float *dres,
                           float *dnorm, const qw_block_hooks *h, qs_error *err) {
    qw_backend *be = io->be;
    const qw_config *c = io->cfg;
    int N = io->N, D = c->dim;
    TRY(h->linear_bwd(h->user, c->n_layers, QW_BLOCK_LM_HEAD, dln, 0, dlogits, io->ln, N, err));
    TRY(be->ops->zero(be, dres, (size_t)N * D * sizeof(float), err));
    return be->ops->rmsnorm_bwd(be, dres, dnorm, dln, io->xf, io->norm, io->rstd, N, D, err);
}

qs_status qw_head_embed_backward(const qw_head_io *io, float *demb, const float *dx,
                                 qs_error *err) {
    qw_backend *be = io->be;
    return be->ops->embedding_bwd(be, demb, dx, io->tokens, io->N, io->cfg->dim, err);
}
