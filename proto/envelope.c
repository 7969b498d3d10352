#include "envelope.h"

#include <stdlib.h>

qs_status qs_proto_decode(const void *buf, size_t len, size_t max_bytes, const char *peer,
                          Qsweep__Envelope **out, qs_error *err) {
    if (!out || (!buf && len > 0))
        return qs_error_set(err, QS_EINVAL, "qs_proto_decode: NULL buffer or output");
    *out = NULL;
    if (!peer) peer = "?";
    if (len > max_bytes)
        return qs_error_set(err, QS_EFORMAT,
                            "peer %s: message of %zu bytes exceeds the limit of %zu", peer, len,
                            max_bytes);
    Qsweep__Envelope *env = qsweep__envelope__unpack(NULL, len, buf);
    if (!env)
        return qs_error_set(err, QS_EFORMAT,
                            "peer %s: malformed message (%zu bytes are not a qsweep Envelope)",
                            peer, len);
    if (env->version != QS_PROTO_VERSION) {
        unsigned v = env->version;
        qsweep__envelope__free_unpacked(env, NULL);
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "peer %s: protocol version %u, this build speaks %u", peer, v,
                            QS_PROTO_VERSION);
    }
    if (env->body_case == QSWEEP__ENVELOPE__BODY__NOT_SET) {
        qsweep__envelope__free_unpacked(env, NULL);
        return qs_error_set(err, QS_EFORMAT,
                            "peer %s: envelope carries no message (or an unknown one)", peer);
    }
    *out = env;
    return QS_OK;
}

void qs_proto_free(Qsweep__Envelope *env) {
    if (env) qsweep__envelope__free_unpacked(env, NULL);
}

qs_status qs_proto_encode(Qsweep__Envelope *env, uint8_t **buf, size_t *len, qs_error *err) {
    if (!env || !buf || !len || env->body_case == QSWEEP__ENVELOPE__BODY__NOT_SET)
        return qs_error_set(err, QS_EINVAL, "qs_proto_encode: no envelope or no message set");
    env->version = QS_PROTO_VERSION;
    size_t n = qsweep__envelope__get_packed_size(env);
    uint8_t *b = malloc(n ? n : 1);
    if (!b) return qs_error_set(err, QS_ENOMEM, "qs_proto_encode: %zu bytes", n);
    *len = qsweep__envelope__pack(env, b);
    *buf = b;
    return QS_OK;
}

const char *qs_proto_kind_name(Qsweep__Envelope__BodyCase c) {
    switch (c) {
    case QSWEEP__ENVELOPE__BODY_HELLO:
        return "HELLO";
    case QSWEEP__ENVELOPE__BODY_READY:
        return "READY";
    case QSWEEP__ENVELOPE__BODY_HEARTBEAT:
        return "HEARTBEAT";
    case QSWEEP__ENVELOPE__BODY_RESULT:
        return "RESULT";
    case QSWEEP__ENVELOPE__BODY_FAILED:
        return "FAILED";
    case QSWEEP__ENVELOPE__BODY_BYE:
        return "BYE";
    case QSWEEP__ENVELOPE__BODY_ASSIGN:
        return "ASSIGN";
    case QSWEEP__ENVELOPE__BODY_ACK:
        return "ACK";
    case QSWEEP__ENVELOPE__BODY_CANCEL:
        return "CANCEL";
    case QSWEEP__ENVELOPE__BODY_REREGISTER:
        return "REREGISTER";
    default:
        return "NONE";
    }
}
