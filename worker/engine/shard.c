/* Tensor-parallel sharding (shard.h): the plan, the ranks' weight slices, the policy synced
 * onto them with MAX-all-reduced amax, and the sharded forward (forward.c). */
#include "shard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format.h"
#include "runstate.h"

struct qw_tp {
    int n, max_ctx, n_lin;  /* ranks, context, tensors per rank (n_layers*7 + 2) */
    qw_config cfg;          /* the whole model's */
    qw_shard sh[QW_TP_MAX]; /* each rank's share */
    qw_rank *rank;          /* [n] */
    qw_rank *rp[QW_TP_MAX]; /* &rank[r], for qw_forward_ranks */
    qw_weight *masters;     /* [n][n_lin] the ranks' master slices (views or owned copies) */
    void **owned;           /* [n][n_lin] a slice's own storage, or NULL for a view */
    size_t owned_bytes;
    float *gathered;                /* [max_ctx x V] lm_head's slices gathered */
    qw_group group;                 /* the ranks' all-reduce (comm.h); zeroed until made */
    int device[QW_TP_MAX];          /* each rank's CUDA ordinal, -1 on a CPU backend */
    void (*release)(qw_backend *b); /* frees a rank's backend */
};

/* Starts of n parts of `total` cut at multiples of a unit: the largest of units[] (in
 * decreasing order) that gives every part at least one unit. start[n] = total. Returns the
 * unit, or 0 when even the smallest does not. */
static int split(int total, int n, const int *units, int n_units, int *start) {
    for (int u = 0; u < n_units; u++) {
        int unit = units[u], chunks = (total + unit - 1) / unit;
        if (chunks < n) continue;
        for (int r = 0; r <= n; r++) {
            long s = (long)chunks * r / n * unit;
            start[r] = s < total ? (int)s : total;
        }
        return unit;
    }
    return 0;
}

qs_status qw_shard_plan(const qw_config *c, int n, qw_shard *out, qs_error *err) {
    if (n < 1 || n > QW_TP_MAX)
        return qs_error_set(err, QS_EINVAL, "tensor parallel: %d ranks outside 1..%d", n,
                            QW_TP_MAX);
    int H = c->n_heads, G = c->n_kv_heads;
    if (H % n != 0)
        return qs_error_set(err, QS_EINVAL,
                            "tensor parallel %d: n_heads %d is not a multiple of the ranks "
                            "(each rank holds whole heads)",
                            n, H);
    if (G % n != 0 && n % G != 0)
        return qs_error_set(err, QS_EINVAL,
                            "tensor parallel %d: n_kv_heads %d neither a multiple nor a divisor "
                            "of the ranks (kv heads are split or replicated whole)",
                            n, G);
    static const int f_units[] = {128, 64, 32, 16, 8, 4, 2, 1}, v_units[] = {16, 8, 4, 2, 1};
    int fs[QW_TP_MAX + 1], vs[QW_TP_MAX + 1];
    if (!split(c->hidden_dim, n, f_units, 8, fs))
        return qs_error_set(err, QS_EINVAL, "tensor parallel %d: hidden_dim %d < ranks", n,
                            c->hidden_dim);
    if (!split(c->vocab_size, n, v_units, 5, vs))
        return qs_error_set(err, QS_EINVAL, "tensor parallel %d: vocab_size %d < ranks", n,
                            c->vocab_size);
    int nh = H / n, group = H / G;
    for (int r = 0; r < n; r++) {
        qw_shard *s = &out[r];
        s->h0 = r * nh;
        s->nh = nh;
        if (G % n == 0) {
            s->ng = G / n;
            s->g0 = r * s->ng;
        } else { /* n is a multiple of G: the rank's nh heads all read kv head h0 / group */
            s->ng = 1;
            s->g0 = s->h0 / group;
        }
        s->f0 = fs[r];
        s->nf = fs[r + 1] - fs[r];
        s->v0 = vs[r];
        s->nv = vs[r + 1] - vs[r];
    }
    return QS_OK;
}

