/* What the coordinator sends to workers : encoding, the ROUTER send, and
 * one function per message it sends (ACK, CANCEL, REREGISTER, ASSIGN in parts). ACKs and
 * ASSIGNs wait for the open batch's commit (commit.c); the others go at once. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <zmq.h>

#include "grow.h"
#include "log.h"
#include "outbox.h"

bool qc_srv_encode(Qsweep__Envelope *env, uint8_t **buf, size_t *len) {
    qs_error err;
    if (qs_proto_encode(env, buf, len, &err) != QS_OK) {
        qc_log("encode %s: %s", qs_proto_kind_name(env->body_case), err.msg);
        return false;
    }
    return true;
}

/* Sends [rid][body]; false when the peer is gone (ROUTER_MANDATORY) or its queue is full. */
bool qc_srv_send_raw(server *s, const char *rid, size_t rid_len, const uint8_t *buf, size_t len) {
    if (zmq_send(s->sock, rid, rid_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
        zmq_send(s->sock, buf, len, ZMQ_DONTWAIT) < 0) {
        char peer[600];
        qc_srv_peer_name(rid, rid_len, peer, sizeof peer);
        qc_log("send to %s: %s (dropped)", peer, zmq_strerror(errno));
        return false;
    }
    return true;
}

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

void qc_srv_send_now(server *s, const char *rid, size_t rid_len, Qsweep__Envelope *env) {
    uint8_t *buf;
    size_t len;
    if (!qc_srv_encode(env, &buf, &len)) return;
    qc_srv_send_raw(s, rid, rid_len, buf, len);
    free(buf);
}

void qc_srv_send_ack(server *s, const char *rid, size_t rid_len, int64_t job_id, uint32_t attempt,
                     uint64_t seq, bool final) {
    Qsweep__Ack a = QSWEEP__ACK__INIT;
    a.job_id = job_id;
    a.attempt = attempt;
    a.seq = seq;
    a.final = final;
    Qsweep__Envelope env = QSWEEP__ENVELOPE__INIT;
    env.body_case = QSWEEP__ENVELOPE__BODY_ACK;
    env.ack = &a;
    qc_srv_send_after_commit(s, rid, rid_len, &env, NULL);
}

void qc_srv_send_cancel(server *s, const char *rid, size_t rid_len, int64_t job_id,
                        uint32_t attempt, const char *reason) {
    Qsweep__Cancel c = QSWEEP__CANCEL__INIT;
    c.job_id = job_id;
    c.attempt = attempt;
    c.reason = (char *)reason;
    Qsweep__Envelope env = QSWEEP__ENVELOPE__INIT;
    env.body_case = QSWEEP__ENVELOPE__BODY_CANCEL;
    env.cancel = &c;
    qc_srv_send_now(s, rid, rid_len, &env);
}

void qc_srv_send_reregister(server *s, const char *rid, size_t rid_len, const char *reason) {
    Qsweep__Reregister r = QSWEEP__REREGISTER__INIT;
    r.reason = (char *)reason;
    Qsweep__Envelope env = QSWEEP__ENVELOPE__INIT;
    env.body_case = QSWEEP__ENVELOPE__BODY_REREGISTER;
    env.reregister = &r;
    qc_srv_send_now(s, rid, rid_len, &env);
}

/* Sends job j's ASSIGN to w: after the batch's commit (the attempt row must be durable
 * first; the lease starts when the first part goes out), or at once (a re-send to a worker
 * that got only part of it). A spec over QS_PROTO_CHUNK_BYTES goes in parts cut at UTF-8
 * character boundaries (proto: Assign.chunks), so no frame holds the link for long. */
void qc_srv_send_assign(server *s, worker *w, job *j, bool after_commit) {
    const size_t room = QS_PROTO_CHUNK_BYTES - 1024, len = strlen(j->spec);
    uint32_t chunks = 0;
    for (size_t off = 0; len > room && off < len; chunks++) {
        size_t cut = len - off > room ? room : len - off;
        while (off + cut < len && cut > 1 && ((unsigned char)j->spec[off + cut] & 0xc0) == 0x80)
            cut--; /* never inside a character */
        off += cut;
    }
    char *part = chunks ? malloc(room + 1) : NULL;
    if (chunks && !part) abort();
    const char *digest =
        qc_srv_trained_digest(&s->jobs, j); /* in every part, as the other fields */
    size_t off = 0;
    for (uint32_t k = 0; k < (chunks ? chunks : 1); k++) {
        Qsweep__Assign a = QSWEEP__ASSIGN__INIT;
        a.job_id = j->id;
        a.attempt = j->attempt;
        a.lease_ms = (uint32_t)s->lease_ms;
        a.kind = j->kind;
        a.spec_json = j->spec;
        if (j->token_known) /* a restarted coordinator knows only its hash: the worker has it */
            a.attempt_token = (ProtobufCBinaryData){sizeof j->token, j->token};
        if (digest) a.model_digest = (char *)digest;
        if (chunks) {
            size_t cut = len - off > room ? room : len - off;
            while (off + cut < len && cut > 1 && ((unsigned char)j->spec[off + cut] & 0xc0) == 0x80)
                cut--;
            memcpy(part, j->spec + off, cut);
            part[cut] = '\0';
            off += cut;
            a.spec_json = part;
            a.chunk = k;
            a.chunks = chunks;
        }
        Qsweep__Envelope env = QSWEEP__ENVELOPE__INIT;
        env.body_case = QSWEEP__ENVELOPE__BODY_ASSIGN;
        env.assign = &a;
        if (after_commit)
            qc_srv_send_after_commit(s, w->rid, w->rid_len, &env, k == 0 ? j : NULL);
        else
            qc_srv_send_now(s, w->rid, w->rid_len, &env);
    }
    free(part);
}
