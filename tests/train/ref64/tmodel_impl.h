/* Body of the FP64 reference model (tmodel64.h), included by tmodel64.c with R, TM (the struct
 * tag), VIEW (the tensor view type), NAME(x) (public names) and OPS(x) (ops64.h names) defined
 * (QW_TM_QUANT, recipe-driven linears, is never defined here: the product's model is
 * worker/train/tmodel.c). Shapes as ops.h: N = B*T, D, F, H, G, E, V, L layers. */

/* Activations of one block, saved by the forward for the backward. */
typedef struct ACTS {
    R *res;   /* [N x D] block input (residual stream) */
    R *ln1;   /* [N x D] input_layernorm output */
    R *rstd1; /* [N] */
    R *q;     /* [N x H*E] after RoPE */
    R *k;     /* [N x G*E] after RoPE */
    R *v;     /* [N x G*E] */
    R *probs; /* [B x H x T x T] attention probabilities */
    R *atty;  /* [N x H*E] attention output, o_proj input */
    R *mid;   /* [N x D] residual after attention */
    R *ln2;   /* [N x D] post_attention_layernorm output */
    R *rstd2; /* [N] */
    R *g, *u; /* [N x F] gate and up outputs */
    R *h;     /* [N x F] silu(g) * u, down_proj input */
} ACTS;

struct TM {
    qw_config cfg;
    int B, T, N, nt;
    int n_tensors;
    VIEW *tensors; /* [n_tensors], carved from the allocation */
    size_t n_params;
    R *params, *grads, *mom_m, *mom_v; /* [n_params] each */
    ACTS *blocks;                      /* [L] */
    R *res_final, *lnf, *rstdf;        /* [N x D], [N x D], [N] */
    R *logits;                         /* [N x V]: logits, then probabilities, then dlogits */
    R *losses;                         /* [N] */
    R *rope_cos, *rope_sin;            /* [T x E/2] */
    /* backward scratch */
    R *dres, *dln, *ybuf;       /* [N x D] */
    R *datty, *dq;              /* [N x H*E] */
    R *dk, *dv;                 /* [N x G*E] */
    R *dh, *dg, *du;            /* [N x F] */
    R *att_scratch;             /* [nt x T x T] */
    uint32_t *tokens, *targets; /* [N] of the last forward */
    int have_targets;
    uint32_t step;
#ifdef QW_TM_QUANT
    qw_recipe recipe;
    qw_qlinear_env env;
#endif
    size_t bytes;
    void *mem; /* the one allocation */
};

/* ---------------------------------------------------------------- linears */

#ifdef QW_TM_QUANT
#define LIN_FWD(m, layer, idx, y, x, W, in, out)                                                   \
    qw_qlinear_forward(&(m)->env, layer, idx, y, x, W, (m)->N, in, out, err)
#define LIN_BWD(m, layer, idx, dx, acc, dW, dy, x, W, in, out)                                     \
    qw_qlinear_backward(&(m)->env, layer, idx, dx, acc, dW, dy, x, W, (m)->N, in, out, err)
#else
static qs_status NAME(lin_fwd_)(TM *m, R *y, const R *x, const R *W, int in, int out) {
    OPS(linear_forward)(y, x, W, m->N, in, out, m->nt);
    return QS_OK;
}
static qs_status NAME(lin_bwd_)(TM *m, R *dx, int acc, R *dW, const R *dy, const R *x, const R *W,
                                int in, int out) {
    OPS(linear_backward)(dx, acc, dW, dy, x, W, m->N, in, out, m->nt);
    return QS_OK;
}
#define LIN_FWD(m, layer, idx, y, x, W, in, out)                                                   \
    ((void)(layer), (void)(idx), NAME(lin_fwd_)(m, y, x, W, in, out))
#define LIN_BWD(m, layer, idx, dx, acc, dW, dy, x, W, in, out)                                     \
    ((void)(layer), (void)(idx), NAME(lin_bwd_)(m, dx, acc, dW, dy, x, W, in, out))
#endif

/* ---------------------------------------------------------------- layout */

/* Tensor index of block l's tensor j (0 attn_norm, 1..4 q k v o, 5 ffn_norm, 6..8 gate up down). */
#define TIDX(l, j) (1 + (l)*9 + (j))

static size_t NAME(align_)(size_t x) {
    return (x + 63) & ~(size_t)63;
}