void qw_shard_range(const qw_shard *s, const qw_config *c, int kind, int *axis, int64_t *start,
                    int64_t *len) {
    int64_t E = c->head_dim;
    *axis = 0;
    switch (kind) {
    case QW_LINEAR_Q:
        *start = s->h0 * E, *len = s->nh * E;
        return;
    case QW_LINEAR_K:
    case QW_LINEAR_V:
        *start = s->g0 * E, *len = s->ng * E;
        return;
    case QW_LINEAR_O:
        *axis = 1, *start = s->h0 * E, *len = s->nh * E;
        return;
    case QW_LINEAR_GATE:
    case QW_LINEAR_UP:
        *start = s->f0, *len = s->nf;
        return;
    case QW_LINEAR_DOWN:
        *axis = 1, *start = s->f0, *len = s->nf;
        return;
    default: /* lm_head */
        *start = s->v0, *len = s->nv;
        return;
    }
}

/* ---------------------------------------------------------------- construction */

/* Columns [s0, s0+len) of every row of stored tensor v, copied in v's own dtype: the bytes of
 * the whole blocks they cover (s0 and len are multiples of its block). */
static qs_status stored_columns(const qw_stored_tensor *v, int64_t s0, int64_t len, int r,
                                qw_weight *w, void **owned, size_t *owned_bytes, qs_error *err) {
    int64_t blk = qw_dtype_block(v->dtype), bb = qw_dtype_block_bytes(v->dtype);
    size_t row_bytes = (size_t)(len / blk * bb), skip = (size_t)(s0 / blk * bb);
    uint8_t *buf = malloc((size_t)v->rows * row_bytes);
    if (!buf)
        return qs_error_set(err, QS_ENOMEM, "tensor parallel: slice [%lld x %lld] of rank %d",
                            (long long)v->rows, (long long)len, r);
    for (int64_t j = 0; j < v->rows; j++)
        memcpy(buf + (size_t)j * row_bytes, v->data + (size_t)j * v->row_bytes + skip, row_bytes);
    *owned = buf;
    *owned_bytes += (size_t)v->rows * row_bytes;
    w->view.data = buf;
    w->view.cols = len;
    w->view.row_bytes = row_bytes;
    w->cols = len;
    return QS_OK;
}

/* Rank r's master slice of tensor i: a view of a row range; a column range of a stored tensor
 * copied in its own dtype; else (a row range permuted per head, columns that cut a GGUF
 * block, an FP32 master) an FP32 copy into tp->owned. */
static qs_status make_slice(qw_tp *tp, const qw_weights *wt, int r, int i, qs_error *err) {
    int L = tp->cfg.n_layers, nlin = L * QW_LINEAR_KINDS;
    const qw_weight *m = i < nlin    ? &wt->lin[i % QW_LINEAR_KINDS][i / QW_LINEAR_KINDS]
                         : i == nlin ? &wt->lm_head
                                     : &wt->embed;
    qw_weight *w = &tp->masters[(size_t)r * tp->n_lin + i];
    *w = *m;
    if (i == nlin + 1) return QS_OK; /* the embeddings: replicated */
    int axis;
    int64_t s0, len;
    qw_shard_range(&tp->sh[r], &tp->cfg, i < nlin ? i % QW_LINEAR_KINDS : QW_LINEAR_KINDS, &axis,
                   &s0, &len);
    if (axis == 0 && m->form == QW_WEIGHT_F32) {
        w->f32 = m->f32 + (size_t)s0 * (size_t)m->cols;
        w->rows = len;
        return QS_OK;
    }
    if (axis == 0 && m->form == QW_WEIGHT_STORED && !m->view.permute_heads) {
        w->view.data = m->view.data + (size_t)s0 * m->view.row_bytes;
        w->view.rows = len;
        w->rows = len;
        return QS_OK;
    }
    if (axis == 1 && m->form == QW_WEIGHT_STORED && !m->view.permute_heads &&
        s0 % qw_dtype_block(m->view.dtype) == 0 && len % qw_dtype_block(m->view.dtype) == 0)
        return stored_columns(&m->view, s0, len, r, w, &tp->owned[(size_t)r * tp->n_lin + i],
                              &tp->owned_bytes, err);
    /* A column range cutting a block, or rows permuted per head in the file: an FP32 copy. */
    int64_t rows = axis == 0 ? len : m->rows, cols = axis == 0 ? m->cols : len;
    float *buf = malloc((size_t)rows * (size_t)cols * sizeof *buf);
    float *row = axis == 1 ? malloc((size_t)m->cols * sizeof *row) : NULL;
    if (!buf || (axis == 1 && !row)) {
        free(buf);
        free(row);
        return qs_error_set(err, QS_ENOMEM, "tensor parallel: slice [%lld x %lld] of rank %d",
                            (long long)rows, (long long)cols, r);
    }
    qs_status st = QS_OK;
    if (axis == 0) {
        st = qw_weight_rows_f32(m, s0, len, buf, err);
    } else {
        for (int64_t j = 0; j < rows && st == QS_OK; j++) {
            st = qw_weight_rows_f32(m, j, 1, row, err);
            memcpy(buf + (size_t)j * cols, row + s0, (size_t)cols * sizeof *buf);
        }
    }
    free(row);
    if (st != QS_OK) {
        free(buf);
        return st;
    }
    tp->owned[(size_t)r * tp->n_lin + i] = buf;
    tp->owned_bytes += (size_t)rows * (size_t)cols * sizeof *buf;
    *w = (qw_weight){.form = QW_WEIGHT_F32, .rows = rows, .cols = cols, .f32 = buf};
    return QS_OK;
}

