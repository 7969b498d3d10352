/* The sensitivity job spec: validation, canonical JSON both ways (sensitivity.h). */
#include "sensitivity.h"

#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *qs_part_name(int p) {
    if (p >= 0 && p < QS_LINEAR_KINDS) return qs_linear_kind_names[p];
    if (p == QS_PART_LM_HEAD) return QS_PART_LM_HEAD_NAME;
    if (p == QS_PART_EMBEDDINGS) return QS_PART_EMBEDDINGS_NAME;
    return "?";
}

int qs_part_by_name(const char *name) {
    int k = qs_linear_kind_index(name);
    if (k >= 0) return k;
    if (name && !strcmp(name, QS_PART_LM_HEAD_NAME)) return QS_PART_LM_HEAD;
    if (name && !strcmp(name, QS_PART_EMBEDDINGS_NAME)) return QS_PART_EMBEDDINGS;
    return -1;
}

unsigned qs_fuse_bit(const char *name) {
    if (name && !strcmp(name, "qkv")) return QS_FUSE_QKV;
    if (name && !strcmp(name, "gate_up")) return QS_FUSE_GATE_UP;
    return 0;
}

const char *qs_fuse_text(unsigned fuse) {
    switch (fuse & QS_FUSE_ALL) {
    case QS_FUSE_QKV:
        return "qkv";
    case QS_FUSE_GATE_UP:
        return "gate_up";
    case QS_FUSE_ALL:
        return "gate_up+qkv";
    }
    return "";
}

int qs_policy_key_parse(const char *key, int *block, int *part) {
    *block = *part = -1;
    if (!key) return -1;
    if (!strcmp(key, QS_PART_LM_HEAD_NAME) || !strcmp(key, QS_PART_EMBEDDINGS_NAME)) {
        *part = qs_part_by_name(key);
        return 0;
    }
    char *end;
    long b = strtol(key, &end, 10);
    if (end == key || *key < '0' || *key > '9' || (*key == '0' && end != key + 1) || b > 1000000 ||
        *end != '.')
        return -1;
    int k = qs_linear_kind_index(end + 1);
    /* the short names only: "3.down", not "3.down_proj" (one spelling, one key) */
    if (k < 0 || strcmp(end + 1, qs_linear_kind_names[k])) return -1;
    *block = (int)b;
    *part = k;
    return 0;
}

qs_status qs_sensitivity_policy_id(const json_t *map, char id[17], qs_error *err) {
    id[0] = 0;
    if (!json_is_object(map))
        return qs_error_set(err, QS_EINVAL, "job spec: policy: expected an object");
    char *text = qs_spec_canonical(map);
    if (!text || sodium_init() < 0) {
        free(text);
        return qs_error_set(err, QS_ENOMEM, "policy id: out of memory");
    }
    unsigned char h[32];
    char hex[65];
    crypto_generichash(h, sizeof h, (const unsigned char *)text, strlen(text), NULL, 0);
    sodium_bin2hex(hex, sizeof hex, h, sizeof h);
    free(text);
    memcpy(id, hex, 16);
    id[16] = 0;
    return QS_OK;
}

