/* The Llama forward pass on the CPU (model.h). Reads like modeling_llama.py: each layer is a
 * free function over raw float*, shapes in the comments (T = tokens, D = dim, F = hidden_dim,
 * H = heads, G = kv heads, E = head_dim, V = vocab). One allocation per buffer, made in
 * qw_model_create; the forward pass allocates nothing.
 *
 * Threads: one OpenMP team does all the work. GEMMs are split across it by output columns
 * (linears) or by head (attention), each piece a single-threaded cblas_sgemm. OpenBLAS's own
 * thread pool is switched off (openblas_set_num_threads(1)): with two pools on the same cores,
 * each spinning while the other works, the 2-thread forward ran at 13 GFLOP/s against 52 on
 * one thread (bench/engine on the 2-core development machine). */
#include "model.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Query rows per attention tile: scores are computed tile by tile, each against the keys up to
 * its last query only, which skips most of the masked upper triangle and keeps the scores
 * buffer at QW_ATT_TILE x T per thread instead of T x T. */
#define QW_ATT_TILE 64

/* One linear y[T x out] = x[T x in] * W^T with W [out x in] row-major (HF layout). */
typedef struct linear {
    const float *master; /* unquantized FP32 weights, owned by the checkpoint */
    float *work;         /* working copy, allocated the first time a policy quantizes it */
    const float *w;      /* what the forward pass reads: master or work */
    int out, in;
    qw_quant_spec spec; /* weight and activation formats of the current policy */
    int quantized;      /* spec has a weight or activation format */
    int tensor_index;   /* layer*7 + kind; n_layers*7 for lm_head (SR stream separation) */
    double sig, noise;  /* SQNR probe sums */
} linear;

/* One prefix-cache entry: the residual stream at the input of blocks 1..n_layers (boundary b
 * = after block b-1; boundary n_layers = before the final norm) for one token sequence. */
typedef struct prefix_entry {
    uint32_t *tokens; /* [max_ctx] */
    int n;            /* tokens; 0 = free entry */
    int valid;        /* boundaries 1..valid hold unquantized-prefix residuals */
    float *resid;     /* [n_layers][max_ctx x D] */
} prefix_entry;

typedef struct layer {
    const float *attn_norm; /* [D] input_layernorm */
    const float *ffn_norm;  /* [D] post_attention_layernorm */
    linear lin[QW_LINEAR_KINDS];
} layer;

struct qw_model {
    qw_checkpoint *ck;
    qw_config cfg;
    int max_ctx, threads;
    layer *layers;             /* [n_layers] */
    linear lm_head;            /* [V x D] */
    const float *embed_master; /* [V x D] */
    float *embed_work;
    const float *embed;      /* master or work */
    const float *final_norm; /* [D] */
    int probe;
    prefix_entry *prefix; /* [n_prefix] */
    int n_prefix;
    void *prefix_pool; /* one allocation for all entries' tokens and residuals */
    size_t prefix_hits, prefix_skipped;
    /* RoPE tables [max_ctx x E/2] */
    float *rope_cos, *rope_sin;
    /* activations, sized for max_ctx tokens */
    float *x;      /* [T x D] residual stream */
    float *xb;     /* [T x D] normalised input of a sub-block */
    float *q;      /* [T x H*E] */
    float *k;      /* [T x G*E] */
    float *v;      /* [T x G*E] */
    float *att;    /* [T x H*E] attention output before o_proj */
    float *scores; /* [scores_threads x QW_ATT_TILE x T] one query tile's attention, per thread */
    int scores_threads;
    float *hb;     /* [T x F] gate, then silu(gate)*up */
    float *hb2;    /* [T x F] up */
    float *ybuf;   /* [T x D] output of o_proj / down_proj before the residual add */
    float *actq;   /* [T x max(D, H*E, F)] fake-quantized copy of a linear's input */
    float *ref;    /* [T x max out] SQNR probe reference output; allocated when the probe is on */
    float *logits; /* [T x V] */
};

/* ---------------------------------------------------------------- kernels */