/* Lays the allocation out (base NULL: just sizes it). Returns the bytes. */
static size_t NAME(layout_)(TM *m, char *base) {
    const qw_config *c = &m->cfg;
    size_t N = (size_t)m->N, D = c->dim, F = c->hidden_dim, HE = (size_t)c->n_heads * c->head_dim,
           GE = (size_t)c->n_kv_heads * c->head_dim, V = c->vocab_size, L = c->n_layers, T = m->T,
           B = m->B, E2 = c->head_dim / 2;
    size_t off = 0;
#define CARVE(ptr, type, count)                                                                    \
    do {                                                                                           \
        if (base) ptr = (type *)(void *)(base + off);                                              \
        off = NAME(align_)(off + (size_t)(count) * sizeof(type));                                  \
    } while (0)
    CARVE(m->tensors, VIEW, m->n_tensors);
    CARVE(m->blocks, ACTS, L);
    CARVE(m->params, R, m->n_params);
    CARVE(m->grads, R, m->n_params);
    CARVE(m->mom_m, R, m->n_params);
    CARVE(m->mom_v, R, m->n_params);
    for (size_t l = 0; l < L; l++) {
        ACTS tmp = {0}, *a = base ? &m->blocks[l] : &tmp;
        CARVE(a->res, R, N * D);
        CARVE(a->ln1, R, N * D);
        CARVE(a->rstd1, R, N);
        CARVE(a->q, R, N * HE);
        CARVE(a->k, R, N * GE);
        CARVE(a->v, R, N * GE);
        CARVE(a->probs, R, B * c->n_heads * T * T);
        CARVE(a->atty, R, N * HE);
        CARVE(a->mid, R, N * D);
        CARVE(a->ln2, R, N * D);
        CARVE(a->rstd2, R, N);
        CARVE(a->g, R, N * F);
        CARVE(a->u, R, N * F);
        CARVE(a->h, R, N * F);
    }
    CARVE(m->res_final, R, N * D);
    CARVE(m->lnf, R, N * D);
    CARVE(m->rstdf, R, N);
    CARVE(m->logits, R, N * V);
    CARVE(m->losses, R, N);
    CARVE(m->rope_cos, R, T * E2);
    CARVE(m->rope_sin, R, T * E2);
    CARVE(m->dres, R, N * D);
    CARVE(m->dln, R, N * D);
    CARVE(m->ybuf, R, N * D);
    CARVE(m->datty, R, N * HE);
    CARVE(m->dq, R, N * HE);
    CARVE(m->dk, R, N * GE);
    CARVE(m->dv, R, N * GE);
    CARVE(m->dh, R, N * F);
    CARVE(m->dg, R, N * F);
    CARVE(m->du, R, N * F);
    CARVE(m->att_scratch, R, (size_t)m->nt * T * T);
    CARVE(m->tokens, uint32_t, N);
    CARVE(m->targets, uint32_t, N);
#ifdef QW_TM_QUANT
    {
        size_t s = 0;
        int ins[QW_TMODEL_KINDS] = {c->dim, c->dim, c->dim, (int)HE, c->dim, c->dim, c->hidden_dim};
        int outs[QW_TMODEL_KINDS] = {(int)HE,       (int)GE,       (int)GE, c->dim,
                                     c->hidden_dim, c->hidden_dim, c->dim};
        for (int k = 0; k < QW_TMODEL_KINDS; k++) {
            size_t x = qw_qlinear_scratch_floats(m->N, ins[k], outs[k]);
            s = x > s ? x : s;
        }
        size_t x = qw_qlinear_scratch_floats(m->N, c->dim, c->vocab_size);
        s = x > s ? x : s;
        CARVE(m->env.buf_a, float, s);
        CARVE(m->env.buf_b, float, s);
    }
#endif
#undef CARVE
    return off;
}

