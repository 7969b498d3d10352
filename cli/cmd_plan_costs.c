/* What a sensitivity sweep measured, as `qsweep plan` reads it (cmd_plan_parts.h).
 *
 * Costs come from v_sensitivity (schema/002_views.sql), round-to-nearest jobs only (a job of
 * another method, kinds/method.h, names it in its spec): the mean KL divergence (kl_mean) or
 * the perplexity increase (ppl: value - baseline) of the eval job that quantized only that
 * linear (layer mode, part "B.kind") or only that kind in every block (component mode, part
 * "kind"). BF16 is the reference: cost 0. A measured cost below 0 (perplexity noise, KL
 * rounding) counts as 0, as bf16's does, and is reported: no format beats the reference.
 * Weight counts come from the model's config (worker/checkpoint/checkpoint.h), checked against
 * the digest the sweep recorded, or from the engine's table for a synthetic model
 * (worker/engine/synthetic.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd_plan_parts.h"
#include "method.h"
#include "method_label.h"
#include "synthetic.h"
#include "trained_names.h"

const char *const qsweep_plan_kinds[7] = {"q", "k", "v", "o", "gate", "up", "down"};
const int qsweep_plan_groups[4][4] = {{0, 1, 2, -1}, {3, -1}, {4, 5, -1}, {6, -1}};
const char *const qsweep_plan_group_names[4] = {"qkv", "o", "gate_up", "down"};

double *qsweep_plan_cost_at(qsweep_plan_input *in, int block, int kind, size_t f) {
    return &in->cost[((size_t)(block < 0 ? 0 : block) * 7 + (size_t)kind) * in->n_formats + f];
}

static int kind_index(const char *k) {
    for (int i = 0; i < 7; i++)
        if (!strcmp(qsweep_plan_kinds[i], k)) return i;
    return -1;
}

uint64_t qsweep_plan_kind_weights(const qw_config *c, int k) {
    uint64_t d = (uint64_t)c->dim, q = (uint64_t)c->n_heads * (uint64_t)c->head_dim,
             kv = (uint64_t)c->n_kv_heads * (uint64_t)c->head_dim, h = (uint64_t)c->hidden_dim;
    switch (k) {
    case 0:
    case 3:
        return q * d;
    case 1:
    case 2:
        return kv * d;
    default:
        return h * d;
    }
}

/* Every method's jobs but per-linear's (a plan measured whole, not a cost), with the
 * method's options, which name the candidate with it (qs_method_label), on the plan's numerics
 * path ($3), a perplexity delta against a baseline of that path too. Within a format,
 * rtn sorts first: among candidates of equal cost and bits the planner keeps the first. */
static const char *const PLAN_SQL =
    "SELECT s.model, s.format, s.quantize, s.mode, s.part,\n"
    "       CASE WHEN $2 = 'ppl' THEN s.delta ELSE s.value END AS cost, s.model_digest,\n"
    "       COALESCE(j.spec ->> 'method', 'rtn') AS method, j.spec ->> 'method_options'\n"
    "FROM v_sensitivity s JOIN jobs j ON j.id = s.job_id\n"
    "WHERE s.experiment = $1 AND s.mode IN ('layer', 'component')\n"
    "  AND s.metric = CASE WHEN $2 = 'ppl' THEN 'ppl' ELSE $2 END\n"
    "  AND ($3 = '' OR EXISTS (SELECT 1 FROM v_numerics_path np WHERE np.job_id = s.job_id\n"
    "       AND COALESCE(np.worker_path, np.path) = $3))\n"
    "  AND ($3 = '' OR $2 <> 'ppl' OR s.baseline_job_id IS NULL OR EXISTS (SELECT 1\n"
    "       FROM v_numerics_path nb WHERE nb.job_id = s.baseline_job_id\n"
    "       AND COALESCE(nb.worker_path, nb.path) = $3))\n"
    "  AND COALESCE(j.spec ->> 'method', 'rtn') <> 'per-linear'\n"
    "ORDER BY s.mode DESC, s.model, s.quantize, s.format, j.spec ? 'method', 8,\n"
    "         coalesce(j.spec -> 'method_options' ? 'scale_search', false), 9, s.part";

