/* qsweep results EXPERIMENT: the sensitivity tables, from the v_sensitivity view
 * (schema/002_views.sql). The table, the CSV and the JSON come from one SQL query, which is
 * printed after the table so the same numbers can be read back with psql. */
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "pipeline_results.h"
#include "result_rows.h"
#include "results_methods.h"
#include "trained_names.h"

/* A compare job (a grid's compare_to, kinds/sensitivity.h reference_model) shows as format
 * "as-stored", mode "compare_to" and its reference's file name as the part: the model as
 * stored against the reference's baseline. */
/* One row per (model, format, options (and fuse), quantize, mode, part): the part's perplexity, its
 * baseline's, the difference, KL mean and p99 against the baseline, top-1 agreement, the mean
 * output SQNR (dB) of the linears the job quantized (v_sqnr, schema/006_sqnr_view.sql: the
 * mean of their finite per-linear figures; NULL when the job did not measure sqnr), and the
 * GEMM path(s) its jobs ran with (v_gemm_path, schema/080_gemm_path.sql: "cpu", "bf16", ...;
 * comma-separated when they differ; CSV and JSON only). Sorted
 * by damage within each (model, format, options, quantize, mode): mean KL divergence from the
 * baseline first (a paired measure, steadier than a difference of two perplexities on a few
 * thousand tokens), then the perplexity increase (the order when KL was not measured). The
 * experiment name is bound as $1 (or spliced in as an SQL literal for psql). */
/* The options column: the format's options, with "fuse" (the fused groups sharing a tensor
 * scale, kinds/sensitivity.h) and "method" with its options (kinds/method.h: absent for rtn)
 * added when the job has them, so fused and unfused jobs, and each method's, are apart. */
#define QSWEEP_RESULTS_OPTIONS                                                                     \
    "CASE WHEN j.spec ? 'fuse' OR j.spec ? 'method' THEN ((j.spec -> 'format_options') || "        \
    "CASE WHEN j.spec ? 'fuse' THEN jsonb_build_object('fuse', j.spec -> 'fuse') ELSE '{}' END || " \
    "CASE WHEN j.spec ? 'method' THEN jsonb_build_object('method', j.spec -> 'method') || "        \
    "coalesce(j.spec -> 'method_options', '{}') ELSE '{}' END)::text "                             \
    "ELSE j.spec ->> 'format_options' END"
/* When the experiment's jobs ran on more than one numerics path (v_numerics_path, schema/110),
 * each job's path joins its options, so the jobs of each path are a sweep of their own: a
 * table ranks components of one path only, never a job of one path against another's (their
 * figures differ in the last digits, a GPU path's by its BF16 activations). One path: the
 * options as they were. */
#define QSWEEP_RESULTS_OPTIONS_BY_PATH                                                             \
    "CASE WHEN (SELECT count(DISTINCT n2.path) FROM v_numerics_path n2 JOIN experiment_jobs ej2 "  \
    "ON ej2.job = n2.job_id JOIN experiments e2 ON e2.id = ej2.experiment WHERE e2.name = "        \
    "s.experiment) > 1 THEN ((" QSWEEP_RESULTS_OPTIONS ")::jsonb || "                              \
    "jsonb_build_object('numerics_path', coalesce(np.path, 'unknown')))::text "                    \
    "ELSE " QSWEEP_RESULTS_OPTIONS " END"
