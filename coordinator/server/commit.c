/* The commit pipeline (server.h): what is made durable before what is sent. Every transition
 * is queued in the open batch; what depends on it (an ASSIGN after its attempt row, an ACK
 * after the result or failure) waits beside it as an action. When the writer thread is idle
 * the open batch goes to it with its actions (the flight list), and only after its commit
 * are they sent. PostgreSQL down, or a condition of the server: dispatch pauses, batches and
 * actions stay queued, the connections are retried, nothing is lost. */
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "log.h"
#include "commit.h"
#include "outbox.h"
#include "transitions.h"

/* Sends the actions of the flight list (whose batch is durable). */
void qc_srv_run_actions(server *s) {
    int64_t now = qs_clock_ms();
    for (size_t i = 0; i < s->n_flight; i++) {
        action *a = &s->flight[i];
        bool sent = qc_srv_send_raw(s, a->rid, a->rid_len, a->buf, a->len);
        job *j = a->assign;
        if (j && j->state == J_RUNNING && j->attempt == a->attempt) {
            if (sent) {
                j->lease_deadline = now + s->lease_ms;
                j->db_lease_until = now + s->lease_ms; /* written with the attempt row */
                if (j->cancel_requested) /* requested while the ASSIGN waited (poll_cancels) */
                    qc_srv_send_cancel(s, a->rid, a->rid_len, j->id, j->attempt,
                                       "cancelled on request");
            } else {
                j->lease_deadline = now; /* makes end_attempt's bookkeeping uniform */
                qc_srv_end_attempt(s, j, QC_ATTEMPT_PREEMPTED, "undeliverable",
                                   "ASSIGN undeliverable: the worker is gone", false);
            }
        }
        free(a->buf);
    }
    s->n_flight = 0;
}

/* Moves the open batch's actions to the (empty) flight list. */
void qc_srv_actions_to_flight(server *s) {
    action *t = s->flight;
    size_t cap = s->cap_flight;
    s->flight = s->actions;
    s->cap_flight = s->cap_actions;
    s->n_flight = s->n_actions;
    s->actions = t;
    s->cap_actions = cap;
    s->n_actions = 0;
}

/* PostgreSQL went away, or reported a condition of its own (condition: disk full, out of
 * memory, ... from qc_store_condition; NULL for a lost connection): pause dispatch, keep
 * every write and its ACKs in memory, and reconnect and retry, every 500 ms after a lost
 * connection, with a backoff doubling from 500 ms to 8 s under a condition (each retry of
 * a full disk would otherwise fail twice a second). */
void qc_srv_db_lost(server *s, const char *why, const char *condition) {
    size_t waiting = qc_store_batch_size(s->batch) +
                     (s->flying && !qc_writer_busy(s->writer) ? qc_store_batch_size(s->flying) : 0);
    if (condition) {
        s->retry_ms = s->retry_ms ? 2 * s->retry_ms : 500;
        if (s->retry_ms > 8000) s->retry_ms = 8000;
        qc_log("PostgreSQL cannot go on: %s: %s; pausing dispatch, retrying in %d ms; %zu "
               "transitions wait in memory",
               condition, why, s->retry_ms, waiting);
    } else {
        s->retry_ms = 500;
        qc_log("PostgreSQL unreachable (%s): pausing dispatch; %zu transitions wait in memory", why,
               waiting);
    }
    s->db_down = true;
    s->down_condition = condition;
    s->next_reconnect = qs_clock_ms() + s->retry_ms;
}

/* While PostgreSQL is down and its retry time has come (and the writer is idle), re-opens
 * every connection; the writer's takes the coordinator lock again before anything is written.
 * The loop calls this every turn: a reconnect never blocks it (qc_store_reconnect_poll, at
 * most the connection's connect_timeout per attempt, spread over the turns), so heartbeats
 * are answered while PostgreSQL is away. Back: dispatch resumes and the queued batches are
 * committed. An attempt failed: the next one is scheduled. Errors: QS_ESTATE (another
 * coordinator holds the lock now). */
qs_status qc_srv_reconnect(server *s, int64_t now, qs_error *err) {
    if (!s->db_down) return QS_OK;
    qs_error e;
    qs_status rs = QS_OK;
    if (!s->reconnecting) {
        if (now < s->next_reconnect || qc_writer_busy(s->writer)) return QS_OK;
        rs = qc_store_reconnect_start(s->store, &e);
        if (rs == QS_OK) rs = qc_writer_reconnect_start(s->writer, &e);
        s->reconnecting = rs == QS_OK;
    }
    bool main_up = false, writer_up = false;
    if (rs == QS_OK) rs = qc_store_reconnect_poll(s->store, &main_up, &e);
    if (rs == QS_OK) rs = qc_writer_reconnect_poll(s->writer, &writer_up, &e);
    if (rs == QS_ESTATE) {
        *err = e;
        return rs;
    }
    if (rs == QS_OK && !(main_up && writer_up)) return QS_OK; /* still connecting */
    s->reconnecting = false;
    if (rs == QS_OK) {
        size_t queued =
            qc_store_batch_size(s->batch) + (s->flying ? qc_store_batch_size(s->flying) : 0);
        /* under a condition (disk full, ...) a new connection says nothing of the condition:
           the commit that follows tells, so this is no "back" */
        if (qc_store_condition_outlives_connection(s->down_condition))
            qc_log("PostgreSQL connections re-opened after %s: retrying %zu queued transitions",
                   s->down_condition, queued);
        else
            qc_log("PostgreSQL is back: resuming with %zu queued transitions", queued);
        s->db_down = false;
        s->dirty = true;
    } else {
        s->next_reconnect = now + (s->retry_ms ? s->retry_ms : 500);
    }
    return QS_OK;
}

