/* config.json of a Hugging Face LlamaForCausalLM checkpoint, read with jansson.
 * Field names and defaults: transformers' LlamaConfig (configuration_llama.py);
 * Llama 3.1 rope scaling: rope_type "llama3" with factor, low_freq_factor, high_freq_factor,
 * original_max_position_embeddings (modeling_rope_utils.py _compute_llama3_parameters). */
#include "checkpoint_internal.h"

#include <jansson.h>
#include <math.h>
#include <string.h>

/* Reads a required (or, with dflt_ok, optional) positive integer field. */
static qs_status qw_cfg_int(const char *file, json_t *root, const char *key, int required, int dflt,
                            int *out, qs_error *err) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        if (required)
            return qs_error_set(err, QS_EFORMAT, "%s: field \"%s\" is missing", file, key);
        *out = dflt;
        return QS_OK;
    }
    if (!json_is_integer(v))
        return qs_error_set(err, QS_EFORMAT, "%s: field \"%s\" must be an integer", file, key);
    json_int_t x = json_integer_value(v);
    if (x <= 0 || x > INT32_MAX)
        return qs_error_set(err, QS_EFORMAT, "%s: field \"%s\" = %lld is out of range (1..%d)",
                            file, key, (long long)x, INT32_MAX);
    *out = (int)x;
    return QS_OK;
}

/* Reads a required (or optional with default) positive finite number. */
static qs_status qw_cfg_float(const char *file, json_t *obj, const char *where, const char *key,
                              int required, float dflt, float *out, qs_error *err) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        if (required)
            return qs_error_set(err, QS_EFORMAT, "%s: field \"%s%s\" is missing", file, where, key);
        *out = dflt;
        return QS_OK;
    }
    if (!json_is_number(v))
        return qs_error_set(err, QS_EFORMAT, "%s: field \"%s%s\" must be a number", file, where,
                            key);
    double x = json_number_value(v);
    if (!(x > 0.0) || !isfinite((float)x))
        return qs_error_set(err, QS_EFORMAT, "%s: field \"%s%s\" = %g must be positive and finite",
                            file, where, key, x);
    *out = (float)x;
    return QS_OK;
}

/* bos/eos ids: an integer, null/absent (-1), or for eos a list (Llama 3.1 instruct: the first is
 * kept). */
static qs_status qw_cfg_token_id(const char *file, json_t *root, const char *key, int *out,
                                 qs_error *err) {
    json_t *v = json_object_get(root, key);
    *out = -1;
    if (!v || json_is_null(v)) return QS_OK;
    if (json_is_array(v)) {
        if (json_array_size(v) == 0) return QS_OK;
        v = json_array_get(v, 0);
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
        return qs_error_set(err, QS_EFORMAT,
                            "%s: field \"%s\" must be a non-negative integer or a list of them",
                            file, key);
    *out = (int)json_integer_value(v);
    return QS_OK;
}

/* Reads rope scaling from the object rs, named `field` in messages: "rope_scaling" in the classic
 * layout, "rope_parameters" in the layout transformers 5 writes (where rope_type "default"
 * means no scaling and rope_theta sits in the same object). */
static qs_status qw_cfg_rope_scaling(const char *file, json_t *rs, const char *field,
                                     qw_config *cfg, qs_error *err) {
    cfg->rope_factor = 0.0f;
    if (!rs || json_is_null(rs)) return QS_OK;
    if (!json_is_object(rs))
        return qs_error_set(err, QS_EFORMAT, "%s: field \"%s\" must be an object or null", file,
                            field);
    /* transformers accepts both "rope_type" and the older "type". */
    json_t *type = json_object_get(rs, "rope_type");
    if (!type) type = json_object_get(rs, "type");
    if (!json_is_string(type))
        return qs_error_set(err, QS_EFORMAT,
                            "%s: field \"%s.rope_type\" is missing or not a string", file, field);
    const char *t = json_string_value(type);
    if (strcmp(t, "default") == 0) return QS_OK;
    if (strcmp(t, "llama3") != 0)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "%s: field \"%s.rope_type\" = \"%s\": only \"llama3\" is supported",
                            file, field, t);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s.", field);
    qs_status st;
    if ((st = qw_cfg_float(file, rs, prefix, "factor", 1, 0, &cfg->rope_factor, err))) return st;
    if ((st = qw_cfg_float(file, rs, prefix, "low_freq_factor", 1, 0, &cfg->rope_low_freq_factor,
                           err)))
        return st;
    if ((st = qw_cfg_float(file, rs, prefix, "high_freq_factor", 1, 0, &cfg->rope_high_freq_factor,
                           err)))
        return st;
    if (!(cfg->rope_high_freq_factor > cfg->rope_low_freq_factor))
        return qs_error_set(err, QS_EFORMAT,
                            "%s: field \"%s.high_freq_factor\" (%g) must exceed "
                            "\"%s.low_freq_factor\" (%g)",
                            file, field, cfg->rope_high_freq_factor, field,
                            cfg->rope_low_freq_factor);
    json_t *omp = json_object_get(rs, "original_max_position_embeddings");
    if (!json_is_integer(omp) || json_integer_value(omp) <= 0 ||
        json_integer_value(omp) > INT32_MAX)
        return qs_error_set(err, QS_EFORMAT,
                            "%s: field \"%s.original_max_position_embeddings\" is "
                            "missing or not a positive integer",
                            file, field);
    cfg->rope_original_max_pos = (int)json_integer_value(omp);
    return QS_OK;
}