static const char *const RESULTS_SQL =
    "SELECT regexp_replace(s.model, '^.*/', '') AS model,\n"
    "       CASE WHEN j.spec ? 'reference_model' THEN 'as-stored' ELSE s.format END AS format,\n"
    "       " QSWEEP_RESULTS_OPTIONS_BY_PATH " AS options, s.quantize,\n"
    "       CASE WHEN j.spec ? 'reference_model' THEN 'compare_to' ELSE s.mode END AS mode,\n"
    "       CASE WHEN j.spec ? 'reference_model' THEN\n"
    "            regexp_replace(j.spec -> 'reference_model' ->> 'path', '^.*/', '')\n"
    "            ELSE s.part END AS part,\n"
    "       max(s.baseline_value) FILTER (WHERE s.metric = 'ppl') AS baseline_ppl,\n"
    "       max(s.value) FILTER (WHERE s.metric = 'ppl') AS ppl,\n"
    "       max(s.delta) FILTER (WHERE s.metric = 'ppl') AS delta_ppl,\n"
    "       max(s.value) FILTER (WHERE s.metric = 'kl_mean') AS kl_mean,\n"
    "       max(s.value) FILTER (WHERE s.metric = 'kl_p99') AS kl_p99,\n"
    "       max(s.value) FILTER (WHERE s.metric = 'top1') AS top1,\n"
    "       max(q.sqnr_db) AS sqnr_db,\n"
    "       string_agg(DISTINCT g.gemm_path, ',' ORDER BY g.gemm_path) AS gemm_path\n"
    "FROM v_sensitivity s JOIN jobs j ON j.id = s.job_id\n"
    "LEFT JOIN v_gemm_path g ON g.job_id = s.job_id\n"
    "LEFT JOIN v_numerics_path np ON np.job_id = s.job_id\n"
    "LEFT JOIN (SELECT job_id, avg(sqnr_db) AS sqnr_db FROM v_sqnr\n"
    "           WHERE sqnr_db < 'Infinity' GROUP BY job_id) q ON q.job_id = s.job_id\n"
    "WHERE s.experiment = %s\n"
    "GROUP BY 1, 2, 3, 4, 5, 6\n"
    "ORDER BY 1, 2, 3, 4, 5, kl_mean DESC NULLS LAST, delta_ppl DESC NULLS LAST";

enum {
    C_MODEL,
    C_FORMAT,
    C_OPTIONS,
    C_QUANT,
    C_MODE,
    C_PART,
    C_BASE,
    C_PPL,
    C_DELTA,
    C_KL,
    C_KL99,
    C_TOP1,
    C_SQNR,
    C_GEMM,
    C_N
};
static const char *const col_names[C_N] = {"model",     "format",  "options",      "quantize",
                                           "mode",      "part",    "baseline_ppl", "ppl",
                                           "delta_ppl", "kl_mean", "kl_p99",       "top1",
                                           "sqnr_db",   "gemm_path"};

/* How each column goes into JSON: options as the stored JSON, figures as reals. */
static const qsweep_col_type col_types[C_N] = {
    QSWEEP_COL_TEXT, QSWEEP_COL_TEXT, QSWEEP_COL_JSON, QSWEEP_COL_TEXT, QSWEEP_COL_TEXT,
    QSWEEP_COL_TEXT, QSWEEP_COL_REAL, QSWEEP_COL_REAL, QSWEEP_COL_REAL, QSWEEP_COL_REAL,
    QSWEEP_COL_REAL, QSWEEP_COL_REAL, QSWEEP_COL_REAL, QSWEEP_COL_TEXT};

static int same_group(PGresult *r, int a, int b) {
    for (int c = C_MODEL; c <= C_MODE; c++)
        if (strcmp(PQgetvalue(r, a, c), PQgetvalue(r, b, c))) return 0;
    return 1;
}

