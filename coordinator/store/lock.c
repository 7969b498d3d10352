/* The coordinator lock: an EXCLUSIVE lock on the table qsweep_coordinator_lock held by a
 * session of its own (lock.h); taking it (ending a stale session of this host's own
 * coordinator), naming its holder, checking it is still held. Contract: store.h. */
#include "store.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lock.h"
#include "session.h"

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
                        "WHERE " COORD_LOCK_HELD);
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
    if (s->stale_lock_backend && backend == s->stale_lock_backend) return true;
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
        "a.pid = l.pid WHERE " COORD_LOCK_HELD " AND a.pid <> pg_backend_pid()",
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
/* Opens the lock session: s's conninfo, the coordinator's options, application_name
 * "qsweep <role>-lock <host>:<pid>"; NULL without memory, else a connection whose PQstatus
 * says whether it is up. */
static PGconn *lock_connect(const qc_store *s) {
    char app[sizeof s->app + 8];
    const char *where = strrchr(s->app, ' '); /* " host:pid" after "qsweep <role>" */
    int role_end = where ? (int)(where - s->app) : (int)strlen(s->app);
    snprintf(app, sizeof app, "%.*s-lock%s", role_end, s->app, where ? where : "");
    return qc_store_connect_as(s->conninfo, app, true);
}

#define COORD_LOCK_WAIT_MS 2000
#define COORD_LOCK_POLL_MS 100

void qc_store_drop_lock_session(qc_store *s) {
    if (!s->lock_conn) return;
    s->stale_lock_backend = s->lock_backend; /* the session whose lock a reconnect looks for */
    PQfinish(s->lock_conn);
    s->lock_conn = NULL;
    s->lock_backend = 0; /* holds_lock stays: a reconnect takes the lock again */
}

/* Fails a statement on the lock session: QS_EDB naming what, with the server's message. */
static qs_status lock_fail(qc_store *s, PGresult *r, const char *what, qs_error *err) {
    char msg[600];
    snprintf(msg, sizeof msg, "%s",
             r && PQresultErrorMessage(r)[0] ? PQresultErrorMessage(r)
                                             : PQerrorMessage(s->lock_conn));
    msg[strcspn(msg, "\n")] = '\0';
    PQclear(r);
    return qs_error_set(err, QS_EDB, "%s: %s", what, msg);
}

/* One try at the lock on the lock session (opened first when there is none): *got says
 * whether it is held now. A lock held by another session is no error (SQLSTATE 55P03 under
 * NOWAIT); a role that may not lock the table (42501: not in qsweep_writer) is. */
static qs_status try_lock_once(qc_store *s, bool *got, qs_error *err) {
    *got = false;
    if (!s->lock_conn) {
        if (!(s->lock_conn = lock_connect(s)))
            return qs_error_set(err, QS_ENOMEM, "coordinator lock: out of memory");
        if (PQstatus(s->lock_conn) != CONNECTION_OK) {
            qs_status st = lock_fail(s, NULL, "coordinator lock: connecting its session", err);
            qc_store_drop_lock_session(s);
            s->lost = true;
            return st;
        }
        s->lock_backend = PQbackendPID(s->lock_conn);
        /* the open transaction holds the lock: no idle timeout may end it */
        PGresult *r = PQexec(s->lock_conn, "SET idle_in_transaction_session_timeout = 0");
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
            qs_status st = lock_fail(s, r, "coordinator lock: SET", err);
            qc_store_drop_lock_session(s);
            return st;
        }
        PQclear(r);
    }
    PGresult *r = PQexec(s->lock_conn, "BEGIN");
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        return lock_fail(s, r, "coordinator lock: BEGIN", err);
    PQclear(r);
    r = PQexec(s->lock_conn, "LOCK TABLE " COORD_LOCK_TABLE " IN EXCLUSIVE MODE NOWAIT");
    if (PQresultStatus(r) == PGRES_COMMAND_OK) {
        PQclear(r);
        *got = true;
        return QS_OK;
    }
    const char *code = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    bool busy = code && strcmp(code, "55P03") == 0;
    if (!busy) return lock_fail(s, r, "taking the coordinator lock (" COORD_LOCK_TABLE ")", err);
    PQclear(r);
    PQclear(PQexec(s->lock_conn, "ROLLBACK"));
    return QS_OK;
}

