/* The sensitivity grid kind (grid.h, grid_kind.h): models x formats x quantize x modes x parts,
 * one baseline per model and one eval job per cell, each spec a kinds/sensitivity.h spec. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grid_kind.h"
#include "method.h"
#include "method_label.h"
#include "sensitivity.h"

/* One format: a name, or {name, options}. options: every option that applies to the format
 * with its default filled in (the numeric core's defaults, kernels/quant.h), values checked
 * by the numeric core's own parser through the probe, so the grid and the worker accept
 * exactly the same names. */
static qs_status parse_format(qc_config *c, struct fy_node *n, const qc_grid_probe *probe,
                              qc_grid_format *f) {
    struct fy_node *name_n = n, *opt_n = NULL;
    qs_status st;
    if (fy_node_is_mapping(n)) {
        static const char *const keys[] = {"name", "options", NULL};
        if ((st = qc_config_check_keys(c, n, "a format", keys))) return st;
        name_n = qc_config_lookup(n, "name");
        opt_n = qc_config_lookup(n, "options");
        if (!name_n)
            return qc_config_fail(c, n, QS_EFORMAT, "expected a 'name' key naming the format");
    }
    const char *name = NULL;
    if ((st = qc_config_string(c, name_n, "the format name", &name))) return st;
    if (!probe->format_known(probe->user, name))
        return qc_config_fail(c, name_n, QS_EINVAL,
                              "unknown format '%s' (expected a numeric-core name such as nvfp4, "
                              "mxfp4, mxfp6_e2m3, mxfp8_e4m3, fp8_e4m3, int8_channel, "
                              "int4_group, bf16)",
                              name);
    int is_mx = strncmp(name, "mx", 2) == 0, is_nv = strncmp(name, "nvfp4", 5) == 0;
    int is_int4 = strcmp(name, "int4_group") == 0, is_bf16 = strcmp(name, "bf16") == 0;
    json_t *o = json_object();
    if (!o) return qc_config_error(c, QS_ENOMEM, "out of memory");
    if (!is_bf16) json_object_set_new(o, "rounding", json_string("rne"));
    if (is_mx) json_object_set_new(o, "scale_rule", json_string("rceil"));
    if (is_nv) json_object_set_new(o, "clamp", json_string("none"));
    if (is_int4) json_object_set_new(o, "group_size", json_integer(128));
    if (opt_n) {
        if (!fy_node_is_mapping(opt_n)) {
            json_decref(o);
            return qc_config_fail(c, opt_n, QS_EFORMAT, "expected 'options' as a mapping");
        }
        void *it = NULL;
        struct fy_node_pair *pair;
        while ((pair = fy_node_mapping_iterate(opt_n, &it))) {
            struct fy_node *k = fy_node_pair_key(pair), *v = fy_node_pair_value(pair);
            const char *ks = qc_config_scalar(k), *vs = qc_config_scalar(v);
            qs_error e = {0};
            if ((st =
                     probe->format_option(probe->user, name, ks ? ks : "(not a scalar)", vs, &e))) {
                json_decref(o);
                /* Point at the key when the option itself is wrong, at the value otherwise. */
                return qc_config_fail(c, st == QS_ENOTFOUND ? k : v, QS_EINVAL, "%s", e.msg);
            }
            if (strcmp(ks, "group_size") == 0) {
                json_object_set_new(o, ks, json_integer(strtol(vs, NULL, 10)));
                continue;
            }
            json_object_set_new(o, ks, json_string(vs));
        }
    }
    f->name = strdup(name);
    f->options_json = json_dumps(o, JSON_SORT_KEYS | JSON_COMPACT);
    json_decref(o);
    return (f->name && f->options_json) ? QS_OK : qc_config_error(c, QS_ENOMEM, "out of memory");
}

static qs_status parse_formats(qc_config *c, struct fy_node *f, const qc_grid_probe *probe,
                               qc_grid *g) {
    if (!f) return qc_config_fail(c, NULL, QS_EFORMAT, "expected a 'formats' list");
    if (fy_node_is_scalar(f)) {
        g->formats = calloc(1, sizeof *g->formats);
        if (!g->formats) return qc_config_error(c, QS_ENOMEM, "out of memory");
        g->n_formats = 1;
        return parse_format(c, f, probe, &g->formats[0]);
    }
    int count = fy_node_is_sequence(f) ? fy_node_sequence_item_count(f) : 0;
    if (count <= 0) return qc_config_fail(c, f, QS_EFORMAT, "expected a non-empty list of formats");
    g->formats = calloc((size_t)count, sizeof *g->formats);
    if (!g->formats) return qc_config_error(c, QS_ENOMEM, "out of memory");
    void *it = NULL;
    struct fy_node *item;
    while ((item = fy_node_sequence_iterate(f, &it))) {
        qc_grid_format *fmt = &g->formats[g->n_formats++];
        qs_status st = parse_format(c, item, probe, fmt);
        if (st) return st;
        for (size_t i = 0; i + 1 < g->n_formats; i++)
            if (!strcmp(g->formats[i].name, fmt->name) &&
                !strcmp(g->formats[i].options_json, fmt->options_json))
                return qc_config_fail(c, item, QS_EINVAL,
                                      "format %s with options %s is listed twice", fmt->name,
                                      fmt->options_json);
    }
    return QS_OK;
}

