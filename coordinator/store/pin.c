/* Pinning an experiment to a numerics path by hand (store.h qc_store_pin, qc_store_pin_conflict;
 * schema/220_numerics_pin_requests.sql), through the coordinator's request queue when one runs
 * (pin_request.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lock.h"
#include "numerics_path.h"
#include "pin_request.h"
#include "session.h"
#include "store.h"

/* What a pin to path would leave unservable: a grid `numerics` request that path does not
 * meet, or `any`, which follows no pin. */
static qs_status grid_conflict(qc_store *s, const char *id, const char *path, char *why, size_t cap,
                               bool *refused, qs_error *err) {
    const char *p[] = {id};
    PGresult *r = qc_store_params(s,
                                  "SELECT DISTINCT j.spec ->> 'numerics' FROM jobs j JOIN "
                                  "experiment_jobs ej ON ej.job = j.id WHERE ej.experiment = $1 "
                                  "AND j.spec ? 'numerics' ORDER BY 1",
                                  1, p, PGRES_TUPLES_OK, "reading the grid's numerics", err);
    if (!r) return QS_EDB;
    for (int i = 0; i < PQntuples(r) && !*refused; i++) {
        const char *want = PQgetvalue(r, i, 0);
        if (!strcmp(want, "any")) {
            *refused = true;
            snprintf(why, cap,
                     "its grid asks for numerics: any, which follows no pin; submit the grid as "
                     "a new experiment with numerics: %s to measure it there",
                     path);
        } else if (!qs_numerics_path_matches(want, path)) {
            *refused = true;
            snprintf(why, cap,
                     "its grid asks for numerics: %s, which %s is not on, so no worker could "
                     "take its jobs; submit the grid as a new experiment with numerics: %s",
                     want, path, path);
        }
    }
    PQclear(r);
    return QS_OK;
}

/* The experiment's attempts off path (attempts.numerics_path; NULL: a path not recorded), of
 * one kind: those that stored final results, or those still running. */
static qs_status attempts_off_path(qc_store *s, const char *id, const char *path, bool running,
                                   char *why, size_t cap, bool *refused, qs_error *err) {
    const char *p[] = {id, path};
    PGresult *r = qc_store_params(
        s,
        running ? "SELECT count(DISTINCT a.job), min(a.job), string_agg(DISTINCT "
                  "COALESCE(a.numerics_path, 'an unrecorded path'), ', '), string_agg(DISTINCT "
                  "a.worker, ', ') FROM attempts a JOIN experiment_jobs ej ON ej.job = a.job "
                  "WHERE ej.experiment = $1 AND a.outcome = 'running' AND a.numerics_path IS "
                  "DISTINCT FROM $2"
                : "SELECT count(DISTINCT a.job), min(a.job), string_agg(DISTINCT "
                  "COALESCE(a.numerics_path, 'an unrecorded path'), ', '), string_agg(DISTINCT "
                  "a.worker, ', ') FROM attempts a JOIN experiment_jobs ej ON ej.job = a.job "
                  "WHERE ej.experiment = $1 AND a.numerics_path IS DISTINCT FROM $2 AND EXISTS "
                  "(SELECT 1 FROM results r WHERE r.job = a.job AND r.attempt = a.attempt AND "
                  "r.final)",
        2, p, PGRES_TUPLES_OK, "looking for the experiment's attempts on other paths", err);
    if (!r) return QS_EDB;
    long n = strtol(PQgetvalue(r, 0, 0), NULL, 10);
    if (n > 0 && running) {
        *refused = true;
        snprintf(why, cap,
                 "%ld job(s) of it run on another path, %s (job %s, worker(s) %s); pin once "
                 "they have ended (qsweep status) or cancel them (an attempt left marked "
                 "running by a coordinator that stopped ends when a coordinator starts and its "
                 "worker does not re-attach)",
                 n, PQgetvalue(r, 0, 2), PQgetvalue(r, 0, 1), PQgetvalue(r, 0, 3));
    } else if (n > 0) {
        *refused = true;
        snprintf(why, cap,
                 "%ld job(s) of it have results computed on another path, %s (job %s, worker(s) "
                 "%s), and pinning it to %s would mix two paths in one experiment; submit the "
                 "grid as a new experiment with numerics: %s to measure it there",
                 n, PQgetvalue(r, 0, 2), PQgetvalue(r, 0, 1), PQgetvalue(r, 0, 3), path, path);
    }
    PQclear(r);
    return QS_OK;
}