/* out[T x D] = x / sqrt(mean(x^2) + eps) * w, per row (HF LlamaRMSNorm; sum in double). */
static void rmsnorm_forward(float *out, const float *x, const float *w, int T, int D, float eps,
                            int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int t = 0; t < T; t++) {
        const float *xr = x + (size_t)t * D;
        float *o = out + (size_t)t * D;
        double ss = 0.0;
        for (int i = 0; i < D; i++)
            ss += (double)xr[i] * xr[i];
        float r = (float)(1.0 / sqrt(ss / D + (double)eps));
        for (int i = 0; i < D; i++)
            o[i] = w[i] * (xr[i] * r);
    }
}

/* Rotates x [T x n_heads*E] in place, HF rotate_half layout: for i < E/2 the pair
 * (x[i], x[i+E/2]) turns by angle pos*inv_freq[i] (modeling_llama.apply_rotary_pos_emb). */
static void rope_forward(float *x, const float *cosb, const float *sinb, int T, int n_heads, int E,
                         int nt) {
    int h2 = E / 2;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int t = 0; t < T; t++) {
        const float *c = cosb + (size_t)t * h2, *s = sinb + (size_t)t * h2;
        for (int h = 0; h < n_heads; h++) {
            float *v = x + ((size_t)t * n_heads + h) * E;
            for (int i = 0; i < h2; i++) {
                float x1 = v[i], x2 = v[i + h2];
                v[i] = x1 * c[i] - x2 * s[i];
                v[i + h2] = x2 * c[i] + x1 * s[i];
            }
        }
    }
}

/* Causal softmax of one query tile's scores S [rows x ncols] in place (ncols = t0 + rows): row r
 * is query position t0 + r and keeps columns 0..t0+r, zeros after. Serial: the caller runs one
 * (head, tile) per thread. */
static void causal_softmax(float *S, int rows, int ncols, int t0) {
    for (int r = 0; r < rows; r++) {
        float *row = S + (size_t)r * ncols;
        int last = t0 + r;
        float mx = row[0];
        for (int j = 1; j <= last; j++)
            mx = row[j] > mx ? row[j] : mx;
        float sum = 0.0f;
        for (int j = 0; j <= last; j++) {
            row[j] = expf(row[j] - mx);
            sum += row[j];
        }
        float inv = 1.0f / sum;
        for (int j = 0; j <= last; j++)
            row[j] *= inv;
        for (int j = last + 1; j < ncols; j++)
            row[j] = 0.0f;
    }
}

/* g[i] = silu(g[i]) * u[i] over n elements (SwiGLU; silu(x) = x / (1 + exp(-x))). */
static void swiglu(float *g, const float *u, size_t n, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t i = 0; i < n; i++)
        g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static void add_inplace(float *x, const float *y, size_t n, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t i = 0; i < n; i++)
        x[i] += y[i];
}

/* Output columns per GEMM piece. The pieces are fixed by the shape alone, never by the thread
 * count: OpenBLAS picks its kernel path from the call's dimensions (on Haswell/Zen kernels a
 * narrower call takes another path, and the sums change in the last bits), so every output
 * element must come from the same call, with the same dimensions, whatever the team size. */
#define QW_GEMM_COLS 128

/* The SQNR probe's sums: values per serial piece, pieces per parallel batch. */
#define QW_SQNR_PIECE 4096
#define QW_SQNR_BATCH 64

/* y[T x out] = x[T x in] * W^T (W [out x in] row-major). The output columns are cut into
 * pieces of QW_GEMM_COLS (the last one narrower), one single-threaded sgemm per piece, handed
 * out to nt threads; the result is bit-identical for any nt. */
static void matmul_wt(float *y, const float *x, const float *W, int T, int in, int out, int nt) {
    int pieces = (out + QW_GEMM_COLS - 1) / QW_GEMM_COLS;
    if (nt > pieces) nt = pieces;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (int p = 0; p < pieces; p++) {
        int c0 = p * QW_GEMM_COLS, c1 = c0 + QW_GEMM_COLS < out ? c0 + QW_GEMM_COLS : out;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, c1 - c0, in, 1.0f, x, in,
                    W + (size_t)c0 * in, in, 0.0f, y + c0, out);
    }
}

/* One linear: optional activation fake-quant of the input (rows = tokens, k = in), the GEMM,
 * and with the probe on the unquantized reference on the same input. */
