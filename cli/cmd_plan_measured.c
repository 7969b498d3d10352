/* What was measured of a plan whole (cmd_plan_parts.h): its policy map, and the policy or
 * cumulative job that measured it, in any experiment of the database, on the plan's numerics
 * path. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd_plan_parts.h"
#include "method.h"
#include "method_label.h"
#include "sensitivity.h"

/* The policy map (cmd_plan_parts.h). */
json_t *qsweep_plan_map(const qsweep_plan_input *in, const char *(*fmt_of)(const void *, int, int),
                        const void *ctx) {
    json_t *map = json_object();
    for (int b = 0; map && b < in->n_layers; b++)
        for (int k = 0; k < 7; k++) {
            const char *f = fmt_of(ctx, b, k);
            char key[32];
            snprintf(key, sizeof key, "%d.%s", b, qsweep_plan_kinds[k]);
            if (strcmp(f, "bf16")) json_object_set_new(map, key, json_string(f));
        }
    return map;
}

/* The format_options object of a policy job over map: each of its formats' sweep options. */
static json_t *map_options(const qsweep_plan_input *in, const json_t *map) {
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

/* The newest job measuring (mode, part, format, method) under the sweep's conditions, on the
 * plan's numerics path. */
double qsweep_plan_measured(PGconn *c, const qsweep_plan_opts *o, const qsweep_plan_input *in,
                            const char *mode, const char *part, const char *format,
                            const json_t *options, const char *method,
                            const json_t *method_options) {
    char *opts = json_dumps(options, JSON_SORT_KEYS | JSON_COMPACT);
    char *ds = json_dumps(in->dataset, JSON_SORT_KEYS | JSON_COMPACT);
    char *mo = method_options ? json_dumps(method_options, JSON_SORT_KEYS | JSON_COMPACT) : NULL;
    const char *metric = !strcmp(o->objective, "ppl") ? "ppl" : o->objective;
    const char *params[11] = {mode,
                              part,
                              format,
                              in->quantize,
                              in->model_digest,
                              metric,
                              opts ? opts : "{}",
                              ds ? ds : "{}",
                              method ? method : "rtn",
                              mo ? mo : "null",
                              in->path};
    PGresult *r = PQexecParams(
        c,
        "SELECT s.value, s.delta FROM v_sensitivity s JOIN jobs j ON j.id = s.job_id\n"
        "WHERE s.mode = $1 AND s.part = $2 AND s.format = $3 AND s.quantize = $4\n"
        "  AND s.model_digest = $5 AND s.metric = $6\n"
        "  AND j.spec -> 'format_options' = $7::jsonb\n"
        "  AND COALESCE(j.spec ->> 'method', 'rtn') = $9\n"
        "  AND COALESCE(j.spec -> 'method_options', 'null'::jsonb) = $10::jsonb\n"
        "  AND j.spec -> 'dataset' -> 'digest' = $8::jsonb -> 'digest'\n"
        "  AND j.spec -> 'dataset' -> 'ctx' = $8::jsonb -> 'ctx'\n"
        "  AND j.spec -> 'dataset' -> 'max_chunks' = $8::jsonb -> 'max_chunks'\n"
        "  AND j.spec -> 'dataset' -> 'bos_id' IS NOT DISTINCT FROM $8::jsonb -> 'bos_id'\n"
        "  AND ($11 = '' OR EXISTS (SELECT 1 FROM v_numerics_path np WHERE np.job_id = s.job_id\n"
        "       AND COALESCE(np.worker_path, np.path) = $11))\n"
        "  AND ($11 = '' OR $6 <> 'ppl' OR s.baseline_job_id IS NULL OR EXISTS (SELECT 1\n"
        "       FROM v_numerics_path nb WHERE nb.job_id = s.baseline_job_id\n"
        "       AND COALESCE(nb.worker_path, nb.path) = $11))\n"
        "ORDER BY s.job_id DESC LIMIT 1",
        11, NULL, params, NULL, NULL, 0);
    free(opts);
    free(ds);
    free(mo);
    double v = NAN;
    int col = !strcmp(o->objective, "ppl") ? 1 : 0;
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 && !PQgetisnull(r, 0, col))
        v = strtod(PQgetvalue(r, 0, col), NULL);
    PQclear(r);
    return v;
}

