/* qsweep report EXPERIMENT -o FILE: one self-contained HTML page with the
 * experiment's sensitivity heatmaps, bars and block strips, its progress and failures, and
 * its training curves where the training views exist, and for a pipeline (sweeps of trained
 * models, schema/130_pipeline_views.sql) the damage per training recipe as a grouped heatmap.
 *
 * Every number on the page comes from one of the SQL queries below, run against the views
 * (schema/002_views.sql, 006_sqnr_view.sql) with the experiment name as $1; PostgreSQL turns
 * each result into JSON (json_agg, float8 printed shortest round-trip), and the page carries
 * the queries' text next to the figures they make. The page's script and style
 * (report_page.js, report_page.css) are embedded in the binary at build time. */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "cli.h"
#include "method.h"
#include "method_label.h"
#include "replace_file.h"
#include "report_page.h"
#include "trained_names.h"

/* One query of the page: its name (the key in the data object and in "queries") and its SQL
 * ($1 = experiment name), which yields one JSON value. */
typedef struct report_query {
    const char *name;
    const char *sql;
} report_query;

static const char *const Q_EXPERIMENT =
    "SELECT json_build_object('name', e.name, 'description', e.description,\n"
    "                         'created_at', e.created_at,\n"
    "                         'kinds', (SELECT coalesce(json_agg(DISTINCT j.kind), '[]')\n"
    "                                   FROM experiment_jobs ej JOIN jobs j ON j.id = ej.job\n"
    "                                   WHERE ej.experiment = e.id))\n"
    "FROM experiments e WHERE e.name = $1";

