/* The request to stop (stop.h). */
#include <signal.h>

#include "stop.h"

static volatile sig_atomic_t stop_requested;

void qw_loop_request_stop(void) {
    stop_requested = 1;
}

void qw_loop_on_stop_signal(int sig) {
    (void)sig;
    stop_requested = 1;
}

bool qw_loop_stop_requested(void) {
    return stop_requested;
}

void qw_loop_stop_reset(void) {
    stop_requested = 0;
}
