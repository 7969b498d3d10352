/* An attempt's end until ACKed (internal to worker/loop). */
#ifndef QW_LOOP_DELIVERY_H
#define QW_LOOP_DELIVERY_H

#include "worker_state.h"

/* Forgets the attempt's end (ACKed, or given up by the coordinator). */
void qw_loop_end_clear(worker *w);

/* Makes FAILED of (job, attempt) with class cls and message msg the attempt's end and sends
 * it (kept until ACKed). */
void qw_loop_send_failed(worker *w, int64_t job, uint32_t attempt, Qsweep__FailureClass cls,
                         const char *msg);

/* Makes the final RESULT of metrics all the attempt's end: one frame when it fits in
 * QS_PROTO_CHUNK_BYTES, else chunks (qsweep.proto: Result) sent one at a time as the
 * coordinator ACKs them; over QS_PROTO_MAX_RESULT_BYTES the worker refuses it with a job
 * error giving its size and the limit (codec.h). */
void qw_loop_deliver_result(worker *w, int64_t job, uint32_t attempt, const metric_vec *all);

#endif
