/* qc_log: the coordinator's log lines, one per call, on stderr, prefixed
 * "qsweep-coordinator: " (server.c, zap.c), and the name a log line gives a peer. A line longer
 * than 1400 bytes is cut. Safe from several threads (one fprintf per line). */
#ifndef QC_SERVER_LOG_H
#define QC_SERVER_LOG_H

#include <stddef.h>

void qc_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A printable peer name for logs: the routing id when printable, else its hex. */
void qc_srv_peer_name(const char *rid, size_t len, char *out, size_t cap);

#endif
