/* Pin changes queued for a running coordinator and its answers (pin_request.h; store.h
 * qc_store_poll_pin_requests). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lock.h"
#include "pin_request.h"
#include "store.h"

qs_status qc_store_pin_command_begin(qc_store *s, const char *cmd, const char *name, bool *held,
                                     char id[32], char path[160], qs_error *err) {
    char what[64];
    snprintf(what, sizeof what, "%s: BEGIN", cmd);
    qs_status st = qc_store_exec(s, "BEGIN", what, err);
    if (st) return st;
    if ((st = qc_store_lock_for_command(s, cmd, held, err))) return st;
    const char *p[] = {name};
    snprintf(what, sizeof what, "%s: looking up the experiment", cmd);
    PGresult *r = qc_store_params(s,
                                  "SELECT e.id, n.path FROM experiments e LEFT JOIN "
                                  "experiment_numerics n ON n.experiment = e.id WHERE e.name = "
                                  "$1 FOR UPDATE OF e",
                                  1, p, PGRES_TUPLES_OK, what, err);
    if (!r) {
        qc_store_rollback(s);
        return QS_EDB;
    }
    if (PQntuples(r) == 0) {
        PQclear(r);
        qc_store_rollback(s);
        return qs_error_set(err, QS_ENOTFOUND, "%s: no experiment named '%s'", cmd, name);
    }
    snprintf(id, 32, "%s", PQgetvalue(r, 0, 0));
    snprintf(path, 160, "%s", PQgetisnull(r, 0, 1) ? "" : PQgetvalue(r, 0, 1));
    PQclear(r);
    return QS_OK;
}

qs_status qc_store_ask_coordinator_pin(qc_store *s, const char *id, const char *path, int wait_ms,
                                       char *msg, size_t cap, qs_error *err) {
    const char *p[] = {id, path};
    qs_status st = qc_store_exec(s, "BEGIN", "BEGIN", err);
    PGresult *r = st ? NULL
                     : qc_store_params(s,
                                       "INSERT INTO numerics_unpin_requests (experiment, path) "
                                       "VALUES ($1, $2) RETURNING id",
                                       2, p, PGRES_TUPLES_OK, "inserting the request", err);
    if (!st && !r) st = QS_EDB;
    char req[32] = "";
    if (r) snprintf(req, sizeof req, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    if (!st) st = qc_store_exec(s, "NOTIFY qsweep_unpin", "NOTIFY", err);
    if (!st) st = qc_store_exec(s, "COMMIT", "COMMIT", err);
    if (st) {
        qc_store_rollback(s);
        return st;
    }
    const char *q[] = {req};
    for (int waited = 0;; waited += 100) {
        r = qc_store_params(s,
                            "SELECT outcome, message FROM numerics_unpin_requests WHERE id = $1 "
                            "AND handled_at IS NOT NULL",
                            1, q, PGRES_TUPLES_OK, "reading the answer", err);
        if (!r) return QS_EDB;
        if (PQntuples(r) == 1) {
            bool refused = !strcmp(PQgetvalue(r, 0, 0), "refused");
            snprintf(msg, cap, "%s", PQgetvalue(r, 0, 1));
            PQclear(r);
            return refused ? qs_error_set(err, QS_ESTATE, "%s", msg) : QS_OK;
        }
        PQclear(r);
        if (waited >= wait_ms)
            return qs_error_set(err, QS_ESTATE,
                                "the coordinator has not answered in %d s; request %s stays "
                                "queued and is applied when it does, unless a pin or unpin "
                                "made without a coordinator supersedes it first",
                                wait_ms / 1000, req);
        nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
    }
}

qs_status qc_store_supersede_pin_requests(qc_store *s, const char *id, const char *change,
                                          qs_error *err) {
    const char *p[] = {id, change};
    return qc_store_command(s,
                            "UPDATE numerics_unpin_requests SET handled_at = now(), outcome = "
                            "'refused', message = 'superseded by ' || $2 || ' made without a "
                            "coordinator' WHERE experiment = $1 AND handled_at IS NULL",
                            2, p, "answering the requests it supersedes", err);
}

qs_status qc_store_poll_pin_requests(qc_store *s, qc_pin_request **out, size_t *n, qs_error *err) {
    *out = NULL;
    *n = 0;
    PGresult *r = qc_store_params(s,
                                  "SELECT r.id, r.experiment, n.path, a.n, a.w, r.path "
                                  "FROM numerics_unpin_requests r LEFT JOIN experiment_numerics n "
                                  "ON n.experiment = r.experiment LEFT JOIN LATERAL (SELECT "
                                  "count(*) AS n, min(at.worker) AS w FROM attempts at JOIN "
                                  "experiment_jobs ej ON ej.job = at.job WHERE ej.experiment = "
                                  "r.experiment AND at.outcome = 'running' AND at.numerics_path = "
                                  "n.path) a ON true WHERE r.handled_at IS NULL ORDER BY r.id",
                                  0, NULL, PGRES_TUPLES_OK, "polling pin requests", err);
    if (!r) return QS_EDB;
    int rows = PQntuples(r);
    if (rows > 0 && !(*out = malloc((size_t)rows * sizeof **out))) {
        PQclear(r);
        return qs_error_set(err, QS_ENOMEM, "pin requests: out of memory");
    }
    for (int i = 0; i < rows; i++) {
        qc_pin_request *q = &(*out)[i];
        *q = (qc_pin_request){.id = strtoll(PQgetvalue(r, i, 0), NULL, 10),
                              .experiment = strtoll(PQgetvalue(r, i, 1), NULL, 10),
                              .running = strtoll(PQgetvalue(r, i, 3), NULL, 10)};
        snprintf(q->stored_path, sizeof q->stored_path, "%s", PQgetvalue(r, i, 2));
        snprintf(q->running_worker, sizeof q->running_worker, "%s", PQgetvalue(r, i, 4));
        snprintf(q->path, sizeof q->path, "%s", PQgetvalue(r, i, 5));
    }
    *n = (size_t)rows;
    PQclear(r);
    return QS_OK;
}
