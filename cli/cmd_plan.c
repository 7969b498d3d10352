/* qsweep plan EXPERIMENT --budget-bits B: a per-linear format assignment from a layer-mode
 * (or component-mode) sensitivity sweep, solved exactly by plan.c, printed
 * with its predicted cost and written as a grid `policy` part.
 *
 * Costs come from v_sensitivity (schema/002_views.sql), round-to-nearest jobs only (a job of
 * another method, kinds/method.h, names it in its spec): the mean KL divergence (kl_mean) or
 * the perplexity increase (ppl: value - baseline) of the eval job that quantized only that
 * linear (layer mode, part "B.kind") or only that kind in every block (component mode, part
 * "kind"). BF16 is the reference: cost 0. The predicted cost of a plan is the sum of its
 * items' costs; damage is not additive, so it is an estimate to be measured. A measured cost
 * below 0 (perplexity noise, KL rounding) counts as 0, as bf16's does, and is reported: no
 * format beats the reference. Weight counts come from the model's config
 * (worker/checkpoint/checkpoint.h), checked against the digest the sweep recorded, or from
 * the engine's table for a synthetic model (worker/engine/synthetic.h). */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "checkpoint.h"
#include "cli.h"
#include "plan.h"
#include "sensitivity.h"
#include "synthetic.h"
#include "trained_names.h"

static const char *const KINDS[7] = {"q", "k", "v", "o", "gate", "up", "down"};

/* The fused groups a serving engine keeps in one format (one GEMM): q/k/v, gate/up. Each
 * entry lists kind indexes, terminated by -1. */
static const int GROUPS[4][4] = {{0, 1, 2, -1}, {3, -1}, {4, 5, -1}, {6, -1}};
static const char *const GROUP_NAMES[4] = {"qkv", "o", "gate_up", "down"};

/* The measured costs, by (block, kind, format): block -1 for component mode. */
typedef struct plan_input {
    char *model_path;
    qw_config cfg;     /* the swept model's shape */
    size_t n_negative; /* measured costs below 0, counted as 0 */
    char quantize[64]; /* the sweep setting the costs are for: weights, weights+activations */
    int layer_mode;    /* 1 layer, 0 component */
    int n_layers;
    size_t n_formats;
    char formats[QSWEEP_PLAN_MAX_FORMATS][32];
    double *cost; /* [n_layers or 1][7][n_formats], NAN when not measured */
    char model_digest[65];
    json_t *dataset;  /* the sweep's "dataset" spec object (path, digest, ctx, max_chunks) */
    json_t *metrics;  /* the sweep's "metrics" array */
    json_t *options;  /* {format: its format_options in the sweep} */
} plan_input;

static double *cost_at(plan_input *in, int block, int kind, size_t f) {
    return &in->cost[((size_t)(block < 0 ? 0 : block) * 7 + (size_t)kind) * in->n_formats + f];
}

static int kind_index(const char *k) {
    for (int i = 0; i < 7; i++)
        if (!strcmp(KINDS[i], k)) return i;
    return -1;
}

