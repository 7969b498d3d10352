/* The table of job kinds (registry.h). One line per kind. */
#include "registry.h"

#include <string.h>

extern const qs_job_kind qs_job_kind_baseline; /* sensitivity_kinds.c */
extern const qs_job_kind qs_job_kind_eval;     /* sensitivity_kinds.c */
extern const qs_job_kind qs_job_kind_train;    /* train.c */

static const qs_job_kind *const kinds[] = {
    &qs_job_kind_baseline,
    &qs_job_kind_eval,
    &qs_job_kind_train,
};

const qs_job_kind *qs_job_kind_find(const char *name) {
    for (size_t i = 0; name && i < sizeof kinds / sizeof kinds[0]; i++)
        if (!strcmp(kinds[i]->name, name)) return kinds[i];
    return NULL;
}

size_t qs_job_kind_count(void) {
    return sizeof kinds / sizeof kinds[0];
}

const qs_job_kind *qs_job_kind_at(size_t i) {
    return i < qs_job_kind_count() ? kinds[i] : NULL;
}

qs_status qs_job_spec_check(const char *spec_json, qs_error *err) {
    json_error_t je;
    json_t *spec = json_loads(spec_json, 0, &je);
    if (!spec || !json_is_object(spec)) {
        json_decref(spec);
        return qs_error_set(err, QS_EFORMAT, "job spec: line %d column %d: %s", je.line, je.column,
                            spec ? "expected a JSON object" : je.text);
    }
    const char *name = json_string_value(json_object_get(spec, "kind"));
    const qs_job_kind *k = qs_job_kind_find(name);
    qs_status st = k ? k->check(spec, err)
                     : qs_error_set(err, QS_EINVAL, "job spec: kind: '%s' is not a job kind",
                                    name ? name : "(missing)");
    json_decref(spec);
    return st;
}
