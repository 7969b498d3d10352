/* qsweep results for training experiments: per (shape, learning rate) the
 * final validation loss of each recipe, mean and spread over seeds, and its gap to bf16
 * (absolute and relative, from v_train_final: schema/020_train_views.sql); then each run's
 * training-loss curve as a terminal sparkline on one scale for all runs. The same rows as CSV
 * or JSON with --csv / --json.
 *
 * An experiment is a training one when any of its jobs is a `train` job; it gets this layout
 * whatever it holds, with what is missing said: runs not finished or failed (with their
 * errors), no validation loss (val_fraction 0: the final training loss is shown instead), no
 * bf16 run of the same shape, learning rate and seed to measure a gap against. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "result_rows.h"

/* One row per (shape, lr, recipe) of metric $2: seeds, mean and sample standard deviation of
 * the value, how many seeds have a bf16 run to compare with, and the gap's mean and spread
 * over those (NULL when none has). The experiment name is $1 (or spliced in as SQL literals
 * for psql). */
static const char *const TRAIN_SQL =
    "SELECT coalesce(shape, '(checkpoint)') AS shape, lr, recipe, metric, count(*) AS seeds,\n"
    "       avg(value) AS value, coalesce(stddev_samp(value), 0) AS value_sd,\n"
    "       count(gap) AS seeds_with_bf16,\n"
    "       avg(gap) AS gap,\n"
    "       CASE WHEN count(gap) > 0 THEN coalesce(stddev_samp(gap), 0) END AS gap_sd,\n"
    "       avg(rel_gap) AS rel_gap,\n"
    "       CASE WHEN count(rel_gap) > 0 THEN coalesce(stddev_samp(rel_gap), 0) END AS rel_gap_sd\n"
    "FROM v_train_final\n"
    "WHERE experiment = %s AND metric = %s\n"
    "GROUP BY 1, lr, recipe, metric\n"
    "ORDER BY 1, lr, avg(value)";

enum {
    C_SHAPE,
    C_LR,
    C_RECIPE,
    C_METRIC,
    C_SEEDS,
    C_VALUE,
    C_SD,
    C_WITH,
    C_GAP,
    C_GAP_SD,
    C_REL,
    C_REL_SD,
    C_N
};
static const char *const col_names[C_N] = {"shape", "lr",     "recipe",   "metric",
                                           "seeds", "value",  "value_sd", "seeds_with_bf16",
                                           "gap",   "gap_sd", "rel_gap",  "rel_gap_sd"};

/* Which final metric there is: final_val_loss, else final_train_loss (no validation windows). */
static const char *const METRIC_SQL = "SELECT count(*) FILTER (WHERE metric = 'final_val_loss'),\n"
                                      "       count(*) FILTER (WHERE metric = 'final_train_loss')\n"
                                      "FROM v_train_final WHERE experiment = $1";

static const char *const KIND_SQL =
    "SELECT count(*) FILTER (WHERE j.kind = 'train'), count(*)\n"
    "FROM experiments e JOIN experiment_jobs ej ON ej.experiment = e.id\n"
    "JOIN jobs j ON j.id = ej.job WHERE e.name = $1";

static const char *const STATES_SQL =
    "SELECT total, pending, running, succeeded, failed, cancelled\n"
    "FROM v_experiment_progress WHERE experiment = $1";

static const char *const FAILED_SQL =
    "SELECT coalesce(j.spec -> 'shape' ->> 'name', '(checkpoint)'), j.spec -> 'recipe' ->> "
    "'name',\n"
    "       j.spec ->> 'lr', j.spec ->> 'seed', coalesce(j.last_error, '(no error recorded)')\n"
    "FROM experiments e JOIN experiment_jobs ej ON ej.experiment = e.id\n"
    "JOIN jobs j ON j.id = ej.job\n"
    "WHERE e.name = $1 AND j.kind = 'train' AND j.state = 'failed' ORDER BY j.id LIMIT 10";

/* The runs without final metrics (failed, queued, running, cancelled), one row each in the
 * columns of TRAIN_SQL (metric and values NULL) followed by state, seed and error, for --csv
 * and --json: a failed run is a result too. */
