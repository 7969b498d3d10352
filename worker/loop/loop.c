/* The worker's messaging thread (loop.h): qw_run's loop as a small state machine in the
 * manner of the ZeroMQ guide's Paranoid Pirate worker (qw_state, worker_state.h): heartbeat
 * both ways, and on silence close the socket, open a fresh one and say HELLO again. The parts
 * it turns over, each in its file with its header: job_ctx.c (what one attempt owns, the
 * compute thread), cache.c (models kept across jobs), pack.c (RESULT envelopes), outbox.c
 * (HELLO, READY, heartbeats, partial results), delivery.c (an attempt's end until ACKed),
 * attempt.c (ASSIGN to end), link.c (the socket, refused handshakes, re-registering),
 * handlers.c (one function per message kind); below them stop.c (the stop request), wlog.c
 * (log lines), kind_registry.c (the job kinds). */
#include <errno.h>
#include <stdarg.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <zmq.h>

#include "attempt.h"
#include "cache.h"
#include "clock.h"
#include "delivery.h"
#include "envelope.h"
#include "handlers.h"
#include "job_ctx.h"
#include "link.h"
#include "loop.h"
#include "outbox.h"
#include "stop.h"
#include "threads.h"
#include "wlog.h"

void qw_request_stop(void) {
    qw_loop_request_stop();
}

static const char *state_name(qw_state st) {
    static const char *const names[] = {"CONNECTING", "REGISTERING", "IDLE",   "RECEIVING",
                                        "RUNNING",    "DELIVERING",  "LEAVING"};
    return names[st];
}

/* Whether an attempt is on: running, its split ASSIGN arriving, or its end not yet ACKed. */
static bool has_work(const worker *w) {
    return w->job || w->end_buf || w->rx_spec;
}

/* The state the worker's facts say it is in (see qw_state). */
static qw_state state_of(const worker *w) {
    if (w->stopping) return QW_LEAVING;
    if (w->job) return QW_RUNNING;
    if (w->end_buf) return QW_DELIVERING;
    if (w->rx_spec) return QW_RECEIVING;
    if (!w->heard) return QW_CONNECTING;
    return w->registering ? QW_REGISTERING : QW_IDLE;
}

/* The one transition function: moves w to the state its facts say, logging the change. */
static void transition(worker *w) {
    qw_state next = state_of(w);
    if (next == w->state) return;
    qw_loop_wlog(w, "state %s -> %s", state_name(w->state), state_name(next));
    w->state = next;
}