static qs_status linear_forward(qw_model *m, linear *L, float *y, const float *x, int T,
                                qs_error *err) {
    const float *xin = x;
    if (L->spec.act) {
        memcpy(m->actq, x, (size_t)T * L->in * sizeof *x);
        qk_quant_options opt = L->spec.act_opt;
        opt.tensor_id += (uint32_t)L->tensor_index;
        qs_status st =
            qk_fake_quant(L->spec.act, &opt, m->actq, (size_t)T, (size_t)L->in, NULL, err);
        if (st != QS_OK) {
            char name[160];
            return qs_error_wrap(err, "activations of %s",
                                 qw_model_linear_name(m, L->tensor_index, name, sizeof name));
        }
        xin = m->actq;
    }
    matmul_wt(y, xin, L->w, T, L->in, L->out, m->threads);
    if (m->probe && L->quantized && m->ref) {
        matmul_wt(m->ref, x, L->master, T, L->in, L->out, m->threads);
        /* Fixed pieces summed serially, then the pieces in order: the sums do not depend on
         * the team size (an OpenMP reduction's order does). */
        size_t n = (size_t)T * L->out;
        for (size_t b0 = 0; b0 < n; b0 += QW_SQNR_PIECE * QW_SQNR_BATCH) {
            double ps[QW_SQNR_BATCH], pn[QW_SQNR_BATCH];
            int np = (int)((n - b0 + QW_SQNR_PIECE - 1) / QW_SQNR_PIECE);
            if (np > QW_SQNR_BATCH) np = QW_SQNR_BATCH;
#pragma omp parallel for num_threads(m->threads) schedule(static)
            for (int p = 0; p < np; p++) {
                size_t i0 = b0 + (size_t)p * QW_SQNR_PIECE, i1 = i0 + QW_SQNR_PIECE;
                if (i1 > n) i1 = n;
                double sig = 0.0, noise = 0.0;
                for (size_t i = i0; i < i1; i++) {
                    double r = m->ref[i], d = (double)y[i] - r;
                    sig += r * r;
                    noise += d * d;
                }
                ps[p] = sig;
                pn[p] = noise;
            }
            for (int p = 0; p < np; p++) {
                L->sig += ps[p];
                L->noise += pn[p];
            }
        }
    }
    return QS_OK;
}

/* ---------------------------------------------------------------- setup */

static size_t max_sz(size_t a, size_t b) {
    return a > b ? a : b;
}

/* Looks a tensor up and checks its HF shape [rows x cols] (cols 1 for vectors). */
static qs_status get_tensor(qw_checkpoint *ck, const char *name, int64_t rows, int64_t cols,
                            const float **out, qs_error *err) {
    int64_t shape[2] = {0, 0};
    int ndim = 0;
    qs_status st = qw_checkpoint_tensor(ck, name, out, shape, &ndim, err);
    if (st != QS_OK) return st;
    if (ndim == 1) shape[1] = 1;
    if (shape[0] != rows || shape[1] != cols)
        return qs_error_set(
            err, QS_EFORMAT, "tensor %s: shape [%lld x %lld], config expects [%lld x %lld]", name,
            (long long)shape[0], (long long)shape[1], (long long)rows, (long long)cols);
    return QS_OK;
}

/* Inverse RoPE frequencies, HF _compute_default_rope_parameters and, when rope_factor > 0,
 * _compute_llama3_parameters (Llama 3.1: long wavelengths divided by factor, a smooth
 * blend between low_freq and high_freq wavelengths). */
static void rope_inv_freq(const qw_config *c, int E, float *inv) {
    for (int i = 0; i < E / 2; i++) {
        float expo = (float)(2 * i) / (float)E;
        inv[i] = 1.0f / powf(c->rope_theta, expo);
    }
    if (c->rope_factor <= 0.0f) return;
    float old_ctx = (float)c->rope_original_max_pos;
    float low_wl = old_ctx / c->rope_low_freq_factor, high_wl = old_ctx / c->rope_high_freq_factor;
    for (int i = 0; i < E / 2; i++) {
        float f = inv[i];
        float wl = 2.0f * (float)M_PI / f;
        float scaled = wl > low_wl ? f / c->rope_factor : f;
        if (!(wl < high_wl) && !(wl > low_wl)) {
            float smooth = (old_ctx / wl - c->rope_low_freq_factor) /
                           (c->rope_high_freq_factor - c->rope_low_freq_factor);
            scaled = (1.0f - smooth) * scaled / c->rope_factor + smooth * scaled;
        }
        inv[i] = scaled;
    }
}

