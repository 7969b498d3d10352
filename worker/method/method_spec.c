/* A job's method as a plan (method_spec.h). */
#include "method_spec.h"

#include <stdlib.h>
#include <string.h>

#include "tokens.h"

qs_status qw_method_plan_from_spec(const qs_sensitivity_spec *s, qw_method_plan *plan,
                                   uint32_t **calib, qs_error *err) {
    memset(plan, 0, sizeof *plan);
    *calib = NULL;
    const qs_method *m = qs_method_at(s->method);
    if (!m) return qs_error_set(err, QS_EINVAL, "job spec: method: %d is not a method", s->method);
    plan->name = m->name;
    plan->rotate = m->rotate;
    plan->gptq = m->gptq;
    plan->smooth = m->smooth;
    if (m->gptq) {
        plan->gptq_opt.damp = json_number_value(json_object_get(s->method_options, "damp"));
        plan->gptq_opt.act_order = json_is_true(json_object_get(s->method_options, "act_order"));
    }
    if (m->smooth) plan->alpha = json_number_value(json_object_get(s->method_options, "alpha"));
    if (!m->calibrated) return QS_OK;
    qw_tokens t = {0};
    qs_status st = qw_tokens_load(s->calib_path, &t, err);
    if (st) return qs_error_wrap(err, "calibration");
    size_t ctx = (size_t)s->dataset.ctx, chunks = (size_t)s->calib_chunks, total = t.n / ctx;
    if (strcmp(t.digest, s->calib_digest))
        st = qs_error_set(err, QS_EINVAL,
                          "calibration: %s has digest %s, the job names %s (the file changed)",
                          s->calib_path, t.digest, s->calib_digest);
    else if (total < chunks)
        st = qs_error_set(err, QS_EINVAL,
                          "calibration: %s holds %zu whole chunks of ctx %zu, the job asks for %zu",
                          s->calib_path, total, ctx, chunks);
    else if (!(*calib = malloc(chunks * ctx * sizeof **calib)))
        st = qs_error_set(err, QS_ENOMEM, "calibration: %zu tokens", chunks * ctx);
    if (!st) {
        memcpy(*calib, t.ids + (total - chunks) * ctx, chunks * ctx * sizeof **calib);
        if (s->dataset.bos)
            for (size_t c = 0; c < chunks; c++)
                (*calib)[c * ctx] = (uint32_t)s->dataset.bos_id;
        plan->calib = *calib;
        plan->calib_chunks = chunks;
        plan->ctx = (int)ctx;
    }
    qw_tokens_free(&t);
    return st;
}
