/* The coordinator's messages (internal to worker/loop). */
#ifndef QW_LOOP_HANDLERS_H
#define QW_LOOP_HANDLERS_H

#include "worker_state.h"

/* Applies one decoded message from the coordinator (handlers.c). */
void qw_loop_handle(worker *w, Qsweep__Envelope *env);

#endif