/* The candidate label of each row of PLAN_SQL: its setting's label among the settings the
 * sweep measured (kinds/method_label.h qs_method_setting_label: gptq+damp=0.1 beside
 * gptq+damp=0.01), and in *options {label: that setting's method_options, null without}. NULL when
 * out of memory. */
typedef char plan_label[64];

static plan_label *row_labels(PGresult *r, json_t **options) {
    int n = PQntuples(r);
    plan_label *l = malloc((size_t)(n ? n : 1) * sizeof *l);
    int *setting = malloc((size_t)(n ? n : 1) * sizeof *setting); /* row -> its distinct one */
    qs_method_setting *all = malloc((size_t)(n ? n : 1) * sizeof *all);
    json_t **mo = calloc((size_t)(n ? n : 1), sizeof *mo);
    *options = json_object();
    size_t k = 0; /* distinct settings: the first row of each (method, options text) */
    int *first = malloc((size_t)(n ? n : 1) * sizeof *first);
    int ok = l && setting && all && mo && first && *options;
    for (int i = 0; ok && i < n; i++) {
        size_t j = 0;
        while (j < k && (strcmp(PQgetvalue(r, first[j], 7), PQgetvalue(r, i, 7)) ||
                         strcmp(PQgetvalue(r, first[j], 8), PQgetvalue(r, i, 8)) ||
                         PQgetisnull(r, first[j], 8) != PQgetisnull(r, i, 8)))
            j++;
        if (j == k) {
            first[k] = i;
            mo[k] = PQgetisnull(r, i, 8) ? NULL : json_loads(PQgetvalue(r, i, 8), 0, NULL);
            all[k] = (qs_method_setting){qs_method_by_name(PQgetvalue(r, i, 7)), mo[k]};
            k++;
        }
        setting[i] = (int)j;
    }
    for (size_t j = 0; ok && j < k; j++) {
        plan_label label;
        qs_method_setting_label(&all[j], all, k, label, sizeof label);
        json_object_set_new(*options, label, mo[j] ? json_deep_copy(mo[j]) : json_null());
        for (int i = 0; i < n; i++)
            if (setting[i] == (int)j) snprintf(l[i], sizeof l[i], "%s", label);
    }
    for (size_t j = 0; mo && j < k; j++)
        json_decref(mo[j]);
    free(mo);
    free(all);
    free(first);
    free(setting);
    if (!ok) {
        free(l);
        json_decref(*options);
        *options = NULL;
        return NULL;
    }
    return l;
}

/* The labels of the settings of label base (the first len bytes of a setting label) among
 * labels [0, n), ", "-separated into out; returns how many. */
static int settings_of(const plan_label *labels, int n, const char *base, size_t len, char *out,
                       size_t cap) {
    int count = 0;
    out[0] = 0;
    for (int i = 0; i < n; i++) {
        bool search;
        size_t ll;
        if (qs_method_by_setting_label(labels[i], &search, &ll) < 0 || ll != len ||
            strncmp(labels[i], base, len) || !labels[i][len])
            continue;
        int seen = 0;
        for (int j = 0; j < i && !seen; j++)
            seen = !strcmp(labels[j], labels[i]);
        if (seen) continue;
        size_t used = strlen(out);
        snprintf(out + used, cap - used, "%s%s", count ? ", " : "", labels[i]);
        count++;
    }
    return count;
}

/* Index of candidate (method, format) in *in, n_formats when absent. */
static size_t candidate_index(const qsweep_plan_input *in, const char *method, const char *format) {
    size_t f = 0;
    while (f < in->n_formats && (strcmp(in->formats[f], format) || strcmp(in->methods[f], method)))
        f++;
    return f;
}