static qs_status rank_init(qw_tp *tp, const qw_weights *wt, int r, int threads,
                           qw_rank_backend_fn init, void *ctx, qs_error *err) {
    qw_rank *rk = &tp->rank[r];
    const qw_shard *s = &tp->sh[r];
    rk->cfg = tp->cfg;
    rk->cfg.n_heads = s->nh;
    rk->cfg.n_kv_heads = s->ng;
    rk->cfg.hidden_dim = s->nf;
    rk->cfg.vocab_size = s->nv;
    rk->vocab0 = s->v0;
    rk->final_norm = wt->final_norm;
    rk->attn_norm = wt->attn_norm;
    rk->ffn_norm = wt->ffn_norm;
    rk->lin = calloc((size_t)tp->n_lin, sizeof *rk->lin);
    if (!rk->lin) return qs_error_set(err, QS_ENOMEM, "tensor parallel: rank %d", r);
    for (int i = 0; i < tp->n_lin; i++) {
        qs_status st = make_slice(tp, wt, r, i, err);
        if (st != QS_OK) return st;
        qw_linear *li = &rk->lin[i];
        li->master = &tp->masters[(size_t)r * tp->n_lin + i];
        li->w = *li->master;
        li->out = (int)li->master->rows;
        li->in = (int)li->master->cols;
        li->tensor_index = i;
    }
    const qw_config *c = &rk->cfg;
    int max_in = c->dim > c->hidden_dim ? c->dim : c->hidden_dim;
    if (c->n_heads * c->head_dim > max_in) max_in = c->n_heads * c->head_dim;
    tp->device[r] = -1;
    qs_status st = init ? init(&rk->be, r, threads, max_in, ctx, &tp->device[r], err)
                        : qw_backend_cpu_init(&rk->be, threads, max_in, err);
    if (st == QS_OK) st = qw_runstate_init(&rk->rs, &rk->be, c, tp->max_ctx, threads, err);
    if (st != QS_OK) return qs_error_wrap(err, "tensor parallel: rank %d", r);
    rk->amax = rk->be.ops->alloc(&rk->be, sizeof(float));
    if (!rk->amax) return qs_error_set(err, QS_ENOMEM, "tensor parallel: rank %d amax", r);
    st = rk->be.ops->zero(&rk->be, rk->amax, sizeof(float), err);
    return st == QS_OK ? QS_OK : qs_error_wrap(err, "tensor parallel: rank %d amax", r);
}

/* The ranks' group: CPU ranks when every rank's backend is a CPU one, NCCL ranks on their
 * devices when every one is a GPU (comm.h). */
static qs_status make_group(qw_tp *tp, int threads, qs_error *err) {
    int gpus = 0;
    for (int r = 0; r < tp->n; r++)
        gpus += tp->device[r] >= 0;
    if (gpus && gpus != tp->n)
        return qs_error_set(err, QS_EINVAL, "tensor parallel: %d of %d ranks on GPUs", gpus, tp->n);
    qs_status st = gpus ? qw_group_nccl(&tp->group, tp->n, tp->device, err)
                        : qw_group_cpu(&tp->group, tp->n, threads, err);
    if (st != QS_OK) return qs_error_wrap(err, "tensor parallel: %d ranks", tp->n);
    for (int r = 0; r < tp->n; r++)
        tp->rank[r].group = &tp->group;
    return QS_OK;
}

