/* Removing an experiment's numerics pin (store.h qc_store_unpin, qc_store_poll_unpins;
 * schema/200_numerics_unpin.sql). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lock.h"
#include "session.h"
#include "store.h"

/* Without a coordinator: the pin goes unless an attempt of the experiment is still marked
 * running on its path (a coordinator that starts waits for its worker to re-attach). */
static qs_status unpin_here(qc_store *s, const char *id, const char *path, char *msg, size_t cap,
                            qs_error *err) {
    const char *p[] = {id, path};
    PGresult *r =
        qc_store_params(s,
                        "SELECT count(*), string_agg(DISTINCT a.worker, ', ') FROM attempts a "
                        "JOIN experiment_jobs ej ON ej.job = a.job WHERE ej.experiment = $1 "
                        "AND a.outcome = 'running' AND a.numerics_path IS NOT DISTINCT FROM $2",
                        2, p, PGRES_TUPLES_OK, "unpin: looking for running attempts", err);
    if (!r) return QS_EDB;
    long running = strtol(PQgetvalue(r, 0, 0), NULL, 10);
    if (running > 0) {
        snprintf(msg, cap,
                 "%ld attempt(s) of its jobs are marked running on %s (worker %s); a coordinator "
                 "waits for them to re-attach: start it, let them end, then unpin",
                 running, path, PQgetvalue(r, 0, 1));
        PQclear(r);
        qc_store_rollback(s);
        return qs_error_set(err, QS_ESTATE, "%s", msg);
    }
    PQclear(r);
    qs_status st = qc_store_command(s, "DELETE FROM experiment_numerics WHERE experiment = $1", 1,
                                    p, "unpin: deleting the pin", err);
    if (!st) st = qc_store_exec(s, "COMMIT", "unpin: COMMIT", err);
    if (st) qc_store_rollback(s);
    if (!st) snprintf(msg, cap, "unpinned from %s", path);
    return st;
}

/* With a coordinator: a request it answers (qc_store_poll_unpins), waited for up to wait_ms. */
static qs_status ask_coordinator(qc_store *s, const char *id, int wait_ms, char *msg, size_t cap,
                                 qs_error *err) {
    const char *p[] = {id};
    qs_status st = qc_store_exec(s, "BEGIN", "unpin: BEGIN", err);
    PGresult *r = st ? NULL
                     : qc_store_params(s,
                                       "INSERT INTO numerics_unpin_requests (experiment) VALUES "
                                       "($1) RETURNING id",
                                       1, p, PGRES_TUPLES_OK, "unpin: inserting the request", err);
    if (!st && !r) st = QS_EDB;
    char req[32] = "";
    if (r) snprintf(req, sizeof req, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    if (!st) st = qc_store_exec(s, "NOTIFY qsweep_unpin", "unpin: NOTIFY", err);
    if (!st) st = qc_store_exec(s, "COMMIT", "unpin: COMMIT", err);
    if (st) {
        qc_store_rollback(s);
        return st;
    }
    const char *q[] = {req};
    for (int waited = 0;; waited += 100) {
        r = qc_store_params(s,
                            "SELECT outcome, message FROM numerics_unpin_requests WHERE id = $1 "
                            "AND handled_at IS NOT NULL",
                            1, q, PGRES_TUPLES_OK, "unpin: reading the answer", err);
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
                                "queued and is applied when it does",
                                wait_ms / 1000, req);
        nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
    }
}

qs_status qc_store_unpin(qc_store *s, const char *experiment, int wait_ms, char *msg, size_t cap,
                         qs_error *err) {
    snprintf(msg, cap, "%s", "");
    if (!experiment || !*experiment)
        return qs_error_set(err, QS_EINVAL, "unpin: experiment name is empty");
    qs_status st = qc_store_exec(s, "BEGIN", "unpin: BEGIN", err);
    if (st) return st;
    bool held = false;
    if ((st = qc_store_lock_for_command(s, "unpin", &held, err))) return st;
    const char *p[] = {experiment};
    /* FOR UPDATE: a second unpin of the same experiment waits for this one */
    PGresult *r = qc_store_params(s,
                                  "SELECT e.id, n.path FROM experiments e LEFT JOIN "
                                  "experiment_numerics n ON n.experiment = e.id WHERE e.name = "
                                  "$1 FOR UPDATE OF e",
                                  1, p, PGRES_TUPLES_OK, "unpin: looking up the experiment", err);
    if (!r) {
        qc_store_rollback(s);
        return QS_EDB;
    }
    if (PQntuples(r) == 0) {
        PQclear(r);
        qc_store_rollback(s);
        return qs_error_set(err, QS_ENOTFOUND, "unpin: no experiment named '%s'", experiment);
    }
    char id[32], path[160];
    snprintf(id, sizeof id, "%s", PQgetvalue(r, 0, 0));
    snprintf(path, sizeof path, "%s", PQgetisnull(r, 0, 1) ? "" : PQgetvalue(r, 0, 1));
    PQclear(r);
    if (held) {
        qc_store_rollback(s);
        st = ask_coordinator(s, id, wait_ms, msg, cap, err);
    } else if (!*path) {
        qc_store_rollback(s);
        snprintf(msg, cap, "not pinned");
    } else {
        st = unpin_here(s, id, path, msg, cap, err);
    }
    if (st) return qs_error_wrap(err, "unpin: experiment '%s'", experiment);
    return QS_OK;
}

qs_status qc_store_poll_unpins(qc_store *s, qc_unpin_request **out, size_t *n, qs_error *err) {
    *out = NULL;
    *n = 0;
    PGresult *r = qc_store_params(s,
                                  "SELECT r.id, r.experiment, n.path, a.n, a.w "
                                  "FROM numerics_unpin_requests r LEFT JOIN experiment_numerics n "
                                  "ON n.experiment = r.experiment LEFT JOIN LATERAL (SELECT "
                                  "count(*) AS n, min(at.worker) AS w FROM attempts at JOIN "
                                  "experiment_jobs ej ON ej.job = at.job WHERE ej.experiment = "
                                  "r.experiment AND at.outcome = 'running' AND at.numerics_path = "
                                  "n.path) a ON true WHERE r.handled_at IS NULL ORDER BY r.id",
                                  0, NULL, PGRES_TUPLES_OK, "unpin: polling requests", err);
    if (!r) return QS_EDB;
    int rows = PQntuples(r);
    if (rows > 0 && !(*out = malloc((size_t)rows * sizeof **out))) {
        PQclear(r);
        return qs_error_set(err, QS_ENOMEM, "unpin: out of memory");
    }
    for (int i = 0; i < rows; i++) {
        qc_unpin_request *q = &(*out)[i];
        *q = (qc_unpin_request){.id = strtoll(PQgetvalue(r, i, 0), NULL, 10),
                                .experiment = strtoll(PQgetvalue(r, i, 1), NULL, 10),
                                .running = strtoll(PQgetvalue(r, i, 3), NULL, 10)};
        snprintf(q->stored_path, sizeof q->stored_path, "%s", PQgetvalue(r, i, 2));
        snprintf(q->running_worker, sizeof q->running_worker, "%s", PQgetvalue(r, i, 4));
    }
    *n = (size_t)rows;
    PQclear(r);
    return QS_OK;
}