qs_status qc_store_pin_conflict(qc_store *s, int64_t experiment, const char *path, char *why,
                                size_t cap, bool *refused, qs_error *err) {
    char id[32];
    snprintf(id, sizeof id, "%lld", (long long)experiment);
    *refused = false;
    snprintf(why, cap, "%s", "");
    qs_status st = grid_conflict(s, id, path, why, cap, refused, err);
    if (!st && !*refused) st = attempts_off_path(s, id, path, false, why, cap, refused, err);
    if (!st && !*refused) st = attempts_off_path(s, id, path, true, why, cap, refused, err);
    return st;
}

/* Without a coordinator, in the transaction holding the coordinator lock: the pin is written
 * unless qc_store_pin_conflict refuses it. Ends the transaction. */
static qs_status pin_here(qc_store *s, const char *id, const char *path, const char *was, char *msg,
                          size_t cap, qs_error *err) {
    char why[768];
    bool refused = false;
    qs_status st =
        qc_store_pin_conflict(s, strtoll(id, NULL, 10), path, why, sizeof why, &refused, err);
    if (!st && refused) st = qs_error_set(err, QS_ESTATE, "%s", why);
    const char *p[] = {id, path};
    char change[192];
    snprintf(change, sizeof change, "the pin to %s", path);
    if (!st) st = qc_store_supersede_pin_requests(s, id, change, err);
    if (!st)
        st = qc_store_command(s,
                              "INSERT INTO experiment_numerics (experiment, path) VALUES ($1, $2) "
                              "ON CONFLICT (experiment) DO UPDATE SET path = EXCLUDED.path, "
                              "pinned_at = now()",
                              2, p, "writing the pin", err);
    if (!st) st = qc_store_exec(s, "COMMIT", "COMMIT", err);
    if (st) {
        qc_store_rollback(s);
        return st;
    }
    if (*was)
        snprintf(msg, cap,
                 "pinned to %s, replacing its pin to %s (no result of it was computed there)", path,
                 was);
    else
        snprintf(msg, cap, "pinned to %s", path);
    return QS_OK;
}

qs_status qc_store_pin(qc_store *s, const char *experiment, const char *path, int wait_ms,
                       char *msg, size_t cap, qs_error *err) {
    snprintf(msg, cap, "%s", "");
    if (!experiment || !*experiment)
        return qs_error_set(err, QS_EINVAL, "pin: experiment name is empty");
    if (!path || !qs_numerics_path_valid(path))
        return qs_error_set(err, QS_EINVAL,
                            "pin: '%s' is no numerics path a worker announces: give one path, "
                            QS_NUMERICS_PATH_FORMS " (cpu, cuda and any are requests a grid's "
                            "numerics key makes, not pins)",
                            path ? path : "");
    bool held = false;
    char id[32], was[160];
    qs_status st = qc_store_pin_command_begin(s, "pin", experiment, &held, id, was, err);
    if (st) return st;
    if (held) {
        qc_store_rollback(s);
        st = qc_store_ask_coordinator_pin(s, id, path, wait_ms, msg, cap, err);
    } else if (!strcmp(was, path)) {
        char change[192];
        snprintf(change, sizeof change, "the pin to %s", path);
        st = qc_store_supersede_pin_requests(s, id, change, err);
        if (!st) st = qc_store_exec(s, "COMMIT", "COMMIT", err);
        if (st) qc_store_rollback(s);
        if (!st) snprintf(msg, cap, "already pinned to %s", path);
    } else {
        st = pin_here(s, id, path, was, msg, cap, err);
    }
    if (st) return qs_error_wrap(err, "pin: experiment '%s'", experiment);
    return QS_OK;
}