/* Weights of linear kind k (HF shapes, worker/engine/policy.h). */
static uint64_t kind_weights(const qw_config *c, int k) {
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

static const char *const PLAN_SQL =
    "SELECT s.model, s.format, s.quantize, s.mode, s.part,\n"
    "       CASE WHEN $2 = 'ppl' THEN s.delta ELSE s.value END AS cost, s.model_digest\n"
    "FROM v_sensitivity s\n"
    "WHERE s.experiment = $1 AND s.mode IN ('layer', 'component')\n"
    "  AND s.metric = CASE WHEN $2 = 'ppl' THEN 'ppl' ELSE $2 END\n"
    "  AND NOT EXISTS (SELECT 1 FROM jobs m WHERE m.id = s.job_id AND m.spec ? 'method')\n"
    "ORDER BY s.mode DESC, s.model, s.quantize, s.format, s.part";

typedef struct plan_opts {
    const char *experiment, *objective, *quantize, *model, *formats;
    double budget;
    int uniform_groups;
    int validate; /* --validate: submit the plan's grid (one policy-mode eval job) */
    const char *output;
} plan_opts;

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

/* Reads the sweep's costs into *in. Errors: QS_ENOTFOUND (no layer/component results),
 * QS_EINVAL (several models or quantize settings and no choice, an unknown format, a part
 * that is not a linear), QS_EDB, QS_ENOMEM; checkpoint errors for the model. */
static qs_status load_costs(PGconn *c, const plan_opts *o, plan_input *in, qs_error *err) {
    const char *params[2] = {o->experiment, o->objective};
    PGresult *r = PQexecParams(c, PLAN_SQL, 2, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        qs_status st = qs_error_set(err, QS_EDB, "plan: %s", PQerrorMessage(c));
        PQclear(r);
        return st;
    }
    int n = PQntuples(r);
    qs_status st = QS_OK;
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
        }
        else if (strcmp(quant, q))
            st = qs_error_set(err, QS_EINVAL,
                              "the sweep quantizes %s and %s: choose one with "
                              "--quantize",
                              quant, q);
    }
    if (!st && !model)
        st =
            qs_error_set(err, QS_ENOTFOUND, "no %s-mode results for that --model/--quantize", mode);
    /* formats: the ones asked for, else those measured and bf16 */
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
                if (!st) snprintf(in->formats[in->n_formats++], sizeof in->formats[0], "%s", t);
            }
        }
    } else if (!st) {
        for (int i = 0; !st && i < n; i++) {
            const char *fm = PQgetvalue(r, i, 1);
            if (strcmp(PQgetvalue(r, i, 3), mode) || strcmp(PQgetvalue(r, i, 0), model) ||
                strcmp(PQgetvalue(r, i, 2), quant) || !qsweep_plan_quarter_bits(fm))
                continue;
            size_t k = 0;
            while (k < in->n_formats && strcmp(in->formats[k], fm))
                k++;
            if (k == in->n_formats && k < QSWEEP_PLAN_MAX_FORMATS - 1)
                snprintf(in->formats[in->n_formats++], sizeof in->formats[0], "%s", fm);
        }
        size_t k = 0;
        while (k < in->n_formats && strcmp(in->formats[k], "bf16"))
            k++;
        if (k == in->n_formats)
            snprintf(in->formats[in->n_formats++], sizeof in->formats[0], "bf16");
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
                    if (!strcmp(in->formats[f], "bf16")) *cost_at(in, b, k, f) = 0.0;
    }
    for (int i = 0; !st && i < n; i++) {
        if (strcmp(PQgetvalue(r, i, 3), mode) || strcmp(PQgetvalue(r, i, 0), model) ||
            strcmp(PQgetvalue(r, i, 2), quant) || PQgetisnull(r, i, 5))
            continue;
        size_t f = 0;
        while (f < in->n_formats && strcmp(in->formats[f], PQgetvalue(r, i, 1)))
            f++;
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
        double *slot = cost_at(in, block, kind, f);
        if (!isnan(*slot))
            st = qs_error_set(err, QS_EINVAL,
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
    PQclear(r);
    return st;
}

/* The sweep's dataset, metrics and each format's options, from the stored specs of the jobs
 * the costs came from, so a validation grid measures the plan under the same conditions.
 * Errors: QS_EDB, QS_ENOMEM. */
static qs_status load_sweep_facts(PGconn *c, const plan_opts *o, plan_input *in, qs_error *err) {
    const char *params[4] = {o->experiment, in->layer_mode ? "layer" : "component", in->model_path,
                             in->quantize};
    PGresult *r = PQexecParams(
        c,
        "SELECT DISTINCT ON (j.spec ->> 'format') j.spec::text FROM jobs j\n"
        "JOIN experiment_jobs ej ON ej.job = j.id JOIN experiments e ON e.id = ej.experiment\n"
        "WHERE e.name = $1 AND j.kind = 'eval' AND j.spec ->> 'mode' = $2 AND NOT j.spec ? 'method'\n"
        "  AND j.spec -> 'model' ->> 'path' = $3 AND j.spec ->> 'quantize' = $4\n"
        "ORDER BY j.spec ->> 'format', j.id",
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
        }
        json_object_set(in->options, fmt, json_object_get(spec, "format_options"));
        json_decref(spec);
    }
    PQclear(r);
    if (!st && (!in->dataset || !in->metrics))
        st = qs_error_set(err, QS_ENOTFOUND, "plan: no stored spec for the sweep's jobs");
    return st;
}

