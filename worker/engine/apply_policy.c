/* Applying a quantization policy (policy.h) to a model (model.h): each linear's master
 * quantized into its packed form (quant.h) a chunk of rows at a time, or the model brought
 * back to its masters. */
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "convcache.h"
#include "format.h"
#include "model.h"
#include "model_internal.h"
#include "ops.h"
#include "quant.h"
#include "weights.h"

static size_t max_sz(size_t a, size_t b) {
    return a > b ? a : b;
}

/* Back to the unquantized model: every tensor reads its master, no activation formats. */
static void restore_all(qw_model *m) {
    qw_convcache_drop_packed(m->convcache); /* the packed tensors are about to be replaced */
    for (int i = 0; i < m->cfg.n_layers * QW_LINEAR_KINDS + 2; i++) {
        qw_linear *L = &m->lin[i];
        L->w = *L->master;
        memset(&L->spec, 0, sizeof L->spec);
        L->quantized = 0;
        L->in_hook = NULL; /* a method's hold (worker/method) ends with its policy */
        L->in_hook_ctx = NULL;
        L->method = 0;
    }
}

/* "bf16" is the numeric core's identity format (quant.h): fake-quant leaves FP32 as it is. */
static int is_identity(const qk_format *f) {
    return strcmp(qk_format_name(f), "bf16") == 0;
}

/* Rows of a master converted to FP32 at a time while it is quantized: about chunk_floats
 * floats (QW_APPLY_CHUNK_FLOATS, 16 MiB, by default), a multiple of 16 rows (the 2D block
 * height; every other format's blocks lie within a row), at least 16. */
static size_t chunk_rows(const qw_linear *L, size_t chunk_floats) {
    size_t r = chunk_floats / (size_t)L->in / 16 * 16;
    if (r < 16) r = 16;
    return r < (size_t)L->out ? r : (size_t)L->out;
}

/* Rows [r0, r0+n) of L's master as FP32: in place for an FP32 master, else converted into
 * buf [n x in] by `threads` threads, each a slice of rows (qw_weight_rows_f32 is serial), read
 * from the model's conversion cache where it holds the linear's pieces (convcache.h). */
static qs_status master_rows(qw_convcache *cache, const qw_linear *L, size_t r0, size_t n,
                             float *buf, int threads, const float **out, qs_error *err) {
    const qw_weight *w = L->master;
    if (w->form == QW_WEIGHT_F32) {
        *out = w->f32 + r0 * (size_t)L->in;
        return QS_OK;
    }
    size_t per = (n + (size_t)threads - 1) / (size_t)threads;
    qs_status st = QS_OK;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int t = 0; t < threads; t++) {
        size_t lo = (size_t)t * per;
        if (lo >= n) continue;
        size_t len = n - lo < per ? n - lo : per;
        qs_error e = {0};
        qs_status s = qw_convcache_rows_f32(cache, w, (int64_t)(r0 + lo), (int64_t)len,
                                            QW_GEMM_COLS, buf + lo * (size_t)L->in, &e);
        if (s != QS_OK) {
#pragma omp critical(qw_apply_policy_err)
            if (st == QS_OK) {
                st = s;
                *err = e;
            }
        }
    }
    *out = buf;
    return st;
}

/* The amax of L's master (NaN and +-Inf ignored), a chunk of rows at a time through buf. */
static qs_status master_amax(qw_convcache *cache, const qw_linear *L, float *buf,
                             size_t chunk_floats, int threads, float *amax, qs_error *err) {
    const size_t rows = (size_t)L->out, step = chunk_rows(L, chunk_floats);
    qs_status st = QS_OK;
    *amax = 0.0f;
    for (size_t r0 = 0; r0 < rows && st == QS_OK; r0 += step) {
        size_t n = rows - r0 < step ? rows - r0 : step, len = n * (size_t)L->in;
        const float *x = NULL;
        float a = 0.0f;
        st = master_rows(cache, L, r0, n, buf, threads, &x, err);
        if (st == QS_OK) st = qk_joint_amax(&x, &len, 1, threads, &a, err);
        *amax = a > *amax ? a : *amax;
    }
    return st;
}

/* The fused group (QW_FUSE_* bit) of linear kind k, 0 when it is in none; first/count: its
 * members' kinds. */
static unsigned fuse_group(int k, int *first, int *count) {
    if (k == QW_LINEAR_Q || k == QW_LINEAR_K || k == QW_LINEAR_V) {
        *first = QW_LINEAR_Q;
        *count = 3;
        return QW_FUSE_QKV;
    }
    if (k == QW_LINEAR_GATE || k == QW_LINEAR_UP) {
        *first = QW_LINEAR_GATE;
        *count = 2;
        return QW_FUSE_GATE_UP;
    }
    return 0;
}

/* Quantizes L's master with spec's weight format into L->packed and points L->w at it, one
 * chunk of rows at a time (chunk_rows; buf holds one chunk of the largest master converted
 * to FP32), so no FP32 copy of a whole master ever exists: for the formats with a per-tensor
 * scale, pass 1 takes the tensor amax over the chunks (unless the policy gives one, or
 * group_amax, the joint amax of its fused group, is given: non-NULL), pass 2
 * quantizes each chunk with it into its place (qk_quantize_rows). The packed result is bit
 * for bit qk_quantize's on the whole FP32 master (quant.h; tests/kernels kernels_packed). */