/* Each query below yields one JSON value (an object, or an array of row objects). */
static const report_query QUERIES[] = {
    {"progress", "SELECT row_to_json(p)\n"
                 "FROM (SELECT total, pending, running, succeeded, failed, cancelled\n"
                 "      FROM v_experiment_progress WHERE experiment = $1) p"},
    /* the baseline job of each model and its run conditions */
    {"conditions",
     "SELECT coalesce(json_agg(c ORDER BY c.model, c.baseline_job), '[]')\n"
     "FROM (SELECT regexp_replace(r.model, '^.*/', '') AS model, r.job_id AS baseline_job,\n"
     "             r.model_digest, regexp_replace(r.dataset, '^.*/', '') AS dataset,\n"
     "             (j.spec -> 'dataset' -> 'ctx')::text AS ctx,\n"
     "             (j.spec -> 'dataset' -> 'max_chunks')::text AS max_chunks,\n"
     "             j.spec ->> 'numerics_version' AS numerics_version,\n"
     "             max(r.value) FILTER (WHERE r.metric = 'ppl') AS baseline_ppl,\n"
     "             max(r.value) FILTER (WHERE r.metric = 'n_chunks') AS n_chunks,\n"
     "             max(r.value) FILTER (WHERE r.metric = 'n_scored') AS n_scored\n"
     "      FROM v_job_results r JOIN jobs j ON j.id = r.job_id\n"
     "      WHERE r.experiment = $1 AND r.kind = 'baseline' AND r.final\n"
     "      GROUP BY 1, 2, 3, 4, 5, 6, 7) c"},
    /* one row per eval job: the metrics a figure can be coloured by */
    {"sensitivity",
     "SELECT coalesce(json_agg(c ORDER BY c.model, c.format, c.options, c.quantize, c.mode,\n"
     "                         c.job), '[]')\n"
     "FROM (SELECT s.job_id AS job, regexp_replace(s.model, '^.*/', '') AS model, s.format,\n"
     /* a job's numerics path joins its options when the experiment's jobs ran on more than
        one (as in `qsweep results`): each path's jobs are a sweep of their own, never ranked
        against another path's */
     "             CASE WHEN (SELECT count(DISTINCT n2.path) FROM v_numerics_path n2\n"
     "                        JOIN experiment_jobs ej2 ON ej2.job = n2.job_id\n"
     "                        JOIN experiments e2 ON e2.id = ej2.experiment\n"
     "                        WHERE e2.name = $1) > 1 THEN\n"
     "             (coalesce(CASE WHEN j.spec ? 'fuse' OR j.spec ? 'method' THEN\n"
     "                      ((j.spec -> 'format_options') || CASE WHEN j.spec ? 'fuse' THEN\n"
     "                      jsonb_build_object('fuse', j.spec -> 'fuse') ELSE '{}' END ||\n"
     "                      CASE WHEN j.spec ? 'method' THEN jsonb_build_object('method',\n"
     "                      j.spec -> 'method') || coalesce(j.spec -> 'method_options', '{}')\n"
     "                      ELSE '{}' END)::text\n"
     "                      ELSE j.spec ->> 'format_options' END, '{}')::jsonb ||\n"
     "              jsonb_build_object('numerics_path', coalesce(np.path, 'unknown')))::text\n"
     "             ELSE\n"
     "             coalesce(CASE WHEN j.spec ? 'fuse' OR j.spec ? 'method' THEN\n"
     "                      ((j.spec -> 'format_options') || CASE WHEN j.spec ? 'fuse' THEN\n"
     "                      jsonb_build_object('fuse', j.spec -> 'fuse') ELSE '{}' END ||\n"
     "                      CASE WHEN j.spec ? 'method' THEN jsonb_build_object('method',\n"
     "                      j.spec -> 'method') || coalesce(j.spec -> 'method_options', '{}')\n"
     "                      ELSE '{}' END)::text\n"
     "                      ELSE j.spec ->> 'format_options' END, '{}') END AS options,\n"
     "             s.quantize,\n"
     "             s.mode, s.part,\n"
     "             max(s.value) FILTER (WHERE s.metric = 'kl_mean') AS kl_mean,\n"
     "             max(s.delta) FILTER (WHERE s.metric = 'ppl') AS delta_ppl,\n"
     "             max(s.value) FILTER (WHERE s.metric = 'kl_p99') AS kl_p99,\n"
     "             max(s.value) FILTER (WHERE s.metric = 'top1') AS top1,\n"
     "             avg(s.value) FILTER (WHERE s.metric LIKE 'sqnr\\_db.%') AS sqnr_db,\n"
     "             max(s.value) FILTER (WHERE s.metric = 'ppl') AS ppl,\n"
     "             max(s.baseline_value) FILTER (WHERE s.metric = 'ppl') AS baseline_ppl\n"
     "      FROM v_sensitivity s JOIN jobs j ON j.id = s.job_id\n"
     "      LEFT JOIN v_numerics_path np ON np.job_id = s.job_id\n"
     "      WHERE s.experiment = $1\n"
     "      GROUP BY s.job_id, s.model, s.format, j.spec, s.quantize,\n"
     "               s.mode, s.part, np.path) c"},
    /* the sensitivity jobs by method (kinds/method.h; rtn when the spec names none), for the
     * component x method heatmaps: format options and method apart, so the page puts the
     * methods of one (format, options, quantize, mode) side by side. Policy, compare and fused
     * jobs have no place there. Each row then gets its column's name, "label"
     * (label_method_settings). */
    {"methods",
     "SELECT coalesce(json_agg(c ORDER BY c.model, c.format, c.format_options, c.quantize,\n"
     "                         c.mode, c.job), '[]')\n"
     "FROM (SELECT s.job_id AS job, regexp_replace(s.model, '^.*/', '') AS model, s.format,\n"
     "             j.spec ->> 'format_options' AS format_options,\n"
     "             coalesce(j.spec ->> 'method', 'rtn') AS method,\n"
     "             coalesce(j.spec ->> 'method_options', '{}') AS method_options,\n"
     "             s.quantize, s.mode, s.part,\n"
     "             max(s.value) FILTER (WHERE s.metric = 'kl_mean') AS kl_mean,\n"
     "             max(s.delta) FILTER (WHERE s.metric = 'ppl') AS delta_ppl,\n"
     "             max(s.value) FILTER (WHERE s.metric = 'kl_p99') AS kl_p99,\n"
     "             max(s.value) FILTER (WHERE s.metric = 'top1') AS top1,\n"
     "             avg(s.value) FILTER (WHERE s.metric LIKE 'sqnr\\_db.%') AS sqnr_db\n"
     "      FROM v_sensitivity s JOIN jobs j ON j.id = s.job_id\n"
     "      WHERE s.experiment = $1 AND s.mode <> 'policy' AND NOT j.spec ? 'reference_model'\n"
     "        AND NOT j.spec ? 'fuse'\n"
     "      GROUP BY s.job_id, s.model, s.format, j.spec, s.quantize, s.mode, s.part) c"},
    {"failed",
     "SELECT coalesce(json_agg(f ORDER BY f.job_id), '[]')\n"
     "FROM (SELECT job_id, job_key, kind, attempts_used, max_attempts, last_error,\n"
     "             last_attempt, last_worker, last_outcome, last_attempt_error\n"
     "      FROM v_failed_jobs\n"
     "      WHERE job_id IN (SELECT ej.job FROM experiment_jobs ej\n"
     "                       JOIN experiments e ON e.id = ej.experiment WHERE e.name = $1)) f"},
    /* the numerics paths the jobs ran on (v_numerics_path, schema/110): the page flags more
     * than one */
    {"paths",
     "SELECT coalesce(json_agg(p ORDER BY p.jobs DESC, p.path), '[]')\n"
     "FROM (SELECT n.path, count(*) AS jobs FROM v_numerics_path n\n"
     "      WHERE n.job_id IN (SELECT ej.job FROM experiment_jobs ej\n"
     "                         JOIN experiments e ON e.id = ej.experiment WHERE e.name = $1)\n"
     "      GROUP BY n.path) p"},
};