qs_status qw_tp_create(const qw_weights *wt, int max_ctx, int threads, int n,
                       qw_rank_backend_fn init, void (*release)(qw_backend *b), void *ctx,
                       qw_tp **out, qs_error *err) {
    *out = NULL;
    if (max_ctx < 1 || threads < 1)
        return qs_error_set(err, QS_EINVAL, "tensor parallel: max_ctx %d, threads %d", max_ctx,
                            threads);
    qw_tp *tp = calloc(1, sizeof *tp);
    if (!tp) return qs_error_set(err, QS_ENOMEM, "tensor parallel");
    tp->cfg = wt->cfg;
    tp->release = release ? release : qw_backend_release;
    tp->n = n;
    tp->max_ctx = max_ctx;
    tp->n_lin = wt->cfg.n_layers * QW_LINEAR_KINDS + 2;
    qs_status st = qw_shard_plan(&tp->cfg, n, tp->sh, err);
    if (st != QS_OK) {
        free(tp);
        return st;
    }
    tp->rank = calloc((size_t)n, sizeof *tp->rank);
    tp->masters = calloc((size_t)n * tp->n_lin, sizeof *tp->masters);
    tp->owned = calloc((size_t)n * tp->n_lin, sizeof *tp->owned);
    tp->gathered = malloc((size_t)max_ctx * (size_t)wt->cfg.vocab_size * sizeof(float));
    if (!tp->rank || !tp->masters || !tp->owned || !tp->gathered) {
        qw_tp_destroy(tp);
        return qs_error_set(err, QS_ENOMEM, "tensor parallel: %d ranks", n);
    }
    /* The ranks run concurrently (forward.c), so the worker's threads are split between them:
     * rank r gets threads/n, the first threads%n one more, at least one each. */
    for (int r = 0; r < n && st == QS_OK; r++) {
        tp->rp[r] = &tp->rank[r];
        int rt = threads / n + (r < threads % n);
        st = rank_init(tp, wt, r, rt > 0 ? rt : 1, init, ctx, err);
    }
    if (st == QS_OK) st = make_group(tp, threads, err);
    if (st != QS_OK) {
        qw_tp_destroy(tp);
        return st;
    }
    *out = tp;
    return QS_OK;
}

void qw_tp_destroy(qw_tp *tp) {
    if (!tp) return;
    if (tp->rank)
        for (int r = 0; r < tp->n; r++) {
            qw_rank *rk = &tp->rank[r];
            if (rk->lin)
                for (int i = 0; i < tp->n_lin; i++)
                    qk_packed_release(&rk->lin[i].packed);
            free(rk->lin);
            if (rk->amax) rk->be.ops->free(&rk->be, rk->amax);
            if (rk->be.ops) qw_runstate_release(&rk->rs, &rk->be);
            if (rk->be.ops) tp->release(&rk->be);
        }
    if (tp->owned)
        for (size_t i = 0; i < (size_t)tp->n * tp->n_lin; i++)
            free(tp->owned[i]);
    free(tp->owned);
    free(tp->masters);
    free(tp->rank);
    free(tp->gathered);
    qw_group_destroy(&tp->group);
    free(tp);
}

void qw_tp_set_profile(qw_tp *tp, qw_profile *p) {
    for (int r = 0; r < tp->n; r++)
        tp->rank[r].prof = p;
}

int qw_tp_ranks(const qw_tp *tp) {
    return tp->n;
}

const qk_packed *qw_tp_packed(const qw_tp *tp, int r, int index) {
    if (r < 0 || r >= tp->n || index < 0 || index >= tp->n_lin) return NULL;
    const qk_packed *p = &tp->rank[r].lin[index].packed;
    return p->storage_ ? p : NULL;
}

qw_backend *qw_tp_backend(const qw_tp *tp, int r) {
    return tp && r >= 0 && r < tp->n ? &tp->rank[r].be : NULL;
}

const qw_shard *qw_tp_shard(const qw_tp *tp, int r) {
    return r >= 0 && r < tp->n ? &tp->sh[r] : NULL;
}

size_t qw_tp_slice_bytes(const qw_tp *tp) {
    return tp->owned_bytes;
}

size_t qw_tp_bytes(const qw_tp *tp) {
    size_t b = tp->owned_bytes + (size_t)tp->max_ctx * tp->cfg.vocab_size * sizeof(float);
    for (int r = 0; r < tp->n; r++) {
        const qw_rank *rk = &tp->rank[r];
        b += rk->rs.bytes + rk->be.wscratch_floats * sizeof(float);
        for (int i = 0; i < tp->n_lin; i++)
            if (rk->lin[i].packed.storage_) b += qw_weight_bytes(&rk->lin[i].w);
    }
    return b;
}

/* ---------------------------------------------------------------- policy */

static int is_identity(const qk_format *f) {
    return f->rule == QK_RULE_IDENTITY;
}

