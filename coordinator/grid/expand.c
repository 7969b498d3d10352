/* Grid expansion into jobs and job keys (grid.h; DESIGN.md "Flow of one sweep", step 1). */
#include "grid.h"

#include <jansson.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* job_key of a spec object (see qc_job_key); spec itself is left as it was. */
static qs_status key_of(const json_t *spec, char hex[65], qs_error *err) {
    json_t *copy = json_deep_copy(spec);
    json_t *m = json_object_get(copy, "model"), *d = json_object_get(copy, "dataset");
    if (json_is_object(m)) json_object_del(m, "path");
    if (json_is_object(d)) json_object_del(d, "path");
    char *canon = copy ? json_dumps(copy, JSON_SORT_KEYS | JSON_COMPACT) : NULL;
    json_decref(copy);
    if (!canon) return qs_error_set(err, QS_ENOMEM, "out of memory");
    if (sodium_init() < 0) {
        free(canon);
        return qs_error_set(err, QS_EINVAL, "libsodium failed to initialise");
    }
    unsigned char h[32];
    crypto_generichash(h, sizeof h, (const unsigned char *)canon, strlen(canon), NULL, 0);
    sodium_bin2hex(hex, 65, h, sizeof h);
    free(canon);
    return QS_OK;
}

qs_status qc_job_key(const char *spec_json, char hex[65], qs_error *err) {
    json_error_t je;
    json_t *spec = json_loads(spec_json, 0, &je);
    if (!spec || !json_is_object(spec)) {
        json_decref(spec);
        return qs_error_set(err, QS_EFORMAT, "job spec: line %d column %d: %s", je.line, je.column,
                            spec ? "expected a JSON object" : je.text);
    }
    qs_status st = key_of(spec, hex, err);
    json_decref(spec);
    return st;
}

/* Growing job list under construction. */
typedef struct builder {
    qc_job_list *list;
    size_t cap;
    qs_error *err;
} builder;

/* Serialises spec, keys it and appends it; *index receives its position. Takes ownership of
 * spec. */
static qs_status add_job(builder *b, json_t *spec, const char *kind, long depends_on, size_t model,
                         int mode, const char *label, long *index) {
    char key[65];
    char *text = spec ? json_dumps(spec, JSON_SORT_KEYS | JSON_COMPACT) : NULL;
    qs_status st =
        text ? key_of(spec, key, b->err) : qs_error_set(b->err, QS_ENOMEM, "out of memory");
    json_decref(spec);
    if (st) {
        free(text);
        return st;
    }
    if (b->list->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 64;
        qc_job *j = realloc(b->list->jobs, cap * sizeof *j);
        if (!j) {
            free(text);
            return qs_error_set(b->err, QS_ENOMEM, "out of memory");
        }
        b->list->jobs = j;
        b->cap = cap;
    }
    qc_job *j = &b->list->jobs[b->list->n];
    memcpy(j->key, key, sizeof key);
    j->spec = text;
    j->kind = kind;
    j->depends_on = depends_on;
    j->model = model;
    j->mode = mode;
    j->label = strdup(label);
    if (!j->label) {
        free(text);
        return qs_error_set(b->err, QS_ENOMEM, "out of memory");
    }
    *index = (long)b->list->n++;
    return QS_OK;
}

/* The fields every job of one model shares: kind, model, dataset, numerics version. */
static json_t *base_spec(const qc_grid *g, const qc_grid_model *m, const char *kind) {
    return json_pack("{s:s, s:{s:s, s:s}, s:{s:s, s:s, s:i, s:i}, s:s}", "kind", kind, "model",
                     "path", m->path, "digest", m->facts.digest, "dataset", "path", g->dataset_path,
                     "digest", g->dataset.digest, "ctx", g->ctx, "max_chunks", g->max_chunks,
                     "numerics_version", QC_NUMERICS_VERSION);
}

