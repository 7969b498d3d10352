/* The worker's resident models, for the job kinds of jobs.c: a model is loaded once per worker
 * (its checkpoint mapped, its engine built), kept in the job cache (loop.h qw_job_cache_*)
 * under its digest's affinity key, watched for changes of its files, and placed on the backend
 * the worker chose (jobs_backend.h) with the job's tensor-parallel ranks. */
#ifndef QW_JOBS_MODEL_CACHE_H
#define QW_JOBS_MODEL_CACHE_H

#include <stddef.h>

#include "checkpoint.h"
#include "error.h"
#include "loop.h"
#include "model.h"
#include "sensitivity.h"
#include "tokens.h"

/* The model of spec s from the worker's cache, loading it (and checking its digest against
 * the spec's) when absent or built for a shorter context than s->dataset.ctx. The tokens t size its
 * prefix cache. It is put on the worker's backend (jobs_backend.h), with a fresh count of the
 * GEMM paths it runs. */
qs_status qw_jobs_get_model(qw_job_ctx *ctx, const qs_sensitivity_spec *s, const char *want,
                            const qw_tokens *t, qw_model **out, qs_error *err);

/* After a job that used the cached model of spec s: its files must be the ones it was loaded
 * from, else the job ran (at least partly) on other weights and its result must not be
 * stored. QS_EINVAL (permanent: a retry would fail the digest check) naming the model. */
qs_status qw_jobs_check_model_after(qw_job_ctx *ctx, const qs_sensitivity_spec *s, qs_error *err);

/* The numerics path a job of spec s runs on in this worker (jobs.h qw_jobs_numerics_path):
 * where qw_jobs_get_model puts the model, or its tensor-parallel ranks; into buf[cap]. */
void qw_jobs_spec_numerics_path(const qs_sensitivity_spec *s, char *buf, size_t cap);

/* The open checkpoint of the cached model of spec s; NULL when it is not cached or is a
 * synthetic model (no checkpoint). Owned by the cache. */
qw_checkpoint *qw_jobs_cached_checkpoint(qw_job_ctx *ctx, const qs_sensitivity_spec *s);

#endif
