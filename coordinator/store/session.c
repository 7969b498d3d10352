/* One PostgreSQL session of the store: running statements, turning a failure into an error
 * that names what failed (and noting a session that is gone or a server that cannot go on),
 * and opening a connection with the coordinator's timeouts. Contract: session.h. */
#include <stdio.h>
#include <string.h>

#include "session.h"

/* Whether a failure means the session is gone, so the caller should reconnect rather than
 * give up: the connection is bad; or a libpq call failed without a result (r NULL: a send,
 * COPY data or pipeline call, i.e. the socket); or the error was made by libpq itself, not
 * the server (no SQLSTATE: libpq 15 reports a failed send or a closed socket that way while
 * PQstatus still says CONNECTION_OK); or the server's SQLSTATE is class 08 (connection
 * exception) or 57P01-57P03 (admin shutdown, crash shutdown, cannot connect now; PostgreSQL
 * docs, Appendix A). */
static bool session_gone(qc_store *s, const PGresult *r) {
    if (PQstatus(s->conn) == CONNECTION_BAD || !r) return true;
    if (PQresultStatus(r) != PGRES_FATAL_ERROR) return false;
    const char *code = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    return !code || strncmp(code, "08", 2) == 0 || strcmp(code, "57P01") == 0 ||
           strcmp(code, "57P02") == 0 || strcmp(code, "57P03") == 0;
}

/* Conditions of the server, not of the statement (SQLSTATEs from the
 * PostgreSQL docs, Appendix A): the same statement may succeed once the condition is
 * over, so they are retried like a lost connection. */
static const struct {
    const char code[6], *what;
    bool outlives; /* a new connection says nothing of it: only a commit tells it is over */
} conditions[] = {
    {"53100", "disk full (SQLSTATE 53100)", true},
    {"53200", "out of memory (SQLSTATE 53200)", true},
    {"53300", "too many connections (SQLSTATE 53300)", true},
    {"53400", "configuration limit exceeded (SQLSTATE 53400)", true},
    {"25006",
     "read-only transaction: a hot standby or default_transaction_read_only "
     "(SQLSTATE 25006)",
     true},
    {"57P01", "admin shutdown (SQLSTATE 57P01)", false},
    {"57P02", "crash shutdown (SQLSTATE 57P02)", false},
    {"57P03", "the server cannot accept connections now (SQLSTATE 57P03)", false},
    {"57P04", "database dropped (SQLSTATE 57P04)", true},
    {"57P05", "idle session timeout (SQLSTATE 57P05)", false},
    {"55P03", "a lock wait timed out (lock_timeout, SQLSTATE 55P03)", false},
    {"57014", "a statement timed out or was cancelled (statement_timeout, SQLSTATE 57014)", false},
    {"25P03", "idle in transaction for too long (SQLSTATE 25P03)", false},
};

bool qc_store_condition_outlives_connection(const char *what) {
    for (size_t i = 0; i < sizeof conditions / sizeof conditions[0]; i++)
        if (what == conditions[i].what || (what && strcmp(what, conditions[i].what) == 0))
            return conditions[i].outlives;
    return false;
}

const char *qc_store_condition(const qc_store *s) {
    for (size_t i = 0; i < sizeof conditions / sizeof conditions[0]; i++)
        if (strcmp(s->sqlstate, conditions[i].code) == 0) return conditions[i].what;
    return NULL;
}

qs_status qc_store_fail(qc_store *s, const PGresult *r, const char *what, qs_error *err) {
    const char *code = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    snprintf(s->sqlstate, sizeof s->sqlstate, "%s", code ? code : "");
    if (session_gone(s, r) || qc_store_condition(s)) s->lost = true;
    const char *msg = r ? PQresultErrorMessage(r) : "";
    if (!msg || !*msg) msg = PQerrorMessage(s->conn);
    const char *detail = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_DETAIL) : NULL;
    char clean[900];
    snprintf(clean, sizeof clean, "%s", msg);
    clean[strcspn(clean, "\n")] = '\0';
    return qs_error_set(err, QS_EDB, "%s: %s%s%s%s", what, clean, detail ? " (" : "",
                        detail ? detail : "", detail ? ")" : "");
}

qs_status qc_store_exec(qc_store *s, const char *sql, const char *what, qs_error *err) {
    PGresult *r = PQexec(s->conn, sql);
    ExecStatusType st = PQresultStatus(r);
    qs_status rc = QS_OK;
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) rc = qc_store_fail(s, r, what, err);
    PQclear(r);
    return rc;
}

qs_status qc_store_command(qc_store *s, const char *sql, int n, const char *const *params,
                           const char *what, qs_error *err) {
    PGresult *r = qc_store_params(s, sql, n, params, PGRES_COMMAND_OK, what, err);
    if (!r) return QS_EDB;
    PQclear(r);
    return QS_OK;
}

PGresult *qc_store_params(qc_store *s, const char *sql, int n, const char *const *params,
                          ExecStatusType want, const char *what, qs_error *err) {
    PGresult *r = PQexecParams(s->conn, sql, n, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(r) == want) return r;
    qc_store_fail(s, r, what, err);
    PQclear(r);
    return NULL;
}

void qc_store_mark_lost(qc_store *s) {
    s->lost = true;
}

void qc_store_rollback(qc_store *s) {
    if (s->lost || PQstatus(s->conn) != CONNECTION_OK) return;
    if (PQtransactionStatus(s->conn) == PQTRANS_IDLE) return;
    PQclear(PQexec(s->conn, "ROLLBACK"));
}

/* Opens a session as "application_name" app; coordinator: the coordinator's timeouts.
 * expand_dbname = 1: conninfo is a full connection string. Keywords before it are
 * defaults it may override, keywords after it override it (libpq docs,
 * PQconnectdbParams). connect_timeout bounds PQreset against an unreachable host, which
 * the coordinator retries from its message loop (2 s for the coordinator, whose loop
 * waits meanwhile, 10 s for the others). A partition must not leave a session hanging on
 * either end: TCP keepalives (5 s idle, then every second, 3 lost probes) and
 * tcp_user_timeout (5 s of unacknowledged data) end the client's side, the same server
 * settings (options) the server's side. The coordinator's sessions also bound how long a
 * statement may wait (QC_STORE_COORDINATOR_OPTIONS). None of these apply over a local
 * socket. */
PGconn *qc_store_connect_as(const char *conninfo, const char *app, bool coordinator) {
    const char *keys[] = {"connect_timeout",  "keepalives",
                          "keepalives_idle",  "keepalives_interval",
                          "keepalives_count", "tcp_user_timeout",
                          "options",          "dbname",
                          "application_name", NULL};
    const char *vals[] = {coordinator ? "2" : "10", /* the coordinator retries from its loop */
                          "1",
                          "5",
                          "1",
                          "3",
                          "5000",
                          coordinator ? QC_STORE_COORDINATOR_OPTIONS : QC_STORE_CLIENT_OPTIONS,
                          conninfo,
                          app,
                          NULL};
    return PQconnectdbParams(keys, vals, 1);
}
