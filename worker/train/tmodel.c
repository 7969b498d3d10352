/* The trainable Llama model (tmodel.h) over the ops table (worker/engine/ops.h): the engine's
 * embeddings, final norm and lm_head (llama_head.h) and its block (block.h), with saved
 * activations and the recipe's linears, then the cross-entropy, forward and backward.
 * Shapes: N = B*T rows, D dim, F hidden_dim, H heads, G kv heads, E head_dim, V vocab,
 * L layers. */
#include "tmodel.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bf16_exact.h"
#include "block.h"
#include "clock.h"
#include "llama_head.h"
#include "philox.h"
#include "threads.h"

/* Activations of one block, saved by the forward for the backward (backend memory). */
typedef struct block_acts {
    float *res;   /* [N x D] block input (residual stream) */
    float *ln1;   /* [N x D] input_layernorm output */
    float *rstd1; /* [N] */
    float *q;     /* [N x H*E] after RoPE */
    float *k;     /* [N x G*E] after RoPE */
    float *v;     /* [N x G*E] */
    float *probs; /* the attention's saved state (ops.h qw_train_attention_saved_floats) */
    float *atty;  /* [N x H*E] attention output, o_proj input */
    float *mid;   /* [N x D] residual after attention */
    float *ln2;   /* [N x D] post_attention_layernorm output */
    float *rstd2; /* [N] */
    float *g, *u; /* [N x F] gate and up outputs */
    float *h;     /* [N x F] silu(g) * u, down_proj input */
} block_acts;

struct qw_tmodel {
    qw_config cfg;
    int B, T, N, nt;
    qw_backend *be;
    qw_backend own_be; /* the CPU backend of qw_tmodel_create (ops NULL when be is the caller's) */
    qw_tprofile prof;  /* where the steps' time went (tprofile.h), since the last reset */
    qw_timed_backend tbe; /* be, its calls timed into prof: what the forward and backward run on */
    int n_tensors;
    qw_tensor_view *tensors; /* [n_tensors], host */
    block_acts *blocks;      /* [L], host */
    size_t n_params;
    /* backend memory, carved from the one allocation */
    float *params, *grads, *mom_m, *mom_v; /* [n_params] each */
    float *res_final, *lnf, *rstdf;        /* [N x D], [N x D], [N] */
    float *logits;                         /* [N x V]: logits, then probabilities, then dlogits */
    float *losses;                         /* [N] */
    float *rope_cos, *rope_sin;            /* [T x E/2] */
    /* backward scratch */
    float *dres, *dln, *ybuf;   /* [N x D] */
    float *datty, *dq;          /* [N x H*E] */
    float *dk, *dv;             /* [N x G*E] */
    float *dh, *dg, *du;        /* [N x F] */
    float *att_scratch;         /* qw_train_attention_scratch_floats */
    uint32_t *tokens, *targets; /* [N] of the last forward */
    float *host_losses;         /* [N], host */
    int have_targets;
    uint32_t step;
    qw_recipe recipe;
    qw_qlinear_env env;
    qw_wcache wcache; /* the quantized weights of this step (wcache.h), for the recipe */
    int wcache_off;   /* 1: env.wcache NULL, every GEMM quantizes its weight */
    qw_shared_input shared; /* the X input a group of linears shares (qlinear.h), [N x D] */
    int shared_off;         /* 1: env.shared NULL, every GEMM makes its X input */
    unsigned gemm_ran[QW_N_LINEAR_GEMMS]; /* env.ran: the paths each GEMM kind ran */
    size_t bytes;
    void *mem;           /* the one backend allocation */
    void *recipe_mem;    /* buf_a, buf_b and the shared input, held while the recipe rounds */
    size_t recipe_bytes; /* its bytes; 0 under an all-FP32 recipe */
};

/* Tensor index of block l's tensor j (0 attn_norm, 1..4 q k v o, 5 ffn_norm, 6..8 gate up down). */
#define TIDX(l, j) (1 + (l)*9 + (j))

static size_t align64(size_t x) {
    return (x + 63) & ~(size_t)63;
}

/* Lays the backend allocation out (base NULL: just sizes it). att_scratch floats come from
 * scratch_floats, each block's saved attention state from saved_floats. Returns the bytes. */
