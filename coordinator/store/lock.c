/* The coordinator lock: taking it (ending a stale session of this host's own coordinator),
 * naming its holder, checking it is still held. Contract: store.h. */
#include "store.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "store_internal.h"

/* Names whoever holds the coordinator lock, for the refusal message ("unknown session" when
 * the query finds nobody or fails); *found (may be NULL): whether anyone does. Returns false
 * when the query failed (PQerrorMessage says why). */
bool qc_store_describe_lock_holder(qc_store *s, char *out, size_t cap, bool *found) {
    snprintf(out, cap, "unknown session");
    if (found) *found = false;
    PGresult *r =
        PQexec(s->conn, "SELECT a.pid, a.application_name, COALESCE(host(a.client_addr), "
                        "'local socket'), to_char(a.backend_start, 'YYYY-MM-DD HH24:MI:SS TZ') "
                        "FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                        "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
                        "AND l.classid = " COORD_LOCK_HI " AND l.objid = " COORD_LOCK_LO
                        " AND l.database = (SELECT oid FROM pg_database "
                        "WHERE datname = current_database())");
    bool ok = PQresultStatus(r) == PGRES_TUPLES_OK;
    if (ok && PQntuples(r) > 0) {
        snprintf(out, cap, "'%s' (server pid %s, %s, connected since %s)", PQgetvalue(r, 0, 1),
                 PQgetvalue(r, 0, 0), PQgetvalue(r, 0, 2), PQgetvalue(r, 0, 3));
        if (found) *found = true;
    }
    PQclear(r);
    return ok;
}

qs_status qc_store_coordinator_running(qc_store *s, bool *held, char *holder, size_t cap,
                                       qs_error *err) {
    char who[400];
    if (!qc_store_describe_lock_holder(s, who, sizeof who, held)) {
        char msg[400];
        snprintf(msg, sizeof msg, "%s", PQerrorMessage(s->conn));
        msg[strcspn(msg, "\n")] = '\0';
        return qs_error_set(err, QS_EDB, "looking for a running coordinator: %s", msg);
    }
    if (cap) snprintf(holder, cap, "%s", *held ? who : "");
    return QS_OK;
}

/* Whether the session holding the coordinator lock, server pid backend named app (its
 * application_name), is stale: the very session this store's reconnect replaced (lost in a
 * partition, which the server has not noticed yet), or a session of a coordinator of this
 * host whose process no longer exists. */
