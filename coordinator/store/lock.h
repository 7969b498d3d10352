/* The coordinator lock and the submit lock (internal to qc_store): their tables, and the
 * lock session the store keeps for the first. */
#ifndef QC_STORE_LOCK_H
#define QC_STORE_LOCK_H

#include <stdbool.h>
#include <stddef.h>

#include "session.h"

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

/* Takes the coordinator lock for this session, retrying a held one for a moment and ending a
 * stale session of this host's own coordinator that holds it (lock.c); QS_ESTATE naming the
 * holder when another coordinator has it, QS_EDB. */
qs_status qc_store_take_coordinator_lock(qc_store *s, qs_error *err);
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

/* In this session's open transaction, takes the coordinator lock for a command that changes
 * what a coordinator holds in memory (unpin, requeue) when no coordinator runs; *held: a
 * coordinator holds it (the transaction is rolled back, and the caller asks the coordinator or
 * refuses). Another command's short transaction holding it answers nothing, so it is waited
 * for, up to 2 s, then QS_ESTATE naming it and `what`. A store holding the lock itself (its
 * lock session) needs nothing. Rolls back on error. QS_EDB. */
qs_status qc_store_lock_for_command(qc_store *s, const char *what, bool *held, qs_error *err);

#endif