/* Policy mode: the map's keys, formats and options (sensitivity.h). */
static qs_status validate_policy(const qs_sensitivity_spec *s, qs_error *err) {
    if (strcmp(s->format, QS_POLICY_FORMAT))
        return qs_error_set(err, QS_EINVAL, "job spec: format: mode policy has format \"%s\"",
                            QS_POLICY_FORMAT);
    if (s->reference.path) /* a compare job quantizes nothing (validate_compare) */
        return json_is_object(s->policy) && !json_object_size(s->policy) &&
                       !json_object_size(s->format_options)
                   ? QS_OK
                   : qs_error_set(err, QS_EINVAL,
                                  "job spec: policy: a compare job (reference_model) has the "
                                  "empty policy {} and no format_options");
    if (!json_is_object(s->policy) || !json_object_size(s->policy))
        return qs_error_set(err, QS_EINVAL,
                            "job spec: policy: expected a non-empty object of linear: format");
    const char *key;
    json_t *v;
    json_object_foreach(s->policy, key, v) {
        int b, p;
        const char *f = json_string_value(v);
        if (qs_policy_key_parse(key, &b, &p))
            return qs_error_set(err, QS_EINVAL,
                                "job spec: policy: '%s' is not a linear (\"<block>.<kind>\" with "
                                "kind q, k, v, o, gate, up or down; lm_head; embeddings)",
                                key);
        if (!f || !*f || !strcmp(f, "bf16"))
            return qs_error_set(err, QS_EINVAL,
                                "job spec: policy.%s: expected the name of a quantized format "
                                "(bf16 linears are left out of the map)",
                                key);
        if (!json_is_object(json_object_get(s->format_options, f)))
            return qs_error_set(err, QS_EINVAL,
                                "job spec: format_options.%s: expected the options object of "
                                "format %s (policy.%s)",
                                f, f, key);
    }
    json_object_foreach(s->format_options, key, v) {
        int used = 0;
        const char *k2;
        json_t *f;
        json_object_foreach(s->policy, k2, f) used |= !strcmp(json_string_value(f), key);
        if (!used)
            return qs_error_set(err, QS_EINVAL,
                                "job spec: format_options.%s: no linear of the policy has it", key);
    }
    return QS_OK;
}

unsigned qs_sensitivity_extra_parts(const qs_sensitivity_spec *s) {
    const unsigned extra = (1u << QS_PART_LM_HEAD) | (1u << QS_PART_EMBEDDINGS);
    if (!s->eval) return 0;
    if (s->mode == QS_MODE_POLICY) {
        unsigned x = 0;
        if (json_object_get(s->policy, QS_PART_LM_HEAD_NAME)) x |= 1u << QS_PART_LM_HEAD;
        if (json_object_get(s->policy, QS_PART_EMBEDDINGS_NAME)) x |= 1u << QS_PART_EMBEDDINGS;
        return x;
    }
    if (s->mode == QS_MODE_COMPONENT) return (1u << s->part) & extra;
    if (s->mode == QS_MODE_LEAVE_ONE_OUT) return s->loo_of & ~(1u << s->part) & extra;
    return 0;
}

/* A compare job (reference_model): an eval of mode policy with the empty map, weights only,
 * rtn, no fuse, and a reference that exists at submit time and is not the model itself. */
static qs_status validate_compare(const qs_sensitivity_spec *s, qs_error *err) {
    if (!s->eval)
        return qs_error_set(err, QS_EINVAL, "job spec: reference_model: a baseline has none");
    if (s->mode != QS_MODE_POLICY || s->quantize_acts || s->method != QS_METHOD_RTN || s->fuse)
        return qs_error_set(err, QS_EINVAL,
                            "job spec: reference_model: a compare job has mode policy, quantize "
                            "weights, method rtn and no fuse (it quantizes nothing)");
    if (s->reference.trained_by[0] || !strcmp(s->reference.digest, s->model.digest))
        return qs_error_set(err, QS_EINVAL,
                            "job spec: reference_model: expected an existing model other than "
                            "the scored one");
    return QS_OK;
}