/* The (quantized) map of a plan: linear -> format for each linear not in bf16, as the grid
 * puts it in the spec of its policy job (kinds/sensitivity.h). fmt_of(b, k) gives the format
 * of linear k of block b. */
static json_t *plan_map(const plan_input *in, const char *(*fmt_of)(const void *, int, int),
                        const void *ctx) {
    json_t *map = json_object();
    for (int b = 0; map && b < in->n_layers; b++)
        for (int k = 0; k < 7; k++) {
            const char *f = fmt_of(ctx, b, k);
            char key[32];
            snprintf(key, sizeof key, "%d.%s", b, KINDS[k]);
            if (strcmp(f, "bf16")) json_object_set_new(map, key, json_string(f));
        }
    return map;
}

/* The format_options object of a policy job over map: each of its formats' sweep options. */
static json_t *map_options(const plan_input *in, const json_t *map) {
    json_t *o = json_object();
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)map, key, v) {
        const char *f = json_string_value(v);
        const json_t *opts = json_object_get(in->options, f);
        json_object_set_new(o, f, opts ? json_deep_copy(opts) : json_object());
    }
    return o;
}

/* The final value (kl_mean) or delta (ppl) of the objective for the eval job of this model,
 * dataset and quantize with mode, part, format and format_options, in any experiment (a job
 * is one computation whoever queued it); NAN when there is none. */
static double measured(PGconn *c, const plan_opts *o, const plan_input *in, const char *mode,
                       const char *part, const char *format, const json_t *options) {
    char *opts = json_dumps(options, JSON_SORT_KEYS | JSON_COMPACT);
    char *ds = json_dumps(in->dataset, JSON_SORT_KEYS | JSON_COMPACT);
    const char *metric = !strcmp(o->objective, "ppl") ? "ppl" : o->objective;
    const char *params[8] = {mode,          part, format, in->quantize, in->model_digest, metric,
                             opts ? opts : "{}", ds ? ds : "{}"};
    PGresult *r = PQexecParams(
        c,
        "SELECT s.value, s.delta FROM v_sensitivity s JOIN jobs j ON j.id = s.job_id\n"
        "WHERE s.mode = $1 AND s.part = $2 AND s.format = $3 AND s.quantize = $4\n"
        "  AND s.model_digest = $5 AND s.metric = $6\n"
        "  AND j.spec -> 'format_options' = $7::jsonb AND NOT j.spec ? 'method'\n"
        "  AND j.spec -> 'dataset' -> 'digest' = $8::jsonb -> 'digest'\n"
        "  AND j.spec -> 'dataset' -> 'ctx' = $8::jsonb -> 'ctx'\n"
        "  AND j.spec -> 'dataset' -> 'max_chunks' = $8::jsonb -> 'max_chunks'\n"
        "  AND j.spec -> 'dataset' -> 'bos_id' IS NOT DISTINCT FROM $8::jsonb -> 'bos_id'\n"
        "ORDER BY s.job_id DESC LIMIT 1",
        8, NULL, params, NULL, NULL, 0);
    free(opts);
    free(ds);
    double v = NAN;
    int col = !strcmp(o->objective, "ppl") ? 1 : 0;
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 && !PQgetisnull(r, 0, col))
        v = strtod(PQgetvalue(r, 0, col), NULL);
    PQclear(r);
    return v;
}

/* The measured damage of a policy map (its policy job), NAN when not measured. */
static double measured_map(PGconn *c, const plan_opts *o, const plan_input *in, const json_t *map,
                           char id[17]) {
    qs_error ignored = {0};
    id[0] = 0;
    if (!json_object_size(map) || qs_sensitivity_policy_id(map, id, &ignored)) return NAN;
    json_t *opts = map_options(in, map);
    double v = measured(c, o, in, "policy", id, QS_POLICY_FORMAT, opts);
    json_decref(opts);
    return v;
}

/* The plan's choices, for plan_map: the format of linear (b, k). */
typedef struct plan_choice {
    const plan_opts *o;
    const plan_input *in;
    const qsweep_plan_item *items;
    const int *choice;
    size_t n;
} plan_choice;

