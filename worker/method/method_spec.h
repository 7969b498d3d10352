/* A sensitivity job's method (kinds/method.h) made into a plan (method_apply.h), with its
 * calibration chunks read from their token file: the last calib_chunks whole chunks at the
 * dataset's ctx, the first token of each replaced by the dataset's BOS when it has one, as the
 * evaluation treats its own chunks (eval.h). */
#ifndef QW_METHOD_SPEC_H
#define QW_METHOD_SPEC_H

#include "method_apply.h"
#include "sensitivity.h"

/* *plan from s; plan->calib points into *calib (freed by the caller with free()) for the
 * calibrated methods; per-linear gets one plan per method of its map, each linear pointing at
 * its own (freed by qw_method_plan_clear). Errors: QS_EIO / QS_EFORMAT reading the token file,
 * QS_EINVAL when its digest is not the spec's (naming both) or it holds fewer whole chunks
 * than asked, or a per-linear linear that the job does not quantize (naming the linear and
 * the job's mode); QS_ENOMEM. */
qs_status qw_method_plan_from_spec(const qs_sensitivity_spec *s, qw_method_plan *plan,
                                   uint32_t **calib, qs_error *err);

#endif