/* Elements per block along K of fmt under opt; 0 = one scale per whole row or tensor. */
static int k_block(const qk_format *f, const qk_quant_options *o) {
    return f->group_option && o->group_size > 0 ? o->group_size : f->block;
}

/* The constraints of shard.h for tensor i quantized as (fmt, opt), a weight (is_weight) or
 * its input activations. */
static qs_status check_format(const qw_tp *tp, int i, const qk_format *fmt,
                              const qk_quant_options *opt, int is_weight, const char *name,
                              qs_error *err) {
    int nlin = tp->cfg.n_layers * QW_LINEAR_KINDS;
    if (!fmt || is_identity(fmt) || tp->n == 1 || i == nlin + 1) return QS_OK;
    int kind = i < nlin ? i % QW_LINEAR_KINDS : QW_LINEAR_KINDS;
    const char *what = is_weight ? "weights" : "activations";
    int axis;
    int64_t s0, len;
    qw_shard_range(&tp->sh[0], &tp->cfg, kind, &axis, &s0, &len);
    /* A column-parallel linear's input is the whole (replicated) activation: no constraint. */
    if (!is_weight && axis == 0) return QS_OK;
    if (opt->rounding == QK_ROUND_SR)
        return qs_error_set(err, QS_EINVAL,
                            "tensor parallel %d: %s of %s: stochastic rounding cannot be "
                            "sharded (its random stream is keyed by the element's index in the "
                            "whole tensor)",
                            tp->n, what, name);
    for (int r = 1; r < tp->n; r++) {
        qw_shard_range(&tp->sh[r], &tp->cfg, kind, &axis, &s0, &len);
        if (axis == 1) {
            int kb = k_block(fmt, opt);
            if (kb == 0 && fmt->rule != QK_RULE_TENSOR)
                return qs_error_set(err, QS_EINVAL,
                                    "tensor parallel %d: %s of %s: %s has one scale per row over "
                                    "the whole K, which is split across ranks",
                                    tp->n, what, name, qk_format_name(fmt));
            if (kb > 0 && s0 % kb != 0)
                return qs_error_set(err, QS_EINVAL,
                                    "tensor parallel %d: %s of %s: rank %d starts at column "
                                    "%lld, not a multiple of %s's block of %d along K",
                                    tp->n, what, name, r, (long long)s0, qk_format_name(fmt), kb);
        } else if (fmt->block_rows > 1 && s0 % fmt->block_rows != 0) {
            return qs_error_set(err, QS_EINVAL,
                                "tensor parallel %d: %s of %s: rank %d starts at row %lld, not a "
                                "multiple of %s's %d-row blocks",
                                tp->n, what, name, r, (long long)s0, qk_format_name(fmt),
                                fmt->block_rows);
        }
    }
    return QS_OK;
}

/* Quantizes tensor i on every rank with spec s: the block linears and lm_head from the
 * MAX-all-reduce of the ranks' slice amax (so the tensor scale is the unsharded one), the
 * replicated embeddings from their own. tmp holds the largest slice in FP32. */
static qs_status quantize_sharded(qw_tp *tp, int i, const qw_quant_spec *s, float *tmp,
                                  qs_error *err) {
    int replicated = i == tp->cfg.n_layers * QW_LINEAR_KINDS + 1;
    qs_status st;
    if (!replicated && s->weight->tensor_scale) {
        float *bufs[QW_TP_MAX];
        for (int r = 0; r < tp->n; r++) {
            qw_rank *rk = &tp->rank[r];
            qw_linear *L = &rk->lin[i];
            st = qw_weight_rows_f32(L->master, 0, L->out, tmp, err);
            if (st != QS_OK) return st;
            /* tmp is host memory: its amax on the host (the CPU table's amax entry is this
             * function), into the rank's buffer for the group's all-reduce */
            float a = qw_amax_forward(tmp, (size_t)L->out * (size_t)L->in);
            st = rk->be.ops->upload(&rk->be, rk->amax, &a, sizeof a, err);
            if (st != QS_OK) return qs_error_wrap(err, "rank %d amax", r);
            bufs[r] = rk->amax;
        }
        st = qw_group_allreduce(&tp->group, bufs, 1, QW_GROUP_MAX, err);
        if (st != QS_OK) return st;
    }
    for (int r = 0; r < tp->n; r++) {
        qw_rank *rk = &tp->rank[r];
        qw_linear *L = &rk->lin[i];
        st = qw_weight_rows_f32(L->master, 0, L->out, tmp, err);
        if (st != QS_OK) return st;
        qk_quant_options opt = s->weight_opt;
        opt.tensor_id += (uint32_t)L->tensor_index;
        if (!replicated && s->weight->tensor_scale) {
            opt.tensor_amax_given = 1;
            st = rk->be.ops->fetch(&rk->be, &opt.tensor_amax, rk->amax, sizeof(float), err);
            if (st != QS_OK) return qs_error_wrap(err, "rank %d group amax", r);
        }
        qk_packed_release(&L->packed);
        st = qk_packed_init(&L->packed, s->weight, &opt, (size_t)L->out, (size_t)L->in, err);
        if (st == QS_OK)
            st = qk_quantize(s->weight, &opt, tmp, (size_t)L->out, (size_t)L->in, &L->packed, err);
        if (st != QS_OK) {
            qk_packed_release(&L->packed);
            return st;
        }
        L->w = qw_weight_from_packed(&L->packed);
    }
    return QS_OK;
}

