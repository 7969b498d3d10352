/* The coordinator's PostgreSQL store: state and outcome names, error helpers, the connection
 * and its reconnect. The coordinator lock is in lock.c, submissions in submit.c, the rebuild
 * snapshot in snapshot.c, the read helpers in reads.c, the batched transitions in batch.c.
 * Contract: store.h. */
#include "store.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "migrate.h"
#include "sqltext.h"
#include "store_internal.h"

static const char *const job_state_names[] = {"pending", "running", "succeeded", "failed",
                                              "cancelled"};
static const char *const outcome_names[] = {"running", "succeeded", "failed",
                                            "lost",    "preempted", "cancelled"};

const char *qc_job_state_name(qc_job_state s) {
    return (unsigned)s < sizeof job_state_names / sizeof job_state_names[0] ? job_state_names[s]
                                                                            : NULL;
}

const char *qc_attempt_outcome_name(qc_attempt_outcome o) {
    return (unsigned)o < sizeof outcome_names / sizeof outcome_names[0] ? outcome_names[o] : NULL;
}

/* attempts.cause's names, as schema/170_attempt_cause.sql's CHECK lists them. */
static const char *const cause_names[] = {"oom",         "signal",    "exit",      "lease",
                                          "restart",     "grace",     "job_error", "worker_error",
                                          "preempted",   "bye",       "undeliverable",
                                          "assign_lost", "cancelled"};

bool qc_attempt_cause_known(const char *cause) {
    for (size_t i = 0; i < sizeof cause_names / sizeof cause_names[0]; i++)
        if (strcmp(cause, cause_names[i]) == 0) return true;
    return false;
}

qs_status qc_job_state_parse(const char *text, qc_job_state *out, qs_error *err) {
    for (size_t i = 0; i < sizeof job_state_names / sizeof job_state_names[0]; i++) {
        if (strcmp(text, job_state_names[i]) == 0) {
            *out = (qc_job_state)i;
            return QS_OK;
        }
    }
    return qs_error_set(err, QS_EINVAL, "job state: unknown value '%s'", text);
}

/* ---- errors ------------------------------------------------------------------------------ */

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

/* ---- connection ---------------------------------------------------------------------------- */

/* The connection's connect_timeout in ms (libpq: seconds, at least 2 when set; 0 or unset:
 * none). */
