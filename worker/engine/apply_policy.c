/* Applying a quantization policy (policy.h) to a model (model.h): each linear's master
 * quantized into its packed form (quant.h), or the model brought back to its masters. */
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "model_internal.h"
#include "weights.h"

static size_t max_sz(size_t a, size_t b) {
    return a > b ? a : b;
}

/* Back to the unquantized model: every tensor reads its master, no activation formats. */
static void restore_all(qw_model *m) {
    for (int i = 0; i < m->cfg.n_layers * QW_LINEAR_KINDS + 2; i++) {
        linear *L = &m->lin[i];
        L->w = *L->master;
        memset(&L->spec, 0, sizeof L->spec);
        L->quantized = 0;
    }
}

/* "bf16" is the numeric core's identity format (quant.h): fake-quant leaves FP32 as it is. */
static int is_identity(const qk_format *f) {
    return strcmp(qk_format_name(f), "bf16") == 0;
}

/* Quantizes L's master with spec's weight format into L->packed (the master converted to FP32
 * in `tmp` [out x in] first), and points L->w at it. */
static qs_status quantize_linear(linear *L, const qw_quant_spec *spec, float *tmp, int threads,
                                 qs_error *err) {
    qs_status st = qw_weight_rows_f32(L->master, 0, L->out, tmp, err);
    if (st != QS_OK) return st;
    qk_quant_options opt = spec->weight_opt;
    opt.tensor_id += (uint32_t)L->tensor_index;
    (void)threads;
    qk_packed_release(&L->packed);
    st = qk_packed_init(&L->packed, spec->weight, &opt, (size_t)L->out, (size_t)L->in, err);
    if (st == QS_OK)
        st = qk_quantize(spec->weight, &opt, tmp, (size_t)L->out, (size_t)L->in, &L->packed, err);
    if (st != QS_OK) {
        qk_packed_release(&L->packed);
        return st;
    }
    L->w = qw_weight_from_packed(&L->packed);
    return QS_OK;
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
    int nlin = m->cfg.n_layers * QW_LINEAR_KINDS;
    size_t biggest = 0;
    for (int i = 0; i < nlin + 2; i++) {
        const qw_quant_spec *s = i < nlin ? &p->linears[i] : i == nlin ? &p->lm_head : &p->embed;
        if (s->weight && !is_identity(s->weight))
            biggest = max_sz(biggest, (size_t)m->lin[i].out * (size_t)m->lin[i].in);
    }
    float *tmp = biggest ? malloc(biggest * sizeof(float)) : NULL;
    if (biggest && !tmp)
        return qs_error_set(err, QS_ENOMEM, "policy: %zu floats to quantize a master", biggest);
    char name[160];
    qs_status st = QS_OK;
    for (int i = 0; i < nlin + 2 && st == QS_OK; i++) {
        linear *L = &m->lin[i];
        const qw_quant_spec *s = i < nlin ? &p->linears[i] : i == nlin ? &p->lm_head : &p->embed;
        if (!s->weight && !s->act) continue;
        L->spec = *s;
        L->quantized = 1;
        /* The identity format keeps the master: fake-quant would leave its FP32 values as they
         * are. A tied lm_head gets a packed copy of its own: the embeddings stay as they are
         * unless the policy's embed names them (policy.h). */
        if (s->weight && !is_identity(s->weight)) {
            st = quantize_linear(L, s, tmp, m->threads, err);
            if (st != QS_OK)
                qs_error_wrap(err, "policy: weights of %s",
                              qw_model_linear_name(m, i, name, sizeof name));
        }
    }
    free(tmp);
    if (st != QS_OK) restore_all(m);
    return st;
}
