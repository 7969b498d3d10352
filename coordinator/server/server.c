/* The coordinator's loop (server.h): in-memory queue, leases, scheduler, ROUTER socket. */
#include "server.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>
#include <zmq.h>

#include "envelope.h"
#include "utf8.h"
#include "clock.h"
#include "log.h"
#include "scheduler.h"
#include "store.h"
#include "writer.h"
#include "zap.h"
#include "server_internal.h"


static volatile sig_atomic_t stop_requested;
static volatile sig_atomic_t reload_requested; /* SIGHUP: re-read the CURVE allow-list */

void qc_server_request_reload(void) {
    reload_requested = 1;
}

static void on_reload_signal(int sig) {
    (void)sig;
    reload_requested = 1;
}

void qc_server_request_stop(void) {
    stop_requested = 1;
}

static void on_stop_signal(int sig) {
    (void)sig;
    stop_requested = 1;
}


void *qc_srv_grow(void *p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return p;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(p, c * elem);
    if (!q) {
        qc_log("out of memory growing a table to %zu entries", need);
        abort(); /* the in-memory queue cannot be kept consistent without memory */
    }
    *cap = c;
    return q;
}

/* Queueing a write fails only without memory or on a bad argument, which the message
 * checks exclude: the in-memory state would no longer match what becomes durable. */
void qc_srv_must(server *s, qs_status st) {
    if (st != QS_OK) {
        qc_log("cannot queue a database write: %s", s->batch_err.msg);
        abort();
    }
}

/* A printable peer name for logs: the routing id when printable, else its hex. */
void qc_srv_peer_name(const char *rid, size_t len, char *out, size_t cap) {
    bool printable = len > 0;
    for (size_t i = 0; i < len && printable; i++)
        printable = rid[i] >= 0x20 && rid[i] < 0x7f;
    if (printable) {
        snprintf(out, cap, "%.*s", (int)len, rid);
        return;
    }
    size_t o = 0;
    o += (size_t)snprintf(out, cap, "0x");
    for (size_t i = 0; i < len && o + 3 < cap; i++)
        o += (size_t)snprintf(out + o, cap - o, "%02x", (unsigned char)rid[i]);
}

/* ---- lookups ---- */

/* ---- sending ---- */

void qc_srv_send_after_commit(server *s, const char *rid, size_t rid_len, Qsweep__Envelope *env,
                              job *assign) {
    uint8_t *buf;
    size_t len;
    if (!qc_srv_encode(env, &buf, &len)) return;
    s->actions = qc_srv_grow(s->actions, &s->cap_actions, s->n_actions + 1, sizeof *s->actions);
    action *a = &s->actions[s->n_actions++];
    memcpy(a->rid, rid, rid_len);
    a->rid_len = rid_len;
    a->buf = buf;
    a->len = len;
    a->assign = assign;
    a->attempt = assign ? assign->attempt : 0;
}

/* ---- job state ---- */


/* ---- scheduling ---- */

/* ---- leases ---- */

/* ---- messages ---- */

/* ---- loading ---- */

/* ---- the loop ---- */

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
                    qc_srv_send_cancel(s, a->rid, a->rid_len, j->id, j->attempt, "cancelled on request");
            } else {
                j->lease_deadline = now; /* makes end_attempt's bookkeeping uniform */
                qc_srv_end_attempt(s, j, QC_ATTEMPT_PREEMPTED, "ASSIGN undeliverable: the worker is gone",
                            false);
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
        qc_log("PostgreSQL unreachable (%s): pausing dispatch; %zu transitions wait in memory",
               why, waiting);
    }
    s->db_down = true;
    s->down_condition = condition;
    s->next_reconnect = qs_clock_ms() + s->retry_ms;
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

