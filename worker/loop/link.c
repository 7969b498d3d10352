/* The worker's connection (loop.h): the DEALER socket, its CURVE keys, the monitor that
 * tells a refused handshake from a silent coordinator, and re-registering. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <zmq.h>

#include "clock.h"
#include "link.h"
#include "outbox.h"
#include "wlog.h"

/* Watches the socket's handshakes (zmq_socket_monitor, libzmq 4.3: each event is two
 * frames, a 16-bit event id and a 32-bit value in host order, then the endpoint): a worker
 * the coordinator refuses (its ZAP handler's allow-list, coordinator/server/zap.h) or whose
 * security mechanism differs (no CURVE keys against a CURVE coordinator, or the reverse),
 * or that uses the wrong coordinator public key (the coordinator cannot read its CURVE HELLO
 * and closes the connection: "failed, no detail"), otherwise only sees a silent coordinator;
 * an admitted one says that it connected. */
static void watch_handshakes(worker *w) {
    char ep[96];
    snprintf(ep, sizeof ep, "inproc://qsweep-worker-monitor-%p-%u", (void *)w, ++w->mon_seq);
    if (zmq_socket_monitor(w->sock, ep,
                           ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                               ZMQ_EVENT_HANDSHAKE_SUCCEEDED) != 0)
        return;
    w->mon = zmq_socket(w->zctx, ZMQ_PAIR);
    int linger = 0;
    if (w->mon && (zmq_setsockopt(w->mon, ZMQ_LINGER, &linger, sizeof linger) != 0 ||
                   zmq_connect(w->mon, ep) != 0)) {
        zmq_close(w->mon);
        w->mon = NULL;
    }
}

/* One refused handshake: says what is wrong the first time, counts, and schedules the next
 * try. libzmq 4.3 ends a connection whose handshake failed with an error (a ZAP refusal, a
 * mechanism mismatch) without reconnecting, and retries one the peer just closed (a wrong
 * coordinator key) every 100 ms: either way the loop opens a fresh socket
 * QW_REFUSAL_SPAN_MS / QW_REFUSALS_MAX after a refusal, so that QW_REFUSALS_MAX refusals take
 * QW_REFUSAL_SPAN_MS whatever the coordinator timeout. */
static void refused(worker *w, int64_t now, const char *why, bool specific) {
    if (w->refusals++ == 0) w->first_refusal_ms = now;
    /* said once; a closed handshake (which a mechanism mismatch can also end in, when the
     * coordinator closes before its greeting is read) gives way to the first refusal that names
     * its cause */
    if (w->refusals == 1 || (specific && !w->refusal_specific)) {
        snprintf(w->refusal, sizeof w->refusal, "%s", why);
        w->refusal_specific = specific;
        qw_loop_wlog(w, "%s", why);
    }
    if (!w->reopen_ms) w->reopen_ms = now + QW_REFUSAL_SPAN_MS / QW_REFUSALS_MAX;
}

/* Reads the monitor's events. Returns true when the worker should give up: the coordinator
 * refused it at least QW_REFUSALS_MAX times over at least QW_REFUSAL_SPAN_MS with no
 * successful handshake in between (loop.h). */
bool qw_loop_read_handshakes(worker *w, int64_t now) {
    for (;;) {
        zmq_msg_t ev;
        zmq_msg_init(&ev);
        if (zmq_msg_recv(&ev, w->mon, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&ev);
            break;
        }
        uint16_t id = 0;
        uint32_t value = 0;
        if (zmq_msg_size(&ev) >= 6) {
            memcpy(&id, zmq_msg_data(&ev), 2);
            memcpy(&value, (const char *)zmq_msg_data(&ev) + 2, 4);
        }
        bool more = zmq_msg_more(&ev);
        zmq_msg_close(&ev);
        if (more) { /* the endpoint frame */
            zmq_msg_init(&ev);
            zmq_msg_recv(&ev, w->mon, ZMQ_DONTWAIT);
            zmq_msg_close(&ev);
        }
        char why[400];
        if (id == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
            if (!w->connected_told)
                qw_loop_wlog(w, "connected to the coordinator at %s%s", w->endpoint_now,
                             w->o->curve_server_key ? " (CURVE: encrypted, key accepted)" : "");
            w->connected_told = true;
            w->refusals = 0;
            w->refusal_specific = false;
            w->reopen_ms = 0;
        } else if (id == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
            snprintf(why, sizeof why,
                     "the coordinator refused this worker's CURVE key (ZAP status %u): is its "
                     "public key %s in the coordinator's allow-list (--authorized-keys)?",
                     value, w->o->curve_public_key);
            refused(w, now, why, true);
        } else if (id == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL &&
                   value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) {
            snprintf(why, sizeof why, "%s",
                     w->o->curve_server_key
                         ? "the coordinator does not use CURVE but this worker does: unset "
                           "QSWEEP_CURVE_SERVER/PUBLIC/SECRET or start the coordinator with "
                           "QSWEEP_CURVE_SECRET"
                         : "the coordinator requires CURVE and this worker has no keys: set "
                           "QSWEEP_CURVE_SERVER (the coordinator's public key) and this "
                           "worker's QSWEEP_CURVE_PUBLIC/QSWEEP_CURVE_SECRET (qsweep keygen)");
            refused(w, now, why, true);
        } else if (id == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
            snprintf(why, sizeof why, "%s",
                     w->o->curve_server_key
                         ? "the coordinator closed the connection during the CURVE handshake: "
                           "is QSWEEP_CURVE_SERVER the coordinator's public key?"
                         : "the peer closed the connection during the handshake: is the "
                           "endpoint a qsweep coordinator, or does it require CURVE and this "
                           "worker has no keys (set QSWEEP_CURVE_SERVER and "
                           "QSWEEP_CURVE_PUBLIC/QSWEEP_CURVE_SECRET: qsweep keygen)?");
            refused(w, now, why, false);
        } else if (id == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
            snprintf(why, sizeof why,
                     "the handshake with the coordinator failed (ZeroMQ protocol error 0x%x): "
                     "is QSWEEP_CURVE_SERVER the coordinator's public key?",
                     value);
            refused(w, now, why, false);
        }
    }
    return w->refusals >= QW_REFUSALS_MAX && now - w->first_refusal_ms >= QW_REFUSAL_SPAN_MS;
}