static bool stale_own_session(const qc_store *s, int backend, const char *app) {
    if (s->stale_backend && backend == s->stale_backend) return true;
    if (strncmp(app, "qsweep coordinator", 18) != 0) return false;
    const char *sp = strrchr(app, ' '), *mine = strrchr(s->app, ' ');
    if (!sp || !mine) return false;
    const char *colon = strrchr(sp, ':'), *mcolon = strrchr(mine, ':');
    if (!colon || !mcolon || colon - sp != mcolon - mine || strncmp(sp, mine, (size_t)(colon - sp)))
        return false; /* another host */
    char *end;
    long pid = strtol(colon + 1, &end, 10);
    if (*end || pid <= 0) return false;
    return pid != (long)getpid() && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* Ends the lock holder's session when it is a stale session of a coordinator of this host
 * (stale_own_session), logging nothing itself; *ended says whether it did. QS_EDB. */
static qs_status end_stale_holder(qc_store *s, bool *ended, char *who, size_t cap, qs_error *err) {
    *ended = false;
    PGresult *r = qc_store_params(
        s,
        "SELECT a.pid, a.application_name FROM pg_locks l JOIN pg_stat_activity a ON "
        "a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
        "AND l.classid = " COORD_LOCK_HI " AND l.objid = " COORD_LOCK_LO
        " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
        "AND a.pid <> pg_backend_pid()",
        0, NULL, PGRES_TUPLES_OK, "looking for the coordinator lock's holder", err);
    if (!r) return QS_EDB;
    bool stale =
        PQntuples(r) > 0 && stale_own_session(s, atoi(PQgetvalue(r, 0, 0)), PQgetvalue(r, 0, 1));
    char pid[32] = "";
    if (stale) {
        snprintf(pid, sizeof pid, "%s", PQgetvalue(r, 0, 0));
        snprintf(who, cap, "'%s' (server pid %s)", PQgetvalue(r, 0, 1), pid);
    }
    PQclear(r);
    if (!stale) return QS_OK;
    const char *p[] = {pid};
    r = qc_store_params(s, "SELECT pg_terminate_backend($1::int)", 1, p, PGRES_TUPLES_OK,
                        "ending a stale coordinator session", err);
    if (!r) return QS_EDB;
    *ended = PQgetvalue(r, 0, 0)[0] == 't';
    PQclear(r);
    return QS_OK;
}

/* How long a held coordinator lock is retried before refusing: a coordinator that was just
 * killed holds it until its server backend notices the closed socket (milliseconds), so a
 * restart right after a kill -9 must not be refused. */
#define COORD_LOCK_WAIT_MS 2000
#define COORD_LOCK_POLL_MS 100

qs_status qc_store_take_coordinator_lock(qc_store *s, qs_error *err) {
    bool got = false, ended_one = false;
    for (int waited = 0;; waited += COORD_LOCK_POLL_MS) {
        PGresult *r = qc_store_params(s, "SELECT pg_try_advisory_lock(" COORD_LOCK_KEY ")", 0, NULL,
                                      PGRES_TUPLES_OK, "taking the coordinator lock", err);
        if (!r) return QS_EDB;
        got = PQgetvalue(r, 0, 0)[0] == 't';
        PQclear(r);
        if (!got && !ended_one) { /* its own stale session, or a dead coordinator's here */
            bool ended = false;
            char who[400] = "";
            if (end_stale_holder(s, &ended, who, sizeof who, err)) return QS_EDB;
            if (ended) {
                fprintf(stderr,
                        "qsweep: ended the stale coordinator session %s holding the lock (its "
                        "process is this one or is gone)\n",
                        who);
                ended_one = true;
                waited = 0; /* the backend goes within milliseconds: wait for it anew */
            }
        }
        if (got || waited >= COORD_LOCK_WAIT_MS) break;
        struct timespec ts = {0, COORD_LOCK_POLL_MS * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (got) {
        s->holds_lock = true;
        return QS_OK;
    }
    char holder[400];
    qc_store_describe_lock_holder(s, holder, sizeof holder, NULL);
    return qs_error_set(err, QS_ESTATE,
                        "another coordinator is already running on database '%s': the "
                        "coordinator lock is held by %s; stop it first",
                        PQdb(s->conn), holder);
}

qs_status qc_store_lock_coordinator(qc_store *s, qs_error *err) {
    if (s->holds_lock) return QS_OK;
    return qc_store_take_coordinator_lock(s, err);
}

qs_status qc_store_check_coordinator_lock(qc_store *s, int holder_pid, qs_error *err) {
    char pid[16];
    snprintf(pid, sizeof pid, "%d", holder_pid);
    const char *p[] = {pid};
    PGresult *r = qc_store_params(
        s,
        "SELECT EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted "
        "AND l.objsubid = 1 AND l.classid = " COORD_LOCK_HI " AND l.objid = " COORD_LOCK_LO
        " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
        "AND l.pid = $1::int)",
        1, p, PGRES_TUPLES_OK, "checking the coordinator lock", err);
    if (!r) return QS_EDB;
    bool held = PQgetvalue(r, 0, 0)[0] == 't';
    PQclear(r);
    if (held) return QS_OK;
    return qs_error_set(err, QS_ESTATE,
                        "the coordinator lock is no longer held by this coordinator's write "
                        "connection (server pid %d): another coordinator may have taken over; "
                        "stopping",
                        holder_pid);
}