/* Training views come with the training sweeps (schema 020: v_train_curves one row
 * per (job, step, metric), v_train_final one per (job, final metric) with the gap to the bf16
 * run of the same spec). Until a database has them the page says so; a query that fails on
 * them (their columns changed) is shown as an error in the page, not a failed report. The
 * final-metrics table leaves out the per-phase time_<phase>_s seconds (36 a run): they are
 * for profiling, in the results table for SQL, not for comparing recipes. */
static const report_query TRAIN_QUERIES[] = {
    {"train_curves",
     "SELECT coalesce(json_agg(t ORDER BY t.metric, t.shape, t.lr, t.recipe, t.step), '[]')\n"
     "FROM (SELECT metric, shape, recipe, lr, step, count(*) AS seeds,\n"
     "             avg(value) AS mean, min(value) AS lo, max(value) AS hi\n"
     "      FROM v_train_curves\n"
     "      WHERE experiment = $1 AND metric IN ('train_loss', 'val_loss')\n"
     "      GROUP BY metric, shape, recipe, lr, step) t"},
    {"train_final",
     "SELECT coalesce(json_agg(t ORDER BY t.metric, t.shape, t.lr, t.recipe), '[]')\n"
     "FROM (SELECT metric, shape, recipe, lr, count(*) AS seeds, avg(value) AS mean,\n"
     "             stddev_samp(value) AS sd, avg(gap) AS gap_to_bf16,\n"
     "             avg(rel_gap) AS rel_gap_to_bf16\n"
     "      FROM v_train_final WHERE experiment = $1 AND metric NOT LIKE 'time\\_%'\n"
     "      GROUP BY metric, shape, recipe, lr) t"},
};

/* Pipelines (schema/130_pipeline_views.sql): sweeps of models a training stage made. One row
 * per (shape, steps, lr, format, options, quantize, mode, part, recipe) with the mean, min and
 * max over seeds of each metric the pipeline heatmap can show (delta_ppl: the perplexity
 * increase, rel_delta_ppl: it over the model's own baseline), and the training runs per
 * recipe. Empty arrays for any other experiment; null (the page says so) for a database
 * without the views. */
#define PIPE_STAT(m, col, as)                                                                      \
    "             max(mean_" col ") FILTER (WHERE metric = '" m "') AS " as ",\n"                 \
    "             max(min_" col ") FILTER (WHERE metric = '" m "') AS " as "_min,\n"              \
    "             max(max_" col ") FILTER (WHERE metric = '" m "') AS " as "_max,\n"