static const char *const UNFINISHED_SQL =
    "SELECT coalesce(j.spec -> 'shape' ->> 'name', '(checkpoint)'), (j.spec ->> 'lr')::float8,\n"
    "       j.spec -> 'recipe' ->> 'name', NULL, 1, NULL, NULL, 0, NULL, NULL, NULL, NULL,\n"
    "       j.state, j.spec ->> 'seed', j.last_error\n"
    "FROM experiments e JOIN experiment_jobs ej ON ej.experiment = e.id\n"
    "JOIN jobs j ON j.id = ej.job\n"
    "WHERE e.name = $1 AND j.kind = 'train' AND j.state <> 'succeeded' ORDER BY j.id";

/* Columns after TRAIN_SQL's in --csv / --json: the run's state ("succeeded" for the rows of
 * final metrics), its seed and its error (both empty / null on aggregated rows). */
enum { X_STATE = C_N, X_SEED, X_ERROR, X_N };
static const char *const x_names[X_N - C_N] = {"state", "seed", "error"};

static const char *const CURVES_SQL =
    "SELECT recipe, seed, string_agg(value::text, ',' ORDER BY step)\n"
    "FROM v_train_curves WHERE experiment = $1 AND metric = 'train_loss'\n"
    "GROUP BY job_id, recipe, seed ORDER BY recipe, seed";

/* How each column goes into JSON: seed counts as integers, lr and figures as reals. */
static const qsweep_col_type col_types[C_N] = {QSWEEP_COL_TEXT, QSWEEP_COL_REAL, QSWEEP_COL_TEXT,
                                               QSWEEP_COL_TEXT, QSWEEP_COL_INT,  QSWEEP_COL_REAL,
                                               QSWEEP_COL_REAL, QSWEEP_COL_INT,  QSWEEP_COL_REAL,
                                               QSWEEP_COL_REAL, QSWEEP_COL_REAL, QSWEEP_COL_REAL};

static PGresult *query(PGconn *c, const char *sql, int n, const char *const *params,
                       const char *what, qs_status *st, qs_error *err) {
    PGresult *r = PQexecParams(c, sql, n, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        *st = qs_error_set(err, QS_EDB, "%s: %s", what, PQerrorMessage(c));
        PQclear(r);
        return NULL;
    }
    *st = QS_OK;
    return r;
}

qs_status qsweep_is_train_experiment(qc_store *db, const char *name, int *is_train, qs_error *err) {
    PGconn *c = qc_store_pgconn(db);
    const char *params[1] = {name};
    qs_status st;
    *is_train = 0;
    PGresult *r = query(c, KIND_SQL, 1, params, "experiment kind", &st, err);
    if (!r) return st;
    *is_train = qsweep_col_num(r, 0, 0) > 0;
    PQclear(r);
    return QS_OK;
}

/* Eight levels, lowest to highest (U+2581..U+2588). */
static const char *const BARS[8] = {"\u2581", "\u2582", "\u2583", "\u2584",
                                    "\u2585", "\u2586", "\u2587", "\u2588"};

static void print_curves(PGresult *r, FILE *out) {
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < PQntuples(r); i++) {
        const char *p = PQgetvalue(r, i, 2);
        while (*p) {
            double v = strtod(p, (char **)&p);
            if (isfinite(v)) {
                lo = v < lo ? v : lo;
                hi = v > hi ? v : hi;
            }
            if (*p == ',') p++;
        }
    }
    if (!(hi >= lo)) return;
    fprintf(out, "\ntraining loss per run (one scale: %.3f to %.3f)\n", lo, hi);
    for (int i = 0; i < PQntuples(r); i++) {
        fprintf(out, "  %-18s seed %-4s ", PQgetvalue(r, i, 0), PQgetvalue(r, i, 1));
        const char *p = PQgetvalue(r, i, 2);
        double first = NAN, last = NAN;
        while (*p) {
            double v = strtod(p, (char **)&p);
            if (isnan(first)) first = v;
            last = v;
            int k = hi > lo ? (int)((v - lo) / (hi - lo) * 7.999) : 0;
            fputs(BARS[k < 0 ? 0 : k > 7 ? 7 : k], out);
            if (*p == ',') p++;
        }
        fprintf(out, "  %.3f -> %.3f\n", first, last);
    }
}

/* Field c of row i of r (a TRAIN_SQL result when unfinished is 0, an UNFINISHED_SQL one when
 * 1), NULL when SQL NULL or not a column of r. */
static const char *field(PGresult *r, int unfinished, int i, int c) {
    if (!unfinished && c >= C_N) return c == X_STATE ? "succeeded" : NULL;
    return PQgetisnull(r, i, c) ? NULL : PQgetvalue(r, i, c);
}

