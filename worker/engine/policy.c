/* Quantization policies and the isolation modes of a sensitivity sweep (policy.h). */
#include "policy.h"

#include <stdlib.h>
#include <string.h>

#include "names.h"

qs_status qw_policy_init(qw_policy *p, int n_layers, qs_error *err) {
    memset(p, 0, sizeof *p);
    if (n_layers < 1) return qs_error_set(err, QS_EINVAL, "policy: n_layers %d < 1", n_layers);
    p->linears = calloc((size_t)n_layers * QW_LINEAR_KINDS, sizeof *p->linears);
    if (!p->linears) return qs_error_set(err, QS_ENOMEM, "policy: %d layers", n_layers);
    p->n_layers = n_layers;
    return QS_OK;
}

void qw_policy_free(qw_policy *p) {
    if (!p) return;
    free(p->linears);
    memset(p, 0, sizeof *p);
}

qw_quant_spec *qw_policy_linear(qw_policy *p, int layer, qw_linear_kind kind) {
    if (!p || layer < 0 || layer >= p->n_layers || (unsigned)kind >= QW_LINEAR_KINDS) return NULL;
    return &p->linears[(size_t)layer * QW_LINEAR_KINDS + kind];
}

const qw_quant_spec *qw_policy_linear_const(const qw_policy *p, int layer, qw_linear_kind kind) {
    return qw_policy_linear((qw_policy *)p, layer, kind);
}

/* Whether isolation `mode` with (kind, block) selects linear `k` of block `b`. */
static int selects(qw_isolation mode, qw_linear_kind kind, int block, int b, int k) {
    switch (mode) {
    case QW_ISO_NONE:
        return 0;
    case QW_ISO_ALL:
        return 1;
    case QW_ISO_COMPONENT:
        return k == (int)kind;
    case QW_ISO_BLOCK:
        return b == block;
    case QW_ISO_LAYER:
        return b == block && k == (int)kind;
    case QW_ISO_LOO_COMPONENT:
        return k != (int)kind;
    case QW_ISO_LOO_BLOCK:
        return b != block;
    case QW_ISO_LOO_LAYER:
        return !(b == block && k == (int)kind);
    case QW_ISO_CUMULATIVE:
        return b <= block;
    }
    return 0;
}

qs_status qw_policy_isolation(qw_policy *p, qw_isolation mode, qw_linear_kind kind, int block,
                              const qw_quant_spec *spec, qs_error *err) {
    if (!p || !p->linears)
        return qs_error_set(err, QS_EINVAL, "policy isolation: policy not initialised");
    if ((unsigned)mode > QW_ISO_CUMULATIVE)
        return qs_error_set(err, QS_EINVAL, "policy isolation: mode %d unknown", (int)mode);
    int needs_kind = mode == QW_ISO_COMPONENT || mode == QW_ISO_LAYER ||
                     mode == QW_ISO_LOO_COMPONENT || mode == QW_ISO_LOO_LAYER;
    int needs_block = mode == QW_ISO_BLOCK || mode == QW_ISO_LAYER || mode == QW_ISO_LOO_BLOCK ||
                      mode == QW_ISO_LOO_LAYER || mode == QW_ISO_CUMULATIVE;
    if (needs_kind && (unsigned)kind >= QW_LINEAR_KINDS)
        return qs_error_set(err, QS_EINVAL, "policy isolation %s: kind %d outside 0..%d",
                            qw_isolation_name(mode), (int)kind, QW_LINEAR_KINDS - 1);
    if (needs_block && (block < 0 || block >= p->n_layers))
        return qs_error_set(err, QS_EINVAL, "policy isolation %s: block %d outside 0..%d",
                            qw_isolation_name(mode), block, p->n_layers - 1);
    if (mode != QW_ISO_NONE && !spec)
        return qs_error_set(err, QS_EINVAL, "policy isolation %s: spec is NULL",
                            qw_isolation_name(mode));
    for (int b = 0; b < p->n_layers; b++)
        for (int k = 0; k < QW_LINEAR_KINDS; k++) {
            qw_quant_spec *s = &p->linears[(size_t)b * QW_LINEAR_KINDS + k];
            if (selects(mode, kind, block, b, k))
                *s = *spec;
            else
                memset(s, 0, sizeof *s);
        }
    return QS_OK;
}

static int spec_active(const qw_quant_spec *s) {
    return s->weight != NULL || s->act != NULL;
}

int qw_policy_count(const qw_policy *p) {
    if (!p || !p->linears) return 0;
    int n = spec_active(&p->lm_head) + spec_active(&p->embed);
    for (size_t i = 0; i < (size_t)p->n_layers * QW_LINEAR_KINDS; i++)
        n += spec_active(&p->linears[i]);
    return n;
}

/* The names are the kinds module's (kinds/names.h), the ones grids and job specs use. */
_Static_assert(QW_LINEAR_KINDS == QS_LINEAR_KINDS, "one linear kind table");

qs_status qw_linear_kind_by_name(const char *name, qw_linear_kind *out, qs_error *err) {
    int k = qs_linear_kind_index(name);
    if (k >= 0) {
        *out = (qw_linear_kind)k;
        return QS_OK;
    }
    return qs_error_set(err, QS_EINVAL, "linear kind \"%s\" unknown (q, k, v, o, gate, up, down)",
                        name ? name : "(null)");
}

const char *qw_linear_kind_name(qw_linear_kind kind) {
    return (unsigned)kind < QW_LINEAR_KINDS ? qs_linear_kind_names[kind] : "?";
}

const char *qw_linear_module_name(qw_linear_kind kind) {
    return (unsigned)kind < QW_LINEAR_KINDS ? qs_linear_module_names[kind] : "?";
}

static const char *const iso_names[] = {"none",      "all",       "component",
                                        "block",     "layer",     "loo_component",
                                        "loo_block", "loo_layer", "cumulative"};

qs_status qw_isolation_by_name(const char *name, qw_isolation *out, qs_error *err) {
    for (size_t i = 0; name && i < sizeof iso_names / sizeof iso_names[0]; i++)
        if (strcmp(name, iso_names[i]) == 0) {
            *out = (qw_isolation)i;
            return QS_OK;
        }
    return qs_error_set(err, QS_EINVAL,
                        "isolation mode \"%s\" unknown (none, all, component, block, layer, "
                        "loo_component, loo_block, loo_layer, cumulative)",
                        name ? name : "(null)");
}

const char *qw_isolation_name(qw_isolation mode) {
    return (unsigned)mode < sizeof iso_names / sizeof iso_names[0] ? iso_names[mode] : "?";
}