static const report_query PIPE_QUERIES[] = {
    {"pipeline",
     "SELECT coalesce(json_agg(p ORDER BY p.shape, p.steps, p.lr, p.mode, p.format, p.options,\n"
     "                         p.quantize, p.block NULLS LAST, p.kind_pos NULLS LAST, p.part,\n"
     "                         p.recipe <> 'bf16', p.recipe), '[]')\n"
     "FROM (SELECT coalesce(shape, '(checkpoint)') AS shape, steps, lr, format, options,\n"
     "             quantize, mode, part, recipe,\n"
     "             substring(part FROM '^[0-9]+')::int AS block,\n"
     "             array_position(ARRAY['q', 'k', 'v', 'o', 'gate', 'up', 'down'],\n"
     "                            regexp_replace(part, '^[0-9]+\\.', '')) AS kind_pos,\n"
     "             max(seeds) AS seeds,\n" PIPE_STAT("kl_mean", "value", "kl_mean")
         PIPE_STAT("ppl", "delta", "delta_ppl") PIPE_STAT("ppl", "rel_delta", "rel_delta_ppl")
             PIPE_STAT("kl_p99", "value", "kl_p99") PIPE_STAT("top1", "value", "top1")
     "             max(mean_final_val_loss) AS final_val_loss\n"
     "      FROM v_pipeline_summary WHERE experiment = $1\n"
     "      GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9) p"},
    {"pipeline_training",
     "SELECT coalesce(json_agg(t ORDER BY t.shape, t.steps, t.lr, t.recipe <> 'bf16',\n"
     "                         t.recipe), '[]')\n"
     "FROM (SELECT coalesce(shape, '(checkpoint)') AS shape, steps, lr, recipe,\n"
     "             count(*) AS runs, count(final_val_loss) AS finished,\n"
     "             count(DISTINCT seed) AS seeds, avg(final_val_loss) AS final_val_loss,\n"
     "             min(final_val_loss) AS final_val_loss_min,\n"
     "             max(final_val_loss) AS final_val_loss_max,\n"
     "             avg(final_train_loss) AS final_train_loss\n"
     "      FROM v_pipeline_training WHERE experiment = $1\n"
     "      GROUP BY 1, 2, 3, 4) t"},
};

/* Writes text (JSON) into a <script type="application/json"> element: every '<' becomes
 * \u003c, so no "</script>" or "<!--" inside a string can end the element early. JSON has
 * '<' only inside strings, where the escape means the same character. */
static void put_json(FILE *out, const char *text) {
    for (; *text; text++) {
        if (*text == '<')
            fputs("\\u003c", out);
        else
            fputc(*text, out);
    }
}

/* Runs sql with $1 = name; *json receives the single JSON value it returns (malloc'd), or
 * "null" when it returned no row or NULL. Errors: QS_EDB naming the query. */
static qs_status run_query(PGconn *c, const char *what, const char *sql, const char *name,
                           char **json, qs_error *err) {
    const char *params[1] = {name};
    PGresult *r = PQexecParams(c, sql, 1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        qs_status st = qs_error_set(err, QS_EDB, "report query %s: %s", what, PQerrorMessage(c));
        PQclear(r);
        return st;
    }
    const char *v = PQntuples(r) > 0 && !PQgetisnull(r, 0, 0) ? PQgetvalue(r, 0, 0) : "null";
    *json = strdup(v);
    PQclear(r);
    return *json ? QS_OK : qs_error_set(err, QS_ENOMEM, "report query %s", what);
}

/* 1 when the database has a relation called name (to_regclass), else 0. */
static int has_relation(PGconn *c, const char *name) {
    const char *params[1] = {name};
    PGresult *r =
        PQexecParams(c, "SELECT to_regclass($1) IS NOT NULL", 1, NULL, params, NULL, NULL, 0);
    int yes = PQresultStatus(r) == PGRES_TUPLES_OK && !strcmp(PQgetvalue(r, 0, 0), "t");
    PQclear(r);
    return yes;
}

/* A JSON string of text (malloc'd), via jansson; NULL when out of memory. */
static char *json_text(const char *text) {
    json_t *s = json_string(text);
    char *out = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;
    json_decref(s);
    return out;
}

/* A pipeline's trained models by their pipeline names in the page's data (trained_names.h),
 * not by folder or key: in the model of each "conditions" and "sensitivity" row (whose only
 * strings that can hold a training job's key or folder are the model's), and in the errors
 * of each "failed" row (not its job_key, which stays the key). *val is replaced. Errors:
 * QS_ENOMEM. */
