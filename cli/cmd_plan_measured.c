/* What was measured of a plan whole (cmd_plan.h): its policy map, and the policy or
 * cumulative job that measured it, in any experiment of the database. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd_plan.h"
#include "sensitivity.h"

json_t *qsweep_plan_map(const plan_input *in, const char *(*fmt_of)(const void *, int, int),
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

double qsweep_plan_measured(PGconn *c, const plan_opts *o, const plan_input *in, const char *mode,
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

double qsweep_plan_measured_map(PGconn *c, const plan_opts *o, const plan_input *in,
                                const json_t *map, char id[17]) {
    qs_error ignored = {0};
    id[0] = 0;
    if (!json_object_size(map) || qs_sensitivity_policy_id(map, id, &ignored)) return NAN;
    json_t *opts = map_options(in, map);
    double v = qsweep_plan_measured(c, o, in, "policy", id, QS_POLICY_FORMAT, opts);
    json_decref(opts);
    return v;
}

const char *qsweep_plan_chosen_format(const void *ctx, int b, int k) {
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
    return in->formats[pc->choice[idx]];
}

const char *qsweep_plan_uniform_format(const void *ctx, int b, int k) {
    (void)b;
    (void)k;
    return ctx;
}