/* The lr as %g: the spec's JSON number may read 0.0030000000000000001. */
static void lr_text(const char *v, char *buf, size_t cap) {
    snprintf(buf, cap, "%g", strtod(v, NULL));
}

static void print_csv(PGresult *r, PGresult *u, FILE *out) {
    for (int c = 0; c < X_N; c++)
        fprintf(out, "%s%s", c ? "," : "", c < C_N ? col_names[c] : x_names[c - C_N]);
    fputc('\n', out);
    for (int k = 0; k < 2; k++) {
        PGresult *q = k ? u : r;
        for (int i = 0; q && i < PQntuples(q); i++) {
            for (int c = 0; c < X_N; c++) {
                if (c) fputc(',', out);
                const char *v = field(q, k, i, c);
                char lr[32];
                if (v && c == C_LR) lr_text(v, lr, sizeof lr), v = lr;
                qsweep_csv_field(v ? v : "", out); /* NULL prints as the empty field */
            }
            fputc('\n', out);
        }
    }
}

static qs_status print_json(PGresult *r, PGresult *u, FILE *out, qs_error *err) {
    json_t *arr = json_array();
    for (int k = 0; k < 2; k++) {
        PGresult *q = k ? u : r;
        for (int i = 0; arr && q && i < PQntuples(q); i++) {
            json_t *o = json_object();
            for (int c = 0; c < X_N; c++) {
                const char *s = field(q, k, i, c);
                json_t *v;
                if (!s)
                    v = json_null();
                else if (c == X_SEED || (c < C_N && col_types[c] == QSWEEP_COL_INT))
                    v = json_integer(strtoll(s, NULL, 10));
                else if (c < C_N && col_types[c] == QSWEEP_COL_REAL)
                    v = json_real(strtod(s, NULL));
                else
                    v = json_string(s);
                json_object_set_new(o, c < C_N ? col_names[c] : x_names[c - C_N],
                                    v ? v : json_null());
            }
            json_array_append_new(arr, o);
        }
    }
    if (!arr || json_dumpf(arr, out, JSON_INDENT(2)) != 0) {
        json_decref(arr);
        return qs_error_set(err, QS_EIO, "cannot write the JSON output");
    }
    fputc('\n', out);
    json_decref(arr);
    return QS_OK;
}

static void print_table(PGresult *r, const char *metric, FILE *out) {
    int n = PQntuples(r);
    fprintf(out,
            "%s per recipe (mean +- sd over seeds), gap to the bf16 run of the same "
            "shape, lr and seed\n",
            strcmp(metric, "final_val_loss") ? "final training loss" : "final validation loss");
    for (int i = 0; i < n; i++) {
        if (i == 0 || strcmp(PQgetvalue(r, i, C_SHAPE), PQgetvalue(r, i - 1, C_SHAPE)) ||
            strcmp(PQgetvalue(r, i, C_LR), PQgetvalue(r, i - 1, C_LR))) {
            fprintf(out, "\n%s  lr %s\n", PQgetvalue(r, i, C_SHAPE), PQgetvalue(r, i, C_LR));
            fprintf(out, "  %-18s %5s %20s %22s %18s\n", "recipe", "seeds",
                    strcmp(metric, "final_val_loss") ? "train loss" : "val loss", "gap to bf16",
                    "relative gap");
        }
        long with = strtol(PQgetvalue(r, i, C_WITH), NULL, 10),
             seeds = strtol(PQgetvalue(r, i, C_SEEDS), NULL, 10);
        /* One seed has no spread: say so rather than print +- 0.0000. */
        if (seeds > 1)
            fprintf(out, "  %-18s %5s %11.4f +- %-6.4f", PQgetvalue(r, i, C_RECIPE),
                    PQgetvalue(r, i, C_SEEDS), qsweep_col_num(r, i, C_VALUE),
                    qsweep_col_num(r, i, C_SD));
        else
            fprintf(out, "  %-18s %5s %11.4f %-9s", PQgetvalue(r, i, C_RECIPE),
                    PQgetvalue(r, i, C_SEEDS), qsweep_col_num(r, i, C_VALUE), " (1 seed)");
        if (with == 0) {
            fprintf(out, " %22s\n", "no bf16 run");
            continue;
        }
        if (with > 1)
            fprintf(out, " %+11.4f +- %-7.4f %+8.2f%% +- %.2f%%", qsweep_col_num(r, i, C_GAP),
                    qsweep_col_num(r, i, C_GAP_SD), 100 * qsweep_col_num(r, i, C_REL),
                    100 * qsweep_col_num(r, i, C_REL_SD));
        else
            fprintf(out, " %+11.4f %-10s %+8.2f%% %-9s", qsweep_col_num(r, i, C_GAP), " (1 seed)",
                    100 * qsweep_col_num(r, i, C_REL), " (1 seed)");
        if (with < seeds) fprintf(out, "  (%ld of %ld seeds have a bf16 run)", with, seeds);
        fputc('\n', out);
    }
}

