/* The Llama model of qsweep's engine (model.h): weights (weights.h), quantized forms, run state
 * (runstate.h) and backend (ops.h) put together (the struct: model_internal.h), the SQNR probe
 * and the prefix cache; policies are applied in apply_policy.c. The forward pass itself is
 * written once over the ops table, at the end of this file; it reads like modeling_llama.py
 * (shapes: T = tokens, D = dim, F = hidden_dim, H = heads, G = kv heads, E = head_dim,
 * V = vocab). */
#include "model.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"
#include "ops.h"
#include "runstate.h"
#include "synthetic.h"
#include "weights.h"

static size_t max_sz(size_t a, size_t b) {
    return a > b ? a : b;
}

static int resolve_threads(int threads) {
    return threads > 0 ? threads : omp_get_num_procs();
}

/* ---------------------------------------------------------------- setup */

/* Backend and run state for `threads` threads. */
static qs_status setup_threads(qw_model *m, int threads, qs_error *err) {
    const qw_config *c = &m->cfg;
    int max_in = c->dim > c->hidden_dim ? c->dim : c->hidden_dim;
    if (c->n_heads * c->head_dim > max_in) max_in = c->n_heads * c->head_dim;
    qw_runstate_release(&m->rs, &m->be);
    qw_backend_release(&m->be);
    qs_status st = qw_backend_cpu_init(&m->be, threads, max_in, err);
    if (st == QS_OK) st = qw_runstate_init(&m->rs, &m->be, c, m->max_ctx, threads, err);
    if (st == QS_OK) m->threads = threads;
    return st;
}

/* The model over weights *w (taken over: released by destroy). */
static qs_status model_create(qw_checkpoint *ck, qw_weights *w, int max_ctx, int threads,
                              qw_model **out, qs_error *err) {
    qw_model *m = calloc(1, sizeof *m);
    if (!m) {
        qw_weights_release(w);
        return qs_error_set(err, QS_ENOMEM, "model");
    }
    m->ck = ck;
    m->wt = *w;
    memset(w, 0, sizeof *w);
    m->cfg = m->wt.cfg;
    m->max_ctx = max_ctx;
    openblas_set_num_threads(1);
    const qw_config *c = &m->cfg;
    int L = c->n_layers;
    m->lin = calloc((size_t)L * QW_LINEAR_KINDS + 2, sizeof *m->lin);
    if (!m->lin) {
        qw_model_destroy(m);
        return qs_error_set(err, QS_ENOMEM, "model: %d layers", L);
    }
    for (int l = 0; l < L; l++)
        for (int k = 0; k < QW_LINEAR_KINDS; k++) {
            linear *li = &m->lin[l * QW_LINEAR_KINDS + k];
            li->master = &m->wt.lin[k][l];
            li->tensor_index = l * QW_LINEAR_KINDS + k;
        }
    m->lm_head = &m->lin[L * QW_LINEAR_KINDS];
    m->lm_head->master = &m->wt.lm_head;
    m->lm_head->tensor_index = L * QW_LINEAR_KINDS;
    m->embed = &m->lin[L * QW_LINEAR_KINDS + 1];
    m->embed->master = &m->wt.embed;
    m->embed->tensor_index = L * QW_LINEAR_KINDS + 1;
    for (int i = 0; i < L * QW_LINEAR_KINDS + 2; i++) {
        linear *li = &m->lin[i];
        li->w = *li->master;
        li->out = (int)li->master->rows;
        li->in = (int)li->master->cols;
    }
    qs_status st = setup_threads(m, resolve_threads(threads), err);
    if (st != QS_OK) {
        qw_model_destroy(m);
        return st;
    }
    *out = m;
    return QS_OK;
}

qs_status qw_model_create(qw_checkpoint *ck, int max_ctx, int threads, qw_model **out,
                          qs_error *err) {
    *out = NULL;
    if (max_ctx < 1) return qs_error_set(err, QS_EINVAL, "model: max_ctx %d < 1", max_ctx);
    if (threads < 0) return qs_error_set(err, QS_EINVAL, "model: threads %d < 0", threads);
    qw_weights w;
    qs_status st = qw_weights_from_checkpoint(ck, &w, err);
    if (st == QS_EINVAL) return st;
    if (st != QS_OK) return qs_error_wrap(err, "model");
    return model_create(ck, &w, max_ctx, threads, out, err);
}

