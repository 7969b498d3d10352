/* The Llama model of qsweep's engine (model.h): weights (weights.h), quantized forms, run state
 * (runstate.h) and backend (ops.h) put together (the struct: model_internal.h), the SQNR probe
 * and the prefix cache; policies are applied in apply_policy.c. The forward pass itself is
 * forward.c over the one block definition (block.c); it reads like modeling_llama.py
 * (shapes: T = tokens, D = dim, F = hidden_dim, H = heads, G = kv heads, E = head_dim,
 * V = vocab). */
#include "model.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convcache.h"
#include "model_internal.h"
#include "ops.h"
#include "shard.h"
#include "runstate.h"
#include "synthetic.h"
#include "threads.h"
#include "weights.h"

static size_t max_sz(size_t a, size_t b) {
    return a > b ? a : b;
}

/* 0 threads: the default of threads.h (OMP_NUM_THREADS, else the affinity mask's CPUs). */
static int resolve_threads(int threads) {
    return threads > 0 ? threads : qs_default_threads();
}

/* ---------------------------------------------------------------- setup */

/* Backend and run state for `threads` threads. */
static qs_status setup_threads(qw_model *m, int threads, qs_error *err) {
    const qw_config *c = &m->cfg;
    int max_in = c->dim > c->hidden_dim ? c->dim : c->hidden_dim;
    if (c->n_heads * c->head_dim > max_in) max_in = c->n_heads * c->head_dim;
    qw_rank *r = &m->rank;
    int probe = r->probe;
    qw_model_probe_release(m);
    qw_runstate_release(&r->rs, &r->be);
    qw_backend_release(&r->be);
    qs_status st = qw_backend_cpu_init(&r->be, threads, max_in, err);
    if (st == QS_OK) st = qw_runstate_init(&r->rs, &r->be, c, m->max_ctx, threads, err);
    if (st == QS_OK) m->threads = threads;
    r->be.convcache = m->convcache;
    if (st == QS_OK && probe) st = qw_model_probe_remake(m, err);
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
            qw_linear *li = &m->lin[l * QW_LINEAR_KINDS + k];
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
        qw_linear *li = &m->lin[i];
        li->w = *li->master;
        li->out = (int)li->master->rows;
        li->in = (int)li->master->cols;
    }
    qw_rank *r = &m->rank;
    r->cfg = *c;
    r->lin = m->lin;
    r->final_norm = m->wt.final_norm;
    r->attn_norm = m->wt.attn_norm;
    r->ffn_norm = m->wt.ffn_norm;
    r->prof = &m->prof;
    m->prefix = (qw_prefix_cache){.n_layers = L, .max_ctx = max_ctx, .dim = c->dim};
    qs_status st = qw_convcache_create(qw_convcache_default_bytes(), &m->convcache, err);
    if (st == QS_OK) st = setup_threads(m, resolve_threads(threads), err);
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
    qw_tp_destroy(m->tp);
    free(m->lin);
    qw_prefix_cache_release(&m->prefix);
    qw_model_probe_release(m);
    qw_runstate_release(&m->rank.rs, &m->rank.be);
    qw_backend_release(&m->rank.be);
    qw_convcache_destroy(m->convcache);
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
qw_profile *qw_model_profile(qw_model *m) {
    return &m->prof;
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
    out->run_state = m->rank.rs.bytes;
    out->scratch = m->rank.be.wscratch_floats * sizeof(float);
}

qs_status qw_model_set_convert_cache(qw_model *m, size_t max_bytes, qs_error *err) {
    qw_convcache *c;
    qs_status st = qw_convcache_create(max_bytes, &c, err);
    if (st != QS_OK) return st;
    qw_convcache_destroy(m->convcache);
    m->convcache = c;
    if (m->rank.be.ops == qw_ops_cpu()) m->rank.be.convcache = c;
    return QS_OK;
}

void qw_model_convert_cache_stats(const qw_model *m, struct qw_convcache_stats *out) {
    qw_convcache_get_stats(m->convcache, out);
}