static qs_status name_trained_models(const qsweep_trained_names *names, const char *query,
                                     char **val, qs_error *err) {
    if (!names->n) return QS_OK;
    char *out = NULL;
    if (strcmp(query, "failed") != 0) {
        out = qsweep_trained_names_apply(names, *val);
    } else {
        json_t *rows = json_loads(*val, JSON_DECODE_ANY, NULL);
        size_t i;
        json_t *row;
        json_array_foreach(rows, i, row) {
            static const char *const fields[] = {"last_error", "last_attempt_error"};
            for (size_t f = 0; f < 2; f++) {
                const char *e = json_string_value(json_object_get(row, fields[f]));
                char *named = e ? qsweep_trained_names_apply(names, e) : NULL;
                if (named) json_object_set_new(row, fields[f], json_string(named));
                free(named);
            }
        }
        out = rows ? json_dumps(rows, JSON_ENCODE_ANY) : NULL;
        json_decref(rows);
    }
    if (!out) return qs_error_set(err, QS_ENOMEM, "report: naming the trained models");
    free(*val);
    *val = out;
    return QS_OK;
}

/* Whether "methods" rows a and b are in one figure: the same model, format, format options,
 * quantize and mode. */
static bool same_figure(const json_t *a, const json_t *b) {
    static const char *const keys[] = {"model", "format", "format_options", "quantize", "mode"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        if (!json_equal(json_object_get(a, keys[k]), json_object_get(b, keys[k]))) return false;
    return true;
}

/* Whether "methods" rows a and b are one column: the same method with the same options. */
static bool same_setting(const json_t *a, const json_t *b) {
    return json_equal(json_object_get(a, "method"), json_object_get(b, "method")) &&
           json_equal(json_object_get(a, "method_options"), json_object_get(b, "method_options"));
}

/* Adds to each "methods" row (a figure's rows are adjacent, in the query's order) "label": its
 * setting label among the settings of its figure (kinds/method_label.h qs_method_setting_label), as
 * `qsweep results` heads its columns, so two settings of one method are two columns named by
 * the options that differ (gptq+damp=0.01, gptq+damp=0.1). A method the build does not know
 * keeps its name. *val is replaced. Errors: QS_ENOMEM. */
static qs_status label_method_settings(char **val, qs_error *err) {
    json_t *rows = json_loads(*val, JSON_DECODE_ANY, NULL);
    size_t n = json_array_size(rows);
    if (!n) {
        json_decref(rows);
        return QS_OK;
    }
    /* per figure [g0, g1): its distinct settings in set[g0 ..), the first row of each in
       first[g0 ..), and which[i] the setting of row i */
    qs_method_setting *set = calloc(n, sizeof *set);
    json_t **opts = calloc(n, sizeof *opts);
    size_t *first = calloc(n, sizeof *first), *which = calloc(n, sizeof *which);
    qs_status st =
        set && opts && first && which ? QS_OK : qs_error_set(err, QS_ENOMEM, "report: methods");
    for (size_t g0 = 0, g1; !st && g0 < n; g0 = g1) {
        size_t ns = 0;
        for (g1 = g0; g1 < n && same_figure(json_array_get(rows, g0), json_array_get(rows, g1));
             g1++) {
            json_t *row = json_array_get(rows, g1);
            size_t c = 0;
            while (c < ns && !same_setting(json_array_get(rows, first[g0 + c]), row))
                c++;
            if (c == ns) {
                const char *o = json_string_value(json_object_get(row, "method_options"));
                opts[g0 + c] = o ? json_loads(o, 0, NULL) : NULL;
                set[g0 + c] = (qs_method_setting){
                    qs_method_by_name(json_string_value(json_object_get(row, "method"))),
                    opts[g0 + c]};
                first[g0 + c] = g1;
                ns++;
            }
            which[g1] = c;
        }
        for (size_t i = g0; !st && i < g1; i++) {
            json_t *row = json_array_get(rows, i), *label = NULL;
            const qs_method_setting *me = &set[g0 + which[i]];
            char text[160];
            if (me->method < 0)
                label = json_incref(json_object_get(row, "method"));
            else if (qs_method_setting_label(me, &set[g0], ns, text, sizeof text) >= 0)
                label = json_string(text);
            if (!label || json_object_set_new(row, "label", label))
                st = qs_error_set(err, QS_ENOMEM, "report: methods");
        }
        for (size_t c = 0; c < ns; c++)
            json_decref(opts[g0 + c]);
    }
    char *out = st ? NULL : json_dumps(rows, JSON_ENCODE_ANY);
    if (!st && !out) st = qs_error_set(err, QS_ENOMEM, "report: methods");
    if (out) {
        free(*val);
        *val = out;
    }
    free(set);
    free(opts);
    free(first);
    free(which);
    json_decref(rows);
    return st;
}

/* Writes the page for experiment `name` to out. Errors: QS_ENOTFOUND (no such experiment),
 * QS_EDB, QS_ENOMEM. */
static qs_status write_report(PGconn *c, const char *name, FILE *out, qs_error *err) {
    char *exp = NULL;
    qs_status st = run_query(c, "experiment", Q_EXPERIMENT, name, &exp, err);
    if (st) return st;
    if (!strcmp(exp, "null")) {
        free(exp);
        return qs_error_set(err, QS_ENOTFOUND, "no experiment named '%s'", name);
    }
    enum {
        NQ = sizeof QUERIES / sizeof QUERIES[0],
        NT = sizeof TRAIN_QUERIES / sizeof TRAIN_QUERIES[0],
        NP = sizeof PIPE_QUERIES / sizeof PIPE_QUERIES[0]
    };
    char *vals[NQ + NT + NP] = {0};
    for (size_t i = 0; !st && i < NQ; i++)
        st = run_query(c, QUERIES[i].name, QUERIES[i].sql, name, &vals[i], err);
    qsweep_trained_names names = {0};
    if (!st) st = qsweep_trained_names_load(c, name, &names, err);
    for (size_t i = 0; !st && i < NQ; i++)
        if (!strcmp(QUERIES[i].name, "conditions") || !strcmp(QUERIES[i].name, "sensitivity") ||
            !strcmp(QUERIES[i].name, "methods") || !strcmp(QUERIES[i].name, "failed"))
            st = name_trained_models(&names, QUERIES[i].name, &vals[i], err);
    for (size_t i = 0; !st && i < NQ; i++)
        if (!strcmp(QUERIES[i].name, "methods")) st = label_method_settings(&vals[i], err);
    qsweep_trained_names_free(&names);
    int train = has_relation(c, "v_train_curves") && has_relation(c, "v_train_final");
    char *train_error = NULL;
    for (size_t i = 0; !st && train && i < NT; i++) {
        qs_error terr = {0};
        if (run_query(c, TRAIN_QUERIES[i].name, TRAIN_QUERIES[i].sql, name, &vals[NQ + i], &terr)) {
            free(train_error);
            train_error = json_text(terr.msg);
            vals[NQ + i] = strdup("[]");
            if (!vals[NQ + i] || !train_error) st = qs_error_set(err, QS_ENOMEM, "report");
        }
    }
    int pipe = has_relation(c, "v_pipeline_summary") && has_relation(c, "v_pipeline_training");
    for (size_t i = 0; !st && pipe && i < NP; i++)
        st = run_query(c, PIPE_QUERIES[i].name, PIPE_QUERIES[i].sql, name, &vals[NQ + NT + i],
                       err);
    if (st) goto done;

    time_t now = time(NULL);
    char stamp[64];
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
          "<meta name=\"generator\" content=\"qsweep report\">\n<title>qsweep report</title>\n"
          "<style>\n",
          out);
    fputs(qsweep_report_css, out);
    fputs("</style></head><body>\n<div id=\"report\"></div><div id=\"tip\"></div>\n"
          "<noscript>This report draws its figures with JavaScript; the numbers are in the "
          "qsweep-data element of this file.</noscript>\n"
          "<script type=\"application/json\" id=\"qsweep-data\">\n{\"experiment\": ",
          out);
    put_json(out, exp);
    fprintf(out, ",\n\"generated_at\": \"%s\", \"qsweep_version\": \"0.1.0 (numerics %s)\"", stamp,
            QC_NUMERICS_VERSION);
    for (size_t i = 0; i < NQ; i++) {
        fprintf(out, ",\n\"%s\": ", QUERIES[i].name);
        put_json(out, vals[i]);
    }
    for (size_t i = 0; i < NT; i++) {
        fprintf(out, ",\n\"%s\": ", TRAIN_QUERIES[i].name);
        put_json(out, train ? vals[NQ + i] : "null");
    }
    for (size_t i = 0; i < NP; i++) {
        fprintf(out, ",\n\"%s\": ", PIPE_QUERIES[i].name);
        put_json(out, pipe ? vals[NQ + NT + i] : "null");
    }
    fputs(",\n\"train_error\": ", out);
    put_json(out, train_error ? train_error : "null");
    fputs(",\n\"queries\": {", out);
    for (size_t i = 0; i < NQ + NT + NP + 1; i++) {
        const report_query *q = i < NQ             ? &QUERIES[i]
                                : i < NQ + NT      ? &TRAIN_QUERIES[i - NQ]
                                : i < NQ + NT + NP ? &PIPE_QUERIES[i - NQ - NT]
                                                   : NULL;
        char *sql = json_text(q ? q->sql : Q_EXPERIMENT);
        if (!sql) {
            st = qs_error_set(err, QS_ENOMEM, "report");
            break;
        }
        fprintf(out, "%s\n  \"%s\": ", i ? "," : "", q ? q->name : "experiment");
        put_json(out, sql);
        free(sql);
    }
    fputs("}}\n</script>\n<script>\n", out);
    fputs(qsweep_report_js, out);
    fputs("</script>\n</body></html>\n", out);
done:
    free(train_error);
    for (size_t i = 0; i < NQ + NT + NP; i++)
        free(vals[i]);
    free(exp);
    return st;
}