qs_status qw_model_create_synthetic(const char *spec, int max_ctx, int threads, qw_model **out,
                                    qs_error *err) {
    *out = NULL;
    if (max_ctx < 1) return qs_error_set(err, QS_EINVAL, "model: max_ctx %d < 1", max_ctx);
    if (threads < 0) return qs_error_set(err, QS_EINVAL, "model: threads %d < 0", threads);
    qw_weights w;
    qs_status st = qw_synthetic_build(spec, resolve_threads(threads), &w, err);
    if (st != QS_OK) return st;
    return model_create(NULL, &w, max_ctx, threads, out, err);
}

void qw_model_destroy(qw_model *m) {
    if (!m) return;
    if (m->lin)
        for (int i = 0; i < m->cfg.n_layers * QW_LINEAR_KINDS + 2; i++)
            qk_packed_release(&m->lin[i].packed);
    free(m->lin);
    free(m->prefix);
    free(m->prefix_pool);
    free(m->ref);
    qw_runstate_release(&m->rs, &m->be);
    qw_backend_release(&m->be);
    qw_weights_release(&m->wt);
    free(m);
}

const qw_config *qw_model_config(const qw_model *m) {
    return &m->cfg;
}
int qw_model_max_ctx(const qw_model *m) {
    return m->max_ctx;
}
int qw_model_threads(const qw_model *m) {
    return m->threads;
}
int qw_model_n_linears(const qw_model *m) {
    return m->cfg.n_layers * QW_LINEAR_KINDS + 1;
}
int qw_model_tied_embeddings(const qw_model *m) {
    return m->cfg.tied_embeddings;
}

void qw_model_memory(const qw_model *m, qw_model_bytes *out) {
    memset(out, 0, sizeof *out);
    out->masters = qw_weights_bytes(&m->wt);
    for (int i = 0; i < m->cfg.n_layers * QW_LINEAR_KINDS + 2; i++)
        if (m->lin[i].packed.storage_) out->packed += qw_weight_bytes(&m->lin[i].w);
    out->run_state = m->rs.bytes;
    out->scratch = m->be.wscratch_floats * sizeof(float);
}

qs_status qw_model_set_threads(qw_model *m, int threads, qs_error *err) {
    if (threads < 0) return qs_error_set(err, QS_EINVAL, "model: threads %d < 0", threads);
    int nt = resolve_threads(threads);
    openblas_set_num_threads(1);
    if (nt == m->threads) return QS_OK;
    qs_status st = setup_threads(m, nt, err);
    if (st != QS_OK) return qs_error_wrap(err, "model: %d threads", nt);
    return QS_OK;
}

static linear *linear_at(qw_model *m, int index) {
    int n = m->cfg.n_layers * QW_LINEAR_KINDS;
    if (index < 0 || index > n) return NULL;
    return &m->lin[index];
}

const char *qw_model_linear_name(const qw_model *m, int index, char *buf, size_t cap) {
    int n = m->cfg.n_layers * QW_LINEAR_KINDS;
    if (index < 0 || index > n + 1) return "?";
    if (index == n)
        snprintf(buf, cap, "lm_head");
    else if (index == n + 1)
        snprintf(buf, cap, "model.embed_tokens");
    else
        snprintf(buf, cap, "model.layers.%d.%s", index / QW_LINEAR_KINDS,
                 qw_linear_module_name((qw_linear_kind)(index % QW_LINEAR_KINDS)));
    return buf;
}

qs_status qw_model_set_sqnr_probe(qw_model *m, int on, qs_error *err) {
    m->probe = 0;
    if (!on) return QS_OK;
    if (!m->ref) {
        size_t mo = (size_t)m->cfg.vocab_size;
        mo = max_sz(mo, (size_t)m->cfg.hidden_dim);
        mo = max_sz(mo, (size_t)m->cfg.dim);
        mo = max_sz(mo, (size_t)m->cfg.n_heads * m->cfg.head_dim);
        m->ref = malloc((size_t)m->max_ctx * mo * sizeof(float));
        if (!m->ref)
            return qs_error_set(err, QS_ENOMEM, "SQNR probe buffer [%d x %zu]", m->max_ctx, mo);
    }
    for (int i = 0; i < qw_model_n_linears(m); i++) {
        linear *L = linear_at(m, i);
        L->sig = L->noise = 0.0;
    }
    m->probe = 1;
    return QS_OK;
}

int qw_model_sqnr_sums(const qw_model *m, int index, double *signal, double *noise) {
    const linear *L = linear_at((qw_model *)m, index);
    if (!L || !L->quantized || !m->probe) return -1;
    *signal = L->sig;
    *noise = L->noise;
    return 0;
}

/* ---------------------------------------------------------------- prefix cache */