qs_status qw_model_set_threads(qw_model *m, int threads, qs_error *err) {
    if (threads < 0) return qs_error_set(err, QS_EINVAL, "model: threads %d < 0", threads);
    int nt = resolve_threads(threads);
    openblas_set_num_threads(1);
    if (nt == m->threads) return QS_OK;
    qs_status st = setup_threads(m, nt, err);
    if (st != QS_OK) return qs_error_wrap(err, "model: %d threads", nt);
    if (m->tp) { /* the ranks' backends and run states are sized for the team too */
        int n = qw_tp_ranks(m->tp);
        qw_tp *tp = NULL;
        st =
            qw_tp_create(&m->wt, m->max_ctx, nt, n, m->tp_init, m->tp_release, m->tp_ctx, &tp, err);
        if (st != QS_OK) return qs_error_wrap(err, "model: %d threads, tensor_parallel %d", nt, n);
        qw_tp_set_profile(tp, &m->prof);
        qw_tp_destroy(m->tp);
        m->tp = tp;
    }
    return QS_OK;
}

static qw_linear *linear_at(qw_model *m, int index) {
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

/* Floats of the probe's reference output: [max_ctx x the largest out of any linear]. */
static size_t probe_floats(const qw_model *m) {
    size_t mo = (size_t)m->cfg.vocab_size;
    mo = max_sz(mo, (size_t)m->cfg.hidden_dim);
    mo = max_sz(mo, (size_t)m->cfg.dim);
    mo = max_sz(mo, (size_t)m->cfg.n_heads * m->cfg.head_dim);
    return (size_t)m->max_ctx * mo;
}

void qw_model_probe_release(qw_model *m) {
    qw_rank *r = &m->rank;
    if (r->ref) r->be.ops->free(&r->be, r->ref);
    r->ref = NULL;
    r->probe = 0;
}

qs_status qw_model_probe_remake(qw_model *m, qs_error *err) {
    qw_rank *r = &m->rank;
    if (!r->ref) {
        size_t n = probe_floats(m);
        r->ref = r->be.ops->alloc(&r->be, n * sizeof(float));
        if (!r->ref)
            return qs_error_set(err, QS_ENOMEM, "SQNR probe buffer [%d x %zu] on the %s backend",
                                m->max_ctx, n / (size_t)m->max_ctx, r->be.ops->name);
    }
    r->probe = 1;
    return QS_OK;
}

qs_status qw_model_set_sqnr_probe(qw_model *m, int on, qs_error *err) {
    qw_rank *r = &m->rank;
    r->probe = 0;
    if (!on) return QS_OK;
    if (m->tp)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "SQNR probe: not with tensor_parallel %d (the probe runs on the "
                            "unsharded model)",
                            qw_tp_ranks(m->tp));
    for (int i = 0; i < qw_model_n_linears(m); i++) {
        qw_linear *L = linear_at(m, i);
        L->sig = L->noise = 0.0;
    }
    return qw_model_probe_remake(m, err);
}

void qw_model_set_sqnr_rows(qw_model *m, int rows) {
    m->rank.probe_rows = rows > 0 ? rows : 0;
}

int qw_model_sqnr_sums(const qw_model *m, int index, double *signal, double *noise) {
    const qw_linear *L = linear_at((qw_model *)m, index);
    if (!L || !L->quantized || !m->rank.probe) return -1;
    *signal = L->sig;
    *noise = L->noise;
    return 0;
}

/* ---------------------------------------------------------------- prefix cache */

qs_status qw_model_set_prefix_cache(qw_model *m, size_t max_bytes, qs_error *err) {
    return qw_prefix_cache_set(&m->prefix, m->cfg.n_layers, m->max_ctx, m->cfg.dim, max_bytes, err);
}

void qw_model_prefix_cache_stats(const qw_model *m, size_t *hits, size_t *blocks_skipped) {
    *hits = m->prefix.hits;
    *blocks_skipped = m->prefix.skipped;
}

/* ---------------------------------------------------------------- forward */

static const char *name_of_linear(const void *ctx, int index, char *buf, size_t cap) {
    return qw_model_linear_name(ctx, index, buf, cap);
}

qs_status qw_model_forward(qw_model *m, const uint32_t *tokens, int n, const float **logits,
                           qs_error *err) {
    return qw_model_forward_rows(m, tokens, n, 0, logits, err);
}

/* tokens[n] a forward of m accepts. Errors: QS_EINVAL naming the count or the token. */
static qs_status check_tokens(const qw_model *m, const uint32_t *tokens, int n, qs_error *err) {
    if (n < 1 || n > m->max_ctx)
        return qs_error_set(err, QS_EINVAL, "forward: %d tokens, model built for 1..%d", n,
                            m->max_ctx);
    for (int t = 0; t < n; t++)
        if (tokens[t] >= (uint32_t)m->cfg.vocab_size)
            return qs_error_set(err, QS_EINVAL, "forward: token %d = %u outside vocab %d", t,
                                tokens[t], m->cfg.vocab_size);
    return QS_OK;
}

