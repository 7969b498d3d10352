/* What the store's files share: the store's fields and its session helpers (running a
 * statement, recording a failure). Internal to qc_store; the coordinator lock is lock.h. */
#ifndef QC_STORE_SESSION_H
#define QC_STORE_SESSION_H

#include "sqltext.h"
#include "store.h"

struct qc_store {
    PGconn *conn;
    bool lost;              /* the last call found the connection gone (or the server unable to
                               go on: qc_store_condition) */
    char sqlstate[6];       /* SQLSTATE of the last failure, "" when none or made by libpq */
    bool holds_lock;        /* qc_store_lock_coordinator succeeded (lock_conn holds it) */
    PGconn *lock_conn;      /* the session holding the coordinator lock, NULL: none */
    int lock_backend;       /* its server pid */
    int stale_lock_backend; /* the server pid of the lock session a reconnect ended, 0: none */
    char *conninfo;         /* the connection string, for lock_conn */
    bool flush_ready;       /* this session has the flush's prepared statements, settings and
                               results staging table (flush.c, prepare_session) */
    qc_sbuf scratch;        /* reused parameter text */
    char app[200];          /* this session's application_name: "qsweep <role> <host>:<pid>" */
    int backend;            /* the server pid of the current session (PQbackendPID while good) */
    int stale_backend;      /* the server pid of the session a reconnect replaced, 0: none */
    int connect_timeout_ms; /* the connection's connect_timeout, 0: none (libpq ignores it
                               under PQresetPoll, so the reconnect keeps it itself) */
    bool reconnecting;      /* qc_store_reconnect_start began, not finished */
    int poll_status;        /* PostgresPollingStatusType PQresetPoll last returned */
    int64_t reconnect_deadline; /* qs_clock_ms() when this attempt gives up, 0: never */
};

/* Records a failed statement as QS_EDB "what: server message (detail)" and notes a lost
 * connection. r may be NULL (then the connection's message is used). */
qs_status qc_store_fail(qc_store *s, const PGresult *r, const char *what, qs_error *err);
/* Runs a statement without parameters; QS_EDB on failure. */
qs_status qc_store_exec(qc_store *s, const char *sql, const char *what, qs_error *err);
/* Runs a statement with text parameters; returns the result when its status is want, else
 * NULL with err filled (QS_EDB). */
PGresult *qc_store_params(qc_store *s, const char *sql, int n, const char *const *params,
                          ExecStatusType want, const char *what, qs_error *err);
/* Runs a statement with text parameters that returns no rows (PGRES_COMMAND_OK); QS_EDB
 * with err filled otherwise. */
qs_status qc_store_command(qc_store *s, const char *sql, int n, const char *const *params,
                           const char *what, qs_error *err);
/* Rolls back an open transaction, if any, ignoring errors; nothing on a lost session (the
 * reconnect starts a new one). */
void qc_store_rollback(qc_store *s);
/* Records that the session is gone (qc_store_connection_lost), e.g. a pipeline that stopped
 * answering. */
void qc_store_mark_lost(qc_store *s);

/* Opens a session as application_name app with the store's connection settings (timeouts,
 * keepalives; coordinator: the coordinator's statement bounds too); NULL without memory, else
 * a connection whose PQstatus says whether it is up. */
PGconn *qc_store_connect_as(const char *conninfo, const char *app, bool coordinator);

#endif
