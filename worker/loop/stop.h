/* The request to stop (internal to worker/loop): one async-signal-safe flag, set by SIGTERM,
 * SIGINT or qw_request_stop (loop.h), read by the messaging thread and the attempts. */
#ifndef QW_LOOP_STOP_H
#define QW_LOOP_STOP_H

#include <stdbool.h>

/* Requests a stop (qw_request_stop's work, loop.h). */
void qw_loop_request_stop(void);

/* Whether a stop was requested (SIGTERM, SIGINT, qw_request_stop). */
bool qw_loop_stop_requested(void);

/* Clears the request (at the start of qw_run). */
void qw_loop_stop_reset(void);

/* The SIGTERM/SIGINT handler: requests a stop. */
void qw_loop_on_stop_signal(int sig);

#endif
