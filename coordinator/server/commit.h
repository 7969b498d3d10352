/* The commit pipeline (coordinator/server only): what is made durable before what is sent,
 * group commit through the writer thread, and the pause and reconnect while PostgreSQL is
 * away. */
#ifndef QC_SERVER_COMMIT_H
#define QC_SERVER_COMMIT_H

#include "state.h"

/* How often a batch waiting for its commit is reported (ms). */
#define STALL_LOG_MS 10000

/* Sends the actions of the flight list (whose batch is durable). */
void qc_srv_run_actions(server *s);

/* Moves the open batch's actions to the (empty) flight list. */
void qc_srv_actions_to_flight(server *s);

/* PostgreSQL went away, or reported a condition of its own (condition: disk full, out of
 * memory, ... from qc_store_condition; NULL for a lost connection): pause dispatch, keep
 * every write and its ACKs in memory, and reconnect and retry, every 500 ms after a lost
 * connection, with a backoff doubling from 500 ms to 8 s under a condition (each retry of
 * a full disk would otherwise fail twice a second). */
void qc_srv_db_lost(server *s, const char *why, const char *condition);

/* While PostgreSQL is down and its retry time has come (and the writer is idle), re-opens
 * every connection; the writer's takes the coordinator lock again before anything is written.
 * Back: dispatch resumes and the queued batches are committed. Still down: the next retry is
 * scheduled. Errors: QS_ESTATE (another coordinator holds the lock now). */
qs_status qc_srv_reconnect(server *s, int64_t now, qs_error *err);

/* The last batches at exit, in order: the flying one, one that failed and waits for a retry,
 * then the open one. Each one's ACKs and ASSIGNs go out after its commit, as in the loop: an
 * attempt committed without its ASSIGN would wait out the next start's grace period and
 * count as lost. (Sent before the socket closes; its linger lets them leave.) A failure is
 * logged. */
void qc_srv_final_commit(server *s);

/* Group commit, overlapped with the loop: when the writer is idle, hands it the batch that
 * failed last time (it goes first), else the open batch with its actions, and opens a new
 * one. An open batch with no writes but with actions (ACKs of ignored messages) needs no
 * commit: everything before it is durable once the writer is idle, so they go at once. */
qs_status qc_srv_start_flush(server *s, qs_error *err);

/* Says so, every STALL_LOG_MS, while a batch waits for its commit: a lock held by another
 * session or a stopped server otherwise stalls the sweep without a word (heartbeats are still
 * answered). */
void qc_srv_log_stall(server *s, int64_t now);

/* Collects the writer's outcome (waiting for it when wait is true): on success sends what
 * waited for the batch; on a lost connection keeps the batch and its actions for a retry
 * and pauses dispatch; any other failure is returned. */
qs_status qc_srv_finish_flush(server *s, bool wait, qs_error *err);

/* Whether nothing waits to be written or sent. */
bool qc_srv_all_durable(server *s);

#endif