qs_status qs_sensitivity_validate(const qs_sensitivity_spec *s, qs_error *err) {
    if (s->reference.path) {
        qs_status cst = validate_compare(s, err);
        if (cst) return cst;
    }
    if (!s->model.path || !s->dataset.path)
        return qs_error_set(err, QS_EINVAL, "job spec: model and dataset are required");
    if (!s->format || !*s->format || !json_is_object(s->format_options))
        return qs_error_set(err, QS_EINVAL,
                            "job spec: format (a name) and format_options (an object) are "
                            "required");
    if (!s->metrics || (s->metrics & ~((1u << QS_METRICS) - 1)))
        return qs_error_set(err, QS_EINVAL, "job spec: metrics: expected a non-empty list of %s",
                            "kl, ppl, sqnr, top1");
    if (s->fuse & ~(unsigned)QS_FUSE_ALL)
        return qs_error_set(err, QS_EINVAL, "job spec: fuse: unknown group bits 0x%x", s->fuse);
    if (s->sqnr_rows < 0 ||
        (s->sqnr_rows && (!s->eval || !(s->metrics & QS_METRIC_SQNR) || s->reference.path)))
        return qs_error_set(err, QS_EINVAL,
                            "job spec: sqnr_rows: %d (expected a count of rows >= 1, and only in "
                            "an eval job with metric sqnr that quantizes the model)",
                            s->sqnr_rows);
    const qs_method *meth = qs_method_at(s->method);
    if (!meth)
        return qs_error_set(err, QS_EINVAL, "job spec: method: %d is not a method", s->method);
    if (s->method != QS_METHOD_RTN && !s->eval)
        return qs_error_set(err, QS_EINVAL, "job spec: method: a baseline quantizes nothing");
    if (meth->calibrated ? (s->calib_chunks < 1 || !s->calib_path || !*s->calib_path)
                         : (s->calib_chunks || s->calib_path))
        return qs_error_set(err, QS_EINVAL, "job spec: calibration: method %s %s", meth->name,
                            meth->calibrated
                                ? "needs calibration chunks (at least 1) and a token file"
                                : "takes no calibration");
    if (s->method != QS_METHOD_RTN && s->fuse)
        return qs_error_set(err, QS_EINVAL,
                            "job spec: fuse: method %s quantizes each linear with its own tensor "
                            "scale (fused groups are round-to-nearest only)",
                            meth->name);
    if ((meth->gptq || meth->smooth) != (s->method_options != NULL))
        return qs_error_set(err, QS_EINVAL, "job spec: method_options: method %s %s", meth->name,
                            meth->gptq || meth->smooth ? "needs its options" : "has none");
    if (!s->eval) {
        if (strcmp(s->format, "bf16") || json_object_size(s->format_options) ||
            s->metrics != QS_METRIC_PPL || s->policy || s->fuse)
            return qs_error_set(err, QS_EINVAL,
                                "job spec: a baseline has format bf16, no format_options and "
                                "metrics [ppl]");
        return QS_OK;
    }
    if ((unsigned)s->mode >= QS_MODE_COUNT)
        return qs_error_set(err, QS_EINVAL, "job spec: mode: %d is not a mode", (int)s->mode);
    if (s->quantize_acts != 0 && s->quantize_acts != 1)
        return qs_error_set(err, QS_EINVAL,
                            "job spec: quantize: expected weights or "
                            "weights+activations");
    const char *mode = qs_mode_name(s->mode);
    if (qs_mode_has_block(s->mode) ? s->block < 0 : s->block != -1)
        return qs_error_set(err, QS_EINVAL, "job spec: part: mode %s %s a block", mode,
                            qs_mode_has_block(s->mode) ? "needs" : "names no");
    int kind_mode = qs_mode_has_kind(s->mode);
    if (kind_mode ? (s->part < 0 || s->part >= QS_PARTS) : s->part != -1)
        return qs_error_set(err, QS_EINVAL, "job spec: part: mode %s %s a part", mode,
                            kind_mode ? "needs" : "names no");
    int component_form = s->mode == QS_MODE_COMPONENT || s->mode == QS_MODE_LEAVE_ONE_OUT;
    if (s->part >= QS_LINEAR_KINDS && !component_form)
        return qs_error_set(err, QS_EINVAL,
                            "job spec: part: %s is a part of component and leave_one_out modes "
                            "only (mode %s names block linears)",
                            qs_part_name(s->part), mode);
    if (s->mode == QS_MODE_LEAVE_ONE_OUT) {
        if (!(s->loo_of & (1u << s->part)) || (s->loo_of >> QS_PARTS))
            return qs_error_set(err, QS_EINVAL,
                                "job spec: leave_one_out_of: must hold the part left out (%s)",
                                qs_part_name(s->part));
    } else if (s->loo_of != QS_PARTS_BLOCK_LINEARS) {
        return qs_error_set(err, QS_EINVAL,
                            "job spec: leave_one_out_of applies to mode leave_one_out only");
    }
    if (s->mode == QS_MODE_POLICY) return validate_policy(s, err);
    if (s->policy)
        return qs_error_set(err, QS_EINVAL, "job spec: policy applies to mode policy only");
    return QS_OK;
}