static qs_status quantize_linear(qw_convcache *cache, qw_linear *L, const qw_quant_spec *spec,
                                 const float *group_amax, float *buf, size_t chunk_floats,
                                 int threads, qs_error *err) {
    qk_quant_options opt = spec->weight_opt;
    opt.tensor_id += (uint32_t)L->tensor_index;
    if (opt.threads == 0) opt.threads = threads;
    const qk_format *f = spec->weight;
    qk_packed_release(&L->packed);
    qs_status st = qk_packed_init(&L->packed, f, &opt, (size_t)L->out, (size_t)L->in, err);
    if (st != QS_OK) return st;
    const size_t rows = (size_t)L->out, step = chunk_rows(L, chunk_floats);
    const float *x = NULL;
    if (f->tensor_scale && !opt.tensor_amax_given) {
        float amax = 0.0f;
        if (group_amax)
            amax = *group_amax;
        else
            st = master_amax(cache, L, buf, chunk_floats, threads, &amax, err);
        opt.tensor_amax_given = 1;
        opt.tensor_amax = amax;
    }
    for (size_t r0 = 0; r0 < rows && st == QS_OK; r0 += step) {
        size_t n = rows - r0 < step ? rows - r0 : step;
        st = master_rows(cache, L, r0, n, buf, threads, &x, err);
        if (st == QS_OK) st = qk_quantize_rows(f, &opt, x, r0, n, &L->packed, err);
    }
    if (st != QS_OK) {
        qk_packed_release(&L->packed);
        return st;
    }
    L->w = qw_weight_from_packed(&L->packed);
    return QS_OK;
}

qw_linear *qw_model_linear(qw_model *m, int index) {
    return index >= 0 && index < m->cfg.n_layers * QW_LINEAR_KINDS + 2 ? &m->lin[index] : NULL;
}

qs_status qw_model_apply_policy(qw_model *m, const qw_policy *p, qs_error *err) {
    double t0 = qs_clock_s();
    qs_status st = qw_model_apply_policy_chunked(m, p, QW_APPLY_CHUNK_FLOATS, err);
    qw_profile_add_since(&m->prof, QW_PHASE_POLICY, t0);
    return st;
}

qs_status qw_model_apply_policy_chunked(qw_model *m, const qw_policy *p, size_t chunk_floats,
                                        qs_error *err) {
    restore_all(m);
    if (!p) return QS_OK;
    if (p->n_layers != m->cfg.n_layers || !p->linears)
        return qs_error_set(err, QS_EINVAL, "policy: %d layers, model has %d", p->n_layers,
                            m->cfg.n_layers);
    if (p->embed.act)
        return qs_error_set(err, QS_EINVAL,
                            "policy: embed.act: the embeddings are a lookup, they have no input "
                            "activations to quantize");
    int nlin = m->cfg.n_layers * QW_LINEAR_KINDS;
    size_t biggest = 0; /* floats of the largest chunk of a master to quantize */
    for (int i = 0; i < nlin + 2; i++) {
        const qw_quant_spec *s = i < nlin ? &p->linears[i] : i == nlin ? &p->lm_head : &p->embed;
        if (s->weight && !is_identity(s->weight))
            biggest = max_sz(biggest, chunk_rows(&m->lin[i], chunk_floats) * (size_t)m->lin[i].in);
    }
    if (p->fuse)
        for (int i = 0; i < nlin; i++) /* the fused groups' amax reads every member's master */
            biggest = max_sz(biggest, chunk_rows(&m->lin[i], chunk_floats) * (size_t)m->lin[i].in);
    float *tmp = biggest ? malloc(biggest * sizeof(float)) : NULL;
    if (biggest && !tmp)
        return qs_error_set(err, QS_ENOMEM, "policy: %zu floats to quantize a master chunk",
                            biggest);
    char name[160];
    qs_status st = QS_OK;
    for (int i = 0; i < nlin + 2 && st == QS_OK; i++) {
        qw_linear *L = &m->lin[i];
        const qw_quant_spec *s = i < nlin ? &p->linears[i] : i == nlin ? &p->lm_head : &p->embed;
        if (!s->weight && !s->act) continue;
        L->spec = *s;
        L->quantized = 1;
        /* The identity format keeps the master: fake-quant would leave its FP32 values as they
         * are. A tied lm_head gets a packed copy of its own: the embeddings stay as they are
         * unless the policy's embed names them (policy.h). */
        if (s->weight && !is_identity(s->weight)) {
            /* a fused group: the joint amax of its members' masters in this block */
            int first = 0, count = 0;
            unsigned g = i < nlin ? fuse_group(i % QW_LINEAR_KINDS, &first, &count) : 0;
            float joint = 0.0f, *given = NULL;
            if ((p->fuse & g) && s->weight->tensor_scale && !s->weight_opt.tensor_amax_given) {
                int base = i - i % QW_LINEAR_KINDS;
                for (int k = first; k < first + count && st == QS_OK; k++) {
                    float a = 0.0f;
                    st = master_amax(m->convcache, &m->lin[base + k], tmp, chunk_floats, m->threads,
                                     &a, err);
                    joint = a > joint ? a : joint;
                }
                given = &joint;
            }
            if (st == QS_OK)
                st = quantize_linear(m->convcache, L, s, given, tmp, chunk_floats, m->threads, err);
            if (st != QS_OK)
                qs_error_wrap(err, "policy: weights of %s",
                              qw_model_linear_name(m, i, name, sizeof name));
        }
    }
    free(tmp);
    if (st != QS_OK) restore_all(m);
    return st;
}