qs_status qc_store_lock_alive(qc_store *s, qs_error *err) {
    if (!s->holds_lock) return QS_OK;
    bool up = s->lock_conn && PQstatus(s->lock_conn) == CONNECTION_OK;
    struct pollfd p = {.fd = up ? PQsocket(s->lock_conn) : -1, .events = POLLIN};
    if (up && poll(&p, 1, 0) > 0) /* the server said something: only an end says anything */
        up = PQconsumeInput(s->lock_conn) && PQstatus(s->lock_conn) == CONNECTION_OK;
    if (up && PQtransactionStatus(s->lock_conn) == PQTRANS_INTRANS) return QS_OK;
    int pid = s->lock_backend;
    s->lost = true;
    return qs_error_set(err, QS_EDB,
                        "the coordinator lock's session (server pid %d) ended: not writing until "
                        "the lock is taken again",
                        pid);
}

qs_status qc_store_take_coordinator_lock(qc_store *s, qs_error *err) {
    bool got = false, ended_one = false;
    for (int waited = 0;; waited += COORD_LOCK_POLL_MS) {
        if (try_lock_once(s, &got, err)) return QS_EDB;
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
        s, "SELECT EXISTS (SELECT 1 FROM pg_locks l WHERE " COORD_LOCK_HELD " AND l.pid = $1::int)",
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

PGconn *qc_store_lock_pgconn(qc_store *s) {
    return s->lock_conn;
}

/* Whether the coordinator lock's holder is a coordinator: its lock session, named
 * "qsweep <role>-lock <host>:<pid>" (above), keeps the lock while it runs; holder names it. */
static qs_status holder_is_coordinator(qc_store *s, bool *coordinator, char *holder, size_t cap,
                                       qs_error *err) {
    PGresult *r = qc_store_params(s,
                                  "SELECT count(*) FILTER (WHERE a.application_name LIKE "
                                  "'qsweep %-lock %'), coalesce(string_agg(a.application_name, "
                                  "', '), '') FROM pg_locks l JOIN pg_stat_activity a ON a.pid = "
                                  "l.pid WHERE " COORD_LOCK_HELD,
                                  0, NULL, PGRES_TUPLES_OK,
                                  "looking for the coordinator lock's holder", err);
    if (!r) return QS_EDB;
    *coordinator = strtol(PQgetvalue(r, 0, 0), NULL, 10) > 0;
    snprintf(holder, cap, "%s", PQgetvalue(r, 0, 1));
    PQclear(r);
    return QS_OK;
}

#define COMMAND_LOCK_WAIT_MS 2000
#define COMMAND_LOCK_POLL_MS 50
qs_status qc_store_lock_for_command(qc_store *s, const char *what, bool *held, qs_error *err) {
    *held = false;
    if (s->holds_lock) return QS_OK;
    for (int waited = 0;; waited += COMMAND_LOCK_POLL_MS) {
        PGresult *r = PQexec(s->conn, "LOCK TABLE " COORD_LOCK_TABLE " IN EXCLUSIVE MODE NOWAIT");
        const char *code = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        bool busy = code && !strcmp(code, "55P03");
        qs_status st = QS_OK;
        if (PQresultStatus(r) != PGRES_COMMAND_OK && !busy)
            st = qc_store_fail(s, r, "probing the coordinator lock", err);
        PQclear(r);
        if (!st && !busy) return QS_OK;
        qc_store_rollback(s);
        if (st) return st;
        char holder[400];
        bool coordinator;
        if ((st = holder_is_coordinator(s, &coordinator, holder, sizeof holder, err))) return st;
        if (coordinator) {
            *held = true;
            return QS_OK;
        }
        if (waited >= COMMAND_LOCK_WAIT_MS)
            return qs_error_set(err, QS_ESTATE,
                                "%s: the coordinator lock is held by '%s', no coordinator, "
                                "for %d s: %s once it ends",
                                what, holder, COMMAND_LOCK_WAIT_MS / 1000, what);
        nanosleep(&(struct timespec){0, COMMAND_LOCK_POLL_MS * 1000 * 1000}, NULL);
        if ((st = qc_store_exec(s, "BEGIN", "BEGIN", err))) return st;
    }
}