void qs_sensitivity_part_text(const qs_sensitivity_spec *s, char *buf, size_t cap) {
    char id[17] = "";
    qs_error ignored = {0};
    if (!s->eval)
        snprintf(buf, cap, "%s", "");
    else if (s->mode == QS_MODE_POLICY)
        snprintf(buf, cap, "%s", qs_sensitivity_policy_id(s->policy, id, &ignored) ? "" : id);
    else if (qs_mode_has_block(s->mode) && qs_mode_has_kind(s->mode))
        snprintf(buf, cap, "%d.%s", s->block, qs_part_name(s->part));
    else if (qs_mode_has_block(s->mode))
        snprintf(buf, cap, "%d", s->block);
    else
        snprintf(buf, cap, "%s", qs_part_name(s->part));
}

/* The "tied_embeddings" value for the extra parts a job quantizes of a tied model, NULL when
 * it quantizes neither (or the model is not tied). */
static const char *tied_text(const qs_sensitivity_spec *s) {
    unsigned x = qs_sensitivity_extra_parts(s);
    if (!s->tied || !x) return NULL;
    unsigned head = 1u << QS_PART_LM_HEAD, emb = 1u << QS_PART_EMBEDDINGS;
    return x == head ? "head_copy_only" : x == emb ? "embeddings_copy_only" : "both_copies";
}

qs_status qs_sensitivity_encode(const qs_sensitivity_spec *s, json_t **out, qs_error *err) {
    *out = NULL;
    qs_status st = qs_sensitivity_validate(s, err);
    if (st) return st;
    json_t *o = json_object(), *metrics = json_array();
    if (o && metrics) {
        for (unsigned i = 0; i < QS_METRICS; i++)
            if (s->metrics & (1u << i))
                json_array_append_new(metrics, json_string(qs_metric_names[i]));
        json_object_set_new(o, "kind", json_string(s->eval ? "eval" : "baseline"));
        json_object_set_new(o, "model", qs_model_ref_json(&s->model));
        json_object_set_new(o, "dataset", qs_dataset_ref_json(&s->dataset));
        json_object_set_new(o, "numerics_version", json_string(s->numerics_version));
        json_object_set_new(o, "format", json_string(s->format));
        json_object_set(o, "format_options", s->format_options);
        json_object_set_new(o, "metrics", metrics);
        metrics = NULL;
        if (s->eval) {
            char part[64];
            qs_sensitivity_part_text(s, part, sizeof part);
            json_object_set_new(o, "quantize", json_string(qs_quantize_name(s->quantize_acts)));
            json_object_set_new(o, "mode", json_string(qs_mode_name(s->mode)));
            json_object_set_new(o, "part", json_string(part));
            if (s->mode == QS_MODE_LEAVE_ONE_OUT && s->loo_of != QS_PARTS_BLOCK_LINEARS) {
                json_t *of = json_array();
                for (int p = 0; of && p < QS_PARTS; p++)
                    if (s->loo_of & (1u << p))
                        json_array_append_new(of, json_string(qs_part_name(p)));
                json_object_set_new(o, "leave_one_out_of", of);
            }
            const char *tied = tied_text(s);
            if (tied) json_object_set_new(o, "tied_embeddings", json_string(tied));
            if (s->mode == QS_MODE_POLICY) json_object_set(o, "policy", s->policy);
            if (s->method != QS_METHOD_RTN) {
                json_object_set_new(o, "method", json_string(qs_method_at(s->method)->name));
                if (s->method_options) json_object_set(o, "method_options", s->method_options);
                if (s->calib_path)
                    json_object_set_new(o, "calibration",
                                        json_pack("{s:i, s:s, s:s}", "chunks", s->calib_chunks,
                                                  "path", s->calib_path, "digest",
                                                  s->calib_digest));
            }
            if (s->sqnr_rows) json_object_set_new(o, "sqnr_rows", json_integer(s->sqnr_rows));
            if (s->fuse) {
                json_t *fu = json_array(); /* sorted by name */
                if (fu && (s->fuse & QS_FUSE_GATE_UP))
                    json_array_append_new(fu, json_string("gate_up"));
                if (fu && (s->fuse & QS_FUSE_QKV)) json_array_append_new(fu, json_string("qkv"));
                json_object_set_new(o, "fuse", fu);
            }
        } else {
            json_object_set_new(o, "quantize", json_null());
            json_object_set_new(o, "mode", json_null());
            json_object_set_new(o, "part", json_null());
        }
        if (s->resources.present)
            json_object_set_new(o, "resources", qs_resources_json(&s->resources));
        if (s->reference.path)
            json_object_set_new(o, "reference_model", qs_model_ref_json(&s->reference));
    }
    json_decref(metrics);
    /* every json_object_set_new above fails only when out of memory: check the count */
    size_t want =
        10 + (s->resources.present ? 1 : 0) + (s->reference.path != NULL) +
        (s->eval && s->mode == QS_MODE_LEAVE_ONE_OUT && s->loo_of != QS_PARTS_BLOCK_LINEARS) +
        (s->eval && tied_text(s) != NULL) + (s->eval && s->mode == QS_MODE_POLICY) +
        (s->eval && s->fuse != 0) + (s->eval && s->sqnr_rows != 0) +
        (s->method != QS_METHOD_RTN) + (s->method_options != NULL) +
        (s->method != QS_METHOD_RTN && s->calib_path != NULL);
    if (!o || json_object_size(o) != want) {
        json_decref(o);
        return qs_error_set(err, QS_ENOMEM, "out of memory");
    }
    *out = o;
    return QS_OK;
}