static size_t layout(qw_tmodel *m, char *base, size_t scratch_floats, size_t saved_floats) {
    const qw_config *c = &m->cfg;
    size_t N = (size_t)m->N, D = c->dim, F = c->hidden_dim, HE = (size_t)c->n_heads * c->head_dim,
           GE = (size_t)c->n_kv_heads * c->head_dim, V = c->vocab_size, L = c->n_layers, T = m->T,
           E2 = c->head_dim / 2;
    size_t off = 0;
#define CARVE(ptr, type, count)                                                                    \
    do {                                                                                           \
        if (base) ptr = (type *)(void *)(base + off);                                              \
        off = align64(off + (size_t)(count) * sizeof(type));                                       \
    } while (0)
    CARVE(m->params, float, m->n_params);
    CARVE(m->grads, float, m->n_params);
    CARVE(m->mom_m, float, m->n_params);
    CARVE(m->mom_v, float, m->n_params);
    for (size_t l = 0; l < L; l++) {
        block_acts tmp = {0}, *a = base ? &m->blocks[l] : &tmp;
        CARVE(a->res, float, N *D);
        CARVE(a->ln1, float, N *D);
        CARVE(a->rstd1, float, N);
        CARVE(a->q, float, N *HE);
        CARVE(a->k, float, N *GE);
        CARVE(a->v, float, N *GE);
        CARVE(a->probs, float, saved_floats);
        CARVE(a->atty, float, N *HE);
        CARVE(a->mid, float, N *D);
        CARVE(a->ln2, float, N *D);
        CARVE(a->rstd2, float, N);
        CARVE(a->g, float, N *F);
        CARVE(a->u, float, N *F);
        CARVE(a->h, float, N *F);
    }
    CARVE(m->res_final, float, N *D);
    CARVE(m->lnf, float, N *D);
    CARVE(m->rstdf, float, N);
    CARVE(m->logits, float, N *V);
    CARVE(m->losses, float, N);
    CARVE(m->rope_cos, float, T *E2);
    CARVE(m->rope_sin, float, T *E2);
    CARVE(m->dres, float, N *D);
    CARVE(m->dln, float, N *D);
    CARVE(m->ybuf, float, N *D);
    CARVE(m->datty, float, N *HE);
    CARVE(m->dq, float, N *HE);
    CARVE(m->dk, float, N *GE);
    CARVE(m->dv, float, N *GE);
    CARVE(m->dh, float, N *F);
    CARVE(m->dg, float, N *F);
    CARVE(m->du, float, N *F);
    CARVE(m->att_scratch, float, scratch_floats);
    CARVE(m->tokens, uint32_t, N);
    CARVE(m->targets, uint32_t, N);
#undef CARVE
    return off;
}

/* in and out of each block linear kind (q, k, v, o, gate, up, down). */
static void linear_dims(const qw_config *c, int *ins, int *outs) {
    int HE = c->n_heads * c->head_dim, GE = c->n_kv_heads * c->head_dim;
    const int in[QW_TMODEL_KINDS] = {c->dim, c->dim, c->dim, HE, c->dim, c->dim, c->hidden_dim};
    const int out[QW_TMODEL_KINDS] = {HE, GE, GE, c->dim, c->hidden_dim, c->hidden_dim, c->dim};
    memcpy(ins, in, sizeof in);
    memcpy(outs, out, sizeof out);
}

/* Floats of each of buf_a and buf_b (qw_qlinear_scratch_floats of the largest linear, lm_head
 * included) and of the shared input (q, k, v read ln1 and gate, up read ln2, both [N x D]: Xq or
 * (X^T)q). */
static void recipe_floats(const qw_tmodel *m, size_t *each_buf, size_t *shared) {
    const qw_config *c = &m->cfg;
    int ins[QW_TMODEL_KINDS], outs[QW_TMODEL_KINDS];
    linear_dims(c, ins, outs);
    size_t s = qw_qlinear_scratch_floats(m->N, c->dim, c->vocab_size);
    for (int k = 0; k < QW_TMODEL_KINDS; k++) {
        size_t x = qw_qlinear_scratch_floats(m->N, ins[k], outs[k]);
        s = x > s ? x : s;
    }
    *each_buf = s;
    *shared = (size_t)m->N * (size_t)c->dim;
}

/* Bytes of the recipe's buffers (recipe_floats' each and shared) laid out one after another,
 * each from a 64-byte boundary. */
static size_t recipe_buffer_bytes(size_t each, size_t shared) {
    return 2 * align64(each * sizeof(float)) + align64(shared * sizeof(float));
}

/* 1 when r rounds or quantizes some linear's inputs (a block, or lm_head, not kept in FP32),
 * so that its GEMMs prepare inputs into buffers. */
static int recipe_rounds(const qw_recipe *r, int n_layers) {
    for (int layer = -1; layer < n_layers; layer++)
        if (!qw_qlinear_layer_fp32(r, layer, n_layers)) return 1;
    return 0;
}

