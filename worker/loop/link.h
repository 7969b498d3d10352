/* The link to the coordinator (internal to worker/loop): the socket, refused handshakes,
 * re-registering. */
#ifndef QW_LOOP_LINK_H
#define QW_LOOP_LINK_H

#include "worker_state.h"

/* Reads the monitor's events. Returns true when the worker should give up: the coordinator
 * refused it at least QW_REFUSALS_MAX times over at least QW_REFUSAL_SPAN_MS with no
 * successful handshake in between (loop.h). */
bool qw_loop_read_handshakes(worker *w, int64_t now);

/* Closes the socket and its monitor (if open). */
void qw_loop_close_socket(worker *w);

/* Opens a fresh DEALER socket (closing the old one) with the worker's routing id and CURVE
 * keys, watches its handshakes and connects. Errors: QS_ENET naming the endpoint or id,
 * QS_EINVAL (CURVE keys libzmq refuses). */
qs_status qw_loop_open_socket(worker *w, qs_error *err);

/* Sets endpoint_now to the endpoint_index-th (modulo their number) of options.endpoint's
 * comma-separated endpoints. */
void qw_loop_pick_endpoint(worker *w);

/* Re-registers: HELLO (naming the running or finished job), then whatever is unacked. */
void qw_loop_reregister(worker *w);

#endif