qs_status qw_run(const qw_options *opts, qs_error *err) {
    if (!opts || !opts->endpoint || !opts->endpoint[0])
        return qs_error_set(err, QS_EINVAL, "qw_run: options.endpoint is required");
    if (opts->worker_id && (!opts->worker_id[0] || strlen(opts->worker_id) > ID_MAX))
        return qs_error_set(err, QS_EINVAL, "qw_run: options.worker_id must be 1..%d bytes",
                            ID_MAX);
    if ((opts->curve_server_key != NULL) != (opts->curve_secret_key != NULL) ||
        (opts->curve_public_key != NULL) != (opts->curve_secret_key != NULL))
        return qs_error_set(err, QS_EINVAL, "qw_run: options.curve_*: give all three keys or none");
    if (opts->curve_secret_key &&
        (strlen(opts->curve_server_key) != 40 || strlen(opts->curve_public_key) != 40 ||
         strlen(opts->curve_secret_key) != 40))
        return qs_error_set(err, QS_EINVAL,
                            "qw_run: options.curve_*: each key must be 40 Z85 characters");
    if (opts->heartbeat_ms < 0 || opts->coordinator_timeout_ms < 0 || opts->threads < 0 ||
        opts->exit_when_idle_ms < 0)
        return qs_error_set(
            err, QS_EINVAL,
            "qw_run: options.heartbeat_ms/coordinator_timeout_ms/threads/exit_when_idle_ms < 0");
    qs_status st = QS_OK;

    worker *w = calloc(1, sizeof *w);
    if (!w) return qs_error_set(err, QS_ENOMEM, "qw_run");
    w->o = opts;
    if (gethostname(w->host, sizeof w->host - 1) != 0) strcpy(w->host, "unknown");
    if (opts->worker_id)
        snprintf(w->id, sizeof w->id, "%s", opts->worker_id);
    else
        snprintf(w->id, sizeof w->id, "%.150s-%ld", w->host, (long)getpid());
    w->hb_ms = opts->heartbeat_ms ? opts->heartbeat_ms : 2000;
    w->timeout_ms = opts->coordinator_timeout_ms ? opts->coordinator_timeout_ms : 4 * w->hb_ms;
    w->threads = opts->threads ? opts->threads : qs_default_threads();
    pthread_mutex_init(&w->mu, NULL);

    struct sigaction old_term, old_int;
    if (!opts->no_signal_handlers) {
        struct sigaction sa = {.sa_handler = qw_loop_on_stop_signal};
        sigemptyset(&sa.sa_mask);
        sigaction(SIGTERM, &sa, &old_term);
        sigaction(SIGINT, &sa, &old_int);
    }
    qw_loop_stop_reset();

    w->zctx = zmq_ctx_new();
    st = w->zctx ? qw_loop_open_socket(w, err)
                 : qs_error_set(err, QS_ENET, "zmq_ctx_new: %s", zmq_strerror(errno));
    if (st == QS_OK) {
        qw_loop_wlog(w, "connecting to %s (heartbeat %d ms, coordinator timeout %d ms, %d threads)",
                     opts->endpoint, w->hb_ms, w->timeout_ms, w->threads);
        qw_loop_send_hello(w);
        w->last_heard_ms = qs_clock_ms();
        w->next_hb_ms = w->last_heard_ms + w->hb_ms;
        w->idle_since_ms = w->last_heard_ms;
    }
    int64_t stop_deadline = 0;
    const char *bye_reason = "stopped";
    while (st == QS_OK) {
        int64_t t = qs_clock_ms();
        if (qw_loop_stop_requested() && !w->stopping) {
            w->stopping = true;
            stop_deadline = t + w->timeout_ms; /* for the ACK; restarted when the job ends */
            qw_loop_wlog(w, "stopping: no new work%s",
                         w->job ? ", cancelling the running job (preempted)" : "");
            if (w->job) {
                w->job->preempted = true;
                atomic_store(&w->job->cancel, true);
            }
        }
        if (w->job) {
            pthread_mutex_lock(&w->mu);
            bool done = w->job->done;
            pthread_mutex_unlock(&w->mu);
            if (done) {
                qw_loop_flush_partials(w);
                qw_loop_finish_job(w);
                if (w->stopping)
                    stop_deadline = t + w->timeout_ms; /* its end gets that long to be ACKed */
            }
        }
        transition(w);
        switch (w->state) {
        case QW_LEAVING:
            if (has_work(w)) w->idle_since_ms = t;
            break;
        case QW_RECEIVING:
        case QW_RUNNING:
        case QW_DELIVERING:
            w->idle_since_ms = t;
            break;
        case QW_CONNECTING:
        case QW_REGISTERING:
        case QW_IDLE:
            break;
        }
        if (w->state == QW_LEAVING && !w->job && (!w->end_buf || t >= stop_deadline)) break;
        if ((w->state == QW_CONNECTING || w->state == QW_REGISTERING || w->state == QW_IDLE) &&
            opts->exit_when_idle_ms > 0 && t - w->idle_since_ms >= opts->exit_when_idle_ms) {
            if (w->state == QW_CONNECTING) { /* not idle: alone; the sweep was never seen */
                st = qs_error_set(err, QS_ENET,
                                  "no answer from the coordinator at %s in %d ms "
                                  "(--exit-when-idle): it was never reached",
                                  opts->endpoint, opts->exit_when_idle_ms);
                break;
            }
            qw_loop_wlog(w, "no job for %d ms (--exit-when-idle): leaving",
                         opts->exit_when_idle_ms);
            bye_reason = "idle (exit when idle)";
            break;
        }
        if ((w->state == QW_CONNECTING || w->state == QW_REGISTERING || w->state == QW_IDLE) &&
            !w->ready_sent)
            qw_loop_send_ready(w);
        if (t >= w->next_hb_ms) {
            qw_loop_send_heartbeat(w);
            qw_loop_flush_partials(w);
            w->next_hb_ms = t + (has_work(w) && w->lease_hb_ms ? w->lease_hb_ms : w->hb_ms);
        }
        if (w->end_buf && t - w->end_sent_ms >= w->timeout_ms) {
            qw_loop_send_packed(w, w->end_buf, w->end_len, "attempt end (resend)");
            w->end_sent_ms = t;
        }
        if (w->reopen_ms && t >= w->reopen_ms) { /* a refused handshake: try again (link.c) */
            w->reopen_ms = 0;
            st = qw_loop_open_socket(w, err);
            if (st != QS_OK) break;
            qw_loop_reregister(w);
            w->last_heard_ms = t;
        }
        if (t - w->last_heard_ms > w->timeout_ms) {
            if (w->refusals == 0) /* else the refusal was explained, once */
                qw_loop_wlog(w,
                             "coordinator silent for %lld ms (%s): reconnecting and re-registering",
                             (long long)(t - w->last_heard_ms), state_name(w->state));
            w->endpoint_index++; /* the next of several endpoints: a standby may answer */
            st = qw_loop_open_socket(w, err);
            if (st != QS_OK) break;
            qw_loop_reregister(w);
            w->last_heard_ms = t;
        }

        zmq_pollitem_t items[2] = {{.socket = w->sock, .events = ZMQ_POLLIN},
                                   {.socket = w->mon, .events = ZMQ_POLLIN}};
        long wait =
            w->state == QW_RUNNING || w->state == QW_LEAVING ? 20 : (long)(w->next_hb_ms - t);
        if (wait > 100) wait = 100;
        if (wait < 0) wait = 0;
        int rc = zmq_poll(items, w->mon ? 2 : 1, wait);
        if (rc < 0 && errno != EINTR) {
            st = qs_error_set(err, QS_ENET, "zmq_poll: %s", zmq_strerror(errno));
            break;
        }
        if (w->mon && (items[1].revents & ZMQ_POLLIN)) {
            if (qw_loop_read_handshakes(w, qs_clock_ms())) {
                st = qs_error_set(err, QS_ENET,
                                  "the coordinator at %s refused this worker %d times in %lld "
                                  "s, giving up: %s",
                                  opts->endpoint, w->refusals,
                                  (long long)((qs_clock_ms() - w->first_refusal_ms) / 1000),
                                  w->refusal);
                break;
            }
            rc -= rc > 0;
        }
        while (rc > 0) {
            zmq_msg_t msg;
            zmq_msg_init(&msg);
            if (zmq_msg_recv(&msg, w->sock, ZMQ_DONTWAIT) < 0) {
                zmq_msg_close(&msg);
                break;
            }
            w->last_heard_ms = qs_clock_ms();
            w->heard = true;
            w->registering = false;
            Qsweep__Envelope *env = NULL;
            qs_error derr;
            if (qs_proto_decode(zmq_msg_data(&msg), zmq_msg_size(&msg), QS_PROTO_MAX_BYTES,
                                "coordinator", &env, &derr) == QS_OK) {
                qw_loop_handle(w, env);
                qs_proto_free(env);
            } else {
                qw_loop_wlog(w, "dropped: %s", derr.msg);
            }
            zmq_msg_close(&msg);
        }
    }
    if (w->job) { /* only on a socket error: the compute thread must not outlive w */
        atomic_store(&w->job->cancel, true);
        pthread_join(w->job->thread, NULL);
        qw_loop_job_free(w->job);
        w->job = NULL;
    }
    if (st == QS_OK) {
        Qsweep__Bye bye = QSWEEP__BYE__INIT;
        bye.reason = (char *)bye_reason;
        Qsweep__Envelope env = QSWEEP__ENVELOPE__INIT;
        env.body_case = QSWEEP__ENVELOPE__BODY_BYE;
        env.bye = &bye;
        qw_loop_send_env(w, &env);
        qw_loop_wlog(w, "BYE%s",
                     w->end_buf ? " (the last attempt's end was not acknowledged)" : "");
        /* Give the BYE a moment on the wire: LINGER is 0 to never hang on a dead peer. */
        int linger = 200;
        zmq_setsockopt(w->sock, ZMQ_LINGER, &linger, sizeof linger);
    }
    qw_loop_close_socket(w);
    if (w->zctx) zmq_ctx_term(w->zctx);
    if (!opts->no_signal_handlers) {
        sigaction(SIGTERM, &old_term, NULL);
        sigaction(SIGINT, &old_int, NULL);
    }
    qw_loop_drop_batches(w);
    qw_loop_end_clear(w);
    qw_loop_rx_clear(w);
    qw_loop_cache_clear(w);
    pthread_mutex_destroy(&w->mu);
    free(w);
    return st;
}
