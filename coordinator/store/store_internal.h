/* What the store's files share: the store's fields, its lock keys and its error/exec
 * helpers. Internal to qc_store. */
#ifndef QC_STORE_STORE_INTERNAL_H
#define QC_STORE_STORE_INTERNAL_H

#include "sqltext.h"
#include "store.h"

/* The coordinator lock: an EXCLUSIVE lock on an empty table only qsweep_writer may lock
 * (schema/150_lock_tables.sql), held by a session of its own in a transaction left open (a
 * table lock needs no transaction id, so it holds back no vacuum). COORD_LOCK_HELD is the
 * pg_locks condition (alias l) of its granted holder in this database. */
#define COORD_LOCK_TABLE "qsweep_coordinator_lock"
#define COORD_LOCK_HELD                                                                            \
    "l.locktype = 'relation' AND l.granted AND l.mode = 'ExclusiveLock' AND l.relation = "         \
    "'" COORD_LOCK_TABLE "'::regclass AND l.database = (SELECT oid FROM pg_database WHERE "        \
    "datname = current_database())"
/* The lock serialising submissions, taken in the submit's transaction. */
#define SUBMIT_LOCK_TABLE "qsweep_submit_lock"

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
/* Opens the lock session: s's conninfo, the coordinator's options, application_name
 * "qsweep <role>-lock <host>:<pid>"; NULL without memory, else a connection whose
 * PQstatus says whether it is up. */
PGconn *qc_store_lock_connect(const qc_store *s);
/* Ends the lock session, if any (its lock goes with it); s->stale_lock_backend names it, and
 * holds_lock stays as it was (a reconnect takes the lock again). */
void qc_store_drop_lock_session(qc_store *s);
/* Before a commit of the coordinator's writes: QS_OK when the lock session is still up in its
 * transaction; else marks the store lost (the caller reconnects, which takes the lock again
 * or finds another coordinator holding it) and returns QS_EDB saying so. */
qs_status qc_store_lock_alive(qc_store *s, qs_error *err);
/* Names whoever holds the coordinator lock into out ("unknown session" when nobody or the
 * query failed); *found (may be NULL): whether anyone does. False when the query failed. */
bool qc_store_describe_lock_holder(qc_store *s, char *out, size_t cap, bool *found);

#endif