/* A policy map's job (cmd_plan_parts.h). */
double qsweep_plan_measured_map(PGconn *c, const qsweep_plan_opts *o, const qsweep_plan_input *in,
                                const json_t *map, const char *method, const json_t *method_options,
                                char id[17]) {
    qs_error ignored = {0};
    id[0] = 0;
    if (!json_object_size(map) || qs_sensitivity_policy_id(map, id, &ignored)) return NAN;
    json_t *opts = map_options(in, map);
    double v = qsweep_plan_measured(c, o, in, "policy", id, QS_POLICY_FORMAT, opts, method,
                                    method_options);
    json_decref(opts);
    return v;
}

/* The candidate of linear (b, k): its item's choice. */
size_t qsweep_plan_chosen(const qsweep_plan_choice *pc, int b, int k) {
    const qsweep_plan_input *in = pc->in;
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
                if (!strcmp(kn, qsweep_plan_group_names[gi]))
                    for (int m = 0; qsweep_plan_groups[gi][m] >= 0; m++)
                        hit |= qsweep_plan_groups[gi][m] == k;
        } else {
            hit = !strcmp(kn, qsweep_plan_kinds[k]);
        }
        if (hit) {
            idx = i;
            break;
        }
    }
    return (size_t)pc->choice[idx];
}

const char *qsweep_plan_chosen_format(const void *ctx, int b, int k) {
    const qsweep_plan_choice *pc = ctx;
    return pc->in->formats[qsweep_plan_chosen(pc, b, k)];
}

const char *qsweep_plan_uniform_format(const void *ctx, int b, int k) {
    (void)b;
    (void)k;
    return ctx;
}

/* Copies option key of the sweep's method into given, unless another method of the plan gave
 * it a different value. Errors: QS_EINVAL naming both methods. */
static qs_status take_option(const qsweep_plan_input *in, const char *method, const char *key,
                             json_t *given, const char **from, qs_error *err) {
    const json_t *v = json_object_get(json_object_get(in->method_options, method), key);
    if (!v) return QS_OK;
    const json_t *have = json_object_get(given, key);
    if (have && !json_equal((json_t *)have, (json_t *)v))
        return qs_error_set(err, QS_EINVAL,
                            "the plan takes %s and %s, whose option %s differs in the sweep: "
                            "per-linear holds one value (choose one with --methods)",
                            *from, method, key);
    json_object_set_new(given, key, json_deep_copy(v));
    *from = method;
    return QS_OK;
}

/* The plan's per-linear options (cmd_plan_parts.h). */
qs_status qsweep_plan_method_options(const qsweep_plan_choice *pc, json_t **out, qs_error *err) {
    const qsweep_plan_input *in = pc->in;
    *out = NULL;
    json_t *given = json_object(), *linears = json_object();
    if (!given || !linears) {
        json_decref(given);
        json_decref(linears);
        return qs_error_set(err, QS_ENOMEM, "plan: method options");
    }
    json_object_set_new(given, "linears", linears);
    const char *from = NULL;
    qs_status st = QS_OK;
    for (int b = 0; !st && b < in->n_layers; b++)
        for (int k = 0; !st && k < 7; k++) {
            size_t f = qsweep_plan_chosen(pc, b, k);
            const char *me = in->methods[f];
            if (!strcmp(me, "rtn") || !strcmp(in->formats[f], "bf16")) continue;
            char key[32];
            snprintf(key, sizeof key, "%d.%s", b, qsweep_plan_kinds[k]);
            /* the linear takes the method's label; its setting's options are per-linear's */
            bool search;
            size_t len;
            qs_method_by_setting_label(me, &search, &len);
            json_object_set_new(linears, key, json_stringn(me, len));
            /* scale_search goes with each linear's label (kinds/method.h per-linear) */
            static const char *const keys[] = {"act_order", "damp", "alpha"};
            for (size_t i = 0; !st && i < sizeof keys / sizeof keys[0]; i++)
                st = take_option(in, me, keys[i], given, &from, err);
        }
    if (!st && json_object_size(linears))
        st = qs_method_options(qs_method_by_name("per-linear"), given, out, err);
    json_decref(given);
    return st;
}