/* Parses an eval part for mode m into block and part index. */
static qs_status parse_part(qs_sensitivity_spec *s, const char *text, qs_error *err) {
    s->block = -1;
    s->part = -1;
    const char *kind = text;
    if (qs_mode_has_block(s->mode)) {
        char *end;
        long b = strtol(text, &end, 10);
        int want_kind = qs_mode_has_kind(s->mode);
        if (end == text || *text < '0' || *text > '9' || (*text == '0' && end != text + 1) ||
            b > 1000000 || (want_kind ? *end != '.' : *end != 0))
            return qs_error_set(err, QS_EINVAL, "job spec: part: '%s' is not %s for mode %s", text,
                                want_kind ? "\"<block>.<kind>\"" : "a block number",
                                qs_mode_name(s->mode));
        s->block = (int)b;
        if (!want_kind) return QS_OK;
        kind = end + 1;
    }
    s->part = qs_part_by_name(kind);
    if (s->part < 0 || (qs_mode_has_block(s->mode) && s->part >= QS_LINEAR_KINDS))
        return qs_error_set(err, QS_EINVAL,
                            "job spec: part: '%s' is not a part (q, k, v, o, gate, up, down%s)",
                            kind, qs_mode_has_block(s->mode) ? "" : ", lm_head, embeddings");
    return QS_OK;
}

/* "method", "method_options", "calibration" (method.h): only as encode writes them, so a
 * stored spec re-encodes to its own key (rtn is never named). */