void qw_loop_close_socket(worker *w) {
    if (w->mon) {
        zmq_socket_monitor(w->sock, NULL, 0); /* stops the monitor */
        zmq_close(w->mon);
    }
    if (w->sock) zmq_close(w->sock);
    w->mon = w->sock = NULL;
}

qs_status qw_loop_open_socket(worker *w, qs_error *err) {
    qw_loop_close_socket(w);
    w->sock = zmq_socket(w->zctx, ZMQ_DEALER);
    if (!w->sock) return qs_error_set(err, QS_ENET, "zmq_socket(DEALER): %s", zmq_strerror(errno));
    int linger = 0;
    zmq_setsockopt(w->sock, ZMQ_LINGER, &linger, sizeof linger);
    /* Each socket's connection gets a routing id of its own, "<id>#<8 random hex digits>":
       the coordinator's ROUTER never hands a connection's id over to another (its HELLO moves
       the worker id instead, coordinator/server/identity.c), so a worker reconnecting while
       its old connection still looks alive there must not collide with it. */
    uint32_t nonce = 0;
    if (getrandom(&nonce, sizeof nonce, 0) != (ssize_t)sizeof nonce)
        nonce = (uint32_t)qs_clock_ms() ^ (uint32_t)getpid() << 16;
    char rid[ID_MAX + 16];
    snprintf(rid, sizeof rid, "%s#%08x", w->id, (unsigned)nonce);
    if (zmq_setsockopt(w->sock, ZMQ_ROUTING_ID, rid, strlen(rid)) != 0)
        return qs_error_set(err, QS_ENET, "worker_id \"%s\": not usable as a ZeroMQ routing id: %s",
                            w->id, zmq_strerror(errno));
    if (w->o->curve_server_key) {
        if (zmq_setsockopt(w->sock, ZMQ_CURVE_SERVERKEY, w->o->curve_server_key, 41) != 0 ||
            zmq_setsockopt(w->sock, ZMQ_CURVE_PUBLICKEY, w->o->curve_public_key, 41) != 0 ||
            zmq_setsockopt(w->sock, ZMQ_CURVE_SECRETKEY, w->o->curve_secret_key, 41) != 0)
            return qs_error_set(err, QS_EINVAL, "CURVE keys: need three 40-character Z85 keys: %s",
                                zmq_strerror(errno));
    }
    watch_handshakes(w);
    w->connected_told = false;
    qw_loop_pick_endpoint(w);
    if (zmq_connect(w->sock, w->endpoint_now) != 0)
        return qs_error_set(err, QS_ENET, "connect %s: %s", w->endpoint_now, zmq_strerror(errno));
    return QS_OK;
}

void qw_loop_pick_endpoint(worker *w) {
    const char *all = w->o->endpoint;
    int n = 1;
    for (const char *p = all; *p; p++)
        n += *p == ',';
    const char *p = all;
    for (int k = w->endpoint_index % n; k > 0; k--)
        p = strchr(p, ',') + 1;
    size_t len = strcspn(p, ",");
    if (len >= sizeof w->endpoint_now) len = sizeof w->endpoint_now - 1;
    memcpy(w->endpoint_now, p, len);
    w->endpoint_now[len] = '\0';
}

/* Re-registers: HELLO (naming the running or finished job), then whatever is unacked. */
void qw_loop_reregister(worker *w) {
    w->registering = true; /* until the coordinator is heard again */
    qw_loop_send_hello(w);
    qw_loop_resend_partials(w);
    if (w->end_buf) { /* the part being delivered; a restarted coordinator asks for chunk 0 */
        qw_loop_send_packed(w, w->end_buf, w->end_len, "attempt end");
        w->end_sent_ms = qs_clock_ms();
    }
}
