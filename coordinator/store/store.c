/* The coordinator's PostgreSQL store: connection, coordinator lock, submit, rebuild
 * snapshot, cancels and read helpers. The batched transitions are in batch.c.
 * Contract: store.h. */
#include "store.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "migrate.h"
#include "sqltext.h"
#include "store_internal.h"

/* Session advisory lock key of the coordinator: 0x71737765657031 ("qsweep1"). pg_locks
 * shows a bigint key as classid = high 32 bits, objid = low 32 bits, objsubid = 1
 * (PostgreSQL docs, pg_locks). */
#define COORD_LOCK_KEY "31933629007753265"
#define COORD_LOCK_HI "7435127"    /* 0x00717377 */
#define COORD_LOCK_LO "1701146673" /* 0x65657031 */
/* Transaction advisory lock serialising submissions: "qsweepsb". */
#define SUBMIT_LOCK_KEY "8175009025984852834"

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

qs_status qc_store_open(const char *conninfo, const char *role, qc_store **out, qs_error *err) {
    *out = NULL;
    qc_store *s = calloc(1, sizeof *s);
    if (!s) return qs_error_set(err, QS_ENOMEM, "store: out of memory");
    char host[128] = "?";
    gethostname(host, sizeof host - 1);
    char *app = s->app;
    snprintf(s->app, sizeof s->app, "qsweep %s %s:%d", role ? role : "client", host, (int)getpid());
    /* expand_dbname = 1: conninfo is a full connection string. Keywords before it are
     * defaults it may override, keywords after it override it (libpq docs,
     * PQconnectdbParams). connect_timeout bounds PQreset against an unreachable host, which
     * the coordinator retries from its message loop (2 s for the coordinator, whose loop
     * waits meanwhile, 10 s for the others). A partition must not leave a session hanging on
     * either end: TCP keepalives (5 s idle, then every second, 3 lost probes) and
     * tcp_user_timeout (5 s of unacknowledged data) end the client's side, the same server
     * settings (options) the server's side. The coordinator's sessions also bound how long a
     * statement may wait (QC_STORE_COORDINATOR_OPTIONS). None of these apply over a local
     * socket. */
    bool coordinator = role && strncmp(role, "coordinator", 11) == 0;
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
    s->conn = PQconnectdbParams(keys, vals, 1);
    if (!s->conn) {
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
    PQfinish(s->conn);
    qc_sbuf_free(&s->scratch);
    free(s);
}

/* Names whoever holds the coordinator lock, for the refusal message ("unknown session" when
 * the query finds nobody or fails); *found (may be NULL): whether anyone does. Returns false
 * when the query failed (PQerrorMessage says why). */
static bool describe_lock_holder(qc_store *s, char *out, size_t cap, bool *found) {
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
    if (!describe_lock_holder(s, who, sizeof who, held)) {
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

static qs_status try_coordinator_lock(qc_store *s, qs_error *err) {
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
    describe_lock_holder(s, holder, sizeof holder, NULL);
    return qs_error_set(err, QS_ESTATE,
                        "another coordinator is already running on database '%s': the "
                        "coordinator lock is held by %s; stop it first",
                        PQdb(s->conn), holder);
}

qs_status qc_store_lock_coordinator(qc_store *s, qs_error *err) {
    if (s->holds_lock) return QS_OK;
    return try_coordinator_lock(s, err);
}

bool qc_store_connection_lost(const qc_store *s) {
    return s->lost || PQstatus(s->conn) == CONNECTION_BAD;
}

int qc_store_backend_pid(const qc_store *s) {
    return PQbackendPID(s->conn);
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

/* Ends a failed reconnect attempt: QS_EDB with libpq's message (or why). */
static qs_status reconnect_failed(qc_store *s, const char *why, qs_error *err) {
    s->reconnecting = false;
    s->lost = true;
    char msg[600];
    snprintf(msg, sizeof msg, "%s", why ? why : PQerrorMessage(s->conn));
    msg[strcspn(msg, "\n")] = '\0';
    return qs_error_set(err, QS_EDB, "reconnect to PostgreSQL: %s", msg);
}

qs_status qc_store_reconnect_start(qc_store *s, qs_error *err) {
    if (s->backend) s->stale_backend = s->backend; /* the session being replaced */
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
        qs_status st = try_coordinator_lock(s, err);
        if (st) return st;
    }
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

/* ---- submit -------------------------------------------------------------------------------- */

/* Checks one job's fields and its spec JSON; QS_EINVAL naming the job and field. */
static qs_status check_job(const qc_job_submit *j, size_t index, qs_error *err) {
    if (!j->job_key || !*j->job_key)
        return qs_error_set(err, QS_EINVAL, "submit: job %zu: job_key is empty", index);
    if (!j->kind || !*j->kind)
        return qs_error_set(err, QS_EINVAL, "submit: job %s: kind is empty", j->job_key);
    if (j->gpus < 0 || j->gpu_mem_mb < 0)
        return qs_error_set(err, QS_EINVAL,
                            "submit: job %s: resources gpus=%d gpu_mem_mb=%lld "
                            "must not be negative",
                            j->job_key, j->gpus, (long long)j->gpu_mem_mb);
    if (j->max_attempts < 1)
        return qs_error_set(err, QS_EINVAL, "submit: job %s: max_attempts %d must be >= 1",
                            j->job_key, j->max_attempts);
    if (!j->spec_json)
        return qs_error_set(err, QS_EINVAL, "submit: job %s: spec_json is missing", j->job_key);
    /* The database is UTF8 (jansson checks spec_json itself). */
    const char *texts[] = {j->job_key, j->kind, j->model_key};
    const char *fields[] = {"job_key", "kind", "model_key"};
    for (int t = 0; t < 3; t++) {
        size_t bad = 0;
        if (texts[t] && !qc_utf8_valid(texts[t], &bad))
            return qs_error_set(err, QS_EINVAL, "submit: job %zu: %s is not valid UTF-8 (byte %zu)",
                                index, fields[t], bad);
    }
    json_error_t je;
    json_t *spec = json_loads(j->spec_json, JSON_REJECT_DUPLICATES, &je);
    if (!spec)
        return qs_error_set(err, QS_EINVAL, "submit: job %s: spec_json line %d column %d: %s",
                            j->job_key, je.line, je.column, je.text);
    bool is_object = json_is_object(spec);
    json_decref(spec);
    if (!is_object)
        return qs_error_set(err, QS_EINVAL, "submit: job %s: spec_json is not a JSON object",
                            j->job_key);
    for (size_t d = 0; d < j->n_depends_on; d++) {
        const char *dep = j->depends_on[d];
        if (!dep || !*dep)
            return qs_error_set(err, QS_EINVAL, "submit: job %s: depends_on[%zu] is empty",
                                j->job_key, d);
        size_t bad = 0;
        if (!qc_utf8_valid(dep, &bad))
            return qs_error_set(err, QS_EINVAL,
                                "submit: job %s: depends_on[%zu] is not valid UTF-8 (byte %zu)",
                                j->job_key, d, bad);
        if (strcmp(dep, j->job_key) == 0)
            return qs_error_set(err, QS_EINVAL, "submit: job %s depends on itself", j->job_key);
    }
    return QS_OK;
}

/* Orders job indices by job_key, then by index, so the first of a run of equal keys is the
 * one submitted first. ctx: the qc_job_submit array (qsort_r, glibc). */
static int by_job_key(const void *a, const void *b, void *ctx) {
    const qc_job_submit *jobs = ctx;
    size_t ia = *(const size_t *)a, ib = *(const size_t *)b;
    int c = strcmp(jobs[ia].job_key, jobs[ib].job_key);
    if (c) return c;
    return ia < ib ? -1 : ia > ib;
}

/* Validates every job and finds repeated job_keys. keep[i] is false for the second and later
 * copies of a key (same spec: counted once); a key repeated with a different spec is
 * QS_EINVAL. */
static qs_status check_jobs(const qc_job_submit *jobs, size_t n, bool *keep, qs_error *err) {
    for (size_t i = 0; i < n; i++) {
        qs_status st = check_job(&jobs[i], i, err);
        if (st) return st;
        keep[i] = true;
    }
    size_t *order = malloc((n ? n : 1) * sizeof *order);
    if (!order) return qs_error_set(err, QS_ENOMEM, "submit: out of memory");
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    qsort_r(order, n, sizeof *order, by_job_key, (void *)jobs);
    qs_status st = QS_OK;
    for (size_t k = 1; k < n && !st; k++) {
        const qc_job_submit *a = &jobs[order[k - 1]], *b = &jobs[order[k]];
        if (strcmp(a->job_key, b->job_key) != 0) continue;
        if (strcmp(a->spec_json, b->spec_json) != 0)
            st = qs_error_set(err, QS_EINVAL,
                              "submit: job_key %s appears twice with different specs", a->job_key);
        keep[order[k]] = false;
    }
    free(order);
    return st;
}

/* The submission as array columns for unnest(). */
typedef struct submit_cols {
    qc_sqlarray key, kind, spec, prio, res, model, maxatt; /* one per kept job */
    qc_sqlarray dep_job, dep_on;                           /* one per dependency edge */
    qc_sqlarray stage; /* one per kept job: its pipeline stage, "" outside one */
} submit_cols;

static void submit_cols_free(submit_cols *c) {
    qc_sqlarray *all[] = {&c->key,    &c->kind,   &c->spec,    &c->prio,   &c->res,
                          &c->model,  &c->maxatt, &c->dep_job, &c->dep_on, &c->stage};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        qc_sqlarray_free(all[i]);
}

static bool submit_cols_oom(const submit_cols *c) {
    const qc_sqlarray *all[] = {&c->key,    &c->kind,   &c->spec,    &c->prio,   &c->res,
                                &c->model,  &c->maxatt, &c->dep_job, &c->dep_on, &c->stage};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]->text.oom) return true;
    return false;
}

static void fill_submit_cols(submit_cols *c, const qc_job_submit *jobs, size_t n,
                             const bool *keep) {
    for (size_t i = 0; i < n; i++) {
        if (!keep[i]) continue;
        const qc_job_submit *j = &jobs[i];
        qc_sqlarray_text(&c->key, j->job_key);
        qc_sqlarray_text(&c->kind, j->kind);
        qc_sqlarray_text(&c->spec, j->spec_json);
        qc_sqlarray_int(&c->prio, j->priority);
        char res[128];
        /* native_fp4 only when asked, so the resources of every other job read as before */
        snprintf(res, sizeof res, "{\"gpus\": %d, \"gpu_mem_mb\": %lld%s}", j->gpus,
                 (long long)j->gpu_mem_mb, j->native_fp4 ? ", \"native_fp4\": true" : "");
        qc_sqlarray_text(&c->res, res);
        qc_sqlarray_text(&c->model, j->model_key ? j->model_key : "");
        qc_sqlarray_int(&c->maxatt, j->max_attempts);
        qc_sqlarray_text(&c->stage, j->stage ? j->stage : "");
        for (size_t d = 0; d < j->n_depends_on; d++) {
            qc_sqlarray_text(&c->dep_job, j->job_key);
            qc_sqlarray_text(&c->dep_on, j->depends_on[d]);
        }
    }
}

/* Finds or creates the experiment row; QS_ESTATE when the name exists with another grid. */
static qs_status submit_experiment(qc_store *s, const char *name, const char *description,
                                   const char *grid_text, const char *grid_json,
                                   qc_submit_counts *out, qs_error *err) {
    const char *p[] = {name, description ? description : "", grid_text, grid_json};
    PGresult *r = qc_store_params(s,
                                  "INSERT INTO experiments (name, description, grid, grid_json) "
                                  "VALUES ($1, $2, $3, $4::jsonb) ON CONFLICT (name) DO NOTHING "
                                  "RETURNING id",
                                  4, p, PGRES_TUPLES_OK, "submit: inserting experiment", err);
    if (!r) return QS_EDB;
    if (PQntuples(r) == 1) {
        out->experiment_id = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
        out->experiment_new = true;
        PQclear(r);
        return QS_OK;
    }
    PQclear(r);
    const char *q[] = {name, grid_text};
    r = qc_store_params(s, "SELECT id, grid = $2 FROM experiments WHERE name = $1", 2, q,
                        PGRES_TUPLES_OK, "submit: reading experiment", err);
    if (!r) return QS_EDB;
    out->experiment_id = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    bool same = PQgetvalue(r, 0, 1)[0] == 't';
    PQclear(r);
    if (!same)
        return qs_error_set(err, QS_ESTATE,
                            "submit: experiment '%s' already exists with a different grid; "
                            "choose another name",
                            name);
    return QS_OK;
}

/* The statements of one submission, inside its transaction. */
static qs_status submit_jobs(qc_store *s, const submit_cols *c, qc_submit_counts *out,
                             qs_error *err) {
    enum { NCOLS = 10 };
    qc_sbuf lit[NCOLS] = {{0}};
    const qc_sqlarray *cols[NCOLS] = {&c->key,    &c->kind,   &c->spec,    &c->prio,
                                      &c->res,    &c->model,  &c->maxatt,  &c->dep_job,
                                      &c->dep_on, &c->stage};
    const char *v[NCOLS];
    for (int i = 0; i < NCOLS; i++)
        v[i] = qc_sqlarray_literal(cols[i], &lit[i]);
    qs_status st = QS_OK;
    for (int i = 0; i < NCOLS; i++)
        if (!v[i]) st = qs_error_set(err, QS_ENOMEM, "submit: out of memory");

    PGresult *r = NULL;
    if (!st && !out->experiment_new) {
        /* One name, one grid, one set of jobs: the same grid text over a changed model or
         * token file gives other job_keys (their digests are part of the key), which must not
         * be added to the experiment that already holds the old ones. */
        char exp_id[32];
        snprintf(exp_id, sizeof exp_id, "%lld", (long long)out->experiment_id);
        const char *ep[] = {exp_id, v[0]};
        r = qc_store_params(
            s,
            "SELECT (SELECT count(*) FROM unnest($2::text[]) AS u(k) WHERE NOT EXISTS "
            "(SELECT 1 FROM experiment_jobs ej JOIN jobs j ON j.id = ej.job "
            "WHERE ej.experiment = $1 AND j.job_key = u.k)), "
            "(SELECT count(*) FROM experiment_jobs ej JOIN jobs j ON j.id = ej.job "
            "WHERE ej.experiment = $1 AND j.job_key <> ALL($2::text[])), "
            "(SELECT name FROM experiments WHERE id = $1)",
            2, ep, PGRES_TUPLES_OK, "submit: comparing with the experiment's jobs", err);
        if (!r)
            st = QS_EDB;
        else {
            long long added = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
            long long dropped = strtoll(PQgetvalue(r, 0, 1), NULL, 10);
            if (added || dropped)
                st = qs_error_set(
                    err, QS_ESTATE,
                    "submit: experiment '%s' already exists with other jobs (%lld of this "
                    "submission's %zu job_keys are not in it, %lld of its jobs are not in this "
                    "submission: a model or token file changed?); choose a new experiment name",
                    PQgetvalue(r, 0, 2), added, c->key.n, dropped);
            PQclear(r);
            r = NULL;
        }
    }
    if (!st) {
        /* Existing jobs, counted by state before inserting. */
        r = qc_store_params(s,
                            "SELECT state, count(*) FROM jobs WHERE job_key = ANY($1::text[]) "
                            "GROUP BY state",
                            1, v, PGRES_TUPLES_OK, "submit: reading existing jobs", err);
        if (!r) st = QS_EDB;
    }
    if (!st) {
        for (int i = 0; i < PQntuples(r); i++) {
            const char *state = PQgetvalue(r, i, 0);
            size_t cnt = strtoull(PQgetvalue(r, i, 1), NULL, 10);
            if (!strcmp(state, "succeeded"))
                out->reused_done += cnt;
            else if (!strcmp(state, "pending") || !strcmp(state, "running"))
                out->reused_pending += cnt;
            else
                out->reused_failed += cnt;
        }
        PQclear(r);
        r = qc_store_params(
            s,
            "INSERT INTO jobs (job_key, kind, spec, priority, resources, model_key, "
            "max_attempts) "
            "SELECT k, kd, sp::jsonb, pr, rs::jsonb, mk, ma FROM unnest($1::text[], $2::text[], "
            "$3::text[], $4::int[], $5::text[], $6::text[], $7::int[]) WITH ORDINALITY "
            "AS u(k, kd, sp, pr, rs, mk, ma, ord) ORDER BY ord ON CONFLICT (job_key) DO NOTHING",
            7, v, PGRES_COMMAND_OK, "submit: inserting jobs", err);
        if (!r) st = QS_EDB;
    }
    if (!st) {
        out->jobs_new = strtoull(PQcmdTuples(r), NULL, 10);
        PQclear(r);
        char exp_id[32];
        snprintf(exp_id, sizeof exp_id, "%lld", (long long)out->experiment_id);
        const char *lp[] = {exp_id, v[0], v[9]};
        /* A link stored before experiment_jobs had a stage (schema/145) gets it now. */
        st = qc_store_command(
            s,
            "INSERT INTO experiment_jobs (experiment, job, stage) SELECT $1, j.id, "
            "NULLIF(u.st, '') FROM unnest($2::text[], $3::text[]) AS u(k, st) "
            "JOIN jobs j ON j.job_key = u.k ON CONFLICT (experiment, job) DO UPDATE "
            "SET stage = EXCLUDED.stage WHERE experiment_jobs.stage IS NULL",
            3, lp, "submit: linking jobs", err);
    }
    if (!st && c->dep_job.n) {
        const char *dp[] = {v[7], v[8]};
        r = qc_store_params(s,
                            "SELECT u.k, u.d FROM unnest($1::text[], $2::text[]) AS u(k, d) "
                            "WHERE NOT EXISTS (SELECT 1 FROM jobs WHERE job_key = u.d) LIMIT 1",
                            2, dp, PGRES_TUPLES_OK, "submit: resolving dependencies", err);
        if (!r)
            st = QS_EDB;
        else if (PQntuples(r) > 0) {
            st = qs_error_set(err, QS_EINVAL,
                              "submit: job %s depends on job_key %s, which is neither in this "
                              "submission nor stored",
                              PQgetvalue(r, 0, 0), PQgetvalue(r, 0, 1));
            PQclear(r);
        } else {
            PQclear(r);
            st = qc_store_command(s,
                                  "INSERT INTO job_deps (job, depends_on) SELECT j.id, d.id "
                                  "FROM unnest($1::text[], $2::text[]) AS u(k, dk) "
                                  "JOIN jobs j ON j.job_key = u.k JOIN jobs d ON d.job_key = u.dk "
                                  "ON CONFLICT DO NOTHING",
                                  2, dp, "submit: inserting dependencies", err);
        }
    }
    for (int i = 0; i < NCOLS; i++)
        qc_sbuf_free(&lit[i]);
    return st;
}

qs_status qc_store_submit(qc_store *s, const char *name, const char *description,
                          const char *grid_text, const char *grid_json, const qc_job_submit *jobs,
                          size_t n_jobs, qc_submit_counts *out, qs_error *err) {
    *out = (qc_submit_counts){0};
    if (!name || !*name) return qs_error_set(err, QS_EINVAL, "submit: experiment name is empty");
    if (!grid_text)
        return qs_error_set(err, QS_EINVAL, "submit: experiment %s: grid text is missing", name);
    const char *texts[] = {name, description, grid_text};
    const char *fields[] = {"experiment name", "description", "grid text"};
    for (int t = 0; t < 3; t++) {
        size_t bad = 0;
        if (texts[t] && !qc_utf8_valid(texts[t], &bad))
            return qs_error_set(err, QS_EINVAL, "submit: %s is not valid UTF-8 (byte %zu)",
                                fields[t], bad);
    }
    if (grid_json) {
        json_error_t je;
        json_t *g = json_loads(grid_json, 0, &je);
        if (!g)
            return qs_error_set(err, QS_EINVAL,
                                "submit: experiment %s: grid_json line %d column %d: %s", name,
                                je.line, je.column, je.text);
        json_decref(g);
    }
    bool *keep = calloc(n_jobs ? n_jobs : 1, sizeof *keep);
    if (!keep) return qs_error_set(err, QS_ENOMEM, "submit: out of memory");
    qs_status st = check_jobs(jobs, n_jobs, keep, err);
    submit_cols c = {0};
    if (!st) {
        fill_submit_cols(&c, jobs, n_jobs, keep);
        if (submit_cols_oom(&c)) st = qs_error_set(err, QS_ENOMEM, "submit: out of memory");
    }
    free(keep);
    if (!st) st = qc_store_exec(s, "BEGIN", "submit: BEGIN", err);
    if (!st)
        st = qc_store_exec(s, "SELECT pg_advisory_xact_lock(" SUBMIT_LOCK_KEY ")",
                           "submit: taking the submit lock", err);
    if (!st) st = submit_experiment(s, name, description, grid_text, grid_json, out, err);
    if (!st) st = submit_jobs(s, &c, out, err);
    if (!st) st = qc_store_exec(s, "NOTIFY qsweep_jobs", "submit: NOTIFY", err);
    if (!st) st = qc_store_exec(s, "COMMIT", "submit: COMMIT", err);
    if (st) {
        qc_store_rollback(s);
        qc_submit_counts zero = {0};
        *out = zero;
    }
    submit_cols_free(&c);
    return st;
}

qs_status qc_store_request_cancel(qc_store *s, const char *job_key, const char *experiment,
                                  const char *reason, qs_error *err) {
    if ((job_key == NULL) == (experiment == NULL))
        return qs_error_set(err, QS_EINVAL, "cancel: give exactly one of job_key, experiment");
    const char *p[] = {job_key ? job_key : experiment, reason ? reason : ""};
    /* A request with nothing left to cancel (every job finished) is stored already handled:
     * no coordinator may be running to mark it, and none would find work in it. */
    const char *sql =
        job_key ? "INSERT INTO cancel_requests (job, reason, handled_at) SELECT id, $2, "
                  "CASE WHEN state IN ('pending', 'running') THEN NULL ELSE now() END "
                  "FROM jobs WHERE job_key = $1"
                : "INSERT INTO cancel_requests (experiment, reason, handled_at) SELECT e.id, $2, "
                  "CASE WHEN EXISTS (SELECT 1 FROM experiment_jobs ej JOIN jobs j ON j.id = "
                  "ej.job WHERE ej.experiment = e.id AND j.state IN ('pending', 'running')) "
                  "THEN NULL ELSE now() END FROM experiments e WHERE e.name = $1";
    qs_status st = qc_store_exec(s, "BEGIN", "cancel: BEGIN", err);
    if (st) return st;
    PGresult *r = qc_store_params(s, sql, 2, p, PGRES_COMMAND_OK, "cancel: inserting request", err);
    if (!r)
        st = QS_EDB;
    else {
        if (strcmp(PQcmdTuples(r), "1") != 0)
            st = qs_error_set(err, QS_ENOTFOUND, "cancel: no %s named '%s'",
                              job_key ? "job with job_key" : "experiment", p[0]);
        PQclear(r);
    }
    if (!st) st = qc_store_exec(s, "NOTIFY qsweep_cancel", "cancel: NOTIFY", err);
    if (!st) st = qc_store_exec(s, "COMMIT", "cancel: COMMIT", err);
    if (st) qc_store_rollback(s);
    return st;
}

qs_status qc_store_requeue(qc_store *s, const char *experiment, size_t *n_requeued, qs_error *err) {
    *n_requeued = 0;
    if (!experiment || !*experiment)
        return qs_error_set(err, QS_EINVAL, "requeue: experiment name is empty");
    qs_status st = qc_store_exec(s, "BEGIN", "requeue: BEGIN", err);
    if (st) return st;
    /* The transaction lock conflicts with a coordinator's session lock on the same key: a
     * running coordinator holds its jobs in memory and reads only new ones, so it would
     * never see the re-queued rows. This session's own lock is re-entrant. */
    PGresult *r =
        qc_store_params(s, "SELECT pg_try_advisory_xact_lock(" COORD_LOCK_KEY ")", 0, NULL,
                        PGRES_TUPLES_OK, "requeue: probing the coordinator lock", err);
    if (!r)
        st = QS_EDB;
    else {
        bool free_ = PQgetvalue(r, 0, 0)[0] == 't';
        PQclear(r);
        if (!free_) {
            char holder[400];
            describe_lock_holder(s, holder, sizeof holder, NULL);
            st = qs_error_set(err, QS_ESTATE,
                              "requeue: experiment '%s': a coordinator is running on database "
                              "'%s' (%s); stop it first, it reads the jobs when it starts",
                              experiment, PQdb(s->conn), holder);
        }
    }
    int64_t exp_id = 0;
    if (!st) {
        const char *p[] = {experiment};
        r = qc_store_params(s, "SELECT id FROM experiments WHERE name = $1", 1, p, PGRES_TUPLES_OK,
                            "requeue: looking up the experiment", err);
        if (!r)
            st = QS_EDB;
        else {
            if (PQntuples(r) == 0)
                st = qs_error_set(err, QS_ENOTFOUND, "requeue: no experiment named '%s'",
                                  experiment);
            else
                exp_id = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
            PQclear(r);
        }
    }
    char id[32];
    snprintf(id, sizeof id, "%lld", (long long)exp_id);
    const char *ip[] = {id};
    if (!st) {
        r = qc_store_params(s,
                            "UPDATE jobs SET state = 'pending', attempts_used = 0, not_before = "
                            "NULL, last_error = NULL, updated_at = now() WHERE state IN "
                            "('failed', 'cancelled') AND id IN (SELECT job FROM experiment_jobs "
                            "WHERE experiment = $1)",
                            1, ip, PGRES_COMMAND_OK, "requeue: resetting jobs", err);
        if (!r)
            st = QS_EDB;
        else {
            *n_requeued = strtoull(PQcmdTuples(r), NULL, 10);
            PQclear(r);
        }
    }
    if (!st) {
        /* Open cancel requests would cancel the re-queued jobs again at the next start. */
        st = qc_store_command(s,
                              "UPDATE cancel_requests SET handled_at = now() WHERE handled_at IS "
                              "NULL AND (experiment = $1 OR job IN (SELECT job FROM "
                              "experiment_jobs WHERE experiment = $1))",
                              1, ip, "requeue: closing cancel requests", err);
    }
    if (!st) st = qc_store_exec(s, "NOTIFY qsweep_jobs", "requeue: NOTIFY", err);
    if (!st) st = qc_store_exec(s, "COMMIT", "requeue: COMMIT", err);
    if (st) {
        qc_store_rollback(s);
        *n_requeued = 0;
    }
    return st;
}

/* ---- rebuild ------------------------------------------------------------------------------- */

static char *dup_or_null(const PGresult *r, int row, int col) {
    if (PQgetisnull(r, row, col)) return NULL;
    return strdup(PQgetvalue(r, row, col));
}

/* Parses a bigint[] in text form ("{1,2,3}"). */
static int64_t *parse_id_array(const char *text, size_t *n) {
    *n = 0;
    size_t cap = 1;
    for (const char *c = text; *c; c++)
        cap += *c == ',';
    int64_t *ids = malloc(cap * sizeof *ids);
    if (!ids) return NULL;
    const char *c = text + (*text == '{');
    while (*c && *c != '}') {
        char *end;
        ids[(*n)++] = strtoll(c, &end, 10);
        c = *end == ',' ? end + 1 : end;
        if (end == c && *c != '}') break;
    }
    return ids;
}

static qs_status load_jobs(qc_store *s, const char *after, qc_store_snapshot *out, qs_error *err) {
    const char *p[] = {after};
    PGresult *r = qc_store_params(
        s,
        "SELECT j.id, j.job_key, j.kind, j.spec::text, j.model_key, j.last_error, j.state, "
        "j.priority, COALESCE((j.resources ->> 'gpus')::int, 0), "
        "COALESCE((j.resources ->> 'gpu_mem_mb')::bigint, 0), j.max_attempts, j.attempts_used, "
        "COALESCE((SELECT max(a.attempt) FROM attempts a WHERE a.job = j.id), 0), "
        "COALESCE(extract(epoch FROM j.not_before), 0), extract(epoch FROM j.created_at), "
        "COALESCE((SELECT array_agg(d.id ORDER BY d.id) FROM job_deps jd JOIN jobs d ON d.id = "
        "jd.depends_on WHERE jd.job = j.id AND d.state IN ('pending', 'running')), '{}'), "
        "(SELECT count(*) FROM job_deps jd JOIN jobs d ON d.id = jd.depends_on "
        "WHERE jd.job = j.id AND d.state IN ('failed', 'cancelled')), "
        "COALESCE(extract(epoch FROM j.not_before - now()), 0), "
        "COALESCE((j.resources ->> 'native_fp4')::boolean, false), "
        "f.id, f.state, f.last_error, j.spec -> 'model' ->> 'trained_by', "
        /* the digest its training job recorded, as v_trained_models reads it */
        "(SELECT substr(r.name, length('model_digest.') + 1) FROM jobs t JOIN results r "
        "ON r.job = t.id WHERE t.job_key = j.spec -> 'model' ->> 'trained_by' "
        "AND t.kind = 'train' AND r.final AND r.name LIKE 'model\\_digest.%' "
        "ORDER BY r.attempt DESC LIMIT 1) "
        "FROM jobs j LEFT JOIN LATERAL (SELECT d.id, d.state, d.last_error FROM job_deps jd "
        "JOIN jobs d ON d.id = jd.depends_on WHERE jd.job = j.id AND d.state IN ('failed', "
        "'cancelled') ORDER BY d.id LIMIT 1) f ON true "
        "WHERE j.state IN ('pending', 'running') AND j.id > $1 ORDER BY j.id",
        1, p, PGRES_TUPLES_OK, "load: reading jobs", err);
    if (!r) return QS_EDB;
    int n = PQntuples(r);
    out->jobs = calloc(n ? (size_t)n : 1, sizeof *out->jobs);
    if (!out->jobs) {
        PQclear(r);
        return qs_error_set(err, QS_ENOMEM, "load: out of memory for %d jobs", n);
    }
    qs_status st = QS_OK;
    for (int i = 0; i < n && !st; i++) {
        qc_stored_job *j = &out->jobs[i];
        out->n_jobs++;
        j->id = strtoll(PQgetvalue(r, i, 0), NULL, 10);
        j->job_key = dup_or_null(r, i, 1);
        j->kind = dup_or_null(r, i, 2);
        j->spec_json = dup_or_null(r, i, 3);
        j->model_key = dup_or_null(r, i, 4);
        j->last_error = dup_or_null(r, i, 5);
        st = qc_job_state_parse(PQgetvalue(r, i, 6), &j->state, err);
        j->priority = (int32_t)strtol(PQgetvalue(r, i, 7), NULL, 10);
        j->gpus = (int32_t)strtol(PQgetvalue(r, i, 8), NULL, 10);
        j->gpu_mem_mb = strtoll(PQgetvalue(r, i, 9), NULL, 10);
        j->native_fp4 = PQgetvalue(r, i, 18)[0] == 't';
        j->max_attempts = (int32_t)strtol(PQgetvalue(r, i, 10), NULL, 10);
        j->attempts_used = (int32_t)strtol(PQgetvalue(r, i, 11), NULL, 10);
        j->last_attempt = (int32_t)strtol(PQgetvalue(r, i, 12), NULL, 10);
        j->not_before = strtod(PQgetvalue(r, i, 13), NULL);
        j->created_at = strtod(PQgetvalue(r, i, 14), NULL);
        j->waiting_on = parse_id_array(PQgetvalue(r, i, 15), &j->n_waiting_on);
        j->n_deps_failed = strtoull(PQgetvalue(r, i, 16), NULL, 10);
        j->not_before_in_s = strtod(PQgetvalue(r, i, 17), NULL);
        if (!PQgetisnull(r, i, 19)) {
            j->dep_failed_id = strtoll(PQgetvalue(r, i, 19), NULL, 10);
            if (!st) st = qc_job_state_parse(PQgetvalue(r, i, 20), &j->dep_failed_state, err);
            j->dep_failed_error = dup_or_null(r, i, 21);
            if (!st && !PQgetisnull(r, i, 21) && !j->dep_failed_error)
                st = qs_error_set(err, QS_ENOMEM, "load: out of memory");
        }
        j->trained_by = dup_or_null(r, i, 22);
        j->trained_digest = dup_or_null(r, i, 23);
        if (!st && ((!PQgetisnull(r, i, 22) && !j->trained_by) ||
                    (!PQgetisnull(r, i, 23) && !j->trained_digest)))
            st = qs_error_set(err, QS_ENOMEM, "load: out of memory");
        if (!st && (!j->job_key || !j->kind || !j->spec_json || !j->model_key || !j->waiting_on))
            st = qs_error_set(err, QS_ENOMEM, "load: out of memory");
        if (j->id > out->max_job_id) out->max_job_id = j->id;
    }
    PQclear(r);
    return st;
}

qs_status qc_store_worker_keys(qc_store *s, qc_worker_key **out, size_t *n, qs_error *err) {
    *out = NULL;
    *n = 0;
    PGresult *r =
        qc_store_params(s, "SELECT id, curve_key FROM workers WHERE curve_key IS NOT NULL", 0, NULL,
                        PGRES_TUPLES_OK, "reading the workers' CURVE keys", err);
    if (!r) return QS_EDB;
    int rows = PQntuples(r);
    qc_worker_key *k = calloc(rows ? (size_t)rows : 1, sizeof *k);
    qs_status st = k ? QS_OK : qs_error_set(err, QS_ENOMEM, "worker keys: out of memory");
    for (int i = 0; i < rows && !st; i++) {
        k[i].worker = strdup(PQgetvalue(r, i, 0));
        k[i].key = strdup(PQgetvalue(r, i, 1));
        *n = (size_t)i + 1;
        if (!k[i].worker || !k[i].key)
            st = qs_error_set(err, QS_ENOMEM, "worker keys: out of memory");
    }
    PQclear(r);
    *out = k;
    return st;
}

static qs_status load_attempts(qc_store *s, const char *after, qc_store_snapshot *out,
                               qs_error *err) {
    const char *p[] = {after};
    PGresult *r = qc_store_params(
        s,
        "SELECT a.job, a.attempt, a.worker, extract(epoch FROM a.started_at), "
        "COALESCE(extract(epoch FROM a.lease_expires_at), 0), "
        "COALESCE(encode(a.token_hash, 'hex'), '') FROM attempts a JOIN jobs j ON "
        "j.id = a.job WHERE a.outcome = 'running' AND j.state IN ('pending', 'running') "
        "AND j.id > $1 ORDER BY a.job, a.attempt",
        1, p, PGRES_TUPLES_OK, "load: reading running attempts", err);
    if (!r) return QS_EDB;
    int n = PQntuples(r);
    out->running = calloc(n ? (size_t)n : 1, sizeof *out->running);
    qs_status st = out->running ? QS_OK : qs_error_set(err, QS_ENOMEM, "load: out of memory");
    for (int i = 0; i < n && !st; i++) {
        qc_stored_attempt *a = &out->running[i];
        out->n_running++;
        a->job = strtoll(PQgetvalue(r, i, 0), NULL, 10);
        a->attempt = (int32_t)strtol(PQgetvalue(r, i, 1), NULL, 10);
        a->worker = dup_or_null(r, i, 2);
        a->started_at = strtod(PQgetvalue(r, i, 3), NULL);
        a->lease_expires_at = strtod(PQgetvalue(r, i, 4), NULL);
        snprintf(a->token_hash, sizeof a->token_hash, "%s", PQgetvalue(r, i, 5));
        if (!a->worker) st = qs_error_set(err, QS_ENOMEM, "load: out of memory");
    }
    PQclear(r);
    return st;
}

qs_status qc_store_load(qc_store *s, int64_t after_id, qc_store_snapshot *out, qs_error *err) {
    *out = (qc_store_snapshot){0};
    out->max_job_id = after_id;
    char after[32];
    snprintf(after, sizeof after, "%lld", (long long)after_id);
    qs_status st =
        qc_store_exec(s, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", "load: BEGIN", err);
    if (!st) st = load_jobs(s, after, out, err);
    if (!st) st = load_attempts(s, after, out, err);
    if (!st) {
        /* The next poll starts above every job that exists now, terminal ones included:
         * starting above the last active one made every poll read the terminal jobs above
         * it again. Submissions are serialised (SUBMIT_LOCK_KEY), so no smaller id can
         * still commit. */
        PGresult *r = qc_store_params(s, "SELECT COALESCE(max(id), 0) FROM jobs", 0, NULL,
                                      PGRES_TUPLES_OK, "load: reading the last job id", err);
        if (!r)
            st = QS_EDB;
        else {
            int64_t max_id = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
            if (max_id > out->max_job_id) out->max_job_id = max_id;
            PQclear(r);
        }
    }
    if (!st) st = qc_store_exec(s, "COMMIT", "load: COMMIT", err);
    if (st) {
        qc_store_rollback(s);
        qc_store_snapshot_free(out);
        out->max_job_id = after_id;
    }
    return st;
}

void qc_store_snapshot_free(qc_store_snapshot *snap) {
    for (size_t i = 0; i < snap->n_jobs; i++) {
        qc_stored_job *j = &snap->jobs[i];
        free(j->job_key);
        free(j->kind);
        free(j->spec_json);
        free(j->model_key);
        free(j->last_error);
        free(j->waiting_on);
        free(j->dep_failed_error);
        free(j->trained_by);
        free(j->trained_digest);
    }
    for (size_t i = 0; i < snap->n_running; i++)
        free(snap->running[i].worker);
    free(snap->jobs);
    free(snap->running);
    int64_t keep = snap->max_job_id;
    *snap = (qc_store_snapshot){0};
    snap->max_job_id = keep;
}

qs_status qc_store_poll_cancels(qc_store *s, int64_t **job_ids, size_t *n_jobs,
                                int64_t *upto_request, qs_error *err) {
    *job_ids = NULL;
    *n_jobs = 0;
    *upto_request = 0;
    /* One statement: the requests seen and the jobs they expand to come from one snapshot. */
    PGresult *r = qc_store_params(
        s,
        "WITH open AS (SELECT id, job, experiment FROM cancel_requests WHERE handled_at IS NULL), "
        "hit AS (SELECT o.id AS req, j.id AS job FROM open o JOIN jobs j ON j.id = o.job "
        "UNION ALL SELECT o.id, ej.job FROM open o JOIN experiment_jobs ej "
        "ON ej.experiment = o.experiment) "
        "SELECT h.job, min(h.req), (SELECT max(id) FROM open) FROM hit h JOIN jobs j ON j.id = "
        "h.job WHERE j.state IN ('pending', 'running') GROUP BY h.job "
        "UNION ALL SELECT NULL, NULL, (SELECT max(id) FROM open) ORDER BY 2 NULLS LAST, 1",
        0, NULL, PGRES_TUPLES_OK, "cancel: polling requests", err);
    if (!r) return QS_EDB;
    int n = PQntuples(r);
    *job_ids = malloc((size_t)(n ? n : 1) * sizeof **job_ids);
    if (!*job_ids) {
        PQclear(r);
        return qs_error_set(err, QS_ENOMEM, "cancel: out of memory");
    }
    for (int i = 0; i < n; i++) {
        if (!PQgetisnull(r, i, 2)) *upto_request = strtoll(PQgetvalue(r, i, 2), NULL, 10);
        if (PQgetisnull(r, i, 0)) continue;
        (*job_ids)[(*n_jobs)++] = strtoll(PQgetvalue(r, i, 0), NULL, 10);
    }
    PQclear(r);
    return QS_OK;
}

/* ---- read helpers -------------------------------------------------------------------------- */

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