/* Appends candidate (method, format) unless present or the table is full (returns 0 then). */
static int add_candidate(qsweep_plan_input *in, const char *method, const char *format) {
    if (candidate_index(in, method, format) < in->n_formats) return 1;
    if (in->n_formats == QSWEEP_PLAN_MAX_FORMATS) return 0;
    snprintf(in->formats[in->n_formats], sizeof in->formats[0], "%s", format);
    snprintf(in->methods[in->n_formats++], sizeof in->methods[0], "%s", method);
    in->any_method |= strcmp(method, "rtn") != 0;
    return 1;
}

/* Whether entry p[0, len) of --methods (canonical setting labels) names the candidate of
 * setting label `label`, whose options are options[label] (row_labels): the label itself, or,
 * when the entry spells out options, a setting they all agree with
 * (kinds/method_label.h qs_method_setting_named: "gptq+damp=0.01" names the one gptq setting
 * measured, labelled "gptq", when its damp is 0.01). */
static int names_candidate(const char *p, size_t len, const char *label, const json_t *options) {
    if (strlen(label) == len && !strncmp(p, label, len)) return 1;
    if (!memchr(p, '=', len)) return 0; /* a bare label names its own candidates only */
    bool search;
    size_t ll;
    qs_method_setting set = {qs_method_by_setting_label(label, &search, &ll),
                             json_object_get(options, label)};
    if (json_is_null(set.options)) set.options = NULL;
    return set.method >= 0 && qs_method_setting_named(p, len, &set);
}

/* Whether a comma-separated list (NULL: every name) names the candidate of setting label
 * `label` (names_candidate). */
static int listed(const char *list, const char *label, const json_t *options) {
    if (!list) return 1;
    for (const char *p = list; *p; p += strcspn(p, ","), p += *p == ',')
        if (names_candidate(p, strcspn(p, ","), label, options)) return 1;
    return 0;
}

/* The config of the swept model at path: a synthetic shape from the engine's table, else the
 * checkpoint found at path, which must still be the one swept (its digest, computed as the grid
 * probe does, equal to the spec's). Errors: QS_EINVAL (another model at path, an unknown
 * synthetic shape), checkpoint errors. */
static qs_status swept_model_config(const char *path, const char *shown, const char *digest,
                                    qw_config *out, qs_error *err) {
    if (qw_synthetic_is(path)) {
        const qw_synthetic_shape *shape = NULL;
        uint64_t seed = 0;
        qs_status st = qw_synthetic_parse(path, &shape, &seed, err);
        if (!st) *out = shape->cfg;
        return st;
    }
    qw_checkpoint *ck = NULL;
    char found[65] = {0};
    qs_status st = qw_checkpoint_open(path, &ck, err);
    if (!st) st = qw_checkpoint_digest(ck, found, err);
    if (!st && strcmp(found, digest))
        st = qs_error_set(err, QS_EINVAL,
                          "%s is not the model the sweep measured: its digest is %s, the "
                          "sweep's %s",
                          shown, found, digest);
    if (!st) *out = *qw_checkpoint_config(ck);
    qw_checkpoint_close(ck);
    return st;
}