static const char *chosen_format(const void *ctx, int b, int k) {
    const plan_choice *pc = ctx;
    const plan_input *in = pc->in;
    /* the item holding (b, k) */
    size_t idx = 0;
    for (size_t i = 0; i < pc->n; i++) {
        const char *nm = pc->items[i].name;
        const char *kn = nm;
        if (in->layer_mode) {
            if (atoi(nm) != b) continue;
            kn = strchr(nm, '.') + 1;
        }
        int hit = 0;
        if (pc->o->uniform_groups) {
            for (int gi = 0; gi < 4; gi++)
                if (!strcmp(kn, GROUP_NAMES[gi]))
                    for (int m = 0; GROUPS[gi][m] >= 0; m++)
                        hit |= GROUPS[gi][m] == k;
        } else {
            hit = !strcmp(kn, KINDS[k]);
        }
        if (hit) {
            idx = i;
            break;
        }
    }
    return in->formats[pc->choice[idx]];
}

static const char *uniform_format(const void *ctx, int b, int k) {
    (void)b;
    (void)k;
    return ctx;
}

/* The name of the experiment that measures the plan: "<sweep>-plan-<B>b[-groups][-ppl]". */
static void validation_name(const plan_opts *o, char *buf, size_t cap) {
    snprintf(buf, cap, "%s-plan-%gb%s%s", o->experiment, o->budget,
             o->uniform_groups ? "-groups" : "", !strcmp(o->objective, "ppl") ? "-ppl" : "");
}

/* Prints v as a YAML scalar (a JSON string, which YAML reads as the same text). */
static void yaml_string(FILE *out, const char *v) {
    json_t *j = json_string(v);
    char *t = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
    fputs(t ? t : "\"\"", out);
    free(t);
    json_decref(j);
}

/* Writes the plan as a grid that measures it (`qsweep submit`/`run`, or --validate): the
 * sweep's model, dataset, metrics and format options, and the sensitivity mode `policy`
 * with an explicit format per linear (all of them, fused groups expanded; bf16 ones are left
 * as they are), with comments on where it came from. */
static void write_policy(FILE *out, const plan_opts *o, const plan_input *in,
                         const qsweep_plan_item *items, const int *choice, size_t n, double cost,
                         double bits) {
    const char *quant = in->quantize;
    char name[256];
    validation_name(o, name, sizeof name);
    fprintf(out,
            "# qsweep plan %s --budget-bits %g --objective %s%s\n"
            "# predicted %s (sum over items, not measured): %.6g at %.4f bits per weight\n"
            "# model %s, %s-mode costs, quantize %s\n"
            "name: %s\ndescription: ",
            o->experiment, o->budget, o->objective, o->uniform_groups ? " --uniform-groups" : "",
            o->objective, cost, bits, in->model_path, in->layer_mode ? "layer" : "component", quant,
            name);
    char desc[512];
    snprintf(desc, sizeof desc, "the plan of %s at %g bits per weight (%s), measured whole",
             o->experiment, o->budget, o->objective);
    yaml_string(out, desc);
    fprintf(out, "\nkind: sensitivity\nmodels:\n  - ");
    const char *mp = in->model_path;
    if (qw_synthetic_is(mp)) {
        /* "synthetic:<shape>:<seed>" as the grid's form */
        const char *shape = mp + strlen("synthetic:"), *seed = strrchr(mp, ':');
        fprintf(out, "{synthetic: %.*s, seed: %s}", (int)(seed - shape), shape, seed + 1);
    } else {
        yaml_string(out, mp);
    }
    const char *dpath = json_string_value(json_object_get(in->dataset, "path"));
    const char *text = qs_dataset_text_path(dpath);
    fprintf(out, "\ndataset:\n  %s: ", text ? "text" : "tokens");
    yaml_string(out, text ? text : dpath ? dpath : "");
    fprintf(out, "\n  ctx: %lld\n  max_chunks: %lld\nsensitivity:\n",
            (long long)json_integer_value(json_object_get(in->dataset, "ctx")),
            (long long)json_integer_value(json_object_get(in->dataset, "max_chunks")));
    /* the sweep's options of each format (a flow mapping in JSON form is YAML too) */
    int any = 0;
    for (size_t f = 0; f < in->n_formats; f++) {
        const json_t *opts = json_object_get(in->options, in->formats[f]);
        if (!opts || !strcmp(in->formats[f], "bf16")) continue;
        char *t = json_dumps(opts, JSON_SORT_KEYS | JSON_COMPACT);
        fprintf(out, "%s    - {name: %s, options: %s}\n", any ? "" : "  formats:\n", in->formats[f],
                t ? t : "{}");
        free(t);
        any = 1;
    }
    char *metrics = json_dumps(in->metrics, JSON_COMPACT);
    fprintf(out, "  quantize: [%s]\n  modes: [policy]\n  metrics: %s\n  policy:\n", quant,
            metrics ? metrics : "[kl, ppl]");
    free(metrics);
    plan_choice pc = {o, in, items, choice, n};
    for (int b = 0; b < in->n_layers; b++)
        for (int k = 0; k < 7; k++)
            fprintf(out, "    \"%d.%s\": %s\n", b, KINDS[k], chosen_format(&pc, b, k));
}

