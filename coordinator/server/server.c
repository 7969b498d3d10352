/* The coordinator's loop and wiring (server.h): options, signals, the ROUTER socket, the
 * poll loop that turns the parts over, and teardown. It stands on three floors: the state
 * (state.h: job_table.c, workers.c, running.c, identity.c, each with its own header), the
 * parts that act on it (handlers.c one function per message kind, transitions.c, intake.c
 * new jobs and cancels from the store, dispatch.c, lease.c, outbox.c messages to workers,
 * commit.c what is durable before what is sent), and this loop on top. */
#include "server.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sodium.h>
#include <zmq.h>

#include "clock.h"
#include "commit.h"
#include "dispatch.h"
#include "envelope.h"
#include "handlers.h"
#include "intake.h"
#include "lease.h"
#include "log.h"
#include "scheduler.h"
#include "store.h"
#include "writer.h"
#include "zap.h"

/* The most messages one turn of the loop receives before it looks at the rest. */
enum { DRAIN_MAX = 8192 };

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

/* Takes the coordinator lock on the writer's store; a standby waits while another holds it
 * (server.h, qc_server_options.standby). Nothing is bound before: workers given several
 * endpoints find only the coordinator that holds the lock answering. */
static qs_status take_lock(server *s, qs_error *err) {
    bool told = false;
    for (;;) {
        qs_status st = qc_store_lock_coordinator(qc_writer_store(s->writer), err);
        if (st != QS_ESTATE || !s->o->standby) {
            if (st == QS_OK && told) qc_log("standby: took the coordinator lock: taking over");
            return st;
        }
        if (!told) qc_log("standby, waiting: %s", err->msg);
        told = true;
        if (stop_requested) return qs_error_set(err, QS_ECANCELLED, "standby stopped waiting");
        struct timespec ts = {0, 200 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static qs_status open_socket(server *s, qs_error *err) {
    s->zctx = zmq_ctx_new();
    if (!s->zctx) return qs_error_set(err, QS_ENET, "zmq_ctx_new: %s", zmq_strerror(errno));
    s->sock = zmq_socket(s->zctx, ZMQ_ROUTER);
    if (!s->sock) return qs_error_set(err, QS_ENET, "zmq_socket(ROUTER): %s", zmq_strerror(errno));
    /* No ZMQ_ROUTER_HANDOVER: a connection's routing id is never taken over by another
       connection. Workers name each connection uniquely (worker/loop/link.c), so only a
       stranger's connection can collide, and it waits until the first one is gone; moving a
       worker id from one connection to another is decided at HELLO (handlers.c, identity.c). */
    int one = 1, linger = 1000, hwm = 100000;
    /* Twice the protocol limit: a body just over it reaches the codec and is logged with its
       peer; libzmq drops the connection of a peer sending more (server.h). */
    int64_t maxmsg = 2 * (int64_t)QS_PROTO_MAX_BYTES;
    if (zmq_setsockopt(s->sock, ZMQ_ROUTER_MANDATORY, &one, sizeof one) != 0 ||
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
    if (s->o->curve_secret_key) {
        /* The ZAP handler is bound before the ROUTER so that no handshake can miss it. It
           runs with CURVE even without an allow-list: its answer gives every connection its
           key as User-Id, to which worker ids are bound (identity.c). */
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
            const char *uid = s->o->curve_secret_key ? zmq_msg_gets(&body, "User-Id") : NULL;
            qc_srv_on_message(s, zmq_msg_data(&id), zmq_msg_size(&id), uid, zmq_msg_data(&body),
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
    qc_srv_jobs_free(&s->jobs);
    qc_srv_workers_free(&s->workers);
    qc_srv_pins_free(&s->pins);
    qc_srv_running_free(&s->running);
    qc_writer_stop(s->writer); /* first: it may still hold a batch */
    for (size_t i = 0; i < s->n_actions; i++)
        free(s->actions[i].buf);
    for (size_t i = 0; i < s->n_flight; i++)
        free(s->flight[i].buf);
    free(s->flight);
    qc_store_batch_free(s->flying);
    qc_store_batch_free(s->spare);
    free(s->actions);
    if (s->sock) zmq_close(s->sock);
    qc_zap_stop(s->zap); /* after the ROUTER, before zmq_ctx_term (zap.h) */
    qc_zap_keys_free(s->allowed);
    if (s->zctx) zmq_ctx_term(s->zctx);
    qc_store_batch_free(s->batch);
    qc_store_close(s->store);
    qc_srv_owners_free(&s->owners);
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
    server s = {.o = opts,
                .quiet = opts->quiet,
                .curve = opts->curve_secret_key != NULL,
                .jobs.next_wake = NEVER};
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
    if (st == QS_OK) st = take_lock(&s, err);
    if (st == QS_OK && sodium_init() < 0)
        st = qs_error_set(err, QS_EIO, "libsodium: sodium_init failed (no entropy source?)");
    if (st == QS_OK) st = qc_srv_owners_load(&s.owners, s.store, err);
    if (st == QS_OK) st = qc_srv_load_new_jobs(&s, err);
    if (st == QS_OK) st = open_socket(&s, err);
    if (st == QS_OK) {
        size_t running = 0;
        for (size_t i = 0; i < s.jobs.n; i++)
            running += s.jobs.all[i]->state == J_RUNNING;
        qc_log(
            "listening on %s; %zu active jobs rebuilt from PostgreSQL (%zu running, waiting %d ms "
            "for their "
            "workers to re-attach); lease %d ms",
            opts->bind_endpoint, s.jobs.active, running, s.grace_ms, s.lease_ms);
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
        if ((st = qc_srv_reconnect(&s, now, err)) != QS_OK) break;
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
            if (qc_srv_poll_cancels(&s, &e) != QS_OK || qc_srv_poll_pin_requests(&s, &e) != QS_OK) {
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
        if (st == QS_OK && opts->exit_when_done && s.jobs.active == 0 && !s.db_down &&
            qc_srv_all_durable(&s) && s.polled_since_commit) {
            qc_log("every job is terminal: exiting");
            break;
        }
    }
    if (st == QS_OK && !s.db_down) qc_srv_final_commit(&s);
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