qs_status qsweep_plan_load_costs(PGconn *c, const qsweep_plan_opts *o, qsweep_plan_input *in,
                                 qs_error *err) {
    const char *params[3] = {o->experiment, o->objective, in->path};
    PGresult *r = PQexecParams(c, PLAN_SQL, 3, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        qs_status st = qs_error_set(err, QS_EDB, "plan: %s", PQerrorMessage(c));
        PQclear(r);
        return st;
    }
    int n = PQntuples(r);
    qs_status st = QS_OK;
    plan_label *label = row_labels(r, &in->method_options);
    if (!label) st = qs_error_set(err, QS_ENOMEM, "plan: %d rows", n);
    const char *exists_params[1] = {o->experiment};
    /* the experiment, and how many of its jobs are training runs */
    PGresult *e = PQexecParams(c,
                               "SELECT (SELECT count(*) FROM experiment_jobs ej JOIN jobs j "
                               "ON j.id = ej.job WHERE ej.experiment = x.id AND j.kind = 'train') "
                               "FROM experiments x WHERE x.name = $1",
                               1, NULL, exists_params, NULL, NULL, 0);
    if (PQresultStatus(e) != PGRES_TUPLES_OK)
        st = qs_error_set(err, QS_EDB, "plan: %s", PQerrorMessage(c));
    else if (PQntuples(e) == 0)
        st = qs_error_set(err, QS_ENOTFOUND, "no experiment named '%s'", o->experiment);
    else if (n == 0 && atol(PQgetvalue(e, 0, 0)) > 0)
        st = qs_error_set(err, QS_EINVAL,
                          "'%s' is a training experiment: plan reads a sensitivity sweep in "
                          "layer or component mode",
                          o->experiment);
    PQclear(e);
    if (!st && n == 0)
        st = qs_error_set(err, QS_ENOTFOUND,
                          "experiment '%s' has no %s results in layer or component mode",
                          o->experiment, o->objective);
    /* the rows of the first mode (layer sorts before component), model and quantize */
    const char *mode = n ? PQgetvalue(r, 0, 3) : "";
    const char *model = NULL, *quant = NULL, *digest = "";
    /* a pipeline's trained model goes by its pipeline name (trained_names.h), in the errors
       and in --model, rather than by its folder */
    qsweep_trained_names names = {0};
    if (!st && n) st = qsweep_trained_names_load(c, o->experiment, &names, err);
    for (int i = 0; !st && i < n; i++) {
        if (strcmp(PQgetvalue(r, i, 3), mode)) continue;
        const char *m = PQgetvalue(r, i, 0), *q = PQgetvalue(r, i, 2);
        const char *base = strrchr(m, '/') ? strrchr(m, '/') + 1 : m;
        const char *trained = qsweep_trained_name_by_path(&names, m);
        if (o->model && strcmp(o->model, m) && strcmp(o->model, base) &&
            !(trained && !strcmp(o->model, trained)))
            continue;
        if (o->quantize && strcmp(o->quantize, q)) continue;
        if (!model) {
            model = m;
            digest = PQgetvalue(r, i, 6);
        }
        if (!quant) quant = q;
        if (strcmp(model, m)) {
            const char *a = qsweep_trained_name_by_path(&names, model);
            st = qs_error_set(err, QS_EINVAL,
                              "the sweep has several models (%s, %s): choose one "
                              "with --model",
                              a ? a : model, trained ? trained : m);
        } else if (strcmp(quant, q))
            st = qs_error_set(err, QS_EINVAL,
                              "the sweep quantizes %s and %s: choose one with "
                              "--quantize",
                              quant, q);
    }
    if (!st && !model)
        st =
            qs_error_set(err, QS_ENOTFOUND, "no %s-mode results for that --model/--quantize", mode);
    /* candidates: the formats asked for (else those measured, and bf16), each by rtn and by
       every other method measured on it (that --methods lets through) */
    if (!st && o->formats) {
        char buf[512];
        snprintf(buf, sizeof buf, "%s", o->formats);
        for (char *save = NULL, *t = strtok_r(buf, ",", &save); !st && t;
             t = strtok_r(NULL, ",", &save)) {
            if (in->n_formats == QSWEEP_PLAN_MAX_FORMATS)
                st = qs_error_set(err, QS_EINVAL, "--formats: at most %d", QSWEEP_PLAN_MAX_FORMATS);
            else if (!qsweep_plan_quarter_bits(t))
                st = qs_error_set(err, QS_EINVAL,
                                  "--formats: %s: no bit count for that format "
                                  "(nvfp4, nvfp4_2d, mxfp4, mxfp6_e2m3, mxfp6_e3m2, mxfp8_e4m3, "
                                  "fp8_e4m3, bf16)",
                                  t);
            else {
                for (size_t k = 0; !st && k < in->n_formats; k++)
                    if (!strcmp(in->formats[k], t))
                        st = qs_error_set(err, QS_EINVAL, "--formats: %s listed twice", t);
                if (!st && (listed(o->methods, "rtn", NULL) || !strcmp(t, "bf16")))
                    add_candidate(in, "rtn", t);
                for (int i = 0; !st && i < n && strcmp(t, "bf16"); i++) {
                    const char *me = label[i];
                    if (strcmp(me, "rtn") && !strcmp(PQgetvalue(r, i, 1), t) &&
                        !strcmp(PQgetvalue(r, i, 3), mode) &&
                        listed(o->methods, me, in->method_options) && !add_candidate(in, me, t))
                        st = qs_error_set(err, QS_EINVAL,
                                          "more than %d (method, format) candidates: choose "
                                          "fewer with --methods or --formats",
                                          QSWEEP_PLAN_MAX_FORMATS);
                }
            }
        }
    } else if (!st) {
        for (int i = 0; !st && i < n; i++) {
            const char *fm = PQgetvalue(r, i, 1), *me = label[i];
            if (strcmp(PQgetvalue(r, i, 3), mode) || strcmp(PQgetvalue(r, i, 0), model) ||
                strcmp(PQgetvalue(r, i, 2), quant) || !qsweep_plan_quarter_bits(fm) ||
                !listed(o->methods, me, in->method_options))
                continue;
            /* one slot stays for bf16; past it, rtn-only sweeps keep their first formats */
            int fresh = candidate_index(in, me, fm) == in->n_formats;
            if (fresh && in->n_formats == QSWEEP_PLAN_MAX_FORMATS - 1 &&
                (in->any_method || strcmp(me, "rtn")))
                st = qs_error_set(err, QS_EINVAL,
                                  "more than %d (method, format) candidates: choose fewer with "
                                  "--methods or --formats",
                                  QSWEEP_PLAN_MAX_FORMATS - 1);
            else if (in->n_formats < QSWEEP_PLAN_MAX_FORMATS - 1)
                add_candidate(in, me, fm);
        }
        if (!st) add_candidate(in, "rtn", "bf16");
    }
    /* every method --methods names must have measured some format: else the plan would be
       bf16's alone, refused later as a budget no assignment meets */
    for (const char *p = o->methods; !st && p && *p; p += strcspn(p, ","), p += *p == ',') {
        size_t len = strcspn(p, ","), k = 0;
        while (k < in->n_formats && (strcmp(in->formats[k], "bf16") == 0 ||
                                     !names_candidate(p, len, in->methods[k], in->method_options)))
            k++;
        char settings[512];
        if (k == in->n_formats && settings_of(label, n, p, len, settings, sizeof settings) > 1)
            st = qs_error_set(err, QS_EINVAL,
                              "--methods %s: %.*s was measured with several settings: %s; name "
                              "one of them",
                              o->methods, (int)len, p, settings);
        else if (k == in->n_formats)
            st = qs_error_set(err, QS_EINVAL,
                              "--methods %s: %s has no %s-mode results of method %.*s for %s "
                              "(quantize %s) in the formats considered",
                              o->methods, o->experiment, mode, (int)len, p, model, quant);
    }
    /* a plan's grid (method per-linear) holds one value of each option: two settings of one
       label are for the user to choose between, by their setting labels */
    for (size_t f = 0; !st && f < in->n_formats; f++) {
        bool search;
        size_t len;
        qs_method_by_setting_label(in->methods[f], &search, &len);
        char chosen[512] = "";
        int among = 0;
        for (size_t g = 0; g < in->n_formats; g++) {
            size_t lg, h = 0;
            if (qs_method_by_setting_label(in->methods[g], &search, &lg) < 0 || lg != len ||
                strncmp(in->methods[g], in->methods[f], len))
                continue;
            while (h < g && strcmp(in->methods[h], in->methods[g]))
                h++;
            if (h < g) continue; /* the label of another format's candidate */
            size_t used = strlen(chosen);
            snprintf(chosen + used, sizeof chosen - used, "%s%s", among++ ? ", " : "",
                     in->methods[g]);
        }
        if (among > 1) {
            st = qs_error_set(err, QS_EINVAL,
                              "%.*s was measured with %d settings: %s; a plan's grid holds one "
                              "setting of a method: choose one with --methods (e.g. --methods "
                              "rtn,%s)",
                              (int)len, in->methods[f], among, chosen, in->methods[f]);
        }
    }
    /* a trained model: the weights are those its training job recorded (the spec's digest is
       a stand-in, docs/pipelines.md) */
    const qsweep_trained_name *tm = st ? NULL : qsweep_trained_model_by_path(&names, model);
    if (!st && tm && !tm->digest[0])
        st = qs_error_set(err, QS_ENOTFOUND, "%s: its training job recorded no model digest",
                          tm->name);
    if (!st)
        st = swept_model_config(model, tm ? tm->name : model, tm ? tm->digest : digest, &in->cfg,
                                err);
    if (!st) snprintf(in->model_digest, sizeof in->model_digest, "%s", digest);
    if (!st) snprintf(in->file_digest, sizeof in->file_digest, "%s", tm ? tm->digest : digest);
    if (!st) {
        in->n_layers = in->cfg.n_layers;
        in->layer_mode = !strcmp(mode, "layer");
        in->model_path = strdup(model);
        size_t cells = (size_t)(in->layer_mode ? in->n_layers : 1) * 7 * in->n_formats;
        in->cost = malloc(cells * sizeof *in->cost);
        if (!in->cost || !in->model_path) st = qs_error_set(err, QS_ENOMEM, "plan");
        for (size_t i = 0; !st && i < cells; i++)
            in->cost[i] = NAN;
        for (int b = 0; !st && b < (in->layer_mode ? in->n_layers : 1); b++)
            for (int k = 0; k < 7; k++)
                for (size_t f = 0; f < in->n_formats; f++)
                    if (!strcmp(in->formats[f], "bf16")) *qsweep_plan_cost_at(in, b, k, f) = 0.0;
    }
    for (int i = 0; !st && i < n; i++) {
        if (strcmp(PQgetvalue(r, i, 3), mode) || strcmp(PQgetvalue(r, i, 0), model) ||
            strcmp(PQgetvalue(r, i, 2), quant) || PQgetisnull(r, i, 5))
            continue;
        size_t f = candidate_index(in, label[i], PQgetvalue(r, i, 1));
        if (f == in->n_formats || !strcmp(in->formats[f], "bf16")) continue;
        const char *part = PQgetvalue(r, i, 4);
        int block = -1, kind;
        char *dot = strchr(part, '.');
        if (in->layer_mode) {
            char *end = NULL;
            long bl = strtol(part, &end, 10);
            kind = dot ? kind_index(dot + 1) : -1;
            if (!dot || end != dot || bl < 0 || bl >= in->n_layers || kind < 0) {
                st = qs_error_set(err, QS_EINVAL,
                                  "layer-mode part '%s' is not BLOCK.KIND of "
                                  "this %d-block model",
                                  part, in->n_layers);
                break;
            }
            block = (int)bl;
        } else if ((kind = kind_index(part)) < 0) {
            /* lm_head and embeddings parts: the plan covers the block linears only */
            fprintf(stderr, "qsweep plan: note: part %s (%s) is not a block linear: left out\n",
                    part, in->formats[f]);
            continue;
        }
        double *slot = qsweep_plan_cost_at(in, block, kind, f);
        if (!isnan(*slot))
            st = strcmp(in->methods[f], "rtn")
                     ? qs_error_set(err, QS_EINVAL,
                                    "part %s in %s by %s measured twice (format options "
                                    "differ?): keep one setting per format",
                                    part, in->formats[f], in->methods[f])
                     : qs_error_set(err, QS_EINVAL,
                                    "part %s in %s measured twice (format options "
                                    "differ?): keep one setting per format",
                                    part, in->formats[f]);
        *slot = strtod(PQgetvalue(r, i, 5), NULL);
        /* noise, not a gain: bf16 is the reference, cost 0 by definition */
        if (*slot < 0) {
            *slot = 0;
            in->n_negative++;
        }
    }
    if (!st) snprintf(in->quantize, sizeof in->quantize, "%s", quant);
    qsweep_trained_names_free(&names);
    free(label);
    PQclear(r);
    return st;
}

