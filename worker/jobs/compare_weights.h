/* SQNR result names, and a compare job's per-linear SQNR of the weights (kinds/sensitivity.h
 * reference_model): the scored checkpoint against its reference, read, not run. */
#ifndef QW_JOBS_COMPARE_WEIGHTS_H
#define QW_JOBS_COMPARE_WEIGHTS_H

#include <stddef.h>

#include "error.h"
#include "loop.h"
#include "model.h"
#include "sensitivity.h"

/* "sqnr_db.<block>.<kind>" for "model.layers.<block>.<module>", "sqnr_db.lm_head" for the head. */
void qw_jobs_sqnr_metric_name(const char *linear, char *buf, size_t cap);

/* A compare job's per-linear SQNR: each linear's weight as the scored checkpoint holds it
 * (an FP4 checkpoint's dequantized) against the reference's, reported as
 * "weight_sqnr_db.<block>.<kind>" = 10 log10(sum w_ref^2 / sum (w - w_ref)^2), +inf when
 * equal; a linear one of them does not store (a tied lm_head) is left out. */
qs_status qw_jobs_compare_weights(qw_job_ctx *ctx, const qs_sensitivity_spec *s,
                                  const qw_model *model, qs_error *err);

#endif