static qs_status decode_method(const json_t *spec, qs_sensitivity_spec *s, qs_error *err) {
    const json_t *m = json_object_get(spec, "method");
    const json_t *mo = json_object_get(spec, "method_options");
    const json_t *cal = json_object_get(spec, "calibration");
    if (!m) {
        if (mo || cal)
            return qs_error_set(err, QS_EINVAL,
                                "job spec: method_options and calibration need a method");
        return QS_OK;
    }
    s->method = qs_method_by_name(json_string_value(m));
    if (s->method <= QS_METHOD_RTN)
        return qs_error_set(err, QS_EINVAL,
                            "job spec: method: unknown '%s' (expected one of %s; rtn is "
                            "written as no method)",
                            json_string_value(m) ? json_string_value(m) : "(not a string)",
                            qs_method_list());
    qs_status st = qs_method_options(s->method, mo, &s->method_options, err);
    if (st) return qs_error_wrap(err, "job spec");
    if (s->method_options && !json_equal(s->method_options, (json_t *)mo))
        return qs_error_set(err, QS_EINVAL,
                            "job spec: method_options: expected every option of method %s with "
                            "its value",
                            json_string_value(m));
    if (cal) {
        const json_t *ch = json_object_get(cal, "chunks");
        const char *path = json_string_value(json_object_get(cal, "path"));
        const char *dig = json_string_value(json_object_get(cal, "digest"));
        if (!json_is_object(cal) || json_object_size(cal) != 3 || !json_is_integer(ch) ||
            json_integer_value(ch) < 1 || json_integer_value(ch) > 1000000 || !path || !*path ||
            !dig || strlen(dig) >= sizeof s->calib_digest)
            return qs_error_set(err, QS_EINVAL,
                                "job spec: calibration: expected {chunks (1..1000000), path, "
                                "digest}");
        s->calib_chunks = (int)json_integer_value(ch);
        s->calib_path = strdup(path);
        if (!s->calib_path) return qs_error_set(err, QS_ENOMEM, "out of memory");
        snprintf(s->calib_digest, sizeof s->calib_digest, "%s", dig);
    }
    return QS_OK;
}

static qs_status decode_eval(const json_t *spec, qs_sensitivity_spec *s, qs_error *err) {
    const char *q = json_string_value(json_object_get(spec, "quantize"));
    const char *m = json_string_value(json_object_get(spec, "mode"));
    const char *p = json_string_value(json_object_get(spec, "part"));
    if (!q || !m || !p)
        return qs_error_set(err, QS_EINVAL,
                            "job spec: an eval needs quantize, mode and part as "
                            "strings");
    /* only the canonical names: a stored spec is written by qs_sensitivity_encode */
    s->quantize_acts = !strcmp(q, "weights") ? 0 : !strcmp(q, "weights+activations") ? 1 : -1;
    if (s->quantize_acts < 0)
        return qs_error_set(err, QS_EINVAL, "job spec: quantize: unknown value '%s'", q);
    int mode = qs_mode_by_name(m);
    if (mode < 0 || strcmp(qs_mode_name((qs_mode)mode), m))
        return qs_error_set(err, QS_EINVAL, "job spec: mode: unknown '%s' (expected %s)", m,
                            qs_mode_list());
    s->mode = (qs_mode)mode;
    qs_status st = QS_OK;
    if (s->mode == QS_MODE_POLICY) {
        /* the part is the map's id: the map itself is read (and checked) by the caller */
        const json_t *map = json_object_get(spec, "policy");
        char id[17];
        if (!json_is_object(map))
            return qs_error_set(err, QS_EINVAL, "job spec: policy: expected an object");
        if ((st = qs_sensitivity_policy_id(map, id, err))) return st;
        if (strcmp(p, id))
            return qs_error_set(err, QS_EINVAL,
                                "job spec: part: '%s' is not the id of its policy (%s)", p, id);
        s->block = s->part = -1;
        s->policy = json_deep_copy(map);
        if (!s->policy) return qs_error_set(err, QS_ENOMEM, "out of memory");
    } else if (json_object_get(spec, "policy")) {
        /* kept, it would count in the key; dropped, re-encoding would change the key */
        return qs_error_set(err, QS_EINVAL, "job spec: policy applies to mode policy only");
    } else if ((st = parse_part(s, p, err))) {
        return st;
    }
    s->loo_of = QS_PARTS_BLOCK_LINEARS;
    const json_t *of = json_object_get(spec, "leave_one_out_of");
    if (of) {
        if (!json_is_array(of) || !json_array_size(of))
            return qs_error_set(err, QS_EINVAL, "job spec: leave_one_out_of: expected a list");
        s->loo_of = 0;
        size_t i;
        const json_t *v;
        json_array_foreach(of, i, v) {
            int part = qs_part_by_name(json_string_value(v));
            /* canonical order: block order, then lm_head, embeddings; each once */
            if (part < 0 || s->loo_of >= (1u << part) ||
                strcmp(json_string_value(v), qs_part_name(part)))
                return qs_error_set(
                    err, QS_EINVAL,
                    "job spec: leave_one_out_of[%zu]: unknown, repeated or out of order part", i);
            s->loo_of |= 1u << part;
        }
    }
    const json_t *fuse = json_object_get(spec, "fuse");
    if (fuse) {
        if (!json_is_array(fuse) || !json_array_size(fuse))
            return qs_error_set(err, QS_EINVAL,
                                "job spec: fuse: expected a non-empty list of qkv, gate_up");
        size_t i;
        const json_t *v;
        unsigned last = 0;
        json_array_foreach(fuse, i, v) {
            unsigned bit = qs_fuse_bit(json_string_value(v));
            /* canonical order: sorted by name (gate_up, qkv), each once */
            unsigned rank = bit == QS_FUSE_GATE_UP ? 1 : bit == QS_FUSE_QKV ? 2 : 0;
            if (!rank || rank <= last)
                return qs_error_set(err, QS_EINVAL,
                                    "job spec: fuse[%zu]: unknown, repeated or out of order "
                                    "group (expected sorted names of gate_up, qkv)",
                                    i);
            last = rank;
            s->fuse |= bit;
        }
    }
    const json_t *rows = json_object_get(spec, "sqnr_rows");
    if (rows) {
        if (!json_is_integer(rows) || json_integer_value(rows) < 1 ||
            json_integer_value(rows) > INT_MAX)
            return qs_error_set(err, QS_EINVAL,
                                "job spec: sqnr_rows: expected an integer >= 1 (rows per linear "
                                "call)");
        s->sqnr_rows = (int)json_integer_value(rows);
    }
    if ((st = decode_method(spec, s, err))) return st;
    const json_t *tied = json_object_get(spec, "tied_embeddings");
    s->tied = tied != NULL;
    if (tied) {
        const char *want = tied_text(s);
        if (!want || !json_is_string(tied) || strcmp(json_string_value(tied), want))
            return qs_error_set(err, QS_EINVAL,
                                "job spec: tied_embeddings: expected \"%s\" for this part",
                                want ? want
                                     : "(nothing: the job quantizes neither lm_head nor "
                                       "the embeddings)");
    }
    return QS_OK;
}