static qs_status open_socket(server *s, qs_error *err) {
    s->zctx = zmq_ctx_new();
    if (!s->zctx) return qs_error_set(err, QS_ENET, "zmq_ctx_new: %s", zmq_strerror(errno));
    s->sock = zmq_socket(s->zctx, ZMQ_ROUTER);
    if (!s->sock) return qs_error_set(err, QS_ENET, "zmq_socket(ROUTER): %s", zmq_strerror(errno));
    int one = 1, linger = 1000, hwm = 100000;
    /* Twice the protocol limit: a body just over it reaches the codec and is logged with its
       peer; libzmq drops the connection of a peer sending more (server.h). */
    int64_t maxmsg = 2 * (int64_t)QS_PROTO_MAX_BYTES;
    if (zmq_setsockopt(s->sock, ZMQ_ROUTER_MANDATORY, &one, sizeof one) != 0 ||
        zmq_setsockopt(s->sock, ZMQ_ROUTER_HANDOVER, &one, sizeof one) != 0 ||
        zmq_setsockopt(s->sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg) != 0 ||
        zmq_setsockopt(s->sock, ZMQ_LINGER, &linger, sizeof linger) != 0 ||
        zmq_setsockopt(s->sock, ZMQ_SNDHWM, &hwm, sizeof hwm) != 0 ||
        zmq_setsockopt(s->sock, ZMQ_RCVHWM, &hwm, sizeof hwm) != 0)
        return qs_error_set(err, QS_ENET, "ROUTER socket options: %s", zmq_strerror(errno));
    if (s->o->curve_secret_key) {
        if (zmq_setsockopt(s->sock, ZMQ_CURVE_SERVER, &one, sizeof one) != 0 ||
            zmq_setsockopt(s->sock, ZMQ_CURVE_SECRETKEY, s->o->curve_secret_key, 41) != 0)
            return qs_error_set(err, QS_EINVAL,
                                "options.curve_secret_key: need a 40-character Z85 key: %s",
                                zmq_strerror(errno));
    }
    if (s->allowed) {
        /* The ZAP handler is bound before the ROUTER so that no handshake can miss it. */
        qc_zap_keys *keys = s->allowed;
        s->allowed = NULL; /* the handler's now, also on failure */
        qs_status st = qc_zap_start(s->zctx, s->o->curve_allowed_keys, keys, &s->zap, err);
        if (st == QS_OK) st = qc_zap_configure_socket(s->sock, err);
        if (st != QS_OK) return st;
    }
    if (zmq_bind(s->sock, s->o->bind_endpoint) != 0)
        return qs_error_set(err, QS_ENET, "bind %s: %s", s->o->bind_endpoint, zmq_strerror(errno));
    return QS_OK;
}

/* Receives every waiting message (up to DRAIN_MAX). */
static void drain(server *s, int64_t now) {
    for (int n = 0; n < DRAIN_MAX; n++) {
        zmq_msg_t id, body;
        zmq_msg_init(&id);
        if (zmq_msg_recv(&id, s->sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&id);
            return;
        }
        zmq_msg_init(&body);
        int more = zmq_msg_more(&id);
        bool ok = more && zmq_msg_recv(&body, s->sock, 0) >= 0;
        int frames = 2;
        if (ok) {
            while (zmq_msg_more(&body)) { /* a rogue multi-frame message: drop it whole */
                zmq_msg_close(&body);
                zmq_msg_init(&body);
                if (zmq_msg_recv(&body, s->sock, 0) < 0) break;
                frames++;
            }
        }
        if (ok && frames == 2) {
            qc_srv_on_message(s, zmq_msg_data(&id), zmq_msg_size(&id), zmq_msg_data(&body),
                       zmq_msg_size(&body), now);
        } else {
            char peer[600];
            qc_srv_peer_name(zmq_msg_data(&id), zmq_msg_size(&id), peer, sizeof peer);
            qc_log("dropped: peer %s: message of %d frames (expected one body frame)", peer,
                 frames - 1);
        }
        zmq_msg_close(&body);
        zmq_msg_close(&id);
    }
}

static void free_server(server *s) {
    for (size_t i = 0; i < s->n_jobs; i++) {
        qc_srv_job_free(s->jobs[i]);
    }
    for (size_t i = 0; i < s->n_workers; i++)
        free(s->workers[i]);
    qc_writer_stop(s->writer); /* first: it may still hold a batch */
    for (size_t i = 0; i < s->n_actions; i++)
        free(s->actions[i].buf);
    for (size_t i = 0; i < s->n_flight; i++)
        free(s->flight[i].buf);
    free(s->flight);
    qc_store_batch_free(s->flying);
    qc_store_batch_free(s->spare);
    free(s->jobs);
    free(s->pending);
    free(s->workers);
    free(s->actions);
    if (s->sock) zmq_close(s->sock);
    qc_zap_stop(s->zap); /* after the ROUTER, before zmq_ctx_term (zap.h) */
    qc_zap_keys_free(s->allowed);
    if (s->zctx) zmq_ctx_term(s->zctx);
    qc_store_batch_free(s->batch);
    qc_store_close(s->store);
}

