/* A sensitivity job's spec (kinds/sensitivity.h) as the engine's quantization policy
 * (worker/engine/policy.h): its mode and parts, or its explicit per-linear map. */
#ifndef QW_JOBS_JOB_POLICY_H
#define QW_JOBS_JOB_POLICY_H

#include "error.h"
#include "policy.h"
#include "sensitivity.h"

/* The policy of spec s on a model of n_layers blocks into *p (qw_policy_free frees it), the
 * fused groups the spec names included (policy.h fuse). Errors: QS_EINVAL naming the spec's
 * field: a block beyond the model's, an unknown format or format option, an unknown mode. */
qs_status qw_jobs_build_policy(const qs_sensitivity_spec *s, int n_layers, qw_policy *p,
                               qs_error *err);

#endif