static void NAME(tensor_table_)(TM *m, int fill) {
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
#define ADD(nm_fmt, nm_arg, r, cc)                                                                 \
    do {                                                                                           \
        if (fill) {                                                                                \
            VIEW *t = &m->tensors[i];                                                              \
            snprintf(t->name, sizeof t->name, nm_fmt, nm_arg);                                     \
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

static void NAME(point_views_)(TM *m) {
    for (int i = 0; i < m->n_tensors; i++) {
        VIEW *t = &m->tensors[i];
        t->data = m->params + t->offset;
        t->grad = m->grads + t->offset;
        t->m = m->mom_m + t->offset;
        t->v = m->mom_v + t->offset;
    }
}

/* Inverse RoPE frequencies as worker/engine/model.c (HF _compute_default_rope_parameters and
 * _compute_llama3_parameters), in FP32 as transformers computes them. */
static void NAME(rope_inv_freq_)(const qw_config *c, int E, float *inv) {
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

qs_status NAME(create)(const qw_config *cfg, int B, int T, int nt, TM **out, qs_error *err) {
    *out = NULL;
    const qw_config *c = cfg;
#define NEED(cond, field)                                                                          \
    if (!(cond)) return qs_error_set(err, QS_EINVAL, "train model: %s out of range", field)
    NEED(c->dim > 0, "dim");
    NEED(c->hidden_dim > 0, "hidden_dim");
    NEED(c->n_layers > 0, "n_layers");
    NEED(c->n_heads > 0, "n_heads");
    NEED(c->n_kv_heads > 0 && c->n_heads % c->n_kv_heads == 0, "n_kv_heads");
    NEED(c->head_dim > 0 && c->head_dim % 2 == 0, "head_dim");
    NEED(c->vocab_size > 0, "vocab_size");
    NEED(c->rope_theta > 0.0f, "rope_theta");
    NEED(B >= 1 && B <= 1 << 16, "batch");
    NEED(T >= 1 && T <= 1 << 16, "ctx");
    NEED(nt >= 0, "threads");
#undef NEED
    TM *m = calloc(1, sizeof *m);
    if (!m) return qs_error_set(err, QS_ENOMEM, "train model");
    m->cfg = *cfg;
    m->B = B;
    m->T = T;
    m->N = B * T;
    m->nt = nt > 0 ? nt : omp_get_num_procs();
    openblas_set_num_threads(1);
    NAME(tensor_table_)(m, 0);
    m->bytes = NAME(layout_)(m, NULL);
    m->mem = aligned_alloc(64, m->bytes);
    if (!m->mem) {
        size_t bytes = m->bytes;
        free(m);
        return qs_error_set(err, QS_ENOMEM, "train model: %zu bytes for B %d x T %d", bytes, B, T);
    }
    memset(m->mem, 0, m->bytes);
    NAME(layout_)(m, m->mem);
    NAME(tensor_table_)(m, 1);
    NAME(point_views_)(m);
    int E = c->head_dim;
    float inv[E / 2 + 1];
    NAME(rope_inv_freq_)(c, E, inv);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < E / 2; i++) {
            float ang = (float)t * inv[i];
            m->rope_cos[(size_t)t * (E / 2) + i] = (R)cos((double)ang);
            m->rope_sin[(size_t)t * (E / 2) + i] = (R)sin((double)ang);
        }
#ifdef QW_TM_QUANT
    qw_recipe_by_name("fp32", &m->recipe, NULL);
    m->env.recipe = &m->recipe;
    m->env.n_layers = c->n_layers;
    m->env.nt = m->nt;
#endif
    *out = m;
    return QS_OK;
}

void NAME(destroy)(TM *m) {
    if (!m) return;
    free(m->mem);
    free(m);
}

const qw_config *NAME(config)(const TM *m) {
    return &m->cfg;
}
int NAME(n_tensors)(const TM *m) {
    return m->n_tensors;
}
void NAME(tensor)(TM *m, int i, VIEW *out) {
    *out = m->tensors[i];
}
size_t NAME(n_params)(const TM *m) {
    return m->n_params;
}
R *NAME(params)(TM *m) {
    return m->params;
}
R *NAME(grads)(TM *m) {
    return m->grads;
}
R *NAME(moment)(TM *m, int which) {
    return which ? m->mom_v : m->mom_m;
}
const R *NAME(logits)(const TM *m) {
    return m->logits;
}

void NAME(zero_grad)(TM *m) {
    memset(m->grads, 0, m->n_params * sizeof(R));
}

void NAME(init_random)(TM *m, uint64_t seed, float std) {
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    for (int i = 0; i < m->n_tensors; i++) {
        VIEW *t = &m->tensors[i];
        size_t n = (size_t)t->rows * t->cols;
        if (t->cols == 1) {
            for (size_t j = 0; j < n; j++)
                t->data[j] = (R)1;
            continue;
        }
        for (size_t j = 0; j < n; j += 2) {
            /* Box-Muller on two 32-bit words; counter {pair lo, pair hi, tensor, "INIT"}. */
            uint32_t ctr[4] = {(uint32_t)(j >> 1), (uint32_t)(j >> 33), (uint32_t)i, 0x494E4954u};
            uint32_t o[4];
            qk_philox4x32_10(ctr, key, o);
            double u1 = ((double)o[0] + 1.0) / 4294967296.0, u2 = (double)o[1] / 4294967296.0;
            double r = sqrt(-2.0 * log(u1)), a = 2.0 * M_PI * u2;
            t->data[j] = (R)(float)(std * r * cos(a));
            if (j + 1 < n) t->data[j + 1] = (R)(float)(std * r * sin(a));
        }
    }
}

qs_status NAME(load)(TM *m, qw_checkpoint *ck, qs_error *err) {
    for (int i = 0; i < m->n_tensors; i++) {
        VIEW *t = &m->tensors[i];
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
        size_t n = (size_t)t->rows * t->cols;
        for (size_t j = 0; j < n; j++)
            t->data[j] = (R)src[j];
    }
    return QS_OK;
}

/* ---------------------------------------------------------------- forward */

static void NAME(add_)(R *out, const R *a, const R *b, size_t n, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

static const R *NAME(lm_head_w_)(TM *m) {
    return m->cfg.tied_embeddings ? m->tensors[0].data : m->tensors[m->n_tensors - 1].data;
}
static R *NAME(lm_head_g_)(TM *m) {
    return m->cfg.tied_embeddings ? m->tensors[0].grad : m->tensors[m->n_tensors - 1].grad;
}

qs_status NAME(forward)(TM *m, const uint32_t *tokens, const uint32_t *targets, uint32_t step,
                        double *loss, qs_error *err) {
    const qw_config *c = &m->cfg;
    int N = m->N, B = m->B, T = m->T, D = c->dim, F = c->hidden_dim, H = c->n_heads,
        G = c->n_kv_heads, E = c->head_dim, V = c->vocab_size, L = c->n_layers, nt = m->nt;
    int HE = H * E, GE = G * E;
    m->have_targets = 0;
    for (int i = 0; i < N; i++) {
        if (tokens[i] >= (uint32_t)V)
            return qs_error_set(err, QS_EINVAL, "train forward: token %u at index %d >= vocab %d",
                                tokens[i], i, V);
        if (targets && targets[i] >= (uint32_t)V)
            return qs_error_set(err, QS_EINVAL, "train forward: target %u at index %d >= vocab %d",
                                targets[i], i, V);
    }
    memcpy(m->tokens, tokens, (size_t)N * sizeof *tokens);
    if (targets) memcpy(m->targets, targets, (size_t)N * sizeof *targets);
    m->step = step;
#ifdef QW_TM_QUANT
    m->env.step = step;
#endif
    qs_status st = QS_OK;
    OPS(embedding_forward)(m->blocks[0].res, tokens, m->tensors[0].data, N, D);
    for (int l = 0; l < L && st == QS_OK; l++) {
        ACTS *a = &m->blocks[l];
        VIEW *tv = &m->tensors[TIDX(l, 0)];
        R *next = l + 1 < L ? m->blocks[l + 1].res : m->res_final;
        int li = l * QW_TMODEL_KINDS;
        OPS(rmsnorm_forward)(a->ln1, a->rstd1, a->res, tv[0].data, N, D, (R)c->norm_eps, nt);
        st = LIN_FWD(m, l, li + 0, a->q, a->ln1, tv[1].data, D, HE);
        if (st == QS_OK) st = LIN_FWD(m, l, li + 1, a->k, a->ln1, tv[2].data, D, GE);
        if (st == QS_OK) st = LIN_FWD(m, l, li + 2, a->v, a->ln1, tv[3].data, D, GE);
        if (st != QS_OK) break;
        OPS(rope_forward)(a->q, m->rope_cos, m->rope_sin, B, T, H, E, nt);
        OPS(rope_forward)(a->k, m->rope_cos, m->rope_sin, B, T, G, E, nt);
        OPS(attention_forward)(a->atty, a->probs, a->q, a->k, a->v, B, T, H, G, E, nt);
        st = LIN_FWD(m, l, li + 3, m->ybuf, a->atty, tv[4].data, HE, D);
        if (st != QS_OK) break;
        NAME(add_)(a->mid, a->res, m->ybuf, (size_t)N * D, nt);
        OPS(rmsnorm_forward)(a->ln2, a->rstd2, a->mid, tv[5].data, N, D, (R)c->norm_eps, nt);
        st = LIN_FWD(m, l, li + 4, a->g, a->ln2, tv[6].data, D, F);
        if (st == QS_OK) st = LIN_FWD(m, l, li + 5, a->u, a->ln2, tv[7].data, D, F);
        if (st != QS_OK) break;
        OPS(swiglu_forward)(a->h, a->g, a->u, (size_t)N * F, nt);
        st = LIN_FWD(m, l, li + 6, m->ybuf, a->h, tv[8].data, F, D);
        if (st != QS_OK) break;
        NAME(add_)(next, a->mid, m->ybuf, (size_t)N * D, nt);
    }
    if (st != QS_OK) return st;
    OPS(rmsnorm_forward)
    (m->lnf, m->rstdf, m->res_final, m->tensors[TIDX(L, 0)].data, N, D, (R)c->norm_eps, nt);
    st = LIN_FWD(m, -1, L * QW_TMODEL_KINDS, m->logits, m->lnf, NAME(lm_head_w_)(m), D, V);
    if (st != QS_OK) return st;
    if (!targets) return QS_OK;
    OPS(crossentropy_forward)(m->logits, m->losses, targets, N, V, nt);
    double sum = 0.0;
    for (int i = 0; i < N; i++)
        sum += (double)m->losses[i];
    *loss = sum / N;
    m->have_targets = 1;
    return QS_OK;
}

/* ---------------------------------------------------------------- backward */

qs_status NAME(backward)(TM *m, R scale, qs_error *err) {
    if (!m->have_targets)
        return qs_error_set(err, QS_ESTATE, "train backward: no forward with targets before it");
    m->have_targets = 0;
    const qw_config *c = &m->cfg;
    int N = m->N, B = m->B, T = m->T, D = c->dim, F = c->hidden_dim, H = c->n_heads,
        G = c->n_kv_heads, E = c->head_dim, V = c->vocab_size, L = c->n_layers, nt = m->nt;
    int HE = H * E, GE = G * E;
    OPS(crossentropy_backward)(m->logits, m->targets, N, V, scale / (R)N, nt);
    qs_status st = LIN_BWD(m, -1, L * QW_TMODEL_KINDS, m->dln, 0, NAME(lm_head_g_)(m), m->logits,
                           m->lnf, NAME(lm_head_w_)(m), D, V);
    if (st != QS_OK) return st;
    memset(m->dres, 0, (size_t)N * D * sizeof(R));
    VIEW *fn = &m->tensors[TIDX(L, 0)];
    OPS(rmsnorm_backward)(m->dres, fn->grad, m->dln, m->res_final, fn->data, m->rstdf, N, D, nt);
    for (int l = L - 1; l >= 0 && st == QS_OK; l--) {
        ACTS *a = &m->blocks[l];
        VIEW *tv = &m->tensors[TIDX(l, 0)];
        int li = l * QW_TMODEL_KINDS;
        /* MLP: next = mid + down(h) */
        st = LIN_BWD(m, l, li + 6, m->dh, 0, tv[8].grad, m->dres, a->h, tv[8].data, F, D);
        if (st != QS_OK) break;
        OPS(swiglu_backward)(m->dg, m->du, m->dh, a->g, a->u, (size_t)N * F, nt);
        st = LIN_BWD(m, l, li + 4, m->dln, 0, tv[6].grad, m->dg, a->ln2, tv[6].data, D, F);
        if (st == QS_OK)
            st = LIN_BWD(m, l, li + 5, m->dln, 1, tv[7].grad, m->du, a->ln2, tv[7].data, D, F);
        if (st != QS_OK) break;
        OPS(rmsnorm_backward)(m->dres, tv[5].grad, m->dln, a->mid, tv[5].data, a->rstd2, N, D, nt);
        /* attention: mid = res + o(atty) */
        st = LIN_BWD(m, l, li + 3, m->datty, 0, tv[4].grad, m->dres, a->atty, tv[4].data, HE, D);
        if (st != QS_OK) break;
        OPS(attention_backward)
        (m->dq, m->dk, m->dv, m->att_scratch, m->datty, a->q, a->k, a->v, a->probs, B, T, H, G, E,
         nt);
        OPS(rope_backward)(m->dq, m->rope_cos, m->rope_sin, B, T, H, E, nt);
        OPS(rope_backward)(m->dk, m->rope_cos, m->rope_sin, B, T, G, E, nt);
        st = LIN_BWD(m, l, li + 0, m->dln, 0, tv[1].grad, m->dq, a->ln1, tv[1].data, D, HE);
        if (st == QS_OK)
            st = LIN_BWD(m, l, li + 1, m->dln, 1, tv[2].grad, m->dk, a->ln1, tv[2].data, D, GE);
        if (st == QS_OK)
            st = LIN_BWD(m, l, li + 2, m->dln, 1, tv[3].grad, m->dv, a->ln1, tv[3].data, D, GE);
        if (st != QS_OK) break;
        OPS(rmsnorm_backward)(m->dres, tv[0].grad, m->dln, a->res, tv[0].data, a->rstd1, N, D, nt);
    }
    if (st != QS_OK) return st;
    OPS(embedding_backward)(m->tensors[0].grad, m->dres, m->tokens, N, D);
    return QS_OK;
}

#undef LIN_FWD
#undef LIN_BWD
#undef TIDX