/* The last batches at exit, in order: the flying one, one that failed and waits for a retry,
 * then the open one. Each one's ACKs and ASSIGNs go out after its commit, as in the loop: an
 * attempt committed without its ASSIGN would wait out the next start's grace period and
 * count as lost. (Sent before the socket closes; its linger lets them leave.) A failure is
 * logged. */
void qc_srv_final_commit(server *s) {
    qs_error e = {0};
    qs_status fs = qc_srv_finish_flush(s, true, &e);
    qc_store *ws = qc_writer_store(s->writer);
    if (fs == QS_OK && s->flying && !s->db_down &&
        (fs = qc_store_flush(ws, s->flying, NULL, &e)) == QS_OK) {
        qc_store_batch_free(s->spare);
        s->spare = s->flying;
        s->flying = NULL;
        qc_srv_run_actions(s);
    }
    if (fs == QS_OK && !s->db_down && (qc_store_batch_size(s->batch) > 0 || s->n_actions > 0) &&
        (fs = qc_store_flush(ws, s->batch, NULL, &e)) == QS_OK) {
        qc_srv_actions_to_flight(s);
        qc_srv_run_actions(s);
    }
    if (fs != QS_OK || s->db_down) qc_log("final commit: %s", fs ? e.msg : "PostgreSQL is down");
}

/* Group commit, overlapped with the loop: when the writer is idle, hands it the batch that
 * failed last time (it goes first), else the open batch with its actions, and opens a new
 * one. An open batch with no writes but with actions (ACKs of ignored messages) needs no
 * commit: everything before it is durable once the writer is idle, so they go at once. */
qs_status qc_srv_start_flush(server *s, qs_error *err) {
    if (s->db_down || qc_writer_busy(s->writer)) return QS_OK;
    if (!s->flying) {
        if (qc_store_batch_size(s->batch) == 0) {
            if (s->n_actions) {
                qc_srv_actions_to_flight(s);
                qc_srv_run_actions(s);
            }
            return QS_OK;
        }
        s->flying = s->batch;
        s->batch = s->spare;
        s->spare = NULL;
        qc_srv_actions_to_flight(s);
    }
    s->flush_since = qs_clock_ms();
    s->next_stall_log = s->flush_since + STALL_LOG_MS;
    s->flying_items = qc_store_batch_size(s->flying);
    return qc_writer_submit(s->writer, s->flying, err);
}

/* Says so, every STALL_LOG_MS, while a batch waits for its commit: a lock held by another
 * session or a stopped server otherwise stalls the sweep without a word (heartbeats are still
 * answered). */
void qc_srv_log_stall(server *s, int64_t now) {
    if (!qc_writer_busy(s->writer) || now < s->next_stall_log) return;
    qc_log("PostgreSQL has not committed a batch of %zu transitions for %lld s (a lock held by "
           "another session? a stopped server?); dispatch waits",
           s->flying_items, (long long)((now - s->flush_since) / 1000));
    s->next_stall_log = now + STALL_LOG_MS;
}

/* Collects the writer's outcome (waiting for it when wait is true): on success sends what
 * waited for the batch; on a lost connection keeps the batch and its actions for a retry
 * and pauses dispatch; any other failure is returned. */
qs_status qc_srv_finish_flush(server *s, bool wait, qs_error *err) {
    qc_store_batch *b;
    qs_status st;
    qs_error e;
    size_t items;
    double seconds;
    if (!qc_writer_collect(s->writer, wait, &b, &st, &e, &items, &seconds)) return QS_OK;
    if (st != QS_OK) {
        if (!qc_writer_connection_lost(s->writer)) {
            *err = e;
            return qs_error_wrap(err, "writing a batch of %zu transitions", items);
        }
        qc_srv_db_lost(s, e.msg, qc_writer_condition(s->writer));
        return QS_OK;
    }
    s->retry_ms = 0;
    s->n_flushes++;
    s->n_flushed_items += items;
    s->flush_s += seconds;
    s->spare = b; /* emptied by the flush */
    s->flying = NULL;
    s->polled_since_commit = false;
    qc_srv_run_actions(s);
    return QS_OK;
}

/* Whether nothing waits to be written or sent. */
bool qc_srv_all_durable(server *s) {
    return qc_store_batch_size(s->batch) == 0 && s->n_actions == 0 && !s->flying &&
           s->n_flight == 0;
}