static qs_status add_quantize(qc_config *c, struct fy_node *n, void *ctx) {
    qc_grid *g = ctx;
    const char *s = qc_config_scalar(n);
    int acts = qs_quantize_by_name(s);
    if (acts < 0)
        return qc_config_fail(c, n, QS_EINVAL,
                              "unknown quantize '%s' (expected weights or weights+activations)",
                              s ? s : "(not a scalar)");
    for (size_t i = 0; i < g->n_quantize; i++)
        if (g->quantize_acts[i] == acts)
            return qc_config_fail(c, n, QS_EINVAL, "quantize '%s' is listed twice", s);
    g->quantize_acts[g->n_quantize++] = acts;
    return QS_OK;
}

static qs_status add_mode(qc_config *c, struct fy_node *n, void *ctx) {
    qc_grid *g = ctx;
    const char *s = qc_config_scalar(n);
    int m = qs_mode_by_name(s);
    if (m < 0)
        return qc_config_fail(c, n, QS_EINVAL, "unknown isolation mode '%s' (expected %s)",
                              s ? s : "(not a scalar)", qs_mode_list());
    for (size_t i = 0; i < g->n_modes; i++)
        if (g->modes[i] == (qs_mode)m)
            return qc_config_fail(c, n, QS_EINVAL, "mode '%s' is listed twice", s);
    g->modes[g->n_modes++] = (qs_mode)m;
    return QS_OK;
}

static qs_status add_part(qc_config *c, struct fy_node *n, void *ctx) {
    qc_grid *g = ctx;
    const char *s = qc_config_scalar(n);
    int p = qs_part_by_name(s);
    if (p < 0)
        return qc_config_fail(c, n, QS_EINVAL,
                              "unknown part '%s' (expected q, k, v, o, gate, up, down, lm_head or "
                              "embeddings)",
                              s ? s : "(not a scalar)");
    for (size_t i = 0; i < g->n_parts; i++)
        if (g->parts[i] == p)
            return qc_config_fail(c, n, QS_EINVAL, "part '%s' is listed twice", s);
    g->parts[g->n_parts++] = p;
    return QS_OK;
}

static qs_status add_metric(qc_config *c, struct fy_node *n, void *ctx) {
    unsigned *mask = ctx;
    const char *s = qc_config_scalar(n);
    unsigned bit = qs_metric_bit(s);
    if (!bit)
        return qc_config_fail(c, n, QS_EINVAL,
                              "unknown metric '%s' (expected ppl, kl, top1 or sqnr)",
                              s ? s : "(not a scalar)");
    if (*mask & bit) return qc_config_fail(c, n, QS_EINVAL, "metric '%s' is listed twice", s);
    *mask |= bit;
    return QS_OK;
}

/* What the sensitivity kind keeps in g->kind_data: the grid's `policy` (mode policy) and
 * `fuse`. */
typedef struct sens_data {
    json_t *policy;   /* {"3.down": "nvfp4", ...}: the quantized linears (bf16 ones left out);
                         NULL without mode policy */
    json_t *options;  /* {"nvfp4": {canonical options}, ...}: each format of the map */
    unsigned fuse;    /* QS_FUSE_* bits: the groups sharing one tensor scale in every eval */
    int sqnr_rows;    /* sensitivity.sqnr_rows: the SQNR probe's rows per linear call; 0 all */
    size_t n_methods; /* the `method` axis; 0: rtn alone (the spec names no method) */
    int methods[16];
    json_t *method_options[16]; /* each method's canonical options, NULL when it has none */
    int calib_chunks;           /* dataset.calibration: 0 when absent */
    char *calib_path;           /* its token file (the scored one unless `tokens` names one) */
    char calib_digest[65];
} sens_data;

/* One `fuse` entry: qkv or gate_up, each once. */
static qs_status add_fuse(qc_config *c, struct fy_node *n, void *ctx) {
    unsigned *fuse = ctx;
    const char *s = qc_config_scalar(n);
    unsigned bit = qs_fuse_bit(s);
    if (!bit)
        return qc_config_fail(c, n, QS_EINVAL, "unknown fused group '%s' (expected qkv or gate_up)",
                              s ? s : "(not a scalar)");
    if (*fuse & bit) return qc_config_fail(c, n, QS_EINVAL, "fused group '%s' is listed twice", s);
    *fuse |= bit;
    return QS_OK;
}

/* The grid's kind data, made on first use. */
static sens_data *data_of(qc_grid *g) {
    if (!g->kind_data) g->kind_data = calloc(1, sizeof(sens_data));
    return g->kind_data;
}

static void free_data(qc_grid *g) {
    sens_data *d = g->kind_data;
    if (d) {
        json_decref(d->policy);
        json_decref(d->options);
        for (size_t i = 0; i < d->n_methods; i++)
            json_decref(d->method_options[i]);
        free(d->calib_path);
        free(d);
    }
    g->kind_data = NULL;
}

/* The `policy` mapping of mode policy: "<block>.<kind>" (or lm_head, embeddings):
 * format. Each key must name a linear of every model, each value a format the numeric core
 * knows; a format also listed in `formats` takes its options from there, else its defaults.
 * bf16 means "as it is" (the unquantized reference) and is left out of the map. Errors point
 * at the key or value (file:line:column). */
