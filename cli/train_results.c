/* qsweep results for training experiments (issue 11 item 7): per (shape, learning rate) the
 * final validation loss of each recipe, mean and spread over seeds, and its gap to bf16
 * (absolute and relative, from v_train_final: schema/020_train_views.sql); then each run's
 * training-loss curve as a terminal sparkline on one scale for all runs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char *const TRAIN_SQL =
    "SELECT shape, lr, recipe, count(*) AS seeds,\n"
    "       avg(value) AS val_loss, coalesce(stddev_samp(value), 0) AS val_loss_sd,\n"
    "       avg(gap) AS gap, coalesce(stddev_samp(gap), 0) AS gap_sd,\n"
    "       avg(rel_gap) AS rel_gap, coalesce(stddev_samp(rel_gap), 0) AS rel_gap_sd\n"
    "FROM v_train_final\n"
    "WHERE experiment = %s AND metric = 'final_val_loss'\n"
    "GROUP BY shape, lr, recipe\n"
    "ORDER BY shape, lr, avg(value)";

static const char *const CURVES_SQL =
    "SELECT recipe, seed, string_agg(value::text, ',' ORDER BY step)\n"
    "FROM v_train_curves WHERE experiment = $1 AND metric = 'train_loss'\n"
    "GROUP BY job_id, recipe, seed ORDER BY recipe, seed";

static double num(PGresult *r, int row, int col) {
    return PQgetisnull(r, row, col) ? NAN : strtod(PQgetvalue(r, row, col), NULL);
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

qs_status qsweep_print_train_results(qc_store *db, const char *name, FILE *out, int *n_rows,
                                     qs_error *err) {
    PGconn *c = qc_store_pgconn(db);
    char sql[2048];
    snprintf(sql, sizeof sql, TRAIN_SQL, "$1");
    const char *params[1] = {name};
    *n_rows = 0;
    PGresult *r = PQexecParams(c, sql, 1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        qs_status st =
            qs_error_set(err, QS_EDB, "training results of %s: %s", name, PQerrorMessage(c));
        PQclear(r);
        return st;
    }
    *n_rows = PQntuples(r);
    if (!*n_rows) {
        PQclear(r);
        return QS_OK;
    }
    fprintf(out, "experiment %s: final validation loss per recipe (mean +- sd over seeds)\n", name);
    for (int i = 0; i < *n_rows; i++) {
        if (i == 0 || strcmp(PQgetvalue(r, i, 0), PQgetvalue(r, i - 1, 0)) ||
            strcmp(PQgetvalue(r, i, 1), PQgetvalue(r, i - 1, 1))) {
            fprintf(out, "\n%s  lr %s\n", PQgetvalue(r, i, 0), PQgetvalue(r, i, 1));
            fprintf(out, "  %-18s %5s %20s %22s %18s\n", "recipe", "seeds", "val loss",
                    "gap to bf16", "relative gap");
        }
        fprintf(out, "  %-18s %5s %11.4f +- %-6.4f %+11.4f +- %-7.4f %+8.2f%% +- %.2f%%\n",
                PQgetvalue(r, i, 2), PQgetvalue(r, i, 3), num(r, i, 4), num(r, i, 5), num(r, i, 6),
                num(r, i, 7), 100 * num(r, i, 8), 100 * num(r, i, 9));
    }
    PQclear(r);
    r = PQexecParams(c, CURVES_SQL, 1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(r) == PGRES_TUPLES_OK) print_curves(r, out);
    PQclear(r);
    char *lit = PQescapeLiteral(c, name, strlen(name));
    char q[2048];
    snprintf(q, sizeof q, TRAIN_SQL, lit ? lit : "''");
    PQfreemem(lit);
    fprintf(out,
            "\nThe same from the views (curves: v_train_curves):\npsql \"host=%s port=%s user=%s "
            "dbname=%s\" <<'SQL'\n%s;\nSQL\n",
            PQhost(c), PQport(c), PQuser(c), PQdb(c), q);
    return QS_OK;
}
