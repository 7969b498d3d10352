/* The protocol handlers (coordinator/server only): messages from workers. */
#ifndef QC_SERVER_HANDLERS_H
#define QC_SERVER_HANDLERS_H

#include "state.h"

/* Decodes one message body from peer rid and applies it (one handler per message kind);
 * undecodable or unexpected messages are logged and dropped. user_id: the connection's
 * ZeroMQ "User-Id" property (its CURVE key in Z85, set by the ZAP handler), NULL without
 * CURVE. */
void qc_srv_on_message(server *s, const char *rid, size_t rid_len, const char *user_id,
                       const uint8_t *body, size_t len, int64_t now);

#endif