/* Holds the recipe's buffers where r rounds (recipe_rounds), none under an all-FP32 recipe:
 * the old ones are kept until the new ones are made. Errors: QS_ENOMEM naming the bytes. */
static qs_status set_recipe_buffers(qw_tmodel *m, const qw_recipe *r, qs_error *err) {
    size_t each, shared;
    recipe_floats(m, &each, &shared);
    size_t bytes = recipe_rounds(r, m->cfg.n_layers) ? recipe_buffer_bytes(each, shared) : 0;
    if (bytes == m->recipe_bytes) return QS_OK;
    void *mem = NULL;
    if (bytes) {
        mem = m->be->ops->alloc(m->be, bytes);
        if (!mem)
            return qs_error_set(err, QS_ENOMEM,
                                "train model: %zu bytes of %s memory for recipe %s's inputs", bytes,
                                m->be->ops->name, r->name);
    }
    if (m->recipe_mem) m->be->ops->free(m->be, m->recipe_mem);
    m->recipe_mem = mem;
    m->recipe_bytes = bytes;
    char *p = mem;
    m->env.buf_a = mem ? (float *)(void *)p : NULL;
    m->env.buf_b = mem ? (float *)(void *)(p + align64(each * sizeof(float))) : NULL;
    m->shared.buf = mem ? (float *)(void *)(p + 2 * align64(each * sizeof(float))) : NULL;
    m->shared.cap = mem ? shared : 0;
    m->shared.valid = 0;
    return QS_OK;
}