qs_status qw_model_forward_rows(qw_model *m, const uint32_t *tokens, int n, int row0,
                                const float **logits, qs_error *err) {
    const qw_config *c = &m->cfg;
    qs_status cs = check_tokens(m, tokens, n, err);
    if (cs != QS_OK) return cs;
    if (row0 < 0 || row0 >= n)
        return qs_error_set(err, QS_EINVAL, "forward: row0 %d outside 0..%d", row0, n - 1);
    if (m->tp) {
        qs_status st = qw_tp_sync(m->tp, m->lin, err);
        if (st != QS_OK) return st;
        return qw_tp_forward(m->tp, tokens, n, row0, name_of_linear, m, logits, err);
    }
    qw_rank *r = &m->rank;
    return qw_forward_ranks(&r, 1, tokens, n, row0, &m->prefix, NULL, c->vocab_size, name_of_linear,
                            m, logits, err);
}

qs_status qw_model_forward_blocks(qw_model *m, const uint32_t *tokens, int n, int first, int end,
                                  const float *in, float *out, qs_error *err) {
    qs_status cs = check_tokens(m, tokens, n, err);
    if (cs != QS_OK) return cs;
    if (m->tp)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "forward of blocks %d..%d: tensor parallelism (unsharded model only)",
                            first, end);
    return qw_forward_blocks(&m->rank, tokens, n, first, end, in, out, &m->prefix, name_of_linear,
                             m, err);
}

qw_backend *qw_model_logits_backend(qw_model *m) {
    if (!m->tp) return &m->rank.be;
    m->host = (qw_backend){.ops = qw_ops_cpu(), .threads = m->threads};
    return &m->host;
}

qs_status qw_model_set_tensor_parallel(qw_model *m, int n, qs_error *err) {
    if (n < 1 || n > QW_TP_MAX)
        return qs_error_set(err, QS_EINVAL, "tensor_parallel %d outside 1..%d", n, QW_TP_MAX);
    if (n == qw_model_tensor_parallel(m)) return QS_OK;
    if (n > 1 && m->rank.probe)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "tensor_parallel %d: switch the SQNR probe off first", n);
    qw_tp *tp = NULL;
    if (n > 1) {
        qs_status st = qw_tp_create(&m->wt, m->max_ctx, m->threads, n, m->tp_init, m->tp_release,
                                    m->tp_ctx, &tp, err);
        if (st != QS_OK) return st;
        qw_tp_set_profile(tp, &m->prof);
    }
    qw_tp_destroy(m->tp);
    m->tp = tp;
    return QS_OK;
}

qs_status qw_model_set_tp_backends(qw_model *m, qw_rank_backend_fn init,
                                   void (*release)(qw_backend *b), void *ctx, qs_error *err) {
    m->tp_init = init;
    m->tp_release = release;
    m->tp_ctx = ctx;
    int n = qw_model_tensor_parallel(m);
    if (n == 1) return QS_OK;
    qw_tp_destroy(m->tp); /* the old ranks' devices are free before the new ones open */
    m->tp = NULL;
    return qw_model_set_tensor_parallel(m, n, err);
}

qw_backend *qw_model_tp_backend(const qw_model *m, int r) {
    return m->tp ? qw_tp_backend(m->tp, r) : NULL;
}

int qw_model_tensor_parallel(const qw_model *m) {
    return m->tp ? qw_tp_ranks(m->tp) : 1;
}

const qk_packed *qw_model_packed(const qw_model *m, int rank, int index, int64_t *axis,
                                 int64_t *start) {
    int nl = m->cfg.n_layers * QW_LINEAR_KINDS + 2;
    if (index < 0 || index >= nl) return NULL;
    *axis = 0;
    *start = 0;
    if (rank < 0) return m->lin[index].packed.storage_ ? &m->lin[index].packed : NULL;
    if (!m->tp) return NULL;
    const qw_shard *s = qw_tp_shard(m->tp, rank);
    if (!s) return NULL;
    if (index < nl - 1) {
        int ax;
        int64_t len;
        qw_shard_range(s, &m->cfg, index < nl - 2 ? index % QW_LINEAR_KINDS : QW_LINEAR_KINDS, &ax,
                       start, &len);
        *axis = ax;
    }
    return qw_tp_packed(m->tp, rank, index);
}
