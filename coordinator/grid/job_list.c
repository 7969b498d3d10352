/* The job list a grid expands into (grid.h, grid_kind.h): appending keyed jobs, freeing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grid_kind.h"
#include "registry.h"

qs_status qc_job_list_add(qc_job_list *list, json_t *spec, const char *kind, long depends_on,
                          size_t model, int mode, const char *label, long *index, qs_error *err) {
    char key[65], model_key[QS_AFFINITY_KEY_MAX] = "";
    /* the affinity key comes from the spec, so every kind that names a model gets one */
    const char *digest =
        json_string_value(json_object_get(json_object_get(spec, "model"), "digest"));
    if (digest) qs_affinity_key(digest, model_key, sizeof model_key);
    /* the job kind's own decoder must accept what the grid kind wrote: a spec the worker would
       refuse fails here, at submission, instead of burning every attempt */
    const qs_job_kind *jk = qs_job_kind_find(kind);
    qs_status chk = !spec ? QS_OK
                    : jk  ? jk->check(spec, err)
                          : qs_error_set(err, QS_EINVAL,
                                         "job kind '%s' is not registered (kinds/registry.c)", kind);
    if (chk) {
        json_decref(spec);
        return qs_error_wrap(err, "job %zu (%s)", list->n + 1, label);
    }
    char *text = spec ? qs_spec_canonical(spec) : NULL;
    qs_status st =
        text ? qs_spec_key(spec, key, err) : qs_error_set(err, QS_ENOMEM, "out of memory");
    json_decref(spec);
    char *lab = st ? NULL : strdup(label);
    if (!st && !lab) st = qs_error_set(err, QS_ENOMEM, "out of memory");
    /* capacity: 64, then doubling (a power of two from 64 on is full) */
    size_t n = list->n;
    if (!st && (n == 0 || (n >= 64 && (n & (n - 1)) == 0))) {
        size_t cap = n ? 2 * n : 64;
        qc_job *j = realloc(list->jobs, cap * sizeof *j);
        if (!j)
            st = qs_error_set(err, QS_ENOMEM, "out of memory");
        else
            list->jobs = j;
    }
    if (st) {
        free(text);
        free(lab);
        return st;
    }
    qc_job *j = &list->jobs[n];
    memcpy(j->key, key, sizeof key);
    memcpy(j->model_key, model_key, sizeof model_key);
    j->spec = text;
    j->kind = kind;
    j->n_deps = 0;
    if (depends_on >= 0) j->deps[j->n_deps++] = depends_on;
    j->stage[0] = '\0';
    j->model = model;
    j->mode = mode;
    j->label = lab;
    j->need = (qs_job_need){0}; /* qc_grid_expand computes it */
    if (index) *index = (long)n;
    list->n = n + 1;
    return QS_OK;
}

qs_status qc_job_list_depend(qc_job_list *list, size_t job, long dep, qs_error *err) {
    if (job >= list->n || dep < 0 || (size_t)dep >= job)
        return qs_error_set(err, QS_EINVAL, "job %zu: dependency %ld is not an earlier job",
                            job + 1, dep + 1);
    qc_job *j = &list->jobs[job];
    for (size_t i = 0; i < j->n_deps; i++)
        if (j->deps[i] == dep) return QS_OK;
    if (j->n_deps == QC_JOB_DEPS_MAX)
        return qs_error_set(err, QS_EINVAL, "job %zu (%s): more than %d dependencies", job + 1,
                            j->label, QC_JOB_DEPS_MAX);
    j->deps[j->n_deps++] = dep;
    return QS_OK;
}

qs_status qc_job_list_take(qc_job_list *dst, qc_job_list *src, const char *stage, qs_error *err) {
    if (!src->n) return QS_OK;
    size_t n = dst->n + src->n, cap = 64;
    while (cap < n)
        cap *= 2;
    /* the capacity rule of qc_job_list_add: 64, then a power of two */
    qc_job *j = realloc(dst->jobs, cap * sizeof *j);
    if (!j) return qs_error_set(err, QS_ENOMEM, "out of memory");
    dst->jobs = j;
    for (size_t i = 0; i < src->n; i++) {
        qc_job *t = &dst->jobs[dst->n + i];
        *t = src->jobs[i];
        for (size_t d = 0; d < t->n_deps; d++)
            t->deps[d] += (long)dst->n;
        snprintf(t->stage, sizeof t->stage, "%s", stage ? stage : "");
    }
    dst->n = n;
    free(src->jobs);
    src->jobs = NULL;
    src->n = 0;
    return QS_OK;
}

void qc_job_list_free(qc_job_list *list) {
    if (!list) return;
    for (size_t i = 0; i < list->n; i++) {
        free(list->jobs[i].spec);
        free(list->jobs[i].label);
    }
    free(list->jobs);
    list->jobs = NULL;
    list->n = 0;
}

qs_status qc_job_key(const char *spec_json, char hex[65], qs_error *err) {
    return qs_spec_key_text(spec_json, hex, err);
}

qs_status qc_job_set_numerics(qc_job *j, const char *numerics, qs_error *err) {
    json_t *spec = json_loads(j->spec, 0, NULL);
    char *text = NULL;
    char key[65];
    qs_status st = spec && !json_object_set_new(spec, "numerics", json_string(numerics)) &&
                           (text = qs_spec_canonical(spec))
                       ? qs_spec_key(spec, key, err)
                       : qs_error_set(err, QS_ENOMEM, "out of memory");
    json_decref(spec);
    if (st) {
        free(text);
        return st;
    }
    free(j->spec);
    j->spec = text;
    memcpy(j->key, key, sizeof key);
    return QS_OK;
}