static qs_status check_config(const qw_config *c, qs_error *err) {
#define NEED(cond, field)                                                                          \
    if (!(cond)) return qs_error_set(err, QS_EINVAL, "model config: %s out of range", field)
    NEED(c->dim > 0, "dim");
    NEED(c->hidden_dim > 0, "hidden_dim");
    NEED(c->n_layers > 0, "n_layers");
    NEED(c->n_heads > 0, "n_heads");
    NEED(c->n_kv_heads > 0 && c->n_heads % c->n_kv_heads == 0, "n_kv_heads");
    NEED(c->head_dim > 0 && c->head_dim % 2 == 0, "head_dim");
    NEED(c->vocab_size > 0, "vocab_size");
    NEED(c->rope_theta > 0.0f, "rope_theta");
    NEED(c->norm_eps >= 0.0f, "norm_eps");
    NEED(c->rope_factor <= 0.0f ||
             (c->rope_original_max_pos > 0 && c->rope_high_freq_factor > c->rope_low_freq_factor &&
              c->rope_low_freq_factor > 0.0f),
         "rope_scaling");
#undef NEED
    return QS_OK;
}

static float *alloc_floats(size_t n, int *fail) {
    float *p = malloc(max_sz(n, 1) * sizeof(float));
    if (!p) *fail = 1;
    return p;
}

static int resolve_threads(int threads) {
    return threads > 0 ? threads : omp_get_num_procs();
}

qs_status qw_model_create(qw_checkpoint *ck, int max_ctx, int threads, qw_model **out,
                          qs_error *err) {
    *out = NULL;
    if (max_ctx < 1) return qs_error_set(err, QS_EINVAL, "model: max_ctx %d < 1", max_ctx);
    if (threads < 0) return qs_error_set(err, QS_EINVAL, "model: threads %d < 0", threads);
    const qw_config *c = qw_checkpoint_config(ck);
    qs_status st = check_config(c, err);
    if (st != QS_OK) return st;
    qw_model *m = calloc(1, sizeof *m);
    if (!m) return qs_error_set(err, QS_ENOMEM, "model");
    m->ck = ck;
    m->cfg = *c;
    m->max_ctx = max_ctx;
    m->threads = resolve_threads(threads);
    openblas_set_num_threads(1);
    int D = c->dim, F = c->hidden_dim, H = c->n_heads, G = c->n_kv_heads, E = c->head_dim,
        V = c->vocab_size;
    int L = c->n_layers;
    m->layers = calloc((size_t)L, sizeof *m->layers);
    if (!m->layers) {
        qw_model_destroy(m);
        return qs_error_set(err, QS_ENOMEM, "model: %d layers", L);
    }
    st = get_tensor(ck, "model.embed_tokens.weight", V, D, &m->embed_master, err);
    if (st == QS_OK) st = get_tensor(ck, "model.norm.weight", D, 1, &m->final_norm, err);
    if (st == QS_OK)
        st = get_tensor(ck, c->tied_embeddings ? "model.embed_tokens.weight" : "lm_head.weight", V,
                        D, &m->lm_head.master, err);
    m->embed = m->embed_master;
    m->lm_head.out = V;
    m->lm_head.in = D;
    m->lm_head.w = m->lm_head.master;
    m->lm_head.tensor_index = L * QW_LINEAR_KINDS;
    const int outs[QW_LINEAR_KINDS] = {H * E, G * E, G * E, D, F, F, D};
    const int ins[QW_LINEAR_KINDS] = {D, D, D, H * E, D, D, F};
    char name[160];
    for (int l = 0; l < L && st == QS_OK; l++) {
        layer *ly = &m->layers[l];
        snprintf(name, sizeof name, "model.layers.%d.input_layernorm.weight", l);
        st = get_tensor(ck, name, D, 1, &ly->attn_norm, err);
        if (st != QS_OK) break;
        snprintf(name, sizeof name, "model.layers.%d.post_attention_layernorm.weight", l);
        st = get_tensor(ck, name, D, 1, &ly->ffn_norm, err);
        for (int k = 0; k < QW_LINEAR_KINDS && st == QS_OK; k++) {
            linear *li = &ly->lin[k];
            snprintf(name, sizeof name, "model.layers.%d.%s.weight", l,
                     qw_linear_module_name((qw_linear_kind)k));
            st = get_tensor(ck, name, outs[k], ins[k], &li->master, err);
            li->w = li->master;
            li->out = outs[k];
            li->in = ins[k];
            li->tensor_index = l * QW_LINEAR_KINDS + k;
        }
    }
    if (st != QS_OK) {
        qw_model_destroy(m);
        return qs_error_wrap(err, "model");
    }
    size_t T = (size_t)max_ctx;
    int fail = 0;
    m->rope_cos = alloc_floats(T * (E / 2), &fail);
    m->rope_sin = alloc_floats(T * (E / 2), &fail);
    m->x = alloc_floats(T * D, &fail);
    m->xb = alloc_floats(T * D, &fail);
    m->q = alloc_floats(T * H * E, &fail);
    m->k = alloc_floats(T * G * E, &fail);
    m->v = alloc_floats(T * G * E, &fail);
    m->att = alloc_floats(T * H * E, &fail);
    m->scores = alloc_floats((size_t)m->threads * QW_ATT_TILE * T, &fail);
    m->scores_threads = m->threads;
    m->hb = alloc_floats(T * F, &fail);
    m->hb2 = alloc_floats(T * F, &fail);
    m->ybuf = alloc_floats(T * D, &fail);
    m->actq = alloc_floats(T * max_sz(max_sz((size_t)D, (size_t)H * E), (size_t)F), &fail);
    m->logits = alloc_floats(T * V, &fail);
    if (fail) {
        qw_model_destroy(m);
        return qs_error_set(err, QS_ENOMEM, "model: activations for max_ctx %d", max_ctx);
    }
    float inv[E / 2 + 1];
    rope_inv_freq(c, E, inv);
    for (size_t t = 0; t < T; t++)
        for (int i = 0; i < E / 2; i++) {
            float ang = (float)t * inv[i];
            m->rope_cos[t * (E / 2) + i] = (float)cos((double)ang);
            m->rope_sin[t * (E / 2) + i] = (float)sin((double)ang);
        }
    *out = m;
    return QS_OK;
}

