/* The worker's `train` job kind: decodes a kinds/train.h spec, loads the data (bytes tokenizer
 * or token file), runs qw_train_job_run with the loop's progress, metric and cancel hooks
 * (worker/loop/loop.h). Preempted (SIGTERM or cancel) after its checkpoint: QS_ECANCELLED;
 * diverged: QS_ESTATE (a job error, "diverged at step S"). */
#ifndef QW_TRAIN_TRAIN_KIND_H
#define QW_TRAIN_TRAIN_KIND_H

#include "error.h"

/* Registers "train" with the worker loop (qw_register_kind). Errors: those of
 * qw_register_kind. */
qs_status qw_train_register(qs_error *err);

#endif