qs_status qc_server_run(const qc_server_options *opts, qs_error *err) {
    if (!opts || !opts->bind_endpoint || !opts->conninfo)
        return qs_error_set(
            err, QS_EINVAL,
            "qc_server_run: options.bind_endpoint and options.conninfo are required");
    if (opts->lease_ms < 0 || opts->grace_ms < 0 || opts->backoff_ms < 0 || opts->poll_ms < 0 ||
        opts->worker_timeout_ms < 0)
        return qs_error_set(err, QS_EINVAL, "qc_server_run: options.*_ms must not be negative");
    if (opts->curve_secret_key && strlen(opts->curve_secret_key) != 40)
        return qs_error_set(err, QS_EINVAL,
                            "qc_server_run: options.curve_secret_key must be 40 Z85 characters");
    if (opts->curve_allowed_keys && !opts->curve_secret_key)
        return qs_error_set(err, QS_EINVAL,
                            "qc_server_run: options.curve_allowed_keys (%s) needs "
                            "options.curve_secret_key: an allow-list of worker keys only works "
                            "with CURVE on",
                            opts->curve_allowed_keys);
    server s = {.o = opts, .next_wake = NEVER};
    s.lease_ms = opts->lease_ms ? opts->lease_ms : 30000;
    s.grace_ms = opts->grace_ms ? opts->grace_ms : s.lease_ms;
    s.backoff_ms = opts->backoff_ms ? opts->backoff_ms : 1000;
    s.poll_ms = opts->poll_ms ? opts->poll_ms : 500;
    s.worker_timeout_ms = opts->worker_timeout_ms ? opts->worker_timeout_ms : 3 * s.lease_ms;

    struct sigaction old_term, old_int, old_hup;
    if (!opts->no_signal_handlers) {
        struct sigaction sa = {.sa_handler = on_stop_signal};
        sigemptyset(&sa.sa_mask);
        sigaction(SIGTERM, &sa, &old_term);
        sigaction(SIGINT, &sa, &old_int);
        if (opts->curve_allowed_keys) { /* else SIGHUP keeps its default action */
            struct sigaction hup = {.sa_handler = on_reload_signal};
            sigemptyset(&hup.sa_mask);
            sigaction(SIGHUP, &hup, &old_hup);
        }
    }
    stop_requested = 0;
    reload_requested = 0;

    s.batch = qc_store_batch_new();
    s.spare = qc_store_batch_new();
    qs_status st = s.batch && s.spare ? QS_OK : qs_error_set(err, QS_ENOMEM, "batch");
    if (st == QS_OK && opts->curve_allowed_keys) /* bad input: refused before connecting */
        st = qc_zap_keys_load(opts->curve_allowed_keys, &s.allowed, err);
    if (st == QS_OK) st = qc_store_open(opts->conninfo, "coordinator", &s.store, err);
    if (st == QS_OK) st = qc_writer_start(opts->conninfo, &s.writer, err);
    /* The lock lives on the connection that writes job state: when that session dies, the
       lock goes with it and no later write can succeed without taking it again
       (qc_writer_reconnect), so two coordinators never both write. */
    if (st == QS_OK) st = qc_store_lock_coordinator(qc_writer_store(s.writer), err);
    if (st == QS_OK) st = qc_srv_load_new_jobs(&s, err);
    if (st == QS_OK) st = open_socket(&s, err);
    if (st == QS_OK) {
        size_t running = 0;
        for (size_t i = 0; i < s.n_jobs; i++)
            running += s.jobs[i]->state == J_RUNNING;
        qc_log("listening on %s; %zu active jobs rebuilt from PostgreSQL (%zu running, waiting %d ms "
             "for their "
             "workers to re-attach); lease %d ms",
             opts->bind_endpoint, s.active, running, s.grace_ms, s.lease_ms);
        if (opts->curve_secret_key && !opts->curve_allowed_keys)
            qc_log("warning: CURVE without an allow-list of worker keys: any client that knows "
                 "this coordinator's public key can connect and take jobs (give the workers' "
                 "public keys in options.curve_allowed_keys / qsweep coordinator "
                 "--authorized-keys)");
    }
    int64_t next_poll = qs_clock_ms() + s.poll_ms, next_cancel_poll = qs_clock_ms() + 1000,
            next_lease_check = 0, last_turn = qs_clock_ms();
    /* A gap between loop turns longer than this is a stall of the coordinator (on_stall): a
       quarter lease, at most 1 s, well within any worker's heartbeat period. */
    const int64_t stall_ms = s.lease_ms / 4 < 1000 ? s.lease_ms / 4 : 1000;
    while (st == QS_OK && !stop_requested) {
        zmq_pollitem_t items[2] = {{.socket = s.sock, .events = ZMQ_POLLIN},
                                   {.fd = qc_writer_fd(s.writer), .events = ZMQ_POLLIN}};
        if (zmq_poll(items, 2, 10) < 0 && errno != EINTR) {
            st = qs_error_set(err, QS_ENET, "zmq_poll: %s", zmq_strerror(errno));
            break;
        }
        if ((st = qc_srv_finish_flush(&s, false, err)) != QS_OK) break;
        int64_t now = qs_clock_ms();
        if (now - last_turn > stall_ms) qc_srv_on_stall(&s, now - last_turn, now);
        last_turn = now;
        drain(&s, now);
        if (now >= next_lease_check) {
            qc_srv_check_leases(&s, now);
            qc_srv_log_stall(&s, now);
            next_lease_check = now + 50;
        }
        if (s.db_down && now >= s.next_reconnect && !qc_writer_busy(s.writer)) {
            /* All connections; the writer's takes the advisory lock again (QS_ESTATE when
               another coordinator has it now) before anything is written. */
            qs_error e;
            qs_status rs = qc_store_reconnect(s.store, &e);
            if (rs == QS_OK) rs = qc_writer_reconnect(s.writer, &e);
            if (rs == QS_ESTATE) {
                *err = e;
                st = rs;
                break;
            }
            if (rs == QS_OK) {
                size_t queued = qc_store_batch_size(s.batch) +
                                (s.flying ? qc_store_batch_size(s.flying) : 0);
                qc_log("PostgreSQL is back%s%s%s: resuming with %zu queued transitions",
                       s.down_condition ? " (connections re-opened after " : "",
                       s.down_condition ? s.down_condition : "", s.down_condition ? ")" : "",
                       queued);
                s.db_down = false;
                s.dirty = true;
            } else {
                s.next_reconnect = now + (s.retry_ms ? s.retry_ms : 500);
            }
        }
        if (!s.db_down && now >= next_poll) {
            qs_error e;
            if (qc_srv_load_new_jobs(&s, &e) != QS_OK) {
                if (!qc_store_connection_lost(s.store)) {
                    *err = e;
                    st = QS_EDB;
                    break;
                }
                qc_srv_db_lost(&s, e.msg, qc_store_condition(s.store));
            } else {
                s.polled_since_commit = true;
            }
            next_poll = now + s.poll_ms;
        }
        if (!s.db_down && now >= next_cancel_poll) {
            qs_error e;
            if (qc_srv_poll_cancels(&s, &e) != QS_OK) {
                if (!qc_store_connection_lost(s.store)) {
                    *err = e;
                    st = QS_EDB;
                    break;
                }
                qc_srv_db_lost(&s, e.msg, qc_store_condition(s.store));
            }
            next_cancel_poll = now + 1000;
        }
        if (reload_requested) {
            reload_requested = 0;
            if (s.zap) qc_zap_reload(s.zap, NULL); /* logs; a bad file keeps the list in use */
        }
        qc_srv_dispatch(&s, now);
        st = qc_srv_start_flush(&s, err);
        if (st == QS_OK && opts->exit_when_done && s.active == 0 && !s.db_down &&
            qc_srv_all_durable(&s) && s.polled_since_commit) {
            qc_log("every job is terminal: exiting");
            break;
        }
    }
    if (st == QS_OK && !s.db_down) {
        /* The last batches, in order: the flying one, one that failed and waits for a retry,
           then the open one. Each one's ACKs and ASSIGNs go out after its commit, as in the
           loop: an attempt committed without its ASSIGN would wait out the next start's
           grace period and count as lost. (Sent before the socket closes; its linger lets
           them leave.) */
        qs_error e = {0};
        qs_status fs = qc_srv_finish_flush(&s, true, &e);
        qc_store *ws = qc_writer_store(s.writer);
        if (fs == QS_OK && s.flying && !s.db_down &&
            (fs = qc_store_flush(ws, s.flying, NULL, &e)) == QS_OK) {
            qc_store_batch_free(s.spare);
            s.spare = s.flying;
            s.flying = NULL;
            qc_srv_run_actions(&s);
        }
        if (fs == QS_OK && !s.db_down && (qc_store_batch_size(s.batch) > 0 || s.n_actions > 0) &&
            (fs = qc_store_flush(ws, s.batch, NULL, &e)) == QS_OK) {
            qc_srv_actions_to_flight(&s);
            qc_srv_run_actions(&s);
        }
        if (fs != QS_OK || s.db_down) qc_log("final commit: %s", fs ? e.msg : "PostgreSQL is down");
    }
    if (!opts->no_signal_handlers) {
        sigaction(SIGTERM, &old_term, NULL);
        sigaction(SIGINT, &old_int, NULL);
        if (opts->curve_allowed_keys) sigaction(SIGHUP, &old_hup, NULL);
    }
    if (s.n_flushes)
        qc_log("%llu transactions wrote %llu items (%.1f per transaction, %.2f ms each)",
             (unsigned long long)s.n_flushes, (unsigned long long)s.n_flushed_items,
             (double)s.n_flushed_items / (double)s.n_flushes,
             1000.0 * s.flush_s / (double)s.n_flushes);
    free_server(&s);
    return st;
}