static qs_status parse_policy(qc_config *c, struct fy_node *n, const qc_grid_probe *probe,
                              qc_grid *g, sens_data *d) {
    if (!fy_node_is_mapping(n) || fy_node_mapping_item_count(n) <= 0)
        return qc_config_fail(c, n, QS_EFORMAT,
                              "expected 'policy' as a mapping of linear (\"<block>.<kind>\", "
                              "lm_head, embeddings) to format");
    d->policy = json_object();
    d->options = json_object();
    if (!d->policy || !d->options) return qc_config_error(c, QS_ENOMEM, "out of memory");
    void *it = NULL;
    struct fy_node_pair *pair;
    qs_status st;
    while ((pair = fy_node_mapping_iterate(n, &it))) {
        struct fy_node *k = fy_node_pair_key(pair), *v = fy_node_pair_value(pair);
        const char *key = qc_config_scalar(k);
        int block, part;
        if (!key || qs_policy_key_parse(key, &block, &part))
            return qc_config_fail(c, k, QS_EINVAL,
                                  "unknown linear '%s' in policy (expected \"<block>.<kind>\" "
                                  "with kind q, k, v, o, gate, up or down, lm_head or "
                                  "embeddings)",
                                  key ? key : "(not a scalar)");
        for (size_t i = 0; i < g->n_models; i++)
            if (block >= g->models[i].facts.n_layers)
                return qc_config_fail(c, k, QS_EINVAL,
                                      "policy linear '%s': model %s has blocks 0..%d", key,
                                      g->models[i].name, g->models[i].facts.n_layers - 1);
        if (json_object_get(d->policy, key))
            return qc_config_fail(c, k, QS_EINVAL, "policy linear '%s' is listed twice", key);
        const char *fmt = qc_config_scalar(v);
        if (!fmt || !probe->format_known(probe->user, fmt))
            return qc_config_fail(c, v, QS_EINVAL,
                                  "policy linear '%s': unknown format '%s' (expected a "
                                  "numeric-core name such as nvfp4, mxfp4, mxfp8_e4m3, fp8_e4m3, "
                                  "bf16)",
                                  key, fmt ? fmt : "(not a scalar)");
        if (!strcmp(fmt, "bf16")) continue; /* the reference: left as it is */
        json_object_set_new(d->policy, key, json_string(fmt));
        if (json_object_get(d->options, fmt)) continue;
        const char *opts = NULL;
        for (size_t i = 0; i < g->n_formats; i++)
            if (!strcmp(g->formats[i].name, fmt)) opts = g->formats[i].options_json;
        qc_grid_format dflt = {0};
        if (!opts && (st = parse_format(c, v, probe, &dflt))) return st;
        json_t *o = json_loads(opts ? opts : dflt.options_json, 0, NULL);
        free(dflt.name);
        free(dflt.options_json);
        if (!o || json_object_set_new(d->options, fmt, o))
            return qc_config_error(c, QS_ENOMEM, "out of memory");
    }
    if (!json_object_size(d->policy))
        return qc_config_fail(c, n, QS_EINVAL,
                              "every linear of the policy is bf16: that is the baseline, not a "
                              "policy to measure");
    return QS_OK;
}

/* A mapping of scalars as a JSON object of strings (per-linear's "linears", method.h); a value
 * that is not a scalar becomes null, which the method's options refuse. */
static json_t *scalar_map(struct fy_node *n) {
    json_t *o = json_object();
    void *it = NULL;
    struct fy_node_pair *pair;
    while (o && (pair = fy_node_mapping_iterate(n, &it))) {
        const char *k = qc_config_scalar(fy_node_pair_key(pair));
        const char *v = qc_config_scalar(fy_node_pair_value(pair));
        json_object_set_new(o, k ? k : "(not a scalar)", v ? json_string(v) : json_null());
    }
    return o;
}

/* One `method` entry: a name, or {name, options} (method.h: options filled with defaults). */
static qs_status add_method(qc_config *c, struct fy_node *n, void *ctx) {
    sens_data *d = ctx;
    struct fy_node *name_n = n, *opt_n = NULL;
    qs_status st;
    if (fy_node_is_mapping(n)) {
        static const char *const keys[] = {"name", "options", NULL};
        if ((st = qc_config_check_keys(c, n, "a method", keys))) return st;
        name_n = qc_config_lookup(n, "name");
        opt_n = qc_config_lookup(n, "options");
        if (!name_n)
            return qc_config_fail(c, n, QS_EFORMAT, "expected a 'name' key naming the method");
    }
    const char *s = qc_config_scalar(name_n);
    int m = qs_method_by_name(s);
    bool search = false;
    if (m < 0 && qs_method_by_label(s, &search) >= 0 && search)
        return qc_config_fail(c, name_n, QS_EINVAL,
                              "'%s' is a label; a grid writes {name: %.*s, options: "
                              "{scale_search: true}}",
                              s, (int)(strlen(s) - strlen("+search")), s);
    if (m < 0)
        return qc_config_fail(c, name_n, QS_EINVAL, "unknown method '%s' (expected %s)",
                              s ? s : "(not a scalar)", qs_method_list());
    if (d->n_methods == sizeof d->methods / sizeof d->methods[0])
        return qc_config_fail(c, n, QS_EINVAL, "more than %zu methods",
                              sizeof d->methods / sizeof d->methods[0]);
    json_t *given = NULL;
    if (opt_n) {
        if (!fy_node_is_mapping(opt_n))
            return qc_config_fail(c, opt_n, QS_EFORMAT, "expected 'options' as a mapping");
        given = json_object();
        void *it = NULL;
        struct fy_node_pair *pair;
        while (given && (pair = fy_node_mapping_iterate(opt_n, &it))) {
            const char *ks = qc_config_scalar(fy_node_pair_key(pair));
            struct fy_node *vn = fy_node_pair_value(pair);
            const char *vs = qc_config_scalar(vn);
            char *end = NULL;
            double x = vs ? strtod(vs, &end) : 0.0;
            /* nan and inf stay text, which the option's check refuses: json_real takes no
               such number, and an option without a value would get its default */
            json_t *v = fy_node_is_mapping(vn)                         ? scalar_map(vn)
                        : !vs                                          ? json_null()
                        : !strcmp(vs, "true")                          ? json_true()
                        : !strcmp(vs, "false")                         ? json_false()
                        : end && *end == 0 && end != vs && isfinite(x) ? json_real(x)
                                                                       : json_string(vs);
            json_object_set_new(given, ks ? ks : "(not a scalar)", v);
        }
    }
    json_t *o = NULL;
    qs_error e = {0};
    st = qs_method_options(m, given, &o, &e);
    json_decref(given);
    if (st) return qc_config_fail(c, opt_n ? opt_n : n, st, "%s", e.msg);
    for (size_t i = 0; i < d->n_methods; i++)
        if (d->methods[i] == m &&
            (d->method_options[i] == o || json_equal(d->method_options[i], o))) {
            json_decref(o);
            return qc_config_fail(c, n, QS_EINVAL, "method '%s' is listed twice", s);
        }
    d->methods[d->n_methods] = m;
    d->method_options[d->n_methods++] = o;
    return QS_OK;
}

