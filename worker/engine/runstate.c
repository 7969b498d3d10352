/* The engine's run state (runstate.h): one allocation, carved. */
#include "runstate.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define QW_ALIGN 64

static size_t max_sz(size_t a, size_t b) {
    return a > b ? a : b;
}

/* The carving plan: sizes in floats, in the order of the fields. */
typedef struct plan {
    size_t n[14];
} plan;

static plan plan_of(const qw_config *c, size_t T, size_t nt) {
    size_t D = (size_t)c->dim, F = (size_t)c->hidden_dim, H = (size_t)c->n_heads,
           G = (size_t)c->n_kv_heads, E = (size_t)c->head_dim, V = (size_t)c->vocab_size;
    plan p = {{T * (E / 2), T * (E / 2), T * D, T * D, T * H * E, T * G * E, T * G * E, T * H * E,
               nt * QW_ATT_TILE * T, T * F, T * F, T * D, T * max_sz(max_sz(D, H * E), F), T * V}};
    return p;
}

static size_t round_up(size_t n) {
    return (n + QW_ALIGN - 1) / QW_ALIGN * QW_ALIGN;
}

size_t qw_runstate_bytes(const qw_config *c, int max_ctx, int threads) {
    plan p = plan_of(c, (size_t)max_ctx, (size_t)threads);
    size_t bytes = 0;
    for (size_t i = 0; i < sizeof p.n / sizeof p.n[0]; i++)
        bytes += round_up(max_sz(p.n[i], 1) * sizeof(float));
    return bytes;
}

qs_status qw_runstate_init(qw_runstate *s, qw_backend *b, const qw_config *c, int max_ctx,
                           int threads, qs_error *err) {
    memset(s, 0, sizeof *s);
    if (max_ctx < 1 || threads < 1)
        return qs_error_set(err, QS_EINVAL, "run state: max_ctx %d, threads %d", max_ctx,
                            threads);
    size_t bytes = qw_runstate_bytes(c, max_ctx, threads) + QW_ALIGN;
    char *mem = b->ops->alloc(b, bytes);
    if (!mem)
        return qs_error_set(err, QS_ENOMEM, "model: activations for max_ctx %d (%zu bytes)",
                            max_ctx, bytes);
    s->storage_ = mem;
    s->bytes = bytes;
    s->max_ctx = max_ctx;
    s->threads = threads;
    char *at = (char *)(((uintptr_t)mem + QW_ALIGN - 1) / QW_ALIGN * QW_ALIGN);
    plan p = plan_of(c, (size_t)max_ctx, (size_t)threads);
    float **dst[] = {&s->rope_cos, &s->rope_sin, &s->x,    &s->xb,     &s->q,
                     &s->k,        &s->v,        &s->att,  &s->scores, &s->hb,
                     &s->hb2,      &s->ybuf,     &s->actq, &s->logits};
    for (size_t i = 0; i < sizeof p.n / sizeof p.n[0]; i++) {
        *dst[i] = (float *)(void *)at;
        at += round_up(max_sz(p.n[i], 1) * sizeof(float));
    }
    /* The tables are computed on the host and go up with the table's upload (a memcpy on the
     * CPU): the backend's memory need not be host-visible. */
    size_t tab = (size_t)max_ctx * (size_t)(c->head_dim / 2);
    float *cs = malloc(max_sz(2 * tab, 1) * sizeof *cs);
    if (!cs) {
        qw_runstate_release(s, b);
        return qs_error_set(err, QS_ENOMEM, "run state: RoPE tables [2 x %zu]", tab);
    }
    qw_rope_tables(c, max_ctx, cs, cs + tab);
    qs_status st = b->ops->upload(b, s->rope_cos, cs, tab * sizeof *cs, err);
    if (st == QS_OK) st = b->ops->upload(b, s->rope_sin, cs + tab, tab * sizeof *cs, err);
    free(cs);
    if (st != QS_OK) {
        qw_runstate_release(s, b);
        return qs_error_wrap(err, "run state: RoPE tables");
    }
    return QS_OK;
}

void qw_runstate_release(qw_runstate *s, qw_backend *b) {
    if (!s || !s->storage_) return;
    b->ops->free(b, s->storage_);
    memset(s, 0, sizeof *s);
}