qs_status qw_model_set_prefix_cache(qw_model *m, size_t max_bytes, qs_error *err) {
    free(m->prefix);
    free(m->prefix_pool);
    m->prefix = NULL;
    m->prefix_pool = NULL;
    m->n_prefix = 0;
    m->prefix_hits = m->prefix_skipped = 0;
    if (max_bytes == 0) return QS_OK;
    size_t resid = (size_t)m->cfg.n_layers * m->max_ctx * m->cfg.dim;
    size_t per = resid * sizeof(float) + (size_t)m->max_ctx * sizeof(uint32_t);
    size_t n = max_bytes / per;
    if (n == 0)
        return qs_error_set(err, QS_EINVAL, "prefix cache: %zu bytes, one entry needs %zu",
                            max_bytes, per);
    if (n > 1u << 20) n = 1u << 20;
    m->prefix = calloc(n, sizeof *m->prefix);
    m->prefix_pool = malloc(n * per);
    if (!m->prefix || !m->prefix_pool) {
        free(m->prefix);
        free(m->prefix_pool);
        m->prefix = NULL;
        m->prefix_pool = NULL;
        return qs_error_set(err, QS_ENOMEM, "prefix cache: %zu entries of %zu bytes", n, per);
    }
    float *f = m->prefix_pool;
    uint32_t *t = (uint32_t *)(f + n * resid);
    for (size_t i = 0; i < n; i++) {
        m->prefix[i].resid = f + i * resid;
        m->prefix[i].tokens = t + i * (size_t)m->max_ctx;
    }
    m->n_prefix = (int)n;
    return QS_OK;
}

void qw_model_prefix_cache_stats(const qw_model *m, size_t *hits, size_t *blocks_skipped) {
    *hits = m->prefix_hits;
    *blocks_skipped = m->prefix_skipped;
}

/* First block with a quantized linear (weights or activations); 0 when the embeddings are
 * quantized, n_layers when no block is. */
static int first_quantized_block(const qw_model *m) {
    if (m->embed->quantized) return 0;
    for (int l = 0; l < m->cfg.n_layers; l++)
        for (int k = 0; k < QW_LINEAR_KINDS; k++)
            if (m->lin[l * QW_LINEAR_KINDS + k].quantized) return l;
    return m->cfg.n_layers;
}

/* The entry for tokens[n], or a free one claimed for them, or NULL. */
static prefix_entry *prefix_lookup(qw_model *m, const uint32_t *tokens, int n, int *found) {
    *found = 0;
    for (int i = 0; i < m->n_prefix; i++) {
        prefix_entry *e = &m->prefix[i];
        if (e->n == n && memcmp(e->tokens, tokens, (size_t)n * sizeof *tokens) == 0) {
            *found = 1;
            return e;
        }
    }
    for (int i = 0; i < m->n_prefix; i++) {
        prefix_entry *e = &m->prefix[i];
        if (e->n == 0) {
            memcpy(e->tokens, tokens, (size_t)n * sizeof *tokens);
            e->n = n;
            e->valid = 0;
            return e;
        }
    }
    return NULL;
}

static float *prefix_boundary(const qw_model *m, prefix_entry *e, int b) {
    return e->resid + (size_t)(b - 1) * m->max_ctx * m->cfg.dim;
}

/* ---------------------------------------------------------------- forward */

/* One linear over the ops table: optional activation fake-quant of the input, the GEMM on the
 * weights in their form, and with the probe on the unquantized reference on the same input
 * (master weights, FP32 input) and its SQNR sums. */
static qs_status linear_forward(qw_model *m, linear *L, float *y, const float *x, int T,
                                qs_error *err) {
    const qw_ops *ops = m->be.ops;
    qw_tensor ty = {y, T, L->out}, tx = {(float *)x, T, L->in};
    qw_act_quant act = {L->spec.act, L->spec.act_opt};
    act.opt.tensor_id += (uint32_t)L->tensor_index;
    qs_status st = ops->linear(&m->be, &ty, &tx, &L->w, &act, m->rs.actq, err);
    if (st != QS_OK) {
        char name[160];
        return qs_error_wrap(err, "%s of %s", L->spec.act ? "activations" : "weights",
                             qw_model_linear_name(m, L->tensor_index, name, sizeof name));
    }
    if (m->probe && L->quantized && m->ref) {
        qw_tensor tr = {m->ref, T, L->out};
        st = ops->linear(&m->be, &tr, &tx, L->master, NULL, NULL, err);
        if (st != QS_OK) return st;
        double sig = 0.0, noise = 0.0;
        ops->sqnr_sums(&m->be, &ty, &tr, &sig, &noise);
        L->sig += sig;
        L->noise += noise;
    }
    return QS_OK;
}

qs_status qw_model_forward(qw_model *m, const uint32_t *tokens, int n, const float **logits,
                           qs_error *err) {
    return qw_model_forward_rows(m, tokens, n, 0, logits, err);
}