static void report_usage(FILE *out) {
    fprintf(out,
            "usage: qsweep report EXPERIMENT [-o FILE] [--db CONNINFO]\n"
            "  Writes one self-contained HTML page (no network needed to view it): per (model,\n"
            "  format, quantize) a block x component heatmap (layer and leave_one_out_layer\n"
            "  modes), bars (component and leave_one_out) or a block strip (block, cumulative,\n"
            "  leave_one_out_block), coloured by\n"
            "  mean KL (switchable to perplexity increase, p99 KL, top-1, SQNR) with values on\n"
            "  hover; the baseline and run conditions; counts by state and the failed jobs with\n"
            "  their last errors; training curves where the training views exist; for a\n"
            "  pipeline (sweeps of trained models), a heatmap of parts x (format, quantize) x\n"
            "  training recipe, each cell the mean over seeds with their spread on hover. The page\n"
            "  shows the SQL query behind each figure.\n"
            "  -o, --output FILE  where to write it (default EXPERIMENT.html); written whole then\n"
            "                     renamed over FILE: a FILE that is a symlink, device, FIFO or\n"
            "                     directory is refused (exit 2)\n"
            "  --db CONNINFO      libpq connection string (default $QSWEEP_DB, else the\n"
            "                     private cluster of qsweep run when it is running)\n");
}