static void linear_free(linear *L) {
    free(L->work);
    L->work = NULL;
}

void qw_model_destroy(qw_model *m) {
    if (!m) return;
    if (m->layers)
        for (int l = 0; l < m->cfg.n_layers; l++)
            for (int k = 0; k < QW_LINEAR_KINDS; k++)
                linear_free(&m->layers[l].lin[k]);
    linear_free(&m->lm_head);
    free(m->embed_work);
    free(m->prefix);
    free(m->prefix_pool);
    free(m->layers);
    float *bufs[] = {m->rope_cos, m->rope_sin, m->x,   m->xb,   m->q,    m->k,   m->v,     m->att,
                     m->scores,   m->hb,       m->hb2, m->ybuf, m->actq, m->ref, m->logits};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
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

qs_status qw_model_set_threads(qw_model *m, int threads, qs_error *err) {
    if (threads < 0) return qs_error_set(err, QS_EINVAL, "model: threads %d < 0", threads);
    int nt = resolve_threads(threads);
    if (nt > m->scores_threads) {
        float *s = realloc(m->scores, (size_t)nt * QW_ATT_TILE * m->max_ctx * sizeof(float));
        if (!s) return qs_error_set(err, QS_ENOMEM, "model: attention buffers for %d threads", nt);
        m->scores = s;
        m->scores_threads = nt;
    }
    m->threads = nt;
    openblas_set_num_threads(1);
    return QS_OK;
}

static linear *linear_at(qw_model *m, int index) {
    int n = m->cfg.n_layers * QW_LINEAR_KINDS;
    if (index < 0 || index > n) return NULL;
    if (index == n) return &m->lm_head;
    return &m->layers[index / QW_LINEAR_KINDS].lin[index % QW_LINEAR_KINDS];
}

const char *qw_model_linear_name(const qw_model *m, int index, char *buf, size_t cap) {
    int n = m->cfg.n_layers * QW_LINEAR_KINDS;
    if (index < 0 || index > n) return "?";
    if (index == n)
        snprintf(buf, cap, "lm_head");
    else
        snprintf(buf, cap, "model.layers.%d.%s", index / QW_LINEAR_KINDS,
                 qw_linear_module_name((qw_linear_kind)(index % QW_LINEAR_KINDS)));
    return buf;
}

/* Back to the unquantized model: every linear reads its master, no activation formats. */
static void restore_all(qw_model *m) {
    for (int i = 0; i < qw_model_n_linears(m); i++) {
        linear *L = linear_at(m, i);
        L->w = L->master;
        memset(&L->spec, 0, sizeof L->spec);
        L->quantized = 0;
    }
    m->embed = m->embed_master;
}

/* Working copy of `master` [rows x k], refilled and fake-quantized with spec's weight format. */
static qs_status quantize_copy(float **work, const float *master, int rows, int k,
                               const qw_quant_spec *spec, int tensor_index, qs_error *err) {
    size_t n = (size_t)rows * k;
    if (!*work) {
        *work = malloc(n * sizeof(float));
        if (!*work) return qs_error_set(err, QS_ENOMEM, "working copy of %zu floats", n);
    }
    memcpy(*work, master, n * sizeof(float));
    qk_quant_options opt = spec->weight_opt;
    opt.tensor_id += (uint32_t)tensor_index;
    return qk_fake_quant(spec->weight, &opt, *work, (size_t)rows, (size_t)k, NULL, err);
}

qs_status qw_model_apply_policy(qw_model *m, const qw_policy *p, qs_error *err) {
    restore_all(m);
    if (!p) return QS_OK;
    if (p->n_layers != m->cfg.n_layers || !p->linears)
        return qs_error_set(err, QS_EINVAL, "policy: %d layers, model has %d", p->n_layers,
                            m->cfg.n_layers);
    if (p->embed.act)
        return qs_error_set(err, QS_EINVAL,
                            "policy: embed.act: the embeddings are a lookup, they have no input "
                            "activations to quantize");
    char name[160];
    qs_status st = QS_OK;
    for (int i = 0; i < qw_model_n_linears(m) && st == QS_OK; i++) {
        linear *L = linear_at(m, i);
        const qw_quant_spec *s =
            i < m->cfg.n_layers * QW_LINEAR_KINDS ? &p->linears[i] : &p->lm_head;
        if (!s->weight && !s->act) continue;
        L->spec = *s;
        L->quantized = 1;
        if (s->weight) {
            st = quantize_copy(&L->work, L->master, L->out, L->in, s, L->tensor_index, err);
            if (st != QS_OK)
                qs_error_wrap(err, "policy: weights of %s",
                              qw_model_linear_name(m, i, name, sizeof name));
            L->w = L->work;
        }
    }
    if (st == QS_OK && p->embed.weight) {
        st = quantize_copy(&m->embed_work, m->embed_master, m->cfg.vocab_size, m->cfg.dim,
                           &p->embed, m->cfg.n_layers * QW_LINEAR_KINDS + 1, err);
        if (st != QS_OK) qs_error_wrap(err, "policy: model.embed_tokens");
        m->embed = m->embed_work;
    }
    if (st != QS_OK) restore_all(m);
    return st;
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
    if (m->embed != m->embed_master) return 0;
    for (int l = 0; l < m->cfg.n_layers; l++)
        for (int k = 0; k < QW_LINEAR_KINDS; k++)
            if (m->layers[l].lin[k].quantized) return l;
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

/* Attention of one block on q [T x H*E], k, v [T x G*E] (rotated), into att [T x H*E].
 * Per head: S = softmax_causal(Q_h K_g^T / sqrt(E)), att_h = S V_g with g = h / (H/G),
 * computed per (head, query tile); the work items are independent, so the result does not
 * depend on the thread count. */
static void attention_forward(qw_model *m, int T) {
    const qw_config *c = &m->cfg;
    int H = c->n_heads, G = c->n_kv_heads, E = c->head_dim, group = H / G;
    int tiles = (T + QW_ATT_TILE - 1) / QW_ATT_TILE;
    float scale = 1.0f / sqrtf((float)E);
#pragma omp parallel for num_threads(m->threads) schedule(dynamic, 1)
    for (int w = 0; w < H * tiles; w++) {
        /* Later tiles have more keys: hand them out first so the team finishes together. */
        int h = w % H, tile = tiles - 1 - w / H, g = h / group;
        int t0 = tile * QW_ATT_TILE, rows = T - t0 < QW_ATT_TILE ? T - t0 : QW_ATT_TILE;
        int ncols = t0 + rows; /* keys 0..t0+rows-1: nothing past the tile's last query */
        float *S = m->scores + (size_t)omp_get_thread_num() * QW_ATT_TILE * m->max_ctx;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, ncols, E, scale,
                    m->q + (size_t)t0 * H * E + (size_t)h * E, H * E, m->k + (size_t)g * E, G * E,
                    0.0f, S, ncols);
        causal_softmax(S, rows, ncols, t0);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, E, ncols, 1.0f, S, ncols,
                    m->v + (size_t)g * E, G * E, 0.0f, m->att + (size_t)t0 * H * E + (size_t)h * E,
                    H * E);
    }
}