qs_status qs_sensitivity_decode(const json_t *spec, qs_sensitivity_spec *out, qs_error *err) {
    memset(out, 0, sizeof *out);
    out->block = out->part = -1;
    out->loo_of = QS_PARTS_BLOCK_LINEARS;
    if (!json_is_object(spec)) return qs_error_set(err, QS_EINVAL, "job spec: expected an object");
    static const char *const keys[] = {"dataset",
                                       "format",
                                       "format_options",
                                       "kind",
                                       "metrics",
                                       "mode",
                                       "model",
                                       "numerics_version",
                                       "part",
                                       "quantize",
                                       "leave_one_out_of",
                                       "tied_embeddings",
                                       "resources",
                                       "policy",
                                       "fuse",
                                       "method",
                                       "method_options",
                                       "calibration",
                                       "reference_model",
                                       "sqnr_rows",
                                       "numerics"};
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)spec, key, v) {
        size_t i = 0;
        while (i < sizeof keys / sizeof keys[0] && strcmp(key, keys[i]))
            i++;
        if (i == sizeof keys / sizeof keys[0])
            return qs_error_set(err, QS_EINVAL, "job spec: unknown key '%s'", key);
    }
    const char *kind = json_string_value(json_object_get(spec, "kind"));
    if (!kind || (strcmp(kind, "eval") && strcmp(kind, "baseline")))
        return qs_error_set(err, QS_EINVAL, "job spec: kind: expected \"baseline\" or \"eval\"");
    out->eval = !strcmp(kind, "eval");
    const char *format = json_string_value(json_object_get(spec, "format"));
    const char *nv = json_string_value(json_object_get(spec, "numerics_version"));
    const json_t *fo = json_object_get(spec, "format_options");
    const json_t *metrics = json_object_get(spec, "metrics");
    qs_status st = QS_OK;
    if (!format || !*format)
        st = qs_error_set(err, QS_EINVAL, "job spec: format: expected a format name");
    else if (!json_is_object(fo))
        st = qs_error_set(err, QS_EINVAL, "job spec: format_options: expected an object");
    else if (!nv || !*nv || strlen(nv) >= sizeof out->numerics_version)
        st = qs_error_set(err, QS_EINVAL, "job spec: numerics_version: expected a short string");
    else if (!json_is_array(metrics))
        st = qs_error_set(err, QS_EINVAL, "job spec: metrics: expected an array");
    if (!st) {
        size_t i;
        json_array_foreach(metrics, i, v) {
            unsigned bit = qs_metric_bit(json_string_value(v));
            /* canonical order: sorted by name, each once (bits grow with the name) */
            if (!bit || out->metrics >= bit) {
                st = qs_error_set(err, QS_EINVAL,
                                  "job spec: metrics[%zu]: unknown, repeated or out of order "
                                  "(expected sorted names of kl, ppl, sqnr, top1)",
                                  i);
                break;
            }
            out->metrics |= bit;
        }
    }
    if (!st) {
        snprintf(out->numerics_version, sizeof out->numerics_version, "%s", nv);
        out->format = strdup(format);
        out->format_options = json_deep_copy(fo);
        if (!out->format || !out->format_options)
            st = qs_error_set(err, QS_ENOMEM, "out of memory");
    }
    if (!st) st = qs_model_ref_read(spec, &out->model, err);
    if (!st) st = qs_dataset_ref_read(spec, &out->dataset, err);
    if (!st) st = qs_resources_read(spec, &out->resources, err);
    if (!st && json_object_get(spec, "reference_model"))
        st = qs_model_ref_read_key(spec, "reference_model", &out->reference, err);
    if (!st && out->eval) st = decode_eval(spec, out, err);
    if (!st && !out->eval) {
        const char *nulls[] = {"quantize", "mode", "part"};
        for (size_t i = 0; !st && i < 3; i++)
            if (!json_is_null(json_object_get(spec, nulls[i])))
                st = qs_error_set(err, QS_EINVAL, "job spec: %s: a baseline has null", nulls[i]);
        if (!st && (json_object_get(spec, "leave_one_out_of") ||
                    json_object_get(spec, "tied_embeddings") || json_object_get(spec, "policy")))
            st = qs_error_set(err, QS_EINVAL,
                              "job spec: a baseline has no leave_one_out_of, tied_embeddings or "
                              "policy");
        if (!st && json_object_get(spec, "fuse"))
            st = qs_error_set(err, QS_EINVAL, "job spec: fuse: a baseline fuses nothing");
        if (!st && json_object_get(spec, "sqnr_rows"))
            st = qs_error_set(err, QS_EINVAL, "job spec: sqnr_rows: a baseline probes nothing");
        if (!st && (json_object_get(spec, "method") || json_object_get(spec, "method_options") ||
                    json_object_get(spec, "calibration")))
            st = qs_error_set(err, QS_EINVAL, "job spec: method: a baseline quantizes nothing");
    }
    if (!st) st = qs_sensitivity_validate(out, err);
    if (st) qs_sensitivity_clear(out);
    return st;
}

void qs_sensitivity_clear(qs_sensitivity_spec *s) {
    if (!s) return;
    qs_model_ref_clear(&s->model);
    qs_model_ref_clear(&s->reference);
    qs_dataset_ref_clear(&s->dataset);
    free(s->format);
    json_decref(s->format_options);
    json_decref(s->policy);
    json_decref(s->method_options);
    free(s->calib_path);
    memset(s, 0, sizeof *s);
    s->block = s->part = -1;
    s->loo_of = QS_PARTS_BLOCK_LINEARS;
}
