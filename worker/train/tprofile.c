/* Per-phase wall time of training (tprofile.h). */
#include "tprofile.h"

#include <string.h>

#include "clock.h"

#define GEMMS(k) "gemm_" k "_fprop", "gemm_" k "_dgrad", "gemm_" k "_wgrad"
static const char *const names[QW_TPHASES] = {
    GEMMS("q"),  GEMMS("k"),    GEMMS("v"),       GEMMS("o"),      GEMMS("gate"),
    GEMMS("up"), GEMMS("down"), GEMMS("lm_head"), "prep_copy",     "prep_bf16",
    "prep_rht",  "prep_quant",  "attention_fwd",  "attention_bwd", "norm",
    "rope",      "swiglu",      "embed_add",      "crossentropy",  "optimizer"};
#undef GEMMS

const char *qw_tphase_name(qw_tphase p) {
    return p >= 0 && p < QW_TPHASES ? names[p] : "?";
}

qw_tphase qw_tphase_gemm(int kind, qw_linear_gemm g) {
    return (qw_tphase)(QW_TPHASE_GEMM + kind * QW_N_LINEAR_GEMMS + (int)g);
}

void qw_tprofile_reset(qw_tprofile *p) {
    memset(p, 0, sizeof *p);
}

double qw_tprofile_total(const qw_tprofile *p) {
    double t = 0.0;
    for (int i = 0; i < QW_TPHASES; i++)
        t += p->s[i];
    return t;
}

void qw_tprofile_add_since(qw_tprofile *p, qw_tphase ph, double t0) {
    if (p) p->s[ph] += qs_clock_s() - t0;
}

/* ---------------------------------------------------------------- the timed table */

/* The timed backend of b, the call through its inner table timed into phase ph. */
#define TIMED(ph, entry, ...)                                                                      \
    qw_timed_backend *t = (qw_timed_backend *)(void *)b;                                           \
    double t0 = qs_clock_s();                                                                      \
    qs_status st = t->inner->entry(b, __VA_ARGS__);                                                \
    qw_tprofile_add_since(t->prof, ph, t0);                                                        \
    return st

static qs_status t_rmsnorm(qw_backend *b, float *out, float *rstd, const float *x, const float *w,
                           int N, int D, float eps, qs_error *err) {
    TIMED(QW_TPHASE_NORM, rmsnorm, out, rstd, x, w, N, D, eps, err);
}
static qs_status t_rmsnorm_bwd(qw_backend *b, float *dx, float *dw, const float *dout,
                               const float *x, const float *w, const float *rstd, int N, int D,
                               qs_error *err) {
    TIMED(QW_TPHASE_NORM, rmsnorm_bwd, dx, dw, dout, x, w, rstd, N, D, err);
}
static qs_status t_rope(qw_backend *b, float *x, const float *cosb, const float *sinb, int B, int T,
                        int nh, int E, qs_error *err) {
    TIMED(QW_TPHASE_ROPE, rope, x, cosb, sinb, B, T, nh, E, err);
}
static qs_status t_rope_bwd(qw_backend *b, float *dx, const float *cosb, const float *sinb, int B,
                            int T, int nh, int E, qs_error *err) {
    TIMED(QW_TPHASE_ROPE, rope_bwd, dx, cosb, sinb, B, T, nh, E, err);
}
static qs_status t_swiglu(qw_backend *b, float *h, const float *g, const float *u, size_t n,
                          qs_error *err) {
    TIMED(QW_TPHASE_SWIGLU, swiglu, h, g, u, n, err);
}
static qs_status t_swiglu_bwd(qw_backend *b, float *dg, float *du, const float *dh, const float *g,
                              const float *u, size_t n, qs_error *err) {
    TIMED(QW_TPHASE_SWIGLU, swiglu_bwd, dg, du, dh, g, u, n, err);
}
static qs_status t_add(qw_backend *b, float *out, const float *x, const float *y, size_t n,
                       qs_error *err) {
    TIMED(QW_TPHASE_EMBED_ADD, add, out, x, y, n, err);
}
static qs_status t_embedding_fwd(qw_backend *b, float *out, const uint32_t *tokens,
                                 const float *emb, int N, int D, qs_error *err) {
    TIMED(QW_TPHASE_EMBED_ADD, embedding_fwd, out, tokens, emb, N, D, err);
}
static qs_status t_embedding_bwd(qw_backend *b, float *demb, const float *dout,
                                 const uint32_t *tokens, int N, int D, qs_error *err) {
    TIMED(QW_TPHASE_EMBED_ADD, embedding_bwd, demb, dout, tokens, N, D, err);
}
static qs_status t_attention_fwd(qw_backend *b, float *out, float *probs, float *scratch,
                                 const float *q, const float *k, const float *v, int B, int T,
                                 int H, int G, int E, qs_error *err) {
    TIMED(QW_TPHASE_ATTN_FWD, attention_fwd, out, probs, scratch, q, k, v, B, T, H, G, E, err);
}
static qs_status t_attention_bwd(qw_backend *b, float *dq, float *dk, float *dv, float *dscratch,
                                 const float *dout, const float *q, const float *k, const float *v,
                                 const float *probs, int B, int T, int H, int G, int E,
                                 qs_error *err) {
    TIMED(QW_TPHASE_ATTN_BWD, attention_bwd, dq, dk, dv, dscratch, dout, q, k, v, probs, B, T, H, G,
          E, err);
}
static qs_status t_crossentropy_fwd(qw_backend *b, float *logits, float *losses,
                                    const uint32_t *targets, int N, int V, qs_error *err) {
    TIMED(QW_TPHASE_XENT, crossentropy_fwd, logits, losses, targets, N, V, err);
}
static qs_status t_crossentropy_bwd(qw_backend *b, float *probs, const uint32_t *targets, int N,
                                    int V, float scale, qs_error *err) {
    TIMED(QW_TPHASE_XENT, crossentropy_bwd, probs, targets, N, V, scale, err);
}
#undef TIMED

void qw_timed_backend_init(qw_timed_backend *t, const qw_backend *inner, qw_tprofile *prof) {
    t->b = *inner;
    t->inner = inner->ops;
    t->prof = prof;
    t->table = *inner->ops;
    /* an entry the inner table lacks stays NULL */
#define WRAP(e)                                                                                    \
    if (t->table.e) t->table.e = t_##e
    WRAP(rmsnorm);
    WRAP(rmsnorm_bwd);
    WRAP(rope);
    WRAP(rope_bwd);
    WRAP(swiglu);
    WRAP(swiglu_bwd);
    WRAP(add);
    WRAP(embedding_fwd);
    WRAP(embedding_bwd);
    WRAP(attention_fwd);
    WRAP(attention_bwd);
    WRAP(crossentropy_fwd);
    WRAP(crossentropy_bwd);
#undef WRAP
    t->b.ops = &t->table;
}