/* dataset.calibration {chunks, tokens}: the last `chunks` whole chunks of the token file
 * `tokens` (default: the scored one, whose scored chunks must then leave them out). */
static qs_status parse_calibration(qc_config *c, struct fy_node *n, const qc_grid_probe *probe,
                                   qc_grid *g, sens_data *d) {
    qs_status st;
    if (!fy_node_is_mapping(n))
        return qc_config_fail(c, n, QS_EFORMAT,
                              "expected 'calibration' as a mapping with 'chunks' and optionally "
                              "'tokens'");
    static const char *const keys[] = {"chunks", "tokens", NULL};
    if ((st = qc_config_check_keys(c, n, "dataset.calibration", keys))) return st;
    struct fy_node *ch = qc_config_lookup(n, "chunks"), *t = qc_config_lookup(n, "tokens");
    if (!ch)
        return qc_config_fail(c, n, QS_EFORMAT, "expected 'chunks' (how many to calibrate on)");
    int chunks = 0;
    if ((st = qc_config_int(c, ch, "dataset.calibration.chunks", 1, 1000000, &chunks))) return st;
    d->calib_chunks = (int)chunks;
    qc_dataset_facts facts = {0};
    if (t) {
        if ((st = qc_config_path(c, t, "calibration token file", &d->calib_path))) return st;
        qs_error e = {0};
        if ((st = probe->dataset(probe->user, d->calib_path, &facts, &e)))
            return qc_config_fail(c, t, st, "cannot read calibration token file: %s", e.msg);
        if (facts.n_tokens / (size_t)g->ctx < (size_t)chunks)
            return qc_config_fail(c, ch, QS_EINVAL,
                                  "the calibration token file holds %zu whole chunks of ctx %d, "
                                  "fewer than %d",
                                  facts.n_tokens / (size_t)g->ctx, g->ctx, chunks);
        for (size_t i = 0; i < g->n_models; i++)
            if (facts.vocab_size > (uint32_t)g->models[i].facts.vocab_size)
                return qc_config_fail(c, t, QS_EINVAL,
                                      "the calibration token file's vocabulary (%u) is larger "
                                      "than model %s's",
                                      facts.vocab_size, g->models[i].name);
    } else {
        if (g->dataset_text)
            return qc_config_fail(c, n, QS_EINVAL,
                                  "calibration from a text dataset needs 'tokens' naming a token "
                                  "file");
        facts = g->dataset;
        d->calib_path = strdup(g->dataset_path);
        if (!d->calib_path) return qc_config_error(c, QS_ENOMEM, "out of memory");
        size_t total = facts.n_tokens / (size_t)g->ctx;
        size_t scored =
            g->max_chunks && (size_t)g->max_chunks < total ? (size_t)g->max_chunks : total;
        if (scored + (size_t)chunks > total)
            return qc_config_fail(c, ch, QS_EINVAL,
                                  "calibration chunks would overlap the scored ones: the token "
                                  "file holds %zu chunks of ctx %d, %zu are scored (max_chunks), "
                                  "%d asked for calibration",
                                  total, g->ctx, scored, chunks);
    }
    memcpy(d->calib_digest, facts.digest, sizeof d->calib_digest);
    return QS_OK;
}

/* Whether every model of g has compare_to: then the grid sweeps nothing and needs no formats
 * (an absent `sensitivity` gives every metric). */
static int only_compare(const qc_grid *g) {
    int all = g->n_models > 0;
    for (size_t i = 0; i < g->n_models; i++)
        all &= g->models[i].ref_path != NULL;
    return all;
}

static qs_status check_per_linear(qc_config *c, struct fy_node *me, const qc_grid *g);
static struct fy_node *linear_node(struct fy_node *me, size_t i, const char *key);

