/* The coordinator's PostgreSQL store: opening and closing it, and the reconnect that keeps
 * it (the coordinator lock's session included, lock.c) across a lost connection. The session
 * helpers are in session.c, the state names in states.c, submissions in submit.c, the rebuild
 * snapshot in snapshot.c, the read helpers in reads.c, the write queue in batch.c and its
 * flush in flush.c. Contract: store.h. */
#include "store.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "lock.h"
#include "migrate.h"
#include "session.h"

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
    snprintf(s->app, sizeof s->app, "qsweep %s %s:%d", role ? role : "client", host, (int)getpid());
    bool coordinator = role && strncmp(role, "coordinator", 11) == 0;
    if (!(s->conninfo = strdup(conninfo))) {
        free(s);
        return qs_error_set(err, QS_ENOMEM, "store: out of memory");
    }
    s->conn = qc_store_connect_as(conninfo, s->app, coordinator);
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