/* --validate: the plan's grid (write_policy) loaded as `qsweep submit` loads a grid, then
 * submitted into the sweep's database. Written to a private temporary file unless -o named
 * one. Errors: the grid's (a plan whose grid does not load is a bug: the message names the
 * file), the store's, QS_EIO. */
static qs_status validate(qc_store *s, const plan_opts *o, const plan_input *in,
                          const qsweep_plan_item *items, const int *choice, size_t n, double cost,
                          double bits, qs_error *err) {
    int any = 0;
    for (size_t i = 0; i < n; i++)
        any |= strcmp(in->formats[choice[i]], "bf16") != 0;
    if (!any) {
        printf("validation: nothing to measure: every linear stays bf16 (the baseline)\n");
        return QS_OK;
    }
    char tmp[4096] = "";
    const char *path = o->output;
    if (!path) {
        const char *dir = getenv("TMPDIR");
        snprintf(tmp, sizeof tmp, "%s/qsweep-plan-XXXXXX.yaml", dir && *dir ? dir : "/tmp");
        int fd = mkstemps(tmp, 5);
        FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
        if (!f) {
            if (fd >= 0) close(fd);
            return qs_error_set(err, QS_EIO, "%s: %s", tmp, strerror(errno));
        }
        write_policy(f, o, in, items, choice, n, cost, bits);
        if (fclose(f) != 0) {
            unlink(tmp);
            return qs_error_set(err, QS_EIO, "writing %s: %s", tmp, strerror(errno));
        }
        path = tmp;
    }
    qc_grid *g = NULL;
    qc_job_list jobs = {0};
    qc_submit_counts counts = {0};
    qs_status st = qsweep_load_grid(path, NULL, 0, &g, &jobs, err);
    if (!st) st = qsweep_submit_jobs(s, g, &jobs, &counts, err);
    if (!st) {
        printf("validation: ");
        qsweep_print_submit(g, jobs.n, &counts, stdout);
        if (counts.jobs_new || counts.reused_pending)
            printf("validation: %s (qsweep worker, or qsweep run on the grid); "
                   "then qsweep plan %s --budget-bits %g prints it measured\n",
                   counts.jobs_new ? "the workers run it" : "already queued: the workers run it",
                   o->experiment, o->budget);
    }
    qc_job_list_free(&jobs);
    qc_grid_free(g);
    if (tmp[0]) unlink(tmp);
    return st;
}

