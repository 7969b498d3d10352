/* The worker's log lines (internal to worker/loop). */
#ifndef QW_LOOP_WLOG_H
#define QW_LOOP_WLOG_H

#include "worker_state.h"

/* One log line "qsweep-worker ID: ..." on stderr, unless options.quiet. */
void qw_loop_wlog(const worker *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
