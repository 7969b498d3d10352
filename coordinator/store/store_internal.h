/* What the store's files share: the store's fields, its lock keys and its error/exec
 * helpers. Internal to qc_store. */
#ifndef QC_STORE_STORE_INTERNAL_H
#define QC_STORE_STORE_INTERNAL_H

#include "sqltext.h"
#include "store.h"

/* Session advisory lock key of the coordinator: 0x71737765657031 ("qsweep1"). pg_locks
 * shows a bigint key as classid = high 32 bits, objid = low 32 bits, objsubid = 1
 * (PostgreSQL docs, pg_locks). */
#define COORD_LOCK_KEY "31933629007753265"
#define COORD_LOCK_HI "7435127"    /* 0x00717377 */
#define COORD_LOCK_LO "1701146673" /* 0x65657031 */
/* Transaction advisory lock serialising submissions: "qsweepsb". */
#define SUBMIT_LOCK_KEY "8175009025984852834"

struct qc_store {
    PGconn *conn;
    bool lost;              /* the last call found the connection gone (or the server unable to
                               go on: qc_store_condition) */
    char sqlstate[6];       /* SQLSTATE of the last failure, "" when none or made by libpq */
    bool holds_lock;        /* qc_store_lock_coordinator succeeded in this session */
    bool flush_ready;       /* this session has the flush's prepared statements, settings and
                               results staging table (batch.c, prepare_session) */
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

/* Takes the coordinator lock for this session, retrying a held one for a moment and ending a
 * stale session of this host's own coordinator that holds it (lock.c); QS_ESTATE naming the
 * holder when another coordinator has it, QS_EDB. */
qs_status qc_store_take_coordinator_lock(qc_store *s, qs_error *err);
/* Names whoever holds the coordinator lock into out ("unknown session" when nobody or the
 * query failed); *found (may be NULL): whether anyone does. False when the query failed. */
bool qc_store_describe_lock_holder(qc_store *s, char *out, size_t cap, bool *found);

#endif