static qs_status parse_section(qc_config *c, struct fy_node *n, const qc_grid_probe *probe,
                               qc_grid *g) {
    if (!n && only_compare(g)) {
        g->quantize_acts[g->n_quantize++] = 0;
        g->metrics_json = strdup("[\"kl\",\"ppl\",\"sqnr\",\"top1\"]");
        return g->metrics_json ? QS_OK : qc_config_error(c, QS_ENOMEM, "out of memory");
    }
    if (!n || !fy_node_is_mapping(n))
        return qc_config_fail(c, n ? n : qc_config_root(c), QS_EFORMAT,
                              "expected 'sensitivity' as a mapping with 'formats', 'quantize', "
                              "'modes' and 'metrics'");
    static const char *const keys[] = {"formats", "quantize", "modes",  "parts",     "metrics",
                                       "policy",  "fuse",     "method", "sqnr_rows", NULL};
    qs_status st = qc_config_check_keys(c, n, "sensitivity", keys);
    if (st) return st;
    struct fy_node *f = qc_config_lookup(n, "formats"), *m = qc_config_lookup(n, "modes"),
                   *pol = qc_config_lookup(n, "policy");
    /* a grid of mode policy only needs no formats: its map names them */
    int only_policy = 0;
    if (m && fy_node_is_sequence(m) && fy_node_sequence_item_count(m) > 0) {
        only_policy = 1;
        void *mit = NULL;
        struct fy_node *item;
        while ((item = fy_node_sequence_iterate(m, &mit)))
            only_policy &= qs_mode_by_name(qc_config_scalar(item)) == QS_MODE_POLICY;
    } else if (m && fy_node_is_scalar(m)) {
        only_policy = qs_mode_by_name(qc_config_scalar(m)) == QS_MODE_POLICY;
    }
    if (!f && !only_policy && !only_compare(g))
        return qc_config_fail(c, n, QS_EFORMAT, "expected a 'formats' list");
    if (f && (st = parse_formats(c, f, probe, g))) return st;
    struct fy_node *q = qc_config_lookup(n, "quantize");
    if (q) {
        if ((st = qc_config_each(c, q, "quantize", add_quantize, g))) return st;
    } else {
        g->quantize_acts[g->n_quantize++] = 0;
    }
    if (m) {
        if ((st = qc_config_each(c, m, "modes", add_mode, g))) return st;
    } else {
        g->modes[g->n_modes++] = QS_MODE_COMPONENT;
    }
    int has_policy = 0;
    for (size_t i = 0; i < g->n_modes; i++)
        has_policy |= g->modes[i] == QS_MODE_POLICY;
    if (has_policy && !pol)
        return qc_config_fail(c, m, QS_EFORMAT,
                              "mode policy needs a 'policy' mapping of linear to format");
    if (pol && !has_policy)
        return qc_config_fail(c, pol, QS_EINVAL,
                              "'policy' applies to mode policy, and the grid has no mode policy");
    if (pol) {
        sens_data *d = data_of(g);
        if (!d) return qc_config_error(c, QS_ENOMEM, "out of memory");
        if ((st = parse_policy(c, pol, probe, g, d))) return st;
    }
    /* fuse: [qkv, gate_up], the groups whose members share one per-tensor scale (an empty
     * list: none, the default) */
    struct fy_node *fu = qc_config_lookup(n, "fuse");
    if (fu && !(fy_node_is_sequence(fu) && fy_node_sequence_item_count(fu) == 0)) {
        sens_data *d = data_of(g);
        if (!d) return qc_config_error(c, QS_ENOMEM, "out of memory");
        if ((st = qc_config_each(c, fu, "fuse", add_fuse, &d->fuse))) return st;
    }
    /* method: [rtn, gptq, ...], the axis beside formats (method.h); absent: rtn alone */
    struct fy_node *me = qc_config_lookup(n, "method");
    if (me) {
        sens_data *d = data_of(g);
        if (!d) return qc_config_error(c, QS_ENOMEM, "out of memory");
        if ((st = qc_config_each(c, me, "method", add_method, d))) return st;
        /* per-linear's linears are blocks of every model: a job applies no method to a
           linear the model does not have, so one listed there would go unused unseen */
        for (size_t i = 0; i < d->n_methods; i++) {
            const char *key;
            json_t *v;
            json_object_foreach(json_object_get(d->method_options[i], "linears"), key, v) {
                int block, kind;
                qs_block_linear_parse(key, &block, &kind);
                for (size_t k = 0; k < g->n_models; k++)
                    if (block >= g->models[k].facts.n_layers)
                        return qc_config_fail(c, linear_node(me, i, key), QS_EINVAL,
                                              "method per-linear: linear '%s': model %s has "
                                              "blocks 0..%d",
                                              key, g->models[k].name,
                                              g->models[k].facts.n_layers - 1);
            }
        }
        for (size_t i = 0; d->fuse && i < d->n_methods; i++)
            if (d->methods[i] != QS_METHOD_RTN)
                return qc_config_fail(c, me, QS_EINVAL,
                                      "method %s with fuse: a method quantizes each linear with "
                                      "its own tensor scale (fused groups are round-to-nearest "
                                      "only)",
                                      qs_method_at(d->methods[i])->name);
    }
    struct fy_node *pn = qc_config_lookup(n, "parts");
    if (pn) {
        if ((st = qc_config_each(c, pn, "parts", add_part, g))) return st;
        int kind_modes = 0;
        for (size_t i = 0; i < g->n_modes; i++)
            kind_modes |= g->modes[i] == QS_MODE_COMPONENT || g->modes[i] == QS_MODE_LEAVE_ONE_OUT;
        if (!kind_modes)
            return qc_config_fail(c, pn, QS_EINVAL,
                                  "'parts' applies to modes component and leave_one_out, and the "
                                  "grid has neither");
    } else {
        for (int k = 0; k < QS_LINEAR_KINDS; k++)
            g->parts[g->n_parts++] = k;
    }
    if (me && (st = check_per_linear(c, me, g))) return st;
    unsigned mask = 0;
    struct fy_node *mt = qc_config_lookup(n, "metrics");
    if (mt) {
        if ((st = qc_config_each(c, mt, "metrics", add_metric, &mask))) return st;
    } else {
        mask = (1u << QS_METRICS) - 1;
    }
    /* sqnr_rows: N, the SQNR probe on the last N rows of each linear call (absent: every row) */
    struct fy_node *sr = qc_config_lookup(n, "sqnr_rows");
    if (sr) {
        int rows;
        if ((st = qc_config_int(c, sr, "sqnr_rows", 1, 1 << 30, &rows))) return st;
        if (!(mask & QS_METRIC_SQNR))
            return qc_config_fail(c, sr, QS_EINVAL,
                                  "'sqnr_rows' samples the SQNR probe, and the grid's metrics "
                                  "have no sqnr");
        if (rows >= g->ctx)
            return qc_config_fail(c, sr, QS_EINVAL,
                                  "sqnr_rows %d is not fewer than the ctx %d of a chunk: leave it "
                                  "out to measure every row",
                                  rows, g->ctx);
        sens_data *d = data_of(g);
        if (!d) return qc_config_error(c, QS_ENOMEM, "out of memory");
        d->sqnr_rows = rows;
    }
    json_t *arr = json_array();
    for (unsigned i = 0; arr && i < QS_METRICS; i++)
        if (mask & (1u << i)) json_array_append_new(arr, json_string(qs_metric_names[i]));
    g->metrics_json = arr ? json_dumps(arr, JSON_COMPACT) : NULL;
    json_decref(arr);
    return g->metrics_json ? QS_OK : qc_config_error(c, QS_ENOMEM, "out of memory");
}