static void print_table(PGresult *r, FILE *out) {
    int n = PQntuples(r);
    /* parts as wide as the widest (a policy's part is its map's 16-digit id) */
    int pw = 8;
    for (int i = 0; i < n; i++)
        if ((int)strlen(PQgetvalue(r, i, C_PART)) > pw) pw = (int)strlen(PQgetvalue(r, i, C_PART));
    for (int i = 0; i < n; i++) {
        if (i == 0 || !same_group(r, i, i - 1)) {
            double base = qsweep_col_num(r, i, C_BASE);
            fprintf(out, "\n%s  %s %s  %s  %s-wise   baseline (unquantized) ppl %.4f\n",
                    PQgetvalue(r, i, C_MODEL), PQgetvalue(r, i, C_FORMAT),
                    PQgetvalue(r, i, C_OPTIONS), PQgetvalue(r, i, C_QUANT),
                    PQgetvalue(r, i, C_MODE), base);
            fprintf(out, "  %-*s %12s %12s %9s %11s %11s %8s %8s\n", pw, "part", "ppl", "delta",
                    "delta%", "KL mean", "KL p99", "top-1", "SQNR dB");
        }
        double base = qsweep_col_num(r, i, C_BASE), ppl = qsweep_col_num(r, i, C_PPL),
               d = qsweep_col_num(r, i, C_DELTA), top1 = qsweep_col_num(r, i, C_TOP1);
        char top1s[16];
        if (isnan(top1)) /* the job did not measure top-1 (metrics without top1) */
            snprintf(top1s, sizeof top1s, "%8s", "-");
        else
            snprintf(top1s, sizeof top1s, "%7.2f%%", 100.0 * top1);
        double sqnr = qsweep_col_num(r, i, C_SQNR);
        char sqnrs[16];
        if (isnan(sqnr)) /* the job did not measure sqnr */
            snprintf(sqnrs, sizeof sqnrs, "%8s", "-");
        else
            snprintf(sqnrs, sizeof sqnrs, "%8.2f", sqnr);
        fprintf(out, "  %-*s %12.4f %+12.4f %+8.2f%% %11.6f %11.6f %s %s\n", pw,
                PQgetvalue(r, i, C_PART), ppl, d, 100.0 * d / base,
                qsweep_kl_shown(qsweep_col_num(r, i, C_KL), 6),
                qsweep_kl_shown(qsweep_col_num(r, i, C_KL99), 6), top1s, sqnrs);
    }
}

/* Under the tables: the experiment's failed jobs, which no table shows, with their count and
 * how many failed because their model's file changed (a digest that no longer matches the
 * grid's or its training job's record, or a change while the job ran: worker/jobs/jobs.c),
 * each with its error (the first 20). A job of a pipeline's trained model (or the training
 * job that makes it) says which model by its pipeline name, which also replaces the model's
 * folder and its training job's key in the error (trained_names.h); the store keeps the
 * error as the worker wrote it. */
static qs_status print_failed(PGconn *c, const char *name, FILE *out, qs_error *err) {
    const char *params[1] = {name};
    PGresult *r = PQexecParams(
        c,
        "SELECT j.id, j.kind, j.attempts_used, j.max_attempts, COALESCE(j.last_error, ''), "
        "COALESCE(j.last_error, '') ~ '(changed while the job ran|file changed since the grid|"
        "recorded when its training job)', "
        "CASE WHEN j.kind = 'train' THEN j.job_key ELSE j.spec -> 'model' ->> 'trained_by' END "
        "FROM jobs j JOIN experiment_jobs ej ON ej.job = j.id JOIN experiments e ON "
        "e.id = ej.experiment WHERE e.name = $1 AND j.state = 'failed' ORDER BY j.id",
        1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        qs_status st = qs_error_set(err, QS_EDB, "failed jobs of %s: %s", name, PQerrorMessage(c));
        PQclear(r);
        return st;
    }
    int n = PQntuples(r), changed = 0;
    for (int i = 0; i < n; i++)
        changed += PQgetvalue(r, i, 5)[0] == 't';
    qsweep_trained_names names = {0};
    qs_status st = n ? qsweep_trained_names_load(c, name, &names, err) : QS_OK;
    if (st) {
        PQclear(r);
        return st;
    }
    if (n) {
        fprintf(out, "\n%d failed job%s of experiment %s, not in the tables above", n,
                n == 1 ? "" : "s", name);
        if (changed) fprintf(out, " (%d because their model changed)", changed);
        fprintf(out, ":\n");
    }
    for (int i = 0; i < n && i < 20 && !st; i++) {
        const char *model = qsweep_trained_name_by_key(&names, PQgetvalue(r, i, 6));
        char *error = qsweep_trained_names_apply(&names, PQgetvalue(r, i, 4));
        if (!error) {
            st = qs_error_set(err, QS_ENOMEM, "failed jobs of %s: out of memory", name);
            break;
        }
        fprintf(out, "  job %s (%s%s%s, %s of %s attempts): %s\n", PQgetvalue(r, i, 0),
                PQgetvalue(r, i, 1), model ? " of " : "", model ? model : "", PQgetvalue(r, i, 2),
                PQgetvalue(r, i, 3), error);
        free(error);
    }
    if (n > 20 && !st) fprintf(out, "  ... and %d more (v_failed_jobs)\n", n - 20);
    qsweep_trained_names_free(&names);
    PQclear(r);
    return st;
}