/* The tensor table (fill 0: count only); offsets into the flat parameter array. */
static void tensor_table(qw_tmodel *m, int fill) {
    const qw_config *c = &m->cfg;
    int D = c->dim, F = c->hidden_dim, HE = c->n_heads * c->head_dim,
        GE = c->n_kv_heads * c->head_dim, V = c->vocab_size, L = c->n_layers;
    static const char *const block_names[9] = {
        "input_layernorm",  "self_attn.q_proj", "self_attn.k_proj",
        "self_attn.v_proj", "self_attn.o_proj", "post_attention_layernorm",
        "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};
    int rows[9] = {D, HE, GE, GE, D, D, F, F, D};
    int cols[9] = {1, D, D, D, HE, 1, D, D, F};
    size_t off = 0;
    int i = 0;
#define ADD(fmt, nm, r, cc)                                                                        \
    do {                                                                                           \
        if (fill) {                                                                                \
            qw_tensor_view *t = &m->tensors[i];                                                    \
            snprintf(t->name, sizeof t->name, fmt, nm);                                            \
            t->rows = (r);                                                                         \
            t->cols = (cc);                                                                        \
            t->offset = off;                                                                       \
            t->decay = (cc) > 1;                                                                   \
        }                                                                                          \
        off += (size_t)(r) * (size_t)(cc);                                                         \
        i++;                                                                                       \
    } while (0)
    ADD("%s", "model.embed_tokens.weight", V, D);
    char nm[96];
    for (int l = 0; l < L; l++)
        for (int j = 0; j < 9; j++) {
            snprintf(nm, sizeof nm, "model.layers.%d.%s.weight", l, block_names[j]);
            ADD("%s", nm, rows[j], cols[j]);
        }
    ADD("%s", "model.norm.weight", D, 1);
    if (!c->tied_embeddings) ADD("%s", "lm_head.weight", V, D);
#undef ADD
    m->n_tensors = i;
    m->n_params = off;
}

static void point_views(qw_tmodel *m) {
    for (int i = 0; i < m->n_tensors; i++) {
        qw_tensor_view *t = &m->tensors[i];
        t->data = m->params + t->offset;
        t->grad = m->grads + t->offset;
        t->m = m->mom_m + t->offset;
        t->v = m->mom_v + t->offset;
    }
}

/* The model config by the engine's rule (qw_config_check, weights.h), and the batch shape. */
static qs_status check_config(const qw_config *c, int B, int T, qs_error *err) {
    qs_status st = qw_config_check(c, err);
    if (st != QS_OK) return qs_error_wrap(err, "train model");
    if (B < 1 || B > 1 << 16)
        return qs_error_set(err, QS_EINVAL, "train model: batch %d out of range", B);
    if (T < 1 || T > 1 << 16)
        return qs_error_set(err, QS_EINVAL, "train model: ctx %d out of range", T);
    return QS_OK;
}

qs_status qw_tmodel_create_on(const qw_config *cfg, int B, int T, qw_backend *be, qw_tmodel **out,
                              qs_error *err) {
    *out = NULL;
    qs_status st = check_config(cfg, B, T, err);
    if (st != QS_OK) return st;
    qw_tmodel *m = calloc(1, sizeof *m);
    if (!m) return qs_error_set(err, QS_ENOMEM, "train model");
    m->cfg = *cfg;
    m->B = B;
    m->T = T;
    m->N = B * T;
    m->be = be;
    m->nt = be->threads;
    const qw_ops *ops = be->ops;
    tensor_table(m, 0);
    m->tensors = calloc((size_t)m->n_tensors, sizeof *m->tensors);
    m->blocks = calloc((size_t)cfg->n_layers, sizeof *m->blocks);
    m->host_losses = malloc((size_t)m->N * sizeof *m->host_losses);
    size_t sf = qw_train_attention_scratch_floats(be, T, cfg->n_heads, cfg->head_dim),
           vf = qw_train_attention_saved_floats(be, B, T, cfg->n_heads);
    m->bytes = layout(m, NULL, sf, vf);
    m->mem = m->tensors && m->blocks && m->host_losses ? ops->alloc(be, m->bytes) : NULL;
    if (!m->mem) {
        size_t bytes = m->bytes;
        qw_tmodel_destroy(m);
        return qs_error_set(err, QS_ENOMEM, "train model: %zu bytes of %s memory for B %d x T %d",
                            bytes, ops->name, B, T);
    }
    layout(m, m->mem, sf, vf);
    tensor_table(m, 1);
    point_views(m);
    st = ops->zero(be, m->mem, m->bytes, err);
    int E = cfg->head_dim;
    size_t tab = (size_t)T * (size_t)(E / 2);
    float *cs = malloc(2 * tab * sizeof *cs);
    if (st == QS_OK && !cs) st = qs_error_set(err, QS_ENOMEM, "train model: RoPE tables");
    if (st == QS_OK) {
        qw_rope_tables(cfg, T, cs, cs + tab);
        st = ops->upload(be, m->rope_cos, cs, tab * sizeof *cs, err);
        if (st == QS_OK) st = ops->upload(be, m->rope_sin, cs + tab, tab * sizeof *cs, err);
    }
    free(cs);
    if (st != QS_OK) {
        qw_tmodel_destroy(m);
        return st;
    }
    qw_recipe_by_name("fp32", &m->recipe, NULL);
    qw_timed_backend_init(&m->tbe, be, &m->prof);
    m->env.be = &m->tbe.b;
    m->env.prof = &m->prof;
    m->env.recipe = &m->recipe;
    m->env.n_layers = cfg->n_layers;
    m->env.ran = m->gemm_ran;
    m->env.shared = &m->shared;
    m->env.group = -1;
    *out = m;
    return QS_OK;
}

qs_status qw_tmodel_create(const qw_config *cfg, int B, int T, int nt, qw_tmodel **out,
                           qs_error *err) {
    *out = NULL;
    if (nt < 0) return qs_error_set(err, QS_EINVAL, "train model: threads out of range");
    qs_status st = check_config(cfg, B, T, err);
    if (st != QS_OK) return st;
    openblas_set_num_threads(1);
    qw_backend *be = malloc(sizeof *be);
    if (!be) return qs_error_set(err, QS_ENOMEM, "train model: backend");
    st = qw_backend_cpu_init(be, nt > 0 ? nt : qs_default_threads(), 1, err);
    if (st == QS_OK) st = qw_tmodel_create_on(cfg, B, T, be, out, err);
    if (st != QS_OK) {
        qw_backend_release(be);
        free(be);
        return st;
    }
    (*out)->own_be = *be; /* the model owns it: released with the model */
    (*out)->be = &(*out)->own_be;
    qw_timed_backend_init(&(*out)->tbe, (*out)->be, &(*out)->prof);
    free(be);
    return QS_OK;
}

void qw_tmodel_destroy(qw_tmodel *m) {
    if (!m) return;
    qw_wcache_release(&m->wcache);
    if (m->recipe_mem) m->be->ops->free(m->be, m->recipe_mem);
    if (m->mem) m->be->ops->free(m->be, m->mem);
    if (m->own_be.ops) qw_backend_release(&m->own_be);
    free(m->tensors);
    free(m->blocks);
    free(m->host_losses);
    free(m);
}

const qw_config *qw_tmodel_config(const qw_tmodel *m) {
    return &m->cfg;
}
qw_backend *qw_tmodel_backend(qw_tmodel *m) {
    return m->be;
}
int qw_tmodel_n_tensors(const qw_tmodel *m) {
    return m->n_tensors;
}
void qw_tmodel_tensor(qw_tmodel *m, int i, qw_tensor_view *out) {
    *out = m->tensors[i];
}
size_t qw_tmodel_n_params(const qw_tmodel *m) {
    return m->n_params;
}
float *qw_tmodel_params(qw_tmodel *m) {
    return m->params;
}
float *qw_tmodel_grads(qw_tmodel *m) {
    return m->grads;
}
float *qw_tmodel_moment(qw_tmodel *m, int which) {
    return which ? m->mom_v : m->mom_m;
}
const float *qw_tmodel_logits(const qw_tmodel *m) {
    return m->logits;
}

static float *array_of(qw_tmodel *m, qw_tmodel_array which) {
    switch (which) {
    case QW_TMODEL_MOMENT_M:
        return m->mom_m;
    case QW_TMODEL_MOMENT_V:
        return m->mom_v;
    case QW_TMODEL_GRADS:
        return m->grads;
    default:
        return m->params;
    }
}

qs_status qw_tmodel_fetch(qw_tmodel *m, qw_tmodel_array which, float *host, qs_error *err) {
    return m->be->ops->fetch(m->be, host, array_of(m, which), m->n_params * sizeof(float), err);
}

qs_status qw_tmodel_put(qw_tmodel *m, qw_tmodel_array which, const float *host, qs_error *err) {
    if (which == QW_TMODEL_PARAMS) qw_tmodel_weights_changed(m);
    return m->be->ops->upload(m->be, array_of(m, which), host, m->n_params * sizeof(float), err);
}

qs_status qw_tmodel_zero_grad(qw_tmodel *m, qs_error *err) {
    double t0 = qs_clock_s();
    qs_status st = m->be->ops->zero(m->be, m->grads, m->n_params * sizeof(float), err);
    qw_tprofile_add_since(&m->prof, QW_TPHASE_OPTIMIZER, t0);
    return st;
}

qw_tprofile *qw_tmodel_profile(qw_tmodel *m) {
    return &m->prof;
}

qs_status qw_tmodel_init_random(qw_tmodel *m, uint64_t seed, float std, qs_error *err) {
    float *p = malloc(m->n_params * sizeof *p);
    if (!p) return qs_error_set(err, QS_ENOMEM, "train model: %zu parameters", m->n_params);
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    for (int i = 0; i < m->n_tensors; i++) {
        qw_tensor_view *t = &m->tensors[i];
        float *d = p + t->offset;
        size_t n = (size_t)t->rows * t->cols;
        if (t->cols == 1) {
            for (size_t j = 0; j < n; j++)
                d[j] = 1.0f;
            continue;
        }
        for (size_t j = 0; j < n; j += 2) {
            /* Box-Muller on two 32-bit words; counter {pair lo, pair hi, tensor, "INIT"}. */
            uint32_t ctr[4] = {(uint32_t)(j >> 1), (uint32_t)(j >> 33), (uint32_t)i, 0x494E4954u};
            uint32_t o[4];
            qk_philox4x32_10(ctr, key, o);
            double u1 = ((double)o[0] + 1.0) / 4294967296.0, u2 = (double)o[1] / 4294967296.0;
            double r = sqrt(-2.0 * log(u1)), a = 2.0 * M_PI * u2;
            d[j] = (float)(std * r * cos(a));
            if (j + 1 < n) d[j + 1] = (float)(std * r * sin(a));
        }
    }
    qs_status st = qw_tmodel_put(m, QW_TMODEL_PARAMS, p, err);
    free(p);
    return st;
}

qs_status qw_tmodel_load(qw_tmodel *m, qw_checkpoint *ck, qs_error *err) {
    qw_tmodel_weights_changed(m);
    for (int i = 0; i < m->n_tensors; i++) {
        qw_tensor_view *t = &m->tensors[i];
        const float *src = NULL;
        int64_t shape[2] = {0, 0};
        int ndim = 0;
        qs_status st = qw_checkpoint_tensor(ck, t->name, &src, shape, &ndim, err);
        if (st != QS_OK) return st;
        if (ndim == 1) shape[1] = 1;
        if (shape[0] != t->rows || shape[1] != t->cols)
            return qs_error_set(err, QS_EFORMAT,
                                "tensor %s: shape [%lld x %lld], model expects [%d x %d]", t->name,
                                (long long)shape[0], (long long)shape[1], t->rows, t->cols);
        st = m->be->ops->upload(m->be, t->data, src, (size_t)t->rows * t->cols * sizeof *src, err);
        if (st != QS_OK) return st;
    }
    return QS_OK;
}

qs_status qw_tmodel_set_recipe(qw_tmodel *m, const qw_recipe *r, uint64_t seed, qs_error *err) {
    qs_status st = qw_recipe_check(r, m->cfg.n_layers, err);
    if (st != QS_OK) return st;
    const qw_config *c = &m->cfg;
    int ins[QW_TMODEL_KINDS], outs[QW_TMODEL_KINDS];
    linear_dims(c, ins, outs);
    if ((st = set_recipe_buffers(m, r, err)) != QS_OK) return st;
    qw_wcache_release(&m->wcache);
    m->env.wcache = NULL;
    st = qw_wcache_init(&m->wcache, m->be, r, c->n_layers, QW_TMODEL_KINDS, ins, outs, err);
    if (st != QS_OK) return qs_error_wrap(err, "recipe %s", r->name);
    m->recipe = *r;
    m->env.recipe = &m->recipe;
    m->env.seed = seed;
    m->env.wcache = m->wcache_off ? NULL : &m->wcache;
    m->shared.valid = 0;
    return QS_OK;
}

void qw_tmodel_set_weight_cache(qw_tmodel *m, int on) {
    m->wcache_off = !on;
    qw_wcache_invalidate(&m->wcache);
    m->env.wcache = on && m->wcache.slot ? &m->wcache : NULL;
}

void qw_tmodel_set_shared_inputs(qw_tmodel *m, int on) {
    m->shared_off = !on;
    m->shared.valid = 0;
    m->env.shared = on ? &m->shared : NULL;
}

void qw_tmodel_shared_input_counts(const qw_tmodel *m, unsigned long *made, unsigned long *reused,
                                   unsigned long *dy_reused) {
    *made = m->shared.made;
    *reused = m->shared.reused;
    *dy_reused = m->shared.dy_reused;
}

void qw_tmodel_set_gemm_fp32(qw_tmodel *m, int on) {
    m->env.gemm_fp32 = on;
}

void qw_tmodel_weights_changed(qw_tmodel *m) {
    qw_wcache_invalidate(&m->wcache);
}

size_t qw_tmodel_weight_cache_bytes(const qw_tmodel *m) {
    return m->wcache.bytes;
}

void qw_tmodel_set_gemm_hook(qw_tmodel *m, qw_gemm_hook hook, void *user) {
    m->env.hook = hook;
    m->env.hook_user = user;
}

void qw_tmodel_gemm_paths(const qw_tmodel *m, int *n_bf16, int *n_fp32) {
    int L = m->cfg.n_layers, bf16 = 0, all = 0;
    for (int layer = -1; layer < L; layer++) {
        int linears = layer < 0 ? 1 : QW_TMODEL_KINDS;
        for (int g = 0; g < QW_N_LINEAR_GEMMS; g++) {
            all += linears;
            if (!m->env.gemm_fp32 && qw_recipe_gemm_bf16(&m->recipe, layer, L, (qw_linear_gemm)g))
                bf16 += linears;
        }
    }
    *n_bf16 = bf16;
    *n_fp32 = all - bf16;
}

void qw_tmodel_gemm_ran(const qw_tmodel *m, unsigned ran[QW_N_LINEAR_GEMMS]) {
    memcpy(ran, m->gemm_ran, sizeof m->gemm_ran);
}

size_t qw_tmodel_bytes(const qw_tmodel *m) {
    return m->bytes + m->recipe_bytes;
}
int qw_tmodel_batch(const qw_tmodel *m) {
    return m->B;
}
int qw_tmodel_ctx(const qw_tmodel *m) {
    return m->T;
}
size_t qw_tmodel_rows(const qw_tmodel *m) {
    return (size_t)m->N;
}

void qw_tmodel_plan(const qw_config *cfg, int B, int T, int nt, size_t *n_params, size_t *bytes) {
    qw_tmodel m;
    memset(&m, 0, sizeof m);
    m.cfg = *cfg;
    m.B = B;
    m.T = T;
    m.N = B * T;
    m.nt = nt > 0 ? nt : qs_default_threads();
    tensor_table(&m, 0);
    *n_params = m.n_params;
    qw_backend cpu = {.ops = qw_ops_cpu(), .threads = m.nt};
    size_t each, shared;
    recipe_floats(&m, &each, &shared);
    *bytes =
        layout(&m, NULL, qw_train_attention_scratch_floats(&cpu, T, cfg->n_heads, cfg->head_dim),
               qw_train_attention_saved_floats(&cpu, B, T, cfg->n_heads)) +
        recipe_buffer_bytes(each, shared);
}

/* ---------------------------------------------------------------- forward */

static const float *lm_head_w(qw_tmodel *m) {
    return m->cfg.tied_embeddings ? m->tensors[0].data : m->tensors[m->n_tensors - 1].data;
}
static float *lm_head_g(qw_tmodel *m) {
    return m->cfg.tied_embeddings ? m->tensors[0].grad : m->tensors[m->n_tensors - 1].grad;
}

/* Each table call of the forward and backward; a failure returns from the function. */
#define TRY(call)                                                                                  \
    do {                                                                                           \
        qs_status st_ = (call);                                                                    \
        if (st_ != QS_OK) return st_;                                                              \
    } while (0)

/* The parameter tensor (block.h kind) of block l's linear, its inputs and outputs. */
static qw_tensor_view *block_linear(qw_tmodel *m, int l, int kind, int *in, int *out) {
    const qw_config *c = &m->cfg;
    int D = c->dim, F = c->hidden_dim, HE = c->n_heads * c->head_dim,
        GE = c->n_kv_heads * c->head_dim;
    static const int tensor_of[QW_TMODEL_KINDS] = {1, 2, 3, 4, 6, 7, 8};
    int ins[QW_TMODEL_KINDS] = {D, D, D, HE, D, D, F};
    int outs[QW_TMODEL_KINDS] = {HE, GE, GE, D, F, F, D};
    *in = ins[kind];
    *out = outs[kind];
    return &m->tensors[TIDX(l, tensor_of[kind])];
}

/* The group of linears of block l reading one X (qlinear.h env.group): q, k, v read ln1 (2l),
 * gate, up read ln2 (2l + 1); -1 for the others and lm_head. */
static int input_group(int l, int kind) {
    switch (kind) {
    case QW_BLOCK_Q:
    case QW_BLOCK_K:
    case QW_BLOCK_V:
        return 2 * l;
    case QW_BLOCK_GATE:
    case QW_BLOCK_UP:
        return 2 * l + 1;
    default:
        return -1;
    }
}

/* The block's and the head's linears: the recipe's (qlinear.h), linear index l*7 + kind;
 * lm_head (kind QW_BLOCK_LM_HEAD, l = n_layers) is index n_layers*7 with layer -1. */
static qs_status hook_linear(void *user, int rank, int l, int kind, float *y, const float *x,
                             int rows, qs_error *err) {
    (void)rank;
    qw_tmodel *m = user;
    m->env.group = kind == QW_BLOCK_LM_HEAD ? -1 : input_group(l, kind);
    if (kind == QW_BLOCK_LM_HEAD)
        return qw_qlinear_forward(&m->env, -1, l * QW_TMODEL_KINDS, y, x, lm_head_w(m), rows,
                                  m->cfg.dim, m->cfg.vocab_size, err);
    int in, out;
    qw_tensor_view *t = block_linear(m, l, kind, &in, &out);
    return qw_qlinear_forward(&m->env, l, l * QW_TMODEL_KINDS + kind, y, x, t->data, rows, in, out,
                              err);
}

static qs_status hook_linear_bwd(void *user, int l, int kind, float *dx, int acc, const float *dy,
                                 const float *x, int rows, qs_error *err) {
    qw_tmodel *m = user;
    m->env.group = kind == QW_BLOCK_LM_HEAD ? -1 : input_group(l, kind);
    if (kind == QW_BLOCK_LM_HEAD)
        return qw_qlinear_backward(&m->env, -1, l * QW_TMODEL_KINDS, dx, acc, lm_head_g(m), dy, x,
                                   lm_head_w(m), rows, m->cfg.dim, m->cfg.vocab_size, err);
    int in, out;
    qw_tensor_view *t = block_linear(m, l, kind, &in, &out);
    return qw_qlinear_backward(&m->env, l, l * QW_TMODEL_KINDS + kind, dx, acc, t->grad, dy, x,
                               t->data, rows, in, out, err);
}

static qw_block_hooks block_hooks(qw_tmodel *m) {
    return (qw_block_hooks){hook_linear, NULL, hook_linear_bwd, m};
}

/* The model's ends (llama_head.h) with saved activations: the tokens uploaded by the forward,
 * the FP32 embeddings, the final norm of every row. */
static qw_head_io head_io(qw_tmodel *m) {
    return (qw_head_io){.be = &m->tbe.b,
                        .cfg = &m->cfg,
                        .N = m->N,
                        .save = 1,
                        .tokens = m->tokens,
                        .emb = m->tensors[0].data,
                        .x = m->blocks[0].res,
                        .xf = m->res_final,
                        .norm = m->tensors[TIDX(m->cfg.n_layers, 0)].data,
                        .ln = m->lnf,
                        .rstd = m->rstdf,
                        .logits = m->logits};
}

/* Block l's saved activations as the block's buffers. */
static qw_block_io block_io(qw_tmodel *m, int l) {
    block_acts *a = &m->blocks[l];
    qw_tensor_view *tv = &m->tensors[TIDX(l, 0)];
    return (qw_block_io){.be = &m->tbe.b,
                         .cfg = &m->cfg,
                         .B = m->B,
                         .T = m->T,
                         .save = 1,
                         .norm1 = tv[0].data,
                         .norm2 = tv[5].data,
                         .rope_cos = m->rope_cos,
                         .rope_sin = m->rope_sin,
                         .res = a->res,
                         .ln1 = a->ln1,
                         .rstd1 = a->rstd1,
                         .q = a->q,
                         .k = a->k,
                         .v = a->v,
                         .probs = a->probs,
                         .scores = m->att_scratch,
                         .att = a->atty,
                         .mid = a->mid,
                         .ln2 = a->ln2,
                         .rstd2 = a->rstd2,
                         .g = a->g,
                         .u = a->u,
                         .h = a->h,
                         .ybuf = m->ybuf,
                         .out = l + 1 < m->cfg.n_layers ? m->blocks[l + 1].res : m->res_final};
}

qs_status qw_tmodel_forward(qw_tmodel *m, const uint32_t *tokens, const uint32_t *targets,
                            uint32_t step, double *loss, qs_error *err) {
    const qw_config *c = &m->cfg;
    qw_backend *be = &m->tbe.b;
    const qw_ops *ops = be->ops;
    int N = m->N, V = c->vocab_size, L = c->n_layers;
    m->have_targets = 0;
    for (int i = 0; i < N; i++) {
        if (tokens[i] >= (uint32_t)V)
            return qs_error_set(err, QS_EINVAL, "train forward: token %u at index %d >= vocab %d",
                                tokens[i], i, V);
        if (targets && targets[i] >= (uint32_t)V)
            return qs_error_set(err, QS_EINVAL, "train forward: target %u at index %d >= vocab %d",
                                targets[i], i, V);
    }
    TRY(ops->upload(be, m->tokens, tokens, (size_t)N * sizeof *tokens, err));
    if (targets) TRY(ops->upload(be, m->targets, targets, (size_t)N * sizeof *targets, err));
    m->step = step;
    m->env.step = step;
    m->shared.valid = 0; /* ln1 and ln2 are made anew */
    qw_head_io hio = head_io(m);
    qw_head_io *hiop = &hio;
    TRY(qw_head_embed(&hiop, 1, err));
    qw_block_hooks h = block_hooks(m);
    for (int l = 0; l < L; l++) {
        qw_block_io io = block_io(m, l);
        qw_block_io *iop = &io;
        TRY(qw_block_forward(&iop, 1, l, &h, err));
    }
    TRY(qw_head_forward(&hiop, 1, &h, err));
    if (!targets) return QS_OK;
    TRY(ops->crossentropy_fwd(be, m->logits, m->losses, m->targets, N, V, err));
    double t0 = qs_clock_s();
    TRY(ops->fetch(be, m->host_losses, m->losses, (size_t)N * sizeof *m->host_losses, err));
    qw_tprofile_add_since(&m->prof, QW_TPHASE_XENT, t0);
    double sum = 0.0;
    for (int i = 0; i < N; i++)
        sum += (double)m->host_losses[i];
    *loss = sum / N;
    m->have_targets = 1;
    return QS_OK;
}

/* ---------------------------------------------------------------- backward */

qs_status qw_tmodel_backward(qw_tmodel *m, float scale, qs_error *err) {
    if (!m->have_targets)
        return qs_error_set(err, QS_ESTATE, "train backward: no forward with targets before it");
    m->have_targets = 0;
    const qw_config *c = &m->cfg;
    qw_backend *be = &m->tbe.b;
    const qw_ops *ops = be->ops;
    int N = m->N, V = c->vocab_size, L = c->n_layers;
    m->shared.valid = 0;
    TRY(ops->crossentropy_bwd(be, m->logits, m->targets, N, V, scale / (float)N, err));
    qw_head_io hio = head_io(m);
    qw_block_hooks h = block_hooks(m);
    TRY(qw_head_backward(&hio, m->logits, m->dln, m->dres, m->tensors[TIDX(L, 0)].grad, &h, err));
    for (int l = L - 1; l >= 0; l--) {
        qw_block_io io = block_io(m, l);
        qw_tensor_view *tv = &m->tensors[TIDX(l, 0)];
        qw_block_grads g = {m->dres, tv[0].grad, tv[5].grad, m->dln, m->datty, m->dq,
                            m->dk,   m->dv,      m->dh,      m->dg,  m->du,    m->att_scratch};
        TRY(qw_block_backward(&io, l, &g, &h, err));
    }
    return qw_head_embed_backward(&hio, m->tensors[0].grad, m->dres, err);
}