qs_status qc_grid_sensitivity_parse_body(qc_config *c, struct fy_node *root,
                                         const qc_grid_probe *probe, qc_grid *g) {
    struct fy_node *ds = qc_config_lookup(root, "dataset");
    qs_status st = qc_grid_parse_dataset(c, ds, probe, g);
    if (!st) st = parse_section(c, qc_config_lookup(root, "sensitivity"), probe, g);
    if (st) return st;
    for (size_t i = 0; g->dataset_text && i < g->n_models; i++)
        if (g->models[i].ref_path) /* the two models' tokenizers would give two datasets */
            return qc_config_fail(c, ds, QS_EINVAL,
                                  "model %s has compare_to: give a token file (dataset.tokens, "
                                  "qsweep tokenize), which both models read alike",
                                  g->models[i].name);
    /* calibration: what the calibrated methods of the grid read; none without one */
    sens_data *d = g->kind_data;
    struct fy_node *cal = qc_config_lookup(ds, "calibration");
    int calibrated = 0;
    for (size_t i = 0; d && i < d->n_methods; i++)
        calibrated |= qs_method_at(d->methods[i])->calibrated;
    if (calibrated && !cal) {
        size_t first = 0;
        while (!qs_method_at(d->methods[first])->calibrated)
            first++;
        return qc_config_fail(c, ds, QS_EFORMAT,
                              "method %s needs calibration data: add dataset.calibration "
                              "{chunks: N} (the last N chunks of the token file, never scored) "
                              "or {chunks: N, tokens: FILE}",
                              qs_method_at(d->methods[first])->name);
    }
    if (cal && !calibrated)
        return qc_config_fail(c, cal, QS_EINVAL,
                              "dataset.calibration: no method of the grid is calibrated (gptq, "
                              "mr-gptq, smoothquant)");
    return cal ? parse_calibration(c, cal, probe, g, d) : QS_OK;
}

static qs_status parse(qc_config *c, struct fy_node *root, const qc_grid_probe *probe, qc_grid *g) {
    qs_status st = qc_grid_parse_models(c, qc_config_lookup(root, "models"), probe, g);
    return st ? st : qc_grid_sensitivity_parse_body(c, root, probe, g);
}

/* The fields every job of model m shares. Strings are borrowed from g and dpath (the spec's
 * dataset path: the token file, or "text:" and the text file), not freed. */
static void base_spec(const qc_grid *g, const qc_grid_model *m, const char *dpath,
                      qs_sensitivity_spec *s) {
    memset(s, 0, sizeof *s);
    s->model.path = m->path;
    memcpy(s->model.digest, m->facts.digest, sizeof s->model.digest);
    memcpy(s->model.trained_by, m->trained_by, sizeof s->model.trained_by);
    /* a text dataset is tokenized by each model's tokenizer: its own ids, digest and BOS */
    s->dataset.path = (char *)dpath;
    memcpy(s->dataset.digest, m->dataset.digest, sizeof s->dataset.digest);
    s->dataset.bos = m->bos_id >= 0;
    s->dataset.bos_id = m->bos_id >= 0 ? m->bos_id : 0;
    s->dataset.ctx = g->ctx;
    s->dataset.max_chunks = g->max_chunks;
    snprintf(s->numerics_version, sizeof s->numerics_version, "%s", QS_NUMERICS_VERSION);
    s->block = s->part = -1;
    s->loo_of = QS_PARTS_BLOCK_LINEARS;
    s->tied = m->facts.tied_embeddings != 0;
    s->resources = g->resources;
}

/* Number of jobs mode has for a model of n_layers blocks and the grid's parts; job i's block
 * and part in *s. */
static size_t mode_jobs(const qc_grid *g, qs_mode mode, int n_layers) {
    if (mode == QS_MODE_POLICY) return 0; /* one per model and quantize: expand_policy */
    if (mode == QS_MODE_COMPONENT || mode == QS_MODE_LEAVE_ONE_OUT) return g->n_parts;
    if (qs_mode_has_kind(mode)) return (size_t)QS_LINEAR_KINDS * (size_t)n_layers;
    return (size_t)n_layers;
}

static void job_part(const qc_grid *g, qs_mode mode, size_t i, qs_sensitivity_spec *s) {
    s->block = s->part = -1;
    if (mode == QS_MODE_COMPONENT || mode == QS_MODE_LEAVE_ONE_OUT) {
        s->part = g->parts[i];
    } else if (qs_mode_has_kind(mode)) {
        s->block = (int)(i / QS_LINEAR_KINDS);
        s->part = (int)(i % QS_LINEAR_KINDS);
    } else {
        s->block = (int)i;
    }
}