static void plan_usage(FILE *out) {
    fprintf(out,
            "usage: qsweep plan EXPERIMENT --budget-bits B [--formats F1,F2,...]\n"
            "                   [--objective kl_mean|ppl] [--uniform-groups] [--quantize Q]\n"
            "                   [--model NAME] [-o FILE] [--validate] [--db CONNINFO]\n"
            "  From a layer-mode (else component-mode) sensitivity sweep, the format of each\n"
            "  linear that minimizes the summed measured damage under an average of B bits per\n"
            "  weight, block scales counted (nvfp4 4.5, mxfp4 4.25, mxfp8_e4m3 8.25, fp8_e4m3 8,\n"
            "  bf16 16; per-tensor FP32 scales are shown, not budgeted). Exact: a\n"
            "  multiple-choice knapsack solved by dynamic programming. Damage is not additive:\n"
            "  the predicted cost is the sum of the isolated measurements. A measured cost\n"
            "  below 0 (noise) counts as 0, as bf16's does; ties go to the higher-precision\n"
            "  format. The model at the sweep's path must be the one swept (same digest).\n"
            "  --formats LIST     candidate formats (default: those measured, and bf16); a\n"
            "                     format without a measurement for a linear is not chosen for it\n"
            "  --objective        kl_mean (default: mean KL divergence from the baseline) or ppl\n"
            "                     (perplexity increase)\n"
            "  --uniform-groups   q/k/v and gate/up of a block share one format (fused GEMMs)\n"
            "  --quantize Q       which sweep setting (weights, weights+activations) when both\n"
            "  --model NAME       which model (path, file name, or a pipeline's name of a\n"
            "                     trained model: train/micro/bf16/seed=1) when the sweep has several\n"
            "  -o FILE            write the plan as a grid that measures it (the sweep's model\n"
            "                     and dataset, sensitivity mode policy); default: printed after\n"
            "                     the table\n"
            "  --validate         submit that grid (experiment <EXPERIMENT>-plan-<B>b...): one\n"
            "                     eval job of the whole plan, run by the workers; once it is\n"
            "                     done, plan prints its measured damage beside the prediction\n"
            "  Measured damage, when the results exist: the plan's policy job, and for each\n"
            "  format the job that quantized every linear in it (policy or cumulative mode).\n");
}