/* Number of parts a mode has for a model of n_layers blocks, and the name of part i. */
static size_t mode_parts(qc_mode mode, int n_layers) {
    switch (mode) {
    case QC_MODE_COMPONENT:
    case QC_MODE_LEAVE_ONE_OUT:
        return 7;
    case QC_MODE_BLOCK:
    case QC_MODE_CUMULATIVE:
        return (size_t)n_layers;
    case QC_MODE_LAYER:
        return 7 * (size_t)n_layers;
    default:
        return 0;
    }
}

static void part_name(qc_mode mode, size_t i, char *buf, size_t len) {
    switch (mode) {
    case QC_MODE_COMPONENT:
    case QC_MODE_LEAVE_ONE_OUT:
        snprintf(buf, len, "%s", qc_linear_kinds[i]);
        break;
    case QC_MODE_LAYER:
        snprintf(buf, len, "%zu.%s", i / 7, qc_linear_kinds[i % 7]);
        break;
    default:
        snprintf(buf, len, "%zu", i);
        break;
    }
}

qs_status qc_grid_expand(const qc_grid *g, qc_job_list *out, qs_error *err) {
    if (!g || !out) return qs_error_set(err, QS_EINVAL, "qc_grid_expand: NULL argument");
    memset(out, 0, sizeof *out);
    builder b = {.list = out, .err = err};
    qs_status st = QS_OK;
    json_t *metrics = json_loads(g->metrics_json, 0, NULL);
    if (!metrics) return qs_error_set(err, QS_ENOMEM, "out of memory");
    for (size_t mi = 0; !st && mi < g->n_models; mi++) {
        const qc_grid_model *m = &g->models[mi];
        json_t *spec = base_spec(g, m, "baseline");
        if (spec) {
            json_object_set_new(spec, "format", json_string("bf16"));
            json_object_set_new(spec, "format_options", json_object());
            json_object_set_new(spec, "quantize", json_null());
            json_object_set_new(spec, "mode", json_null());
            json_object_set_new(spec, "part", json_null());
            json_object_set_new(spec, "metrics", json_pack("[s]", "ppl"));
        }
        char label[256];
        snprintf(label, sizeof label, "%s baseline", m->name);
        long base = -1;
        st = add_job(&b, spec, "baseline", -1, mi, -1, label, &base);
        for (size_t fi = 0; !st && fi < g->n_formats; fi++)
            for (size_t qi = 0; !st && qi < g->n_quantize; qi++)
                for (size_t oi = 0; !st && oi < g->n_modes; oi++) {
                    qc_mode mode = g->modes[oi];
                    const char *quant = g->quantize_acts[qi] ? "weights+activations" : "weights";
                    size_t np = mode_parts(mode, m->facts.n_layers);
                    for (size_t pi = 0; !st && pi < np; pi++) {
                        char part[64];
                        part_name(mode, pi, part, sizeof part);
                        spec = base_spec(g, m, "eval");
                        if (spec) {
                            json_object_set_new(spec, "format", json_string(g->formats[fi].name));
                            json_object_set_new(spec, "format_options",
                                                json_loads(g->formats[fi].options_json, 0, NULL));
                            json_object_set_new(spec, "quantize", json_string(quant));
                            json_object_set_new(spec, "mode", json_string(qc_mode_name(mode)));
                            json_object_set_new(spec, "part", json_string(part));
                            json_object_set(spec, "metrics", metrics);
                        }
                        snprintf(label, sizeof label, "%s %s %s %s %s", m->name,
                                 g->formats[fi].name, quant, qc_mode_name(mode), part);
                        long idx;
                        st = add_job(&b, spec, "eval", base, mi, (int)mode, label, &idx);
                    }
                }
    }
    json_decref(metrics);
    if (st) qc_job_list_free(out);
    return st;
}

void qc_job_list_free(qc_job_list *list) {
    if (!list) return;
    for (size_t i = 0; i < list->n; i++) {
        free(list->jobs[i].spec);
        free(list->jobs[i].label);
    }
    free(list->jobs);
    list->jobs = NULL;
    list->n = 0;
}
