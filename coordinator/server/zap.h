/* qc_zap: the coordinator's allow-list of worker CURVE keys, enforced through a ZAP handler
 * (ZeroMQ Authentication Protocol, RFC 27, https://rfc.zeromq.org/spec/27/).
 *
 * With CURVE alone (ZMQ_CURVE_SERVER) the traffic is encrypted but any client that knows the
 * server's public key completes the handshake. libzmq 4.3 asks a ZAP handler about every
 * CURVE handshake when one is bound to inproc://zeromq.zap.01 in the socket's context
 * (src/curve_server.cpp, process_initiate): the handshake completes only on status "200";
 * any other status refuses the client before a single message of it reaches the ROUTER.
 * With no handler bound, libzmq 4.3 lets the client in ("Stonehouse" without
 * authentication), unless the socket has a ZAP domain and ZMQ_ZAP_ENFORCE_DOMAIN (a draft
 * option, 93); qc_zap_configure_socket sets both, so a handshake that finds no handler
 * (during shutdown, after qc_zap_stop) fails closed where libzmq accepts the option.
 *
 * The handler runs in a thread of its own with a REP socket in the coordinator's context, so
 * it answers at once even while the message loop is busy (a long drain, a slow PostgreSQL
 * query). It answers "200" (user id = the client's key in Z85, which libzmq attaches to the
 * client's messages as the "User-Id" property) for a CURVE client whose 32-byte public key is
 * in the allow-list, "400" for any other key or mechanism, "500" for a malformed request.
 * Refusals are logged with the key in Z85 and the peer address (a.b.c.d for tcp,
 * ":uid:gid:pid" for ipc), rate-limited: a key at most once a minute, at most 10 lines a
 * minute in all; the refusals not logged are counted in the next line and at stop.
 *
 * Lifetime, in the coordinator's context: qc_zap_start before the ROUTER binds (so no
 * handshake can miss the handler), qc_zap_stop after the ROUTER is closed and before
 * zmq_ctx_term (which blocks while the handler's socket is open). */
#ifndef QC_SERVER_ZAP_H
#define QC_SERVER_ZAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* The ZAP domain the coordinator's ROUTER announces (RFC 27 "domain" frame). */
#define QC_ZAP_DOMAIN "qsweep"

/* An allow-list: distinct 32-byte CURVE (Curve25519) public keys, sorted for lookup. */
typedef struct qc_zap_keys qc_zap_keys;

/* Reads an allow-list file (at most 16 MiB): one Z85 public key per line (40 characters, the
 * `public` half of qsweep keygen / zmq_curve_keypair), optionally followed by whitespace and
 * a '#' comment; blank lines and lines whose first non-blank character is '#' are skipped;
 * whitespace around a key (and a CR) is ignored. Errors: QS_ENOTFOUND (no such file), QS_EIO
 * (cannot open or read it), QS_EINVAL (not a regular file, or too large), QS_EFORMAT
 * "<path>:<line>: ..." for a key that is not 40 characters, is not valid Z85 (naming the
 * column), or was already given (naming the first line), and for a file without any key;
 * QS_ENOMEM. *out is owned by the caller (qc_zap_keys_free). */
qs_status qc_zap_keys_load(const char *path, qc_zap_keys **out, qs_error *err);

/* Number of keys in the list. */
size_t qc_zap_keys_count(const qc_zap_keys *keys);

/* Whether key (32 bytes, binary) is in the list. */
bool qc_zap_keys_contains(const qc_zap_keys *keys, const uint8_t key[32]);

/* Frees a list; NULL is a no-op. */
void qc_zap_keys_free(qc_zap_keys *keys);

/* A running ZAP handler. */
typedef struct qc_zap qc_zap;

/* Binds a REP socket to inproc://zeromq.zap.01 in zctx (a libzmq context) and starts the
 * thread that answers on it with keys, the list read from path (named in logs and re-read by
 * qc_zap_reload). Takes ownership of keys, also on failure. path and keys NULL: no allow-list,
 * every CURVE client is admitted (still with its key as User-Id, so that the coordinator can
 * bind each worker id to the key that first registered it). Logs one line with the key count.
 * Errors: QS_ENET (socket or bind failed, e.g. another handler is bound in zctx), QS_EIO (no
 * pipe or thread), QS_ENOMEM. */
qs_status qc_zap_start(void *zctx, const char *path, qc_zap_keys *keys, qc_zap **out,
                       qs_error *err);

/* Makes libzmq consult the handler for the CURVE server socket sock: sets ZMQ_ZAP_DOMAIN to
 * QC_ZAP_DOMAIN and, where this libzmq has it (draft API), ZMQ_ZAP_ENFORCE_DOMAIN so that a
 * handshake without a handler fails instead of passing. Call before zmq_bind.
 * Errors: QS_ENET naming the option. */
qs_status qc_zap_configure_socket(void *sock, qs_error *err);

/* Re-reads the allow-list file and, when it loads, replaces the list the handler uses (the
 * next handshake sees it; connections already made stay). A file that does not load leaves
 * the list in use unchanged. Logs the outcome either way. Call from one thread at a time
 * (the coordinator's loop); safe while the handler answers. Errors: qc_zap_keys_load's. */
qs_status qc_zap_reload(qc_zap *z, qs_error *err);

/* Stops the thread, logs how many refusals the rate limit kept out of the log, closes the
 * socket and frees z. Call after closing the sockets that use the handler and before
 * zmq_ctx_term. NULL is a no-op. */
void qc_zap_stop(qc_zap *z);

#endif
