/* qc_log: the coordinator's log lines, one per call, on stderr, prefixed
 * "qsweep-coordinator: " (server.c, zap.c). A line longer than 1400 bytes is cut. Safe from
 * several threads (one fprintf per line). */
#ifndef QC_SERVER_LOG_H
#define QC_SERVER_LOG_H

void qc_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