qs_status qsweep_plan_load_sweep_facts(PGconn *c, const qsweep_plan_opts *o, qsweep_plan_input *in,
                                       qs_error *err) {
    const char *params[4] = {o->experiment, in->layer_mode ? "layer" : "component", in->model_path,
                             in->quantize};
    PGresult *r = PQexecParams(
        c,
        "SELECT DISTINCT ON (j.spec ->> 'format', j.spec ->> 'method',\n"
        "                    j.spec -> 'method_options') j.spec::text\n"
        "FROM jobs j\n"
        "JOIN experiment_jobs ej ON ej.job = j.id JOIN experiments e ON e.id = ej.experiment\n"
        "WHERE e.name = $1 AND j.kind = 'eval' AND j.spec ->> 'mode' = $2\n"
        "  AND COALESCE(j.spec ->> 'method', 'rtn') <> 'per-linear'\n"
        "  AND j.spec -> 'model' ->> 'path' = $3 AND j.spec ->> 'quantize' = $4\n"
        "ORDER BY j.spec ->> 'format', j.spec ->> 'method' NULLS FIRST,\n"
        "         j.spec -> 'method_options', j.id",
        4, NULL, params, NULL, NULL, 0);
    qs_status st = QS_OK;
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        st = qs_error_set(err, QS_EDB, "plan: %s", PQerrorMessage(c));
    in->options = json_object();
    for (int i = 0; !st && i < PQntuples(r); i++) {
        json_t *spec = json_loads(PQgetvalue(r, i, 0), 0, NULL);
        const char *fmt = json_string_value(json_object_get(spec, "format"));
        if (!spec || !fmt || !in->options) {
            json_decref(spec);
            st = qs_error_set(err, QS_ENOMEM, "plan: a stored spec is not JSON");
            break;
        }
        if (!in->dataset) {
            in->dataset = json_incref(json_object_get(spec, "dataset"));
            in->metrics = json_incref(json_object_get(spec, "metrics"));
            /* the path its costs were measured on, which the validation must run on too */
            const char *np = json_string_value(json_object_get(spec, "numerics"));
            snprintf(in->numerics, sizeof in->numerics, "%s", np ? np : "");
        }
        /* a format's options are its rtn jobs' (sorted first) where it has some */
        if (!json_object_get(in->options, fmt))
            json_object_set(in->options, fmt, json_object_get(spec, "format_options"));
        if (!in->calibration && json_object_get(spec, "calibration"))
            in->calibration = json_incref(json_object_get(spec, "calibration"));
        json_decref(spec);
    }
    PQclear(r);
    if (!st && (!in->dataset || !in->metrics))
        st = qs_error_set(err, QS_ENOTFOUND, "plan: no stored spec for the sweep's jobs");
    return st;
}

void qsweep_plan_input_free(qsweep_plan_input *in) {
    json_decref(in->dataset);
    json_decref(in->metrics);
    json_decref(in->options);
    json_decref(in->method_options);
    json_decref(in->calibration);
    free(in->model_path);
    free(in->cost);
}
