/* What one attempt owns and its compute thread (internal to worker/loop; the kinds' side of
 * the job context is loop.h). */
#ifndef QW_LOOP_JOB_CTX_H
#define QW_LOOP_JOB_CTX_H

#include "worker_state.h"

/* Appends m to mv, growing it. Errors: QS_ENOMEM (mv unchanged). */
qs_status qw_loop_metric_push(metric_vec *mv, const metric_rec *m);

/* The compute thread of one attempt (arg: its qw_job_ctx): runs the kind's function from the
 * registry and records status, error and done under the worker's mutex. */
void *qw_loop_compute_main(void *arg);

/* Frees a job context and what it owns (spec, metrics); NULL is fine. */
void qw_loop_job_free(qw_job_ctx *ctx);

#endif