qs_status qw_model_forward_rows(qw_model *m, const uint32_t *tokens, int n, int row0,
                                const float **logits, qs_error *err) {
    const qw_config *c = &m->cfg;
    const qw_ops *ops = m->be.ops;
    qw_backend *be = &m->be;
    qw_runstate *rs = &m->rs;
    if (n < 1 || n > m->max_ctx)
        return qs_error_set(err, QS_EINVAL, "forward: %d tokens, model built for 1..%d", n,
                            m->max_ctx);
    if (row0 < 0 || row0 >= n)
        return qs_error_set(err, QS_EINVAL, "forward: row0 %d outside 0..%d", row0, n - 1);
    int D = c->dim, F = c->hidden_dim, H = c->n_heads, G = c->n_kv_heads, E = c->head_dim, T = n;
    for (int t = 0; t < T; t++)
        if (tokens[t] >= (uint32_t)c->vocab_size)
            return qs_error_set(err, QS_EINVAL, "forward: token %d = %u outside vocab %d", t,
                                tokens[t], c->vocab_size);
    qw_tensor x = {rs->x, T, D}, xb = {rs->xb, T, D}, q = {rs->q, T, H * E}, k = {rs->k, T, G * E},
              v = {rs->v, T, G * E}, att = {rs->att, T, H * E}, hb = {rs->hb, T, F},
              hb2 = {rs->hb2, T, F}, ybuf = {rs->ybuf, T, D};
    /* Blocks before the first quantized one compute what the unquantized model computes: start
     * from the cached residual where there is one, and store the boundaries this run reaches. */
    int fq = first_quantized_block(m), start = 0, found = 0;
    prefix_entry *pe = fq > 0 && m->n_prefix ? prefix_lookup(m, tokens, T, &found) : NULL;
    if (found && pe->valid > 0) {
        start = fq < pe->valid ? fq : pe->valid;
        memcpy(rs->x, prefix_boundary(m, pe, start), (size_t)T * D * sizeof(float));
        m->prefix_hits++;
        m->prefix_skipped += (size_t)start;
    } else {
        ops->embedding(be, &x, tokens, &m->embed->w);
    }
    qs_status st = QS_OK;
    for (int l = start; l < c->n_layers; l++) {
        if (pe && l > pe->valid && l <= fq) {
            memcpy(prefix_boundary(m, pe, l), rs->x, (size_t)T * D * sizeof(float));
            pe->valid = l;
        }
        linear *lin = &m->lin[l * QW_LINEAR_KINDS];
#define LIN(kind, y, in)                                                                           \
    do {                                                                                           \
        st = linear_forward(m, &lin[kind], (y).data, (in).data, T, err);                           \
        if (st != QS_OK) return st;                                                                \
    } while (0)
        /* attention sub-block */
        ops->rmsnorm(be, &xb, &x, m->wt.attn_norm[l], c->norm_eps);
        LIN(QW_LINEAR_Q, q, xb);
        LIN(QW_LINEAR_K, k, xb);
        LIN(QW_LINEAR_V, v, xb);
        ops->rope(be, &q, rs->rope_cos, rs->rope_sin, H, E);
        ops->rope(be, &k, rs->rope_cos, rs->rope_sin, G, E);
        ops->attention(be, &att, &q, &k, &v, rs->scores, H, G, E);
        LIN(QW_LINEAR_O, ybuf, att);
        ops->residual(be, &x, &ybuf);
        /* MLP sub-block */
        ops->rmsnorm(be, &xb, &x, m->wt.ffn_norm[l], c->norm_eps);
        LIN(QW_LINEAR_GATE, hb, xb);
        LIN(QW_LINEAR_UP, hb2, xb);
        ops->swiglu(be, &hb, &hb, &hb2);
        LIN(QW_LINEAR_DOWN, ybuf, hb);
        ops->residual(be, &x, &ybuf);
#undef LIN
    }
    if (pe && c->n_layers > pe->valid && c->n_layers <= fq) {
        memcpy(prefix_boundary(m, pe, c->n_layers), rs->x, (size_t)T * D * sizeof(float));
        pe->valid = c->n_layers;
    }
    int R = T - row0; /* rows of logits wanted */
    qw_tensor xr = {rs->x + (size_t)row0 * D, R, D}, xbr = {rs->xb, R, D};
    ops->rmsnorm(be, &xbr, &xr, m->wt.final_norm, c->norm_eps);
    st = linear_forward(m, m->lm_head, rs->logits, rs->xb, R, err);
    if (st != QS_OK) return st;
    *logits = rs->logits;
    return QS_OK;
}
