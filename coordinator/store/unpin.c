/* Removing an experiment's numerics pin (store.h qc_store_unpin; schema/200_numerics_unpin.sql),
 * through the coordinator's request queue when one runs (pin_request.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lock.h"
#include "pin_request.h"
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
    qs_status st = qc_store_supersede_pin_requests(s, id, "an unpin", err);
    if (!st)
        st = qc_store_command(s, "DELETE FROM experiment_numerics WHERE experiment = $1", 1, p,
                              "unpin: deleting the pin", err);
    if (!st) st = qc_store_exec(s, "COMMIT", "unpin: COMMIT", err);
    if (st) qc_store_rollback(s);
    if (!st) snprintf(msg, cap, "unpinned from %s", path);
    return st;
}

qs_status qc_store_unpin(qc_store *s, const char *experiment, int wait_ms, char *msg, size_t cap,
                         qs_error *err) {
    snprintf(msg, cap, "%s", "");
    if (!experiment || !*experiment)
        return qs_error_set(err, QS_EINVAL, "unpin: experiment name is empty");
    bool held = false;
    char id[32], path[160];
    qs_status st = qc_store_pin_command_begin(s, "unpin", experiment, &held, id, path, err);
    if (st) return st;
    if (held) {
        qc_store_rollback(s);
        st = qc_store_ask_coordinator_pin(s, id, NULL, wait_ms, msg, cap, err);
    } else if (!*path) {
        st = qc_store_supersede_pin_requests(s, id, "an unpin", err);
        if (!st) st = qc_store_exec(s, "COMMIT", "unpin: COMMIT", err);
        if (st) qc_store_rollback(s);
        if (!st) snprintf(msg, cap, "not pinned");
    } else {
        st = unpin_here(s, id, path, msg, cap, err);
    }
    if (st) return qs_error_wrap(err, "unpin: experiment '%s'", experiment);
    return QS_OK;
}