qs_status qw_model_forward(qw_model *m, const uint32_t *tokens, int n, const float **logits,
                           qs_error *err) {
    return qw_model_forward_rows(m, tokens, n, 0, logits, err);
}

qs_status qw_model_forward_rows(qw_model *m, const uint32_t *tokens, int n, int row0,
                                const float **logits, qs_error *err) {
    const qw_config *c = &m->cfg;
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
    /* Blocks before the first quantized one compute what the unquantized model computes: start
     * from the cached residual where there is one, and store the boundaries this run reaches. */
    int fq = first_quantized_block(m), start = 0, found = 0;
    prefix_entry *pe = fq > 0 && m->n_prefix ? prefix_lookup(m, tokens, T, &found) : NULL;
    if (found && pe->valid > 0) {
        start = fq < pe->valid ? fq : pe->valid;
        memcpy(m->x, prefix_boundary(m, pe, start), (size_t)T * D * sizeof(float));
        m->prefix_hits++;
        m->prefix_skipped += (size_t)start;
    } else {
        for (int t = 0; t < T; t++)
            memcpy(m->x + (size_t)t * D, m->embed + (size_t)tokens[t] * D, D * sizeof(float));
    }
    qs_status st = QS_OK;
    for (int l = start; l < c->n_layers; l++) {
        if (pe && l > pe->valid && l <= fq) {
            memcpy(prefix_boundary(m, pe, l), m->x, (size_t)T * D * sizeof(float));
            pe->valid = l;
        }
        layer *ly = &m->layers[l];
        linear *lin = ly->lin;
#define LIN(kind, y, x)                                                                            \
    do {                                                                                           \
        st = linear_forward(m, &lin[kind], y, x, T, err);                                          \
        if (st != QS_OK) return st;                                                                \
    } while (0)
        /* attention sub-block */
        rmsnorm_forward(m->xb, m->x, ly->attn_norm, T, D, c->norm_eps, m->threads);
        LIN(QW_LINEAR_Q, m->q, m->xb);
        LIN(QW_LINEAR_K, m->k, m->xb);
        LIN(QW_LINEAR_V, m->v, m->xb);
        rope_forward(m->q, m->rope_cos, m->rope_sin, T, H, E, m->threads);
        rope_forward(m->k, m->rope_cos, m->rope_sin, T, G, E, m->threads);
        attention_forward(m, T);
        LIN(QW_LINEAR_O, m->ybuf, m->att);
        add_inplace(m->x, m->ybuf, (size_t)T * D, m->threads);
        /* MLP sub-block */
        rmsnorm_forward(m->xb, m->x, ly->ffn_norm, T, D, c->norm_eps, m->threads);
        LIN(QW_LINEAR_GATE, m->hb, m->xb);
        LIN(QW_LINEAR_UP, m->hb2, m->xb);
        swiglu(m->hb, m->hb2, (size_t)T * F, m->threads);
        LIN(QW_LINEAR_DOWN, m->ybuf, m->hb);
        add_inplace(m->x, m->ybuf, (size_t)T * D, m->threads);
#undef LIN
    }
    if (pe && c->n_layers > pe->valid && c->n_layers <= fq) {
        memcpy(prefix_boundary(m, pe, c->n_layers), m->x, (size_t)T * D * sizeof(float));
        pe->valid = c->n_layers;
    }
    int R = T - row0; /* rows of logits wanted */
    rmsnorm_forward(m->xb, m->x + (size_t)row0 * D, m->final_norm, R, D, c->norm_eps, m->threads);
    st = linear_forward(m, &m->lm_head, m->logits, m->xb, R, err);
    if (st != QS_OK) return st;
    *logits = m->logits;
    return QS_OK;
}
