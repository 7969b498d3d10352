/* The registry entries of the sensitivity job kinds (registry.h, sensitivity.h). */
#include <string.h>

#include "registry.h"
#include "sensitivity.h"

/* Decodes spec as a sensitivity spec of kind `want` and drops it. */
static qs_status check_as(const json_t *spec, bool want_eval, qs_error *err) {
    qs_sensitivity_spec s;
    qs_status st = qs_sensitivity_decode(spec, &s, err);
    if (!st && s.eval != want_eval)
        st = qs_error_set(err, QS_EINVAL, "job spec: kind: expected \"%s\"",
                          want_eval ? "eval" : "baseline");
    qs_sensitivity_clear(&s);
    return st;
}

static qs_status check_baseline(const json_t *spec, qs_error *err) {
    return check_as(spec, false, err);
}

static qs_status check_eval(const json_t *spec, qs_error *err) {
    return check_as(spec, true, err);
}

const qs_job_kind qs_job_kind_baseline = {"baseline", "sensitivity", check_baseline};
const qs_job_kind qs_job_kind_eval = {"eval", "sensitivity", check_eval};