/* The node of linear key in the options of the i-th entry of the `method` sequence me, me when
 * the entry has no such node (an override's value). */
static struct fy_node *linear_node(struct fy_node *me, size_t i, const char *key) {
    struct fy_node *entry =
        fy_node_is_sequence(me) ? fy_node_sequence_get_by_index(me, (int)i) : me;
    struct fy_node *lin = qc_config_lookup(qc_config_lookup(entry, "options"), "linears");
    void *it = NULL;
    struct fy_node_pair *pair;
    while (lin && fy_node_is_mapping(lin) && (pair = fy_node_mapping_iterate(lin, &it))) {
        const char *k = qc_config_scalar(fy_node_pair_key(pair));
        if (k && !strcmp(k, key)) return fy_node_pair_key(pair);
    }
    return entry ? entry : me;
}

/* Every linear a per-linear method of the grid names is one each of its jobs quantizes
 * (kinds/method.h): refused at the linear's line, naming the job that leaves it unquantized. */
static qs_status check_per_linear(qc_config *c, struct fy_node *me, const qc_grid *g) {
    const sens_data *d = g->kind_data;
    unsigned loo_of = 0;
    for (size_t i = 0; i < g->n_parts; i++)
        loo_of |= 1u << g->parts[i];
    for (size_t i = 0; d && i < d->n_methods; i++) {
        const char *key;
        json_t *v;
        json_object_foreach(json_object_get(d->method_options[i], "linears"), key, v) {
            for (size_t oi = 0; oi < g->n_modes; oi++) {
                qs_mode mode = g->modes[oi];
                if (mode == QS_MODE_POLICY) {
                    if (!qs_method_linear_quantized(key, mode, -1, -1, 0, d->policy))
                        return qc_config_fail(c, linear_node(me, i, key), QS_EINVAL,
                                              "method per-linear: linear '%s' is not quantized "
                                              "by the policy-mode job: its policy does not list "
                                              "it (a bf16 linear takes no method)",
                                              key);
                    continue;
                }
                for (size_t mi = 0; mi < g->n_models; mi++)
                    for (size_t pi = 0; pi < mode_jobs(g, mode, g->models[mi].facts.n_layers);
                         pi++) {
                        qs_sensitivity_spec s = {.eval = true, .mode = mode};
                        job_part(g, mode, pi, &s);
                        if (qs_method_linear_quantized(key, mode, s.block, s.part, loo_of, NULL))
                            continue;
                        char part[64];
                        qs_sensitivity_part_text(&s, part, sizeof part);
                        return qc_config_fail(c, linear_node(me, i, key), QS_EINVAL,
                                              "method per-linear: linear '%s' is not quantized "
                                              "by the %s-mode job of part %s (model %s), which "
                                              "would leave its method unused: a per-linear "
                                              "method names only linears every job of the grid "
                                              "quantizes (mode policy measures a plan)",
                                              key, qs_mode_name(mode), part, g->models[mi].name);
                    }
            }
        }
    }
    return QS_OK;
}

/* Method `me` of the grid's axis on s (borrowed from d), with the calibration when the method
 * takes one; rtn when the grid has no axis. */
static void set_method(const sens_data *d, size_t me, qs_sensitivity_spec *s) {
    s->method = QS_METHOD_RTN;
    s->method_options = NULL;
    s->calib_chunks = 0;
    s->calib_path = NULL;
    s->calib_digest[0] = 0;
    if (!d || !d->n_methods) return;
    s->method = d->methods[me];
    s->method_options = d->method_options[me];
    if (qs_method_at(s->method)->calibrated) {
        s->calib_chunks = d->calib_chunks;
        s->calib_path = d->calib_path;
        memcpy(s->calib_digest, d->calib_digest, sizeof s->calib_digest);
    }
}

/* Encodes s and appends it (the spec's borrowed strings stay g's). */
static qs_status add(qc_job_list *out, qs_sensitivity_spec *s, long depends_on, size_t model,
                     int mode, const char *label, long *index, qs_error *err) {
    json_t *spec = NULL;
    qs_status st = qs_sensitivity_encode(s, &spec, err);
    json_decref(s->format_options);
    s->format_options = NULL;
    if (st) return st;
    return qc_job_list_add(out, spec, s->eval ? "eval" : "baseline", depends_on, model, mode, label,
                           index, err);
}

/* A model with compare_to: the reference's baseline, then one compare job of the model against
 * it (kinds/sensitivity.h reference_model: mode policy with the empty map, nothing quantized
 * further). The baseline's spec is the reference's as any grid listing it writes it. */
static qs_status expand_compare(const qc_grid *g, const qc_grid_model *m, size_t mi,
                                const char *dpath, unsigned metrics, qc_job_list *out,
                                qs_error *err) {
    qc_grid_model ref = *m;
    ref.path = m->ref_path;
    ref.facts = m->ref_facts;
    qs_sensitivity_spec s;
    base_spec(g, &ref, dpath, &s);
    s.format = "bf16";
    s.format_options = json_object();
    s.metrics = QS_METRIC_PPL;
    char label[512];
    snprintf(label, sizeof label, "%s baseline", m->ref_name);
    long base = -1;
    qs_status st = add(out, &s, -1, mi, -1, label, &base, err);
    json_t *empty = json_object();
    if (!st && !empty) st = qs_error_set(err, QS_ENOMEM, "out of memory");
    if (!st) {
        base_spec(g, m, dpath, &s);
        s.eval = true;
        s.reference.path = m->ref_path; /* borrowed */
        memcpy(s.reference.digest, m->ref_facts.digest, sizeof s.reference.digest);
        s.format = QS_POLICY_FORMAT;
        s.format_options = json_object();
        s.policy = empty; /* borrowed */
        s.mode = QS_MODE_POLICY;
        s.metrics = metrics;
        snprintf(label, sizeof label, "%s compare_to %s", m->name, m->ref_name);
        st = s.format_options ? add(out, &s, base, mi, (int)QS_MODE_POLICY, label, NULL, err)
                              : qs_error_set(err, QS_ENOMEM, "out of memory");
    }
    json_decref(empty);
    return st;
}

