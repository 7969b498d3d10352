/* qs_proto: the envelope codec of qsweep's wire protocol (qsweep.proto). Named
 * envelope.h so it is not confused with the numeric core's element codecs (kernels/element.h).
 *
 * Every ZeroMQ body frame is one packed Qsweep__Envelope carrying QS_PROTO_VERSION and
 * exactly one message. Decoding is the trust boundary: a body that is over the size limit,
 * not valid protobuf, of another protocol version or carrying no message is rejected with
 * an error naming the peer, so the caller logs it and drops it (it never brings a loop
 * down). The codec itself does no I/O. */
#ifndef QS_PROTO_ENVELOPE_H
#define QS_PROTO_ENVELOPE_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "qsweep.pb-c.h"

/* Protocol version carried by every envelope. Bump when a message's meaning changes. */
#define QS_PROTO_VERSION 1u

/* Default largest accepted body, bytes (also the coordinator's ZMQ_MAXMSGSIZE). A final
 * RESULT of a per-layer sweep holds a few thousand metrics (~100 kB); 4 MiB leaves room. */
#define QS_PROTO_MAX_BYTES ((size_t)4 << 20)

/* Bulk data (a final RESULT's metrics, partial RESULT batches, an ASSIGN's spec) travels in
 * frames of at most about this many bytes (qsweep.proto: Result, Assign): on a 1 Mbit/s link
 * one takes half a second, so a heartbeat queued behind it is never late by more. */
#define QS_PROTO_CHUNK_BYTES ((size_t)64 << 10)

/* Largest final result a worker delivers (in chunks), encoded bytes: the coordinator holds
 * the chunks of a result in memory until the last one. A worker refuses a larger result
 * with a job error giving its size and this limit. */
#define QS_PROTO_MAX_RESULT_BYTES ((size_t)64 << 20)

/* Decodes one body frame of len bytes received from peer (a printable name used only in the
 * error message, e.g. the worker id or the hex ROUTER identity).
 * On QS_OK *out is a new envelope with version == QS_PROTO_VERSION and body_case set; free
 * it with qs_proto_free. Errors (*out stays NULL):
 *   QS_EFORMAT       len > max_bytes, not a valid protobuf Envelope, or no message set;
 *   QS_EUNSUPPORTED  another protocol version;
 *   QS_EINVAL        buf NULL with len > 0, or out NULL. */
qs_status qs_proto_decode(const void *buf, size_t len, size_t max_bytes, const char *peer,
                          Qsweep__Envelope **out, qs_error *err);

/* Frees an envelope from qs_proto_decode. NULL is allowed. */
void qs_proto_free(Qsweep__Envelope *env);

/* Packs env into a new malloc'd buffer (*buf, *len bytes; caller frees), after setting
 * env->version to QS_PROTO_VERSION. Errors: QS_EINVAL when no message is set,
 * QS_ENOMEM when the buffer cannot be allocated. */
qs_status qs_proto_encode(Qsweep__Envelope *env, uint8_t **buf, size_t *len, qs_error *err);

/* Short name of a message kind ("HELLO", "ASSIGN", ...), "NONE" when unset, for logs. */
const char *qs_proto_kind_name(Qsweep__Envelope__BodyCase c);

#endif