static int connect_timeout_ms(PGconn *conn) {
    PQconninfoOption *opts = PQconninfo(conn);
    int ms = 0;
    for (PQconninfoOption *o = opts; o && o->keyword; o++) {
        if (strcmp(o->keyword, "connect_timeout") || !o->val) continue;
        int sec = atoi(o->val);
        ms = sec <= 0 ? 0 : (sec < 2 ? 2 : sec) * 1000;
    }
    PQconninfoFree(opts);
    return ms;
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
static PGconn *connect_as(const char *conninfo, const char *app, bool coordinator) {
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

PGconn *qc_store_lock_connect(const qc_store *s) {
    char app[sizeof s->app + 8];
    const char *where = strrchr(s->app, ' '); /* " host:pid" after "qsweep <role>" */
    int role_end = where ? (int)(where - s->app) : (int)strlen(s->app);
    snprintf(app, sizeof app, "%.*s-lock%s", role_end, s->app, where ? where : "");
    return connect_as(s->conninfo, app, true);
}

qs_status qc_store_open(const char *conninfo, const char *role, qc_store **out, qs_error *err) {
    *out = NULL;
    qc_store *s = calloc(1, sizeof *s);
    if (!s) return qs_error_set(err, QS_ENOMEM, "store: out of memory");
    char host[128] = "?";
    gethostname(host, sizeof host - 1);
    snprintf(s->app, sizeof s->app, "qsweep %s %s:%d", role ? role : "client", host, (int)getpid());
    bool coordinator = role && strncmp(role, "coordinator", 11) == 0;
    if (!(s->conninfo = strdup(conninfo))) {
        free(s);
        return qs_error_set(err, QS_ENOMEM, "store: out of memory");
    }
    s->conn = connect_as(conninfo, s->app, coordinator);
    if (!s->conn) {
        free(s->conninfo);
        free(s);
        return qs_error_set(err, QS_ENOMEM, "store: out of memory connecting");
    }
    if (PQstatus(s->conn) != CONNECTION_OK) {
        char msg[600];
        snprintf(msg, sizeof msg, "%s", PQerrorMessage(s->conn));
        msg[strcspn(msg, "\n")] = '\0';
        qc_store_close(s);
        return qs_error_set(err, QS_EDB, "connect to PostgreSQL (%s): %s", conninfo, msg);
    }
    s->backend = PQbackendPID(s->conn);
    s->connect_timeout_ms = connect_timeout_ms(s->conn);
    qs_status st = qc_migrate(s->conn, NULL, err);
    if (st) {
        qc_store_close(s);
        return st;
    }
    *out = s;
    return QS_OK;
}

void qc_store_close(qc_store *s) {
    if (!s) return;
    qc_store_drop_lock_session(s);
    PQfinish(s->conn);
    free(s->conninfo);
    qc_sbuf_free(&s->scratch);
    free(s);
}

bool qc_store_connection_lost(const qc_store *s) {
    return s->lost || PQstatus(s->conn) == CONNECTION_BAD;
}

int qc_store_backend_pid(const qc_store *s) {
    return s->lock_conn ? s->lock_backend : PQbackendPID(s->conn);
}

/* Ends a failed reconnect attempt: QS_EDB with libpq's message (or why). */
static qs_status reconnect_failed(qc_store *s, const char *why, qs_error *err) {
    s->reconnecting = false;
    s->lost = true;
    char msg[600];
    snprintf(msg, sizeof msg, "%s", why ? why : PQerrorMessage(s->conn));
    msg[strcspn(msg, "\n")] = '\0';
    return qs_error_set(err, QS_EDB, "reconnect to PostgreSQL: %s", msg);
}

/* Ends the session the reconnect replaced when the server still keeps it (a partition it
 * has not noticed): it may sit in a transaction holding row locks the new session needs.
 * Only a session of this very process (its application_name) is ended; errors are ignored. */
static void end_replaced_session(qc_store *s) {
    if (!s->stale_backend) return;
    char pid[16];
    snprintf(pid, sizeof pid, "%d", s->stale_backend);
    const char *p[] = {pid, s->app};
    PQclear(PQexecParams(s->conn,
                         "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = "
                         "$1::int AND application_name = $2",
                         2, NULL, p, NULL, NULL, 0));
    s->stale_backend = 0;
}

qs_status qc_store_reconnect_start(qc_store *s, qs_error *err) {
    if (s->backend) s->stale_backend = s->backend; /* the session being replaced */
    qc_store_drop_lock_session(s);                 /* or the lock's, which it names */
    s->backend = 0;
    s->lost = true; /* until the new session is up */
    s->reconnecting = true;
    s->reconnect_deadline = s->connect_timeout_ms ? qs_clock_ms() + s->connect_timeout_ms : 0;
    if (!PQresetStart(s->conn)) return reconnect_failed(s, NULL, err);
    s->poll_status = PGRES_POLLING_WRITING; /* as after PQconnectStart (libpq docs) */
    return QS_OK;
}

qs_status qc_store_reconnect_poll(qc_store *s, bool *done, qs_error *err) {
    *done = false;
    if (!s->reconnecting) {
        *done = !s->lost && PQstatus(s->conn) == CONNECTION_OK;
        return QS_OK;
    }
    while (s->poll_status != PGRES_POLLING_OK) {
        if (s->poll_status == PGRES_POLLING_FAILED) return reconnect_failed(s, NULL, err);
        struct pollfd p = {.fd = PQsocket(s->conn),
                           .events = s->poll_status == PGRES_POLLING_READING ? POLLIN : POLLOUT};
        int r = p.fd < 0 ? 1 : poll(&p, 1, 0); /* no socket: PQresetPoll says why */
        if (r < 0 && errno != EINTR) return reconnect_failed(s, strerror(errno), err);
        if (r <= 0) { /* not ready yet */
            if (s->reconnect_deadline && qs_clock_ms() >= s->reconnect_deadline) {
                char why[80];
                snprintf(why, sizeof why, "no connection within connect_timeout (%d s)",
                         s->connect_timeout_ms / 1000);
                return reconnect_failed(s, why, err);
            }
            return QS_OK;
        }
        s->poll_status = PQresetPoll(s->conn);
    }
    s->reconnecting = false;
    if (PQstatus(s->conn) != CONNECTION_OK) return reconnect_failed(s, NULL, err);
    s->lost = false;
    s->backend = PQbackendPID(s->conn);
    s->sqlstate[0] = '\0';
    s->flush_ready = false; /* prepared statements and temporary tables died with the session */
    if (s->holds_lock) {
        s->holds_lock = false;
        qs_status st = qc_store_take_coordinator_lock(s, err);
        if (st) return st;
    }
    end_replaced_session(s);
    *done = true;
    return QS_OK;
}

qs_status qc_store_reconnect(qc_store *s, qs_error *err) {
    qs_status st = qc_store_reconnect_start(s, err);
    bool done = false;
    while (st == QS_OK && !(st = qc_store_reconnect_poll(s, &done, err)) && !done) {
        struct pollfd p = {.fd = PQsocket(s->conn),
                           .events = s->poll_status == PGRES_POLLING_READING ? POLLIN : POLLOUT};
        if (p.fd >= 0) poll(&p, 1, 100); /* the deadline is checked at least every 100 ms */
    }
    return st;
}

PGconn *qc_store_pgconn(qc_store *s) {
    return s->conn;
}