int qsweep_cmd_plan(int argc, char **argv) {
    static const struct option opts[] = {{"budget-bits", required_argument, 0, 'b'},
                                         {"formats", required_argument, 0, 'f'},
                                         {"objective", required_argument, 0, 'j'},
                                         {"uniform-groups", no_argument, 0, 'u'},
                                         {"quantize", required_argument, 0, 'q'},
                                         {"model", required_argument, 0, 'm'},
                                         {"output", required_argument, 0, 'o'},
                                         {"validate", no_argument, 0, 'V'},
                                         {"db", required_argument, 0, 'd'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    plan_opts o = {.objective = "kl_mean", .budget = NAN};
    const char *db = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "b:f:j:uq:m:o:d:h", opts, NULL)) != -1) {
        char *end = NULL;
        switch (c) {
        case 'b':
            errno = 0;
            o.budget = strtod(optarg, &end);
            if (!*optarg || *end || errno || !(o.budget > 0 && o.budget <= 64)) {
                fprintf(stderr,
                        "qsweep plan: --budget-bits %s: expected a number of bits per "
                        "weight in (0, 64]\n",
                        optarg);
                return QS_EXIT_USAGE;
            }
            break;
        case 'f':
            o.formats = optarg;
            break;
        case 'j':
            if (strcmp(optarg, "kl_mean") && strcmp(optarg, "ppl")) {
                fprintf(stderr, "qsweep plan: --objective %s: expected kl_mean or ppl\n", optarg);
                return QS_EXIT_USAGE;
            }
            o.objective = optarg;
            break;
        case 'u':
            o.uniform_groups = 1;
            break;
        case 'q':
            o.quantize = optarg;
            break;
        case 'm':
            o.model = optarg;
            break;
        case 'o':
            o.output = optarg;
            break;
        case 'V':
            o.validate = 1;
            break;
        case 'd':
            db = optarg;
            break;
        case 'h':
            plan_usage(stdout);
            return QS_EXIT_OK;
        default:
            plan_usage(stderr);
            return QS_EXIT_USAGE;
        }
    }
    /* each mistake gets its one line (qsweep plan --help shows the options) */
    if (optind >= argc) {
        fprintf(stderr, "qsweep plan: no EXPERIMENT given (%s plan --help)\n", qsweep_invoked());
        return QS_EXIT_USAGE;
    }
    if (optind < argc - 1) {
        fprintf(stderr, "qsweep plan: unexpected argument '%s'\n", argv[optind + 1]);
        return QS_EXIT_USAGE;
    }
    if (isnan(o.budget)) {
        fprintf(stderr, "qsweep plan: --budget-bits B is required (e.g. --budget-bits 4.5)\n");
        return QS_EXIT_USAGE;
    }
    /* as status, results and report: --db, $QSWEEP_DB, else the private cluster of run */
    const char *conninfo = qsweep_find_db(db, "plan");
    if (!conninfo) return QS_EXIT_USAGE;
    o.experiment = argv[optind];
    qs_error err = {0};
    qc_store *s = NULL;
    plan_input in = {0};
    qsweep_plan_item *items = NULL;
    int *choice = NULL;
    qs_status st = qsweep_open_existing_store(conninfo, "plan", &s, &err);
    if (!st) st = load_costs(qc_store_pgconn(s), &o, &in, &err);
    if (!st) st = load_sweep_facts(qc_store_pgconn(s), &o, &in, &err);
    if (st) goto done;
    const qw_config *cfg = &in.cfg;
    /* items: linears (or kinds, component mode) or their fused groups */
    int per_block = o.uniform_groups ? 4 : 7, blocks = in.layer_mode ? in.n_layers : 1;
    size_t n = (size_t)per_block * (size_t)blocks;
    items = calloc(n, sizeof *items);
    choice = calloc(n, sizeof *choice);
    if (!items || !choice) {
        st = qs_error_set(&err, QS_ENOMEM, "plan");
        goto done;
    }
    unsigned qbits[QSWEEP_PLAN_MAX_FORMATS];
    for (size_t f = 0; f < in.n_formats; f++)
        qbits[f] = qsweep_plan_quarter_bits(in.formats[f]);
    for (int b = 0; b < blocks; b++)
        for (int g = 0; g < per_block; g++) {
            qsweep_plan_item *it = &items[(size_t)b * (size_t)per_block + (size_t)g];
            const int solo[2] = {g, -1};
            const int *members = o.uniform_groups ? GROUPS[g] : solo;
            const char *nm = o.uniform_groups ? GROUP_NAMES[g] : KINDS[g];
            if (in.layer_mode)
                snprintf(it->name, sizeof it->name, "%d.%s", b, nm);
            else
                snprintf(it->name, sizeof it->name, "%s", nm);
            for (size_t f = 0; f < in.n_formats; f++)
                it->cost[f] = 0.0;
            for (int m = 0; members[m] >= 0; m++) {
                it->weights +=
                    kind_weights(cfg, members[m]) * (uint64_t)(in.layer_mode ? 1 : in.n_layers);
                for (size_t f = 0; f < in.n_formats; f++)
                    it->cost[f] += *cost_at(&in, in.layer_mode ? b : -1, members[m], f);
            }
        }
    for (size_t f = 0; f < in.n_formats; f++) {
        size_t missing = 0;
        for (size_t i = 0; i < n; i++)
            missing += isnan(items[i].cost[f]);
        if (missing)
            fprintf(stderr,
                    "qsweep plan: note: %s was not measured for %zu of %zu items; they "
                    "cannot take it\n",
                    in.formats[f], missing, n);
    }
    if (in.n_negative)
        printf("note: %zu linears measured a negative %s, counted as 0 (noise: no format beats "
               "bf16)\n",
               in.n_negative, !strcmp(o.objective, "ppl") ? "delta" : "kl_mean");
    double cost = 0, bits = 0;
    st = qsweep_plan_solve(items, n, qbits, in.n_formats, o.budget, choice, &cost, &bits, &err);
    if (st) goto done;

    const char *quant = in.quantize;
    printf("plan for %s (%s, quantize %s, %s-mode costs, objective %s), budget %g bits per "
           "weight\n",
           o.experiment, in.model_path, quant, in.layer_mode ? "layer" : "component", o.objective,
           o.budget);
    printf("  %-12s %12s  %-12s %6s  %12s\n", "item", "weights", "format", "bits", o.objective);
    uint64_t total_w = 0;
    double scale_bits = 0;
    for (size_t i = 0; i < n; i++) {
        const char *fm = in.formats[choice[i]];
        printf("  %-12s %12llu  %-12s %6.2f  %12.6g\n", items[i].name,
               (unsigned long long)items[i].weights, fm, qbits[choice[i]] / 4.0,
               items[i].cost[choice[i]]);
        total_w += items[i].weights;
        /* one per-tensor scale per linear of the item */
        int members = o.uniform_groups ? (i % 4 == 0 ? 3 : i % 4 == 2 ? 2 : 1) : 1;
        scale_bits +=
            (double)qsweep_plan_tensor_scale_bits(fm) * members * (in.layer_mode ? 1 : in.n_layers);
    }
    printf("\nformat counts:");
    for (size_t f = 0; f < in.n_formats; f++) {
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            k += choice[i] == (int)f;
        printf("  %s %zu", in.formats[f], k);
    }
    printf("\naverage bits per weight: %.4f (budget %g; %.4f with per-tensor FP32 scales)\n", bits,
           o.budget, bits + scale_bits / (double)total_w);
    printf("predicted %s: %.6g (sum of the isolated measurements; damage is not additive: "
           "measure the plan)\n",
           o.objective, cost);
    double nvfp4_measured = NAN;
    for (size_t f = 0; f < in.n_formats; f++) {
        if (!strcmp(in.formats[f], "bf16")) continue;
        double u = 0;
        for (size_t i = 0; i < n; i++)
            u += items[i].cost[f];
        /* measured: a policy job with every linear in it, else the cumulative job over
           every block (the same linears) */
        json_t *umap = plan_map(&in, uniform_format, in.formats[f]);
        char uid[17];
        double um = measured_map(qc_store_pgconn(s), &o, &in, umap, uid);
        json_decref(umap);
        char last[16];
        snprintf(last, sizeof last, "%d", in.n_layers - 1);
        if (isnan(um))
            um = measured(qc_store_pgconn(s), &o, &in, "cumulative", last, in.formats[f],
                          json_object_get(in.options, in.formats[f]));
        char meas[96] = "";
        if (!isnan(um)) snprintf(meas, sizeof meas, ", measured %.6g", um);
        if (!strcmp(in.formats[f], "nvfp4")) nvfp4_measured = um;
        if (isnan(u))
            printf("uniform %s: not every item was measured%s\n", in.formats[f], meas);
        else
            printf("uniform %s (%.2f bits): predicted %s %.6g%s\n", in.formats[f],
                   qbits[f] / 4.0, o.objective, u, meas);
    }
    /* the plan measured whole: its policy job, when one ran */
    plan_choice pc = {&o, &in, items, choice, n};
    json_t *map = plan_map(&in, chosen_format, &pc);
    char id[17];
    double pm = measured_map(qc_store_pgconn(s), &o, &in, map, id);
    json_decref(map);
    if (!id[0])
        printf("measured %s of the plan: nothing to measure (every linear stays bf16, the "
               "reference)\n",
               o.objective);
    else if (isnan(pm))
        printf("measured %s of the plan: not yet (policy %s; %s)\n", o.objective, id,
               o.validate ? "--validate queues it below" : "--validate queues it");
    else if (isnan(nvfp4_measured))
        printf("measured %s of the plan: %.6g (policy %s; predicted %.6g)\n", o.objective, pm,
               id, cost);
    else
        printf("measured %s of the plan: %.6g (policy %s; predicted %.6g; uniform nvfp4 "
               "measured %.6g)\n",
               o.objective, pm, id, cost, nvfp4_measured);
    FILE *out = stdout;
    if (o.output && !(out = fopen(o.output, "w"))) {
        st = qs_error_set(&err, QS_EIO, "cannot write %s: %s", o.output, strerror(errno));
        goto done;
    }
    if (!o.output) printf("\n");
    write_policy(out, &o, &in, items, choice, n, cost, bits);
    if (o.output) {
        if (fclose(out) != 0)
            st = qs_error_set(&err, QS_EIO, "writing %s: %s", o.output, strerror(errno));
        else
            printf("policy written to %s\n", o.output);
    }
    if (!st && o.validate) st = validate(s, &o, &in, items, choice, n, cost, bits, &err);
done:
    qc_store_close(s);
    json_decref(in.dataset);
    json_decref(in.metrics);
    json_decref(in.options);
    free(items);
    free(choice);
    free(in.model_path);
    free(in.cost);
    return st ? qsweep_fail("plan", &err) : QS_EXIT_OK;
}
