/* A sensitivity job's spec onto the engine's quantization policy (job_policy.h). */
#include "job_policy.h"

#include <stdio.h>
#include <string.h>

#include "quant.h"

/* The quantization of one format: format by name, its options from opts (a format_options
 * object) through the numeric core's own option names (kernels/quant.h qk_quant_option_set,
 * the parser the grid validates with), the same format on the GEMM inputs when acts. */
static qs_status quant_spec(const char *name, const json_t *opts, int acts, qw_quant_spec *q,
                            qs_error *err) {
    memset(q, 0, sizeof *q);
    q->weight = qk_format_by_name(name);
    if (!q->weight)
        return qs_error_set(err, QS_EINVAL, "job spec: format: unknown format '%s'", name);
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)opts, key, v) {
        char num[32];
        const char *text = json_string_value(v);
        if (json_is_integer(v)) {
            snprintf(num, sizeof num, "%lld", (long long)json_integer_value(v));
            text = num;
        }
        qs_status st = qk_quant_option_set(q->weight, &q->weight_opt, key, text, err);
        if (st) return qs_error_wrap(err, "job spec: format_options.%s", key);
    }
    if (acts) {
        q->act = q->weight;
        q->act_opt = q->weight_opt;
    }
    return QS_OK;
}

/* Mode policy: each linear of the map in its format, every other as it is. Errors: a block
 * beyond the model's, an unknown format or option (QS_EINVAL naming the linear). */
static qs_status build_explicit_policy(const qs_sensitivity_spec *s, int n_layers, qw_policy *p,
                                       qs_error *err) {
    qs_status st = qw_policy_init(p, n_layers, err);
    const char *key;
    json_t *v;
    json_object_foreach(s->policy, key, v) {
        if (st) break;
        int block, part;
        const char *name = json_string_value(v);
        qw_quant_spec q;
        qs_policy_key_parse(key, &block, &part); /* checked by the spec's decoder */
        if (block >= n_layers) {
            st = qs_error_set(err, QS_EINVAL,
                              "job spec: policy.%s: block %d is not a block of 0..%d", key, block,
                              n_layers - 1);
            break;
        }
        st = quant_spec(name, json_object_get(s->format_options, name),
                        s->quantize_acts && part != QS_PART_EMBEDDINGS, &q, err);
        if (st) {
            qs_error_wrap(err, "job spec: policy.%s", key);
            break;
        }
        if (part == QS_PART_LM_HEAD)
            p->lm_head = q;
        else if (part == QS_PART_EMBEDDINGS)
            p->embed = q; /* a lookup: weight format only (quant_spec without acts) */
        else
            *qw_policy_linear(p, block, (qw_linear_kind)part) = q;
    }
    return st;
}

/* The policy a spec names: the kind's modes and parts (kinds/names.h, sensitivity.h) onto
 * the engine's policy. Block modes map onto the engine's isolation helpers; component and
 * leave_one_out set each part they quantize, lm_head and the embeddings included (the head is
 * a copy of its own even when tied: policy.h, so a tied model's embeddings stay as they are
 * when only lm_head is quantized). The embeddings are a lookup with no activation input:
 * they get the weight format only. */
static qs_status build_policy_parts(const qs_sensitivity_spec *s, int n_layers, qw_policy *p, qs_error *err);

qs_status qw_jobs_build_policy(const qs_sensitivity_spec *s, int n_layers, qw_policy *p,
                               qs_error *err) {
    _Static_assert((int)QS_FUSE_QKV == (int)QW_FUSE_QKV &&
                       (int)QS_FUSE_GATE_UP == (int)QW_FUSE_GATE_UP,
                   "one table of fused groups");
    qs_status st = build_policy_parts(s, n_layers, p, err);
    if (st == QS_OK) p->fuse = s->fuse;
    return st;
}

static qs_status build_policy_parts(const qs_sensitivity_spec *s, int n_layers, qw_policy *p, qs_error *err) {
    if (s->mode == QS_MODE_POLICY) return build_explicit_policy(s, n_layers, p, err);
    qw_quant_spec q;
    qs_status st = quant_spec(s->format, s->format_options, s->quantize_acts, &q, err);
    if (st) return st;
    if (s->block >= n_layers)
        return qs_error_set(err, QS_EINVAL,
                            "job spec: part: block %d is not a block of 0..%d for mode %s",
                            s->block, n_layers - 1, qs_mode_name(s->mode));
    if ((st = qw_policy_init(p, n_layers, err))) return st;
    qw_quant_spec embed = q;
    embed.act = NULL;
    memset(&embed.act_opt, 0, sizeof embed.act_opt);
    unsigned set = 0; /* parts set in every block (component forms) */
    switch (s->mode) {
    case QS_MODE_COMPONENT:
        set = 1u << s->part;
        break;
    case QS_MODE_LEAVE_ONE_OUT:
        set = s->loo_of & ~(1u << s->part);
        break;
    case QS_MODE_BLOCK:
        return qw_policy_isolation(p, QW_ISO_BLOCK, QW_LINEAR_Q, s->block, &q, err);
    case QS_MODE_LAYER:
        return qw_policy_isolation(p, QW_ISO_LAYER, (qw_linear_kind)s->part, s->block, &q, err);
    case QS_MODE_CUMULATIVE:
        return qw_policy_isolation(p, QW_ISO_CUMULATIVE, QW_LINEAR_Q, s->block, &q, err);
    case QS_MODE_LEAVE_ONE_OUT_BLOCK:
        return qw_policy_isolation(p, QW_ISO_LOO_BLOCK, QW_LINEAR_Q, s->block, &q, err);
    case QS_MODE_LEAVE_ONE_OUT_LAYER:
        return qw_policy_isolation(p, QW_ISO_LOO_LAYER, (qw_linear_kind)s->part, s->block, &q, err);
    default:
        return qs_error_set(err, QS_EINVAL, "job spec: mode %d unknown", (int)s->mode);
    }
    for (int b = 0; b < n_layers; b++)
        for (int k = 0; k < QS_LINEAR_KINDS; k++)
            if (set & (1u << k)) *qw_policy_linear(p, b, (qw_linear_kind)k) = q;
    if (set & (1u << QS_PART_LM_HEAD)) p->lm_head = q;
    if (set & (1u << QS_PART_EMBEDDINGS)) p->embed = embed;
    return QS_OK;
}