int qsweep_cmd_report(int argc, char **argv) {
    static const struct option opts[] = {{"output", required_argument, 0, 'o'},
                                         {"db", required_argument, 0, 'd'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *db = NULL, *output = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "o:d:h", opts, NULL)) != -1) {
        switch (c) {
        case 'o':
            output = optarg;
            break;
        case 'd':
            db = optarg;
            break;
        case 'h':
            report_usage(stdout);
            return QS_EXIT_OK;
        default:
            report_usage(stderr);
            return QS_EXIT_USAGE;
        }
    }
    if (optind != argc - 1 || (output && !*output)) {
        report_usage(stderr);
        return QS_EXIT_USAGE;
    }
    /* --db, $QSWEEP_DB, else the private cluster of qsweep run, as results and status */
    const char *conninfo = qsweep_find_db(db, "report");
    if (!conninfo) return QS_EXIT_USAGE;
    const char *name = argv[optind];
    char path[4096];
    snprintf(path, sizeof path, "%s%s", output ? output : name, output ? "" : ".html");
    qs_error err = {0};
    qc_store *s = NULL;
    qs_status st = qsweep_open_existing_store(conninfo, "report", &s, &err);
    /* written whole under a unique temporary name, then renamed: a failed report leaves no
       half page and an older page at path stays as it was; a path that is not a regular file
       (a device, FIFO, directory or symlink) is refused rather than replaced */
    qs_replace_file r = {0};
    if (!st) st = qs_replace_file_open(path, NULL, &r, &err);
    if (!st) {
        st = write_report(qc_store_pgconn(s), name, r.f, &err);
        if (st)
            qs_replace_file_abort(&r);
        else
            st = qs_replace_file_commit(&r, &err);
    }
    qc_store_close(s);
    if (st) return qsweep_fail("report", &err);
    printf("report of %s written to %s\n", name, path);
    return QS_EXIT_OK;
}