static qs_status expand(const qc_grid *g, qc_job_list *out, qs_error *err) {
    qs_status st = QS_OK;
    unsigned loo_of = 0;
    for (size_t i = 0; i < g->n_parts; i++)
        loo_of |= 1u << g->parts[i];
    unsigned metrics = 0;
    json_t *mj = json_loads(g->metrics_json, 0, NULL);
    size_t i;
    json_t *v;
    json_array_foreach(mj, i, v) metrics |= qs_metric_bit(json_string_value(v));
    json_decref(mj);
    size_t dlen = strlen(QS_DATASET_TEXT_PREFIX) + strlen(g->dataset_path) + 1;
    char *dpath = malloc(dlen);
    if (!dpath) return qs_error_set(err, QS_ENOMEM, "out of memory");
    snprintf(dpath, dlen, "%s%s", g->dataset_text ? QS_DATASET_TEXT_PREFIX : "", g->dataset_path);
    const sens_data *d = g->kind_data;
    unsigned fuse = d ? d->fuse : 0;
    /* the method axis: rtn alone (named nowhere) when the grid has none */
    size_t n_methods = d && d->n_methods ? d->n_methods : 1;
    for (size_t mi = 0; !st && mi < g->n_models; mi++) {
        const qc_grid_model *m = &g->models[mi];
        if (m->ref_path) {
            st = expand_compare(g, m, mi, dpath, metrics, out, err);
            continue;
        }
        qs_sensitivity_spec s;
        base_spec(g, m, dpath, &s);
        s.format = "bf16";
        s.format_options = json_object();
        s.metrics = QS_METRIC_PPL;
        char label[256];
        snprintf(label, sizeof label, "%s baseline", m->name);
        long base = -1;
        st = add(out, &s, -1, mi, -1, label, &base, err);
        for (size_t fi = 0; !st && fi < g->n_formats; fi++)
            for (size_t me = 0; !st && me < n_methods; me++)
                for (size_t qi = 0; !st && qi < g->n_quantize; qi++)
                    for (size_t oi = 0; !st && oi < g->n_modes; oi++) {
                        qs_mode mode = g->modes[oi];
                        size_t nj = mode_jobs(g, mode, m->facts.n_layers);
                        for (size_t pi = 0; !st && pi < nj; pi++) {
                            base_spec(g, m, dpath, &s);
                            s.eval = true;
                            s.format = g->formats[fi].name;
                            s.format_options = json_loads(g->formats[fi].options_json, 0, NULL);
                            s.quantize_acts = g->quantize_acts[qi];
                            s.mode = mode;
                            s.metrics = metrics;
                            job_part(g, mode, pi, &s);
                            s.fuse = fuse;
                            s.sqnr_rows = d ? d->sqnr_rows : 0;
                            set_method(d, me, &s);
                            if (mode == QS_MODE_LEAVE_ONE_OUT) s.loo_of = loo_of;
                            if (!s.format_options) {
                                st = qs_error_set(err, QS_ENOMEM, "out of memory");
                                break;
                            }
                            char part[64];
                            qs_sensitivity_part_text(&s, part, sizeof part);
                            snprintf(label, sizeof label, "%s %s %s %s %s%s%s%s%s", m->name,
                                     g->formats[fi].name, qs_quantize_name(s.quantize_acts),
                                     qs_mode_name(mode), part, fuse ? " fuse " : "",
                                     qs_fuse_text(fuse), s.method ? " method " : "",
                                     s.method ? qs_method_at(s.method)->name : "");
                            st = add(out, &s, base, mi, (int)mode, label, NULL, err);
                        }
                    }
        for (size_t me = 0; !st && d && d->policy && me < n_methods; me++)
            for (size_t qi = 0; !st && qi < g->n_quantize; qi++) {
                base_spec(g, m, dpath, &s);
                set_method(d, me, &s);
                s.eval = true;
                s.format = QS_POLICY_FORMAT;
                s.format_options = json_deep_copy(d->options);
                s.policy = d->policy; /* borrowed */
                s.quantize_acts = g->quantize_acts[qi];
                s.mode = QS_MODE_POLICY;
                s.metrics = metrics;
                s.fuse = fuse;
                s.sqnr_rows = d->sqnr_rows;
                if (!s.format_options) {
                    st = qs_error_set(err, QS_ENOMEM, "out of memory");
                    break;
                }
                char part[64];
                qs_sensitivity_part_text(&s, part, sizeof part);
                snprintf(label, sizeof label, "%s policy %s %s (%zu linears)%s%s", m->name,
                         qs_quantize_name(s.quantize_acts), part, json_object_size(d->policy),
                         s.method ? " method " : "", s.method ? qs_method_at(s.method)->name : "");
                st = add(out, &s, base, mi, (int)QS_MODE_POLICY, label, NULL, err);
            }
    }
    free(dpath);
    return st;
}

static const char *const sensitivity_keys[] = {"models", "dataset", "sensitivity", NULL};

const qc_grid_kind qc_grid_kind_sensitivity = {
    .name = "sensitivity",
    .keys = sensitivity_keys,
    .parse = parse,
    .expand = expand,
    .free_data = free_data,
};