/* Under the tables, only when the experiment's jobs ran on more than one numerics path
 * (v_numerics_path, schema/110_numerics_path.sql: a CPU kernel family, or a GPU's GEMM path):
 * each path and its count of jobs. Results of different paths differ in their last digits
 * (docs/performance.md), so a mixed sweep is flagged rather than silently averaged.
 * Errors: QS_EDB. */
static qs_status print_paths(PGconn *c, const char *name, FILE *out, qs_error *err) {
    const char *params[1] = {name};
    PGresult *r = PQexecParams(
        c,
        "SELECT n.path, count(*) FROM v_numerics_path n JOIN experiment_jobs ej ON "
        "ej.job = n.job_id JOIN experiments e ON e.id = ej.experiment WHERE e.name = $1 "
        "GROUP BY 1 ORDER BY 2 DESC, 1",
        1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        qs_status st =
            qs_error_set(err, QS_EDB, "numerics paths of %s: %s", name, PQerrorMessage(c));
        PQclear(r);
        return st;
    }
    int n = PQntuples(r);
    if (n > 1) {
        fprintf(out,
                "\nmixed numerics: the jobs of experiment %s ran on %d paths, whose results "
                "differ in the last digits (docs/performance.md); no table ranks one path's "
                "jobs against another's: each path is a sweep of its own (\"numerics_path\" "
                "in its options):\n",
                name, n);
        for (int i = 0; i < n; i++)
            fprintf(out, "  %s: %s job%s\n", PQgetvalue(r, i, 0), PQgetvalue(r, i, 1),
                    strcmp(PQgetvalue(r, i, 1), "1") ? "s" : "");
    }
    PQclear(r);
    return QS_OK;
}

/* "N measured (component 7, cumulative 30)": the rows counted by mode, in order of first
 * appearance. */
static void print_counts(PGresult *r, const char *name, FILE *out) {
    int n = PQntuples(r), seen = 0;
    fprintf(out, "experiment %s: %d eval jobs measured", name, n);
    for (int i = 0; i < n; i++) {
        const char *mode = PQgetvalue(r, i, C_MODE);
        int first = 1, count = 0;
        for (int j = 0; j < n; j++) {
            if (strcmp(PQgetvalue(r, j, C_MODE), mode)) continue;
            if (j < i) first = 0;
            count++;
        }
        if (!first) continue;
        fprintf(out, "%s%s %d", seen++ ? ", " : " (", mode, count);
    }
    fprintf(out, "%s\n", seen ? ")" : "");
}