qs_status qsweep_print_train_results(qc_store *db, const char *name, int format, FILE *out,
                                     qs_error *err) {
    PGconn *c = qc_store_pgconn(db);
    const char *params[2] = {name, NULL};
    qs_status st;
    PGresult *m = query(c, METRIC_SQL, 1, params, "training results", &st, err);
    if (!m) return st;
    int n_val = (int)qsweep_col_num(m, 0, 0), n_train = (int)qsweep_col_num(m, 0, 1);
    PQclear(m);
    const char *metric = n_val > 0 ? "final_val_loss" : "final_train_loss";
    params[1] = metric;
    char sql[2048];
    snprintf(sql, sizeof sql, TRAIN_SQL, "$1", "$2");
    PGresult *r = query(c, sql, 2, params, "training results", &st, err);
    if (!r) return st;
    if (format == 1 || format == 2) {
        PGresult *u = query(c, UNFINISHED_SQL, 1, params, "unfinished runs", &st, err);
        if (!u) {
            PQclear(r);
            return st;
        }
        if (format == 1)
            print_csv(r, u, out);
        else
            st = print_json(r, u, out, err);
        PQclear(u);
        PQclear(r);
        return st;
    }
    PGresult *p = query(c, STATES_SQL, 1, params, "training progress", &st, err);
    if (!p) {
        PQclear(r);
        return st;
    }
    if (PQntuples(p) == 1)
        fprintf(out,
                "experiment %s: training, %s runs: %s done, %s running, %s queued, %s failed, %s "
                "cancelled\n",
                name, PQgetvalue(p, 0, 0), PQgetvalue(p, 0, 3), PQgetvalue(p, 0, 2),
                PQgetvalue(p, 0, 1), PQgetvalue(p, 0, 4), PQgetvalue(p, 0, 5));
    PQclear(p);
    if (n_val == 0 && n_train > 0)
        fprintf(out, "no validation loss (val_fraction 0, or no validation windows): the final "
                     "training loss is shown instead\n");
    if (PQntuples(r) > 0)
        print_table(r, metric, out);
    else
        fprintf(out, "no finished training run yet: no final metrics to tabulate\n");
    PQclear(r);
    PGresult *f = query(c, FAILED_SQL, 1, params, "failed runs", &st, err);
    if (!f) return st;
    if (PQntuples(f) > 0) fprintf(out, "\nfailed runs (first %d):\n", PQntuples(f));
    for (int i = 0; i < PQntuples(f); i++) {
        char lr[32];
        lr_text(PQgetvalue(f, i, 2), lr, sizeof lr);
        fprintf(out, "  %s %s lr=%s seed=%s: %s\n", PQgetvalue(f, i, 0), PQgetvalue(f, i, 1), lr,
                PQgetvalue(f, i, 3), PQgetvalue(f, i, 4));
    }
    PQclear(f);
    PGresult *cv = query(c, CURVES_SQL, 1, params, "training curves", &st, err);
    if (!cv) return st;
    print_curves(cv, out);
    PQclear(cv);
    char *lit = PQescapeLiteral(c, name, strlen(name));
    char *mlit = PQescapeLiteral(c, metric, strlen(metric));
    char q[2048];
    snprintf(q, sizeof q, TRAIN_SQL, lit ? lit : "''", mlit ? mlit : "''");
    PQfreemem(lit);
    PQfreemem(mlit);
    fprintf(out,
            "\nThe same from the views (curves: v_train_curves):\npsql \"host=%s port=%s user=%s "
            "dbname=%s\" <<'SQL'\n%s;\nSQL\n",
            PQhost(c), PQport(c), PQuser(c), PQdb(c), q);
    return QS_OK;
}
