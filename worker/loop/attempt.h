/* An attempt from its ASSIGN to its end (internal to worker/loop). */
#ifndef QW_LOOP_ATTEMPT_H
#define QW_LOOP_ATTEMPT_H

#include "worker_state.h"

/* Starts the attempt of a whole ASSIGN a on a compute thread; a busy or stopping worker
 * answers FAILED PREEMPTED (once, not kept), a spec that is not a JSON object fails the
 * attempt as a job error; a duplicate ASSIGN is ignored. */
void qw_loop_start_job(worker *w, const Qsweep__Assign *a);

/* Keeps a's attempt token as the token of the attempt on (w->token; none when a has one
 * longer than the buffer). */
void qw_loop_take_token(worker *w, const Qsweep__Assign *a);

/* Joins a finished job and turns its outcome into the attempt's end message. */
void qw_loop_finish_job(worker *w);

/* Forgets a split ASSIGN being received. */
void qw_loop_rx_clear(worker *w);

/* One part of a split ASSIGN (qsweep.proto: Assign): chunk 0 starts a new one, the next
 * expected chunk is appended, anything else is dropped (the coordinator sends the whole
 * ASSIGN again when this worker's HELLO says it is receiving). The last part starts the job. */
void qw_loop_receive_assign(worker *w, const Qsweep__Assign *a);

#endif
