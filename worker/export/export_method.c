/* An eval job's method as the plan an export applies (export.h qw_export_method_from_spec). */
#include <jansson.h>
#include <stdlib.h>

#include "export.h"
#include "method_spec.h"
#include "sensitivity.h"

/* The plan with the calibration tokens it points into, one allocation to free. */
typedef struct owned_plan {
    qw_method_plan plan; /* first: the pointer handed out */
    uint32_t *calib;
} owned_plan;

qs_status qw_export_method_from_spec(const char *spec_json, qw_method_plan **out, qs_error *err) {
    *out = NULL;
    json_error_t je;
    json_t *spec = json_loads(spec_json, 0, &je);
    if (!spec) return qs_error_set(err, QS_EFORMAT, "job spec: %s", je.text);
    qs_sensitivity_spec s = {0};
    qs_status st = qs_sensitivity_decode(spec, &s, err);
    owned_plan *o = NULL;
    if (!st && s.method != QS_METHOD_RTN && !(o = calloc(1, sizeof *o)))
        st = qs_error_set(err, QS_ENOMEM, "export: method plan");
    if (!st && o) st = qw_method_plan_from_spec(&s, &o->plan, &o->calib, err);
    if (st && o) {
        qw_export_method_free(&o->plan);
        o = NULL;
    }
    if (o) *out = &o->plan;
    qs_sensitivity_clear(&s);
    json_decref(spec);
    return st;
}

void qw_export_method_free(qw_method_plan *plan) {
    if (!plan) return;
    owned_plan *o = (owned_plan *)plan;
    free(o->calib);
    qw_method_plan_clear(&o->plan);
    free(o);
}