static qs_status qw_cfg_fill(const char *file, json_t *root, qw_config *cfg, qs_error *err) {
    if (!json_is_object(root))
        return qs_error_set(err, QS_EFORMAT, "%s: top level must be a JSON object", file);
    json_t *arch = json_object_get(root, "architectures");
    if (arch && !json_is_null(arch)) {
        if (!json_is_array(arch))
            return qs_error_set(err, QS_EFORMAT, "%s: field \"architectures\" must be a list",
                                file);
        int llama = 0;
        for (size_t i = 0; i < json_array_size(arch); i++) {
            json_t *a = json_array_get(arch, i);
            if (json_is_string(a) && strcmp(json_string_value(a), "LlamaForCausalLM") == 0)
                llama = 1;
        }
        if (!llama)
            return qs_error_set(err, QS_EUNSUPPORTED,
                                "%s: field \"architectures\" does not list LlamaForCausalLM", file);
    }
    json_t *mt = json_object_get(root, "model_type");
    if (mt && !(json_is_string(mt) && strcmp(json_string_value(mt), "llama") == 0))
        return qs_error_set(err, QS_EUNSUPPORTED, "%s: field \"model_type\" must be \"llama\"",
                            file);
    json_t *act = json_object_get(root, "hidden_act");
    if (act && !(json_is_string(act) && strcmp(json_string_value(act), "silu") == 0))
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "%s: field \"hidden_act\" must be \"silu\" (SwiGLU)", file);

    qs_status st;
    if ((st = qw_cfg_int(file, root, "hidden_size", 1, 0, &cfg->dim, err))) return st;
    if ((st = qw_cfg_int(file, root, "intermediate_size", 1, 0, &cfg->hidden_dim, err))) return st;
    if ((st = qw_cfg_int(file, root, "num_hidden_layers", 1, 0, &cfg->n_layers, err))) return st;
    if ((st = qw_cfg_int(file, root, "num_attention_heads", 1, 0, &cfg->n_heads, err))) return st;
    if ((st =
             qw_cfg_int(file, root, "num_key_value_heads", 0, cfg->n_heads, &cfg->n_kv_heads, err)))
        return st;
    if ((st = qw_cfg_int(file, root, "vocab_size", 1, 0, &cfg->vocab_size, err))) return st;
    if ((st = qw_cfg_int(file, root, "max_position_embeddings", 1, 0, &cfg->max_seq_len, err)))
        return st;
    json_t *hd = json_object_get(root, "head_dim");
    if ((!hd || json_is_null(hd)) && cfg->dim % cfg->n_heads != 0)
        return qs_error_set(
            err, QS_EFORMAT,
            "%s: field \"hidden_size\" (%d) is not a multiple of \"num_attention_heads\" (%d) and "
            "\"head_dim\" is absent",
            file, cfg->dim, cfg->n_heads);
    if ((st = qw_cfg_int(file, root, "head_dim", 0, cfg->dim / cfg->n_heads, &cfg->head_dim, err)))
        return st;
    if (cfg->n_heads % cfg->n_kv_heads != 0)
        return qs_error_set(err, QS_EFORMAT,
                            "%s: field \"num_attention_heads\" (%d) is not a multiple of "
                            "\"num_key_value_heads\" (%d)",
                            file, cfg->n_heads, cfg->n_kv_heads);
    if (cfg->head_dim % 2 != 0)
        return qs_error_set(err, QS_EFORMAT,
                            "%s: field \"head_dim\" (%d) must be even for rotary embeddings", file,
                            cfg->head_dim);
    if ((st = qw_cfg_float(file, root, "", "rms_norm_eps", 1, 0, &cfg->norm_eps, err))) return st;
    if ((st = qw_cfg_float(file, root, "", "rope_theta", 0, 10000.0f, &cfg->rope_theta, err)))
        return st;
    /* transformers 5 writes rope_theta and the scaling into one "rope_parameters" object. Where
     * both layouts are present they must agree, so a stale field cannot silently win. */
    json_t *rp = json_object_get(root, "rope_parameters");
    if (rp && !json_is_null(rp)) {
        if (!json_is_object(rp))
            return qs_error_set(err, QS_EFORMAT,
                                "%s: field \"rope_parameters\" must be an object or null", file);
        float theta = 0.0f;
        if ((st = qw_cfg_float(file, rp, "rope_parameters.", "rope_theta", 1, 0, &theta, err)))
            return st;
        if (json_object_get(root, "rope_theta") && theta != cfg->rope_theta)
            return qs_error_set(err, QS_EFORMAT,
                                "%s: field \"rope_parameters.rope_theta\" (%g) contradicts "
                                "\"rope_theta\" (%g)",
                                file, theta, cfg->rope_theta);
        cfg->rope_theta = theta;
        json_t *rs = json_object_get(root, "rope_scaling");
        if (rs && !json_is_null(rs))
            return qs_error_set(err, QS_EFORMAT,
                                "%s: fields \"rope_parameters\" and \"rope_scaling\" are both "
                                "present; keep one layout",
                                file);
    }
    json_t *tie = json_object_get(root, "tie_word_embeddings");
    if (tie && !json_is_boolean(tie))
        return qs_error_set(err, QS_EFORMAT,
                            "%s: field \"tie_word_embeddings\" must be true or false", file);
    cfg->tied_embeddings = tie ? json_is_true(tie) : 0;
    if (rp && json_is_object(rp)) {
        if ((st = qw_cfg_rope_scaling(file, rp, "rope_parameters", cfg, err))) return st;
    } else if ((st = qw_cfg_rope_scaling(file, json_object_get(root, "rope_scaling"),
                                         "rope_scaling", cfg, err))) {
        return st;
    }
    if ((st = qw_cfg_token_id(file, root, "bos_token_id", &cfg->bos_token_id, err))) return st;
    if ((st = qw_cfg_token_id(file, root, "eos_token_id", &cfg->eos_token_id, err))) return st;
    if (cfg->bos_token_id >= cfg->vocab_size || cfg->eos_token_id >= cfg->vocab_size)
        return qs_error_set(err, QS_EFORMAT, "%s: field \"%s\" is not below \"vocab_size\" (%d)",
                            file,
                            cfg->bos_token_id >= cfg->vocab_size ? "bos_token_id" : "eos_token_id",
                            cfg->vocab_size);
    return QS_OK;
}

qs_status qw_config_parse_json_root(const char *file, const char *text, size_t len, qw_config *cfg,
                                    json_t **root_out, qs_error *err) {
    memset(cfg, 0, sizeof *cfg);
    if (root_out) *root_out = NULL;
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return qs_error_set(err, QS_EFORMAT, "%s: line %d, column %d: not valid JSON: %s", file,
                            je.line, je.column, je.text);
    qs_status st = qw_cfg_fill(file, root, cfg, err);
    if (st == QS_OK && root_out)
        *root_out = root;
    else
        json_decref(root);
    return st;
}

qs_status qw_config_parse_json(const char *file, const char *text, size_t len, qw_config *cfg,
                               qs_error *err) {
    return qw_config_parse_json_root(file, text, len, cfg, NULL, err);
}
