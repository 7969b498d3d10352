/* A job's method as a plan (method_spec.h). */
#include "method_spec.h"

#include <stdlib.h>
#include <string.h>

#include "method_label.h"
#include "tokens.h"

/* The plan of method m alone, options from the spec's (a per-linear spec holds every method's). */
static void method_plan(const qs_method *m, const json_t *options, qw_method_plan *plan) {
    plan->name = m->name;
    plan->rotate = m->rotate;
    plan->gptq = m->gptq;
    plan->smooth = m->smooth;
    if (m->gptq) {
        plan->gptq_opt.damp = json_number_value(json_object_get(options, "damp"));
        plan->gptq_opt.act_order = json_is_true(json_object_get(options, "act_order"));
        plan->gptq_opt.scale_search =
            m->rotate == QS_ROTATE_GROUP && json_is_true(json_object_get(options, "scale_search"));
    }
    if (m->smooth) plan->alpha = json_number_value(json_object_get(options, "alpha"));
}

/* per-linear: one plan per method label (each method, then each with the scale search) and a
 * table of linear -> plan, in one allocation. The map's linears must be ones the job quantizes
 * (kinds/method.h qs_method_linear_quantized, the grid's rule), checked here too because a job
 * spec can reach the worker without passing a grid. */
static qs_status per_linear_plan(const qs_sensitivity_spec *s, qw_method_plan *plan,
                                 qs_error *err) {
    const json_t *map = json_object_get(s->method_options, "linears");
    const char *key;
    json_t *v;
    int n = 0;
    json_object_foreach((json_t *)map, key, v) {
        int block, kind;
        if (qs_block_linear_parse(key, &block, &kind))
            return qs_error_set(err, QS_EINVAL, "method_options.linears: '%s' is not a linear",
                                key);
        if (!qs_method_linear_quantized(key, s->mode, s->block, s->part, s->loo_of, s->policy)) {
            char part[64];
            qs_sensitivity_part_text(s, part, sizeof part);
            return qs_error_set(err, QS_EINVAL,
                                "method_options.linears.%s: linear '%s' is not quantized by this "
                                "%s-mode job (%s %s), which would leave its method unused",
                                key, key, qs_mode_name(s->mode),
                                s->mode == QS_MODE_POLICY ? "policy" : "part", part);
        }
        if ((block + 1) * QW_LINEAR_KINDS > n) n = (block + 1) * QW_LINEAR_KINDS;
    }
    size_t nm = (size_t)qs_method_count();
    char *mem = calloc(1, 2 * nm * sizeof(qw_method_plan) + (size_t)n * sizeof(qw_method_plan *));
    if (!mem) return qs_error_set(err, QS_ENOMEM, "method per-linear: %d linears", n);
    qw_method_plan *plans = (qw_method_plan *)mem;
    const qw_method_plan **table = (const qw_method_plan **)(mem + 2 * nm * sizeof(qw_method_plan));
    for (size_t i = 0; i < nm; i++) {
        method_plan(qs_method_at((int)i), s->method_options, &plans[i]);
        plans[nm + i] = plans[i];
        plans[nm + i].gptq_opt.scale_search = plans[i].rotate == QS_ROTATE_GROUP && plans[i].gptq;
    }
    json_object_foreach((json_t *)map, key, v) {
        int block, kind;
        bool search;
        qs_block_linear_parse(key, &block, &kind);
        int i = qs_method_by_label(json_string_value(v), &search);
        table[block * QW_LINEAR_KINDS + kind] = &plans[(search ? nm : 0) + (size_t)i];
    }
    plan->linear = table;
    plan->n_linear = n;
    plan->owned = mem;
    return QS_OK;
}

void qw_method_plan_clear(qw_method_plan *plan) {
    free(plan->owned);
    memset(plan, 0, sizeof *plan);
}

qs_status qw_method_plan_from_spec(const qs_sensitivity_spec *s, qw_method_plan *plan,
                                   uint32_t **calib, qs_error *err) {
    memset(plan, 0, sizeof *plan);
    *calib = NULL;
    const qs_method *m = qs_method_at(s->method);
    if (!m) return qs_error_set(err, QS_EINVAL, "job spec: method: %d is not a method", s->method);
    method_plan(m, s->method_options, plan);
    if (m->per_linear) {
        plan->gptq = plan->smooth = 0;
        qs_status st = per_linear_plan(s, plan, err);
        if (st) return st;
    }
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