/* Every rank back to its masters, no formats. */
static void unquantize(qw_tp *tp) {
    for (int r = 0; r < tp->n; r++)
        for (int i = 0; i < tp->n_lin; i++) {
            qw_linear *L = &tp->rank[r].lin[i];
            qk_packed_release(&L->packed);
            L->w = *L->master;
            memset(&L->spec, 0, sizeof L->spec);
            L->quantized = 0;
        }
}

static int same_spec(const qw_linear *a, const qw_linear *b) {
    return a->quantized == b->quantized && !memcmp(&a->spec, &b->spec, sizeof a->spec);
}

qs_status qw_tp_sync(qw_tp *tp, const qw_linear *lin, qs_error *err) {
    size_t biggest = 0;
    int changed = 0;
    for (int i = 0; i < tp->n_lin; i++) {
        if (same_spec(&tp->rank[0].lin[i], &lin[i])) continue;
        changed = 1;
        for (int r = 0; r < tp->n; r++) {
            const qw_linear *L = &tp->rank[r].lin[i];
            size_t sz = (size_t)L->out * (size_t)L->in;
            biggest = sz > biggest ? sz : biggest;
        }
    }
    if (!changed) return QS_OK;
    float *tmp = malloc((biggest ? biggest : 1) * sizeof *tmp);
    if (!tmp) return qs_error_set(err, QS_ENOMEM, "tensor parallel: %zu floats", biggest);
    qs_status st = QS_OK;
    char name[64];
    for (int i = 0; i < tp->n_lin && st == QS_OK; i++) {
        const qw_linear *M = &lin[i];
        if (same_spec(&tp->rank[0].lin[i], M)) continue;
        int nlin = tp->cfg.n_layers * QW_LINEAR_KINDS;
        if (i < nlin)
            snprintf(name, sizeof name, "layer %d %s", i / QW_LINEAR_KINDS,
                     qw_linear_kind_name((qw_linear_kind)(i % QW_LINEAR_KINDS)));
        else
            snprintf(name, sizeof name, "%s", i == nlin ? "lm_head" : "embeddings");
        for (int r = 0; r < tp->n; r++) {
            qw_linear *L = &tp->rank[r].lin[i];
            qk_packed_release(&L->packed);
            L->w = *L->master;
            L->spec = M->spec;
            L->quantized = M->quantized;
        }
        if (!M->quantized) continue;
        st = check_format(tp, i, M->spec.weight, &M->spec.weight_opt, 1, name, err);
        if (st == QS_OK) st = check_format(tp, i, M->spec.act, &M->spec.act_opt, 0, name, err);
        if (st == QS_OK && M->spec.weight && !is_identity(M->spec.weight)) {
            st = quantize_sharded(tp, i, &M->spec, tmp, err);
            if (st != QS_OK) qs_error_wrap(err, "tensor parallel: weights of %s", name);
        }
    }
    free(tmp);
    if (st != QS_OK) unquantize(tp);
    return st;
}

qs_status qw_tp_forward(qw_tp *tp, const uint32_t *tokens, int n, int row0,
                        const char *(*name_of)(const void *ctx, int index, char *buf, size_t cap),
                        const void *name_ctx, const float **logits, qs_error *err) {
    return qw_forward_ranks(tp->rp, tp->n, tokens, n, row0, NULL, tp->gathered, tp->cfg.vocab_size,
                            name_of, name_ctx, logits, err);
}
