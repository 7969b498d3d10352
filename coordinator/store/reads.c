/* Read helpers for the command line: progress per experiment and the result rows.
 * Contract: store.h. */
#include "store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "session.h"

static qs_status check_experiment(qc_store *s, const char *name, qs_error *err) {
    if (!name) return QS_OK;
    const char *p[] = {name};
    PGresult *r = qc_store_params(s, "SELECT 1 FROM experiments WHERE name = $1", 1, p,
                                  PGRES_TUPLES_OK, "looking up experiment", err);
    if (!r) return QS_EDB;
    int n = PQntuples(r);
    PQclear(r);
    if (n == 0) return qs_error_set(err, QS_ENOTFOUND, "no experiment named '%s'", name);
    return QS_OK;
}

qs_status qc_store_progress(qc_store *s, const char *name, qc_progress **rows, size_t *n,
                            qs_error *err) {
    *rows = NULL;
    *n = 0;
    qs_status st = check_experiment(s, name, err);
    if (st) return st;
    const char *p[] = {name};
    PGresult *r = qc_store_params(
        s,
        "SELECT experiment_id, experiment, total, pending, running, succeeded, failed, "
        "cancelled, waiting FROM v_experiment_progress WHERE $1::text IS NULL OR experiment = $1 "
        "ORDER BY experiment_id",
        1, p, PGRES_TUPLES_OK, "progress: reading v_experiment_progress", err);
    if (!r) return QS_EDB;
    int m = PQntuples(r);
    *rows = calloc(m ? (size_t)m : 1, sizeof **rows);
    if (!*rows) {
        PQclear(r);
        return qs_error_set(err, QS_ENOMEM, "progress: out of memory");
    }
    for (int i = 0; i < m; i++) {
        qc_progress *g = &(*rows)[i];
        g->experiment_id = strtoll(PQgetvalue(r, i, 0), NULL, 10);
        snprintf(g->name, sizeof g->name, "%s", PQgetvalue(r, i, 1));
        int64_t *counts[] = {&g->total,  &g->pending,   &g->running, &g->succeeded,
                             &g->failed, &g->cancelled, &g->waiting};
        for (int k = 0; k < 7; k++)
            *counts[k] = strtoll(PQgetvalue(r, i, 2 + k), NULL, 10);
    }
    *n = (size_t)m;
    PQclear(r);
    return QS_OK;
}

static const char *val_or_null(const PGresult *r, int col) {
    return PQgetisnull(r, 0, col) ? NULL : PQgetvalue(r, 0, col);
}

qs_status qc_store_results(qc_store *s, const char *name,
                           int (*fn)(void *ctx, const qc_result_row *row), void *ctx,
                           qs_error *err) {
    qs_status st = check_experiment(s, name, err);
    if (st) return st;
    const char *p[] = {name};
    if (!PQsendQueryParams(s->conn,
                           "SELECT experiment, job_key, kind, model, format, quantize, mode, "
                           "part, metric, value, step, final FROM v_job_results "
                           "WHERE $1::text IS NULL OR experiment = $1 "
                           "ORDER BY experiment, job_id, metric, step",
                           1, NULL, p, NULL, NULL, 0))
        return qc_store_fail(s, NULL, "results: sending query", err);
    PQsetSingleRowMode(s->conn);
    bool stopped = false;
    PGresult *r;
    while ((r = PQgetResult(s->conn)) != NULL) {
        ExecStatusType rs = PQresultStatus(r);
        if (rs == PGRES_SINGLE_TUPLE && !stopped && !st) {
            qc_result_row row = {
                .experiment = val_or_null(r, 0),
                .job_key = val_or_null(r, 1),
                .kind = val_or_null(r, 2),
                .model = val_or_null(r, 3),
                .format = val_or_null(r, 4),
                .quantize = val_or_null(r, 5),
                .mode = val_or_null(r, 6),
                .part = val_or_null(r, 7),
                .metric = val_or_null(r, 8),
                .value = strtod(PQgetvalue(r, 0, 9), NULL),
                .step = strtoll(PQgetvalue(r, 0, 10), NULL, 10),
                .final = PQgetvalue(r, 0, 11)[0] == 't',
            };
            if (fn(ctx, &row) != 0) stopped = true;
        } else if (rs != PGRES_SINGLE_TUPLE && rs != PGRES_TUPLES_OK && !st) {
            st = qc_store_fail(s, r, "results: reading v_job_results", err);
        }
        PQclear(r);
    }
    if (st) return st;
    if (stopped) return qs_error_set(err, QS_ECANCELLED, "results: stopped by the caller");
    return QS_OK;
}