qs_status qsweep_print_results(qc_store *db, const char *name, int format, FILE *out,
                               qs_error *err) {
    PGconn *c = qc_store_pgconn(db);
    qc_progress *prog = NULL;
    size_t np = 0;
    qs_status st = qc_store_progress(db, name, &prog, &np, err);
    free(prog);
    if (st) return st;
    /* a pipeline (sweeps of trained models) holds train jobs too: its layout comes first */
    int pipeline = 0, printed = 0;
    if ((st = qsweep_is_pipeline_experiment(db, name, &pipeline, err))) return st;
    if (pipeline) {
        if ((st = qsweep_print_pipeline_results(db, name, format, out, err))) return st;
        printed = 1;
    }
    /* another kind's own layout (cli/kind_table.c), whatever it holds */
    if (!printed && (st = qsweep_print_kind_tables(db, name, format, out, &printed, err)))
        return st;
    if (printed)
        return format == 0 && !(st = print_failed(c, name, out, err)) ? print_paths(c, name, out, err)
                                                                       : st;
    char sql[8192];
    snprintf(sql, sizeof sql, RESULTS_SQL, "$1");
    const char *params[1] = {name};
    PGresult *r = PQexecParams(c, sql, 1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        st = qs_error_set(err, QS_EDB, "results of %s: %s", name, PQerrorMessage(c));
        PQclear(r);
        return st;
    }
    if (format == 1) {
        qsweep_print_csv_rows(r, col_names, C_N, out);
    } else if (format == 2) {
        st = qsweep_print_json_rows(r, col_names, col_types, C_N, out, err);
    } else {
        print_counts(r, name, out);
        print_table(r, out);
        st = qsweep_print_method_tables(c, name, out, err);
        qsweep_print_views_query(c, "", RESULTS_SQL, name, out);
        if (!st) st = print_failed(c, name, out, err);
        if (!st) st = print_paths(c, name, out, err);
    }
    PQclear(r);
    return st;
}

static void results_usage(FILE *out) {
    fprintf(
        out,
        "usage: qsweep results EXPERIMENT [--csv | --json] [--db CONNINFO]\n"
        "  One table per (model, format, quantize, isolation mode): the baseline perplexity, then\n"
        "  each isolated part with its perplexity, the increase over the baseline, KL divergence\n"
        "  (mean, p99) and top-1 agreement against the baseline, sorted by damage (KL mean,\n"
        "  then the perplexity increase). A training experiment: per shape and learning rate,\n"
        "  each recipe's final validation loss over seeds and its gap to bf16, then the curves.\n"
        "  A pipeline (sweeps of trained models): per part, each training recipe's mean KL and\n"
        "  perplexity increase side by side, mean over seeds +- half the range (docs/results.md).\n"
        "  --csv / --json   machine-readable output of the same rows\n"
        "  --db CONNINFO    libpq connection string (default $QSWEEP_DB)\n");
}

int qsweep_cmd_results(int argc, char **argv) {
    static const struct option opts[] = {{"csv", no_argument, 0, 'c'},
                                         {"json", no_argument, 0, 'j'},
                                         {"db", required_argument, 0, 'd'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int format = 0, c;
    const char *db = NULL;
    optind = 1;
    while ((c = getopt_long(argc, argv, "cjd:h", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
        case 'j':
            if (format && format != (c == 'c' ? 1 : 2)) {
                fprintf(stderr, "qsweep results: --csv and --json exclude each other\n");
                results_usage(stderr);
                return QS_EXIT_USAGE;
            }
            format = c == 'c' ? 1 : 2;
            break;
        case 'd':
            db = optarg;
            break;
        case 'h':
            results_usage(stdout);
            return QS_EXIT_OK;
        default:
            results_usage(stderr);
            return QS_EXIT_USAGE;
        }
    }
    if (optind != argc - 1) {
        results_usage(stderr);
        return QS_EXIT_USAGE;
    }
    const char *conninfo = qsweep_find_db(db, "results");
    if (!conninfo) return QS_EXIT_USAGE;
    qs_error err = {0};
    qc_store *s = NULL;
    qs_status st = qsweep_open_existing_store(conninfo, "results", &s, &err);
    if (!st) st = qsweep_print_results(s, argv[optind], format, stdout, &err);
    qc_store_close(s);
    return st ? qsweep_fail("results", &err) : QS_EXIT_OK;
}
