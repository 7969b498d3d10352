/* The names a pipeline gives its trained models, read back from the store (trained_names.h). */
#include "trained_names.h"

#include <libfyaml.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

/* Whether sequence seq (NULL or not a sequence: any) holds the scalar text. */
static int seq_has(struct fy_node *seq, const char *text) {
    if (!seq || !fy_node_is_sequence(seq)) return 1;
    void *it = NULL;
    struct fy_node *n;
    while ((n = fy_node_sequence_iterate(seq, &it)) != NULL) {
        const char *v = qc_config_scalar(n);
        if (!v && fy_node_is_mapping(n)) v = qc_config_scalar(qc_config_lookup(n, "name"));
        if (v && !strcmp(v, text)) return 1;
    }
    return 0;
}

/* Whether sequence shapes (NULL or not a sequence: any) holds the job's shape: the named
 * shape (named 1), or a {init: path} entry for a fine-tune (named 0). */
static int shapes_have(struct fy_node *shapes, int named, const char *shape) {
    if (!shapes || !fy_node_is_sequence(shapes)) return 1;
    if (named) return seq_has(shapes, shape);
    void *it = NULL;
    struct fy_node *n;
    while ((n = fy_node_sequence_iterate(shapes, &it)) != NULL)
        if (fy_node_is_mapping(n) && qc_config_lookup(n, "init")) return 1;
    return 0;
}

/* Whether the training stage named stage of the grid has more than one lr (its names then
 * carry the lr). */
static int stage_has_many_lrs(struct fy_document *doc, const char *stage) {
    struct fy_node *stages = doc ? qc_config_lookup(fy_document_root(doc), "stages") : NULL;
    struct fy_node *v = stages ? qc_config_lookup(stages, stage) : NULL;
    struct fy_node *tr = v ? qc_config_lookup(v, "training") : NULL;
    struct fy_node *lrs = tr ? qc_config_lookup(tr, "lrs") : NULL;
    return lrs && fy_node_is_sequence(lrs) && fy_node_sequence_item_count(lrs) > 1;
}

/* For a link stored without its stage (before schema/145_experiment_job_stage.sql, until the
 * grid is submitted again): the training stage of the grid whose shapes, recipes and seeds
 * hold the job's, else the first training stage, into stage; "" when the grid has none.
 * named: the job trains a named shape (shape), else it fine-tunes a checkpoint. */
static void guess_stage(struct fy_document *doc, int named, const char *shape, const char *recipe,
                        const char *seed, char *stage, size_t cap) {
    stage[0] = '\0';
    struct fy_node *stages = doc ? qc_config_lookup(fy_document_root(doc), "stages") : NULL;
    if (!stages || !fy_node_is_mapping(stages)) return;
    void *it = NULL;
    struct fy_node_pair *p;
    while ((p = fy_node_mapping_iterate(stages, &it)) != NULL) {
        struct fy_node *v = fy_node_pair_value(p);
        const char *kind = qc_config_scalar(qc_config_lookup(v, "kind"));
        const char *key = qc_config_scalar(fy_node_pair_key(p));
        if (!kind || strcmp(kind, "training") || !key) continue;
        struct fy_node *tr = qc_config_lookup(v, "training");
        int match = tr && shapes_have(qc_config_lookup(tr, "shapes"), named, shape) &&
                    seq_has(qc_config_lookup(tr, "recipes"), recipe) &&
                    seq_has(qc_config_lookup(tr, "seeds"), seed);
        if (stage[0] && !match) continue;
        snprintf(stage, cap, "%s", key);
        if (match) return;
    }
}

qs_status qsweep_trained_names_load(PGconn *c, const char *experiment, qsweep_trained_names *out,
                                    qs_error *err) {
    *out = (qsweep_trained_names){0};
    const char *p[] = {experiment};
    PGresult *r = PQexecParams(
        c,
        "SELECT t.job_key, (t.spec ->> 'checkpoint_dir') || '/' || t.job_key, "
        "COALESCE(t.spec -> 'shape' ->> 'name', "
        "regexp_replace(rtrim(t.spec -> 'model' ->> 'path', '/'), '^.*/', '')), "
        "t.spec -> 'recipe' ->> 'name', ((t.spec ->> 'lr')::float8)::text, t.spec ->> 'seed', "
        "e.grid, COALESCE(m.digest, ''), (t.spec -> 'shape' ->> 'name') IS NOT NULL, ej.stage "
        "FROM experiments e JOIN experiment_jobs ej "
        "ON ej.experiment = e.id JOIN jobs t ON t.id = ej.job "
        "LEFT JOIN v_trained_models m ON m.train_job_id = t.id WHERE e.name = $1 AND t.kind = 'train' ORDER BY t.id",
        1, NULL, p, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        qs_status st = qs_error_set(err, QS_EDB, "trained models of %s: %s", experiment,
                                    PQerrorMessage(c));
        PQclear(r);
        return st;
    }
    int n = PQntuples(r);
    struct fy_document *doc =
        n ? fy_document_build_from_string(NULL, PQgetvalue(r, 0, 6), FY_NT) : NULL;
    out->v = calloc(n ? (size_t)n : 1, sizeof *out->v);
    qs_status st = out->v ? QS_OK : qs_error_set(err, QS_ENOMEM, "trained models: out of memory");
    for (int i = 0; i < n && !st; i++) {
        qsweep_trained_name *t = &out->v[out->n++];
        snprintf(t->key, sizeof t->key, "%s", PQgetvalue(r, i, 0));
        snprintf(t->digest, sizeof t->digest, "%s", PQgetvalue(r, i, 7));
        char stage[64], name[1200], lr[300] = "";
        if (!PQgetisnull(r, i, 9))
            snprintf(stage, sizeof stage, "%s", PQgetvalue(r, i, 9));
        else
            guess_stage(doc, PQgetvalue(r, i, 8)[0] == 't', PQgetvalue(r, i, 2),
                        PQgetvalue(r, i, 3), PQgetvalue(r, i, 5), stage, sizeof stage);
        if (stage[0] && stage_has_many_lrs(doc, stage))
            snprintf(lr, sizeof lr, "/lr=%s", PQgetvalue(r, i, 4));
        snprintf(name, sizeof name, "%s%s%s/%s%s/seed=%s", stage, stage[0] ? "/" : "",
                 PQgetvalue(r, i, 2), PQgetvalue(r, i, 3), lr, PQgetvalue(r, i, 5));
        t->path = strdup(PQgetvalue(r, i, 1));
        t->name = strdup(name);
        if (!t->path || !t->name) st = qs_error_set(err, QS_ENOMEM, "trained models: out of memory");
    }
    if (doc) fy_document_destroy(doc);
    PQclear(r);
    if (st) qsweep_trained_names_free(out);
    return st;
}

void qsweep_trained_names_free(qsweep_trained_names *t) {
    for (size_t i = 0; i < t->n; i++) {
        free(t->v[i].path);
        free(t->v[i].name);
    }
    free(t->v);
    *t = (qsweep_trained_names){0};
}

const char *qsweep_trained_name_by_key(const qsweep_trained_names *t, const char *key) {
    for (size_t i = 0; key && i < t->n; i++)
        if (!strcmp(t->v[i].key, key)) return t->v[i].name;
    return NULL;
}

const qsweep_trained_name *qsweep_trained_model_by_path(const qsweep_trained_names *t,
                                                        const char *path) {
    for (size_t i = 0; path && i < t->n; i++)
        if (!strcmp(t->v[i].path, path)) return &t->v[i];
    return NULL;
}

const char *qsweep_trained_name_by_path(const qsweep_trained_names *t, const char *path) {
    const qsweep_trained_name *m = qsweep_trained_model_by_path(t, path);
    return m ? m->name : NULL;
}

/* s with every occurrence of from replaced by to (malloc'd), taking ownership of s. */
static char *replace_all(char *s, const char *from, const char *to) {
    size_t fl = strlen(from), tl = strlen(to), k = 0;
    if (!s || !fl) return s;
    for (const char *c = strstr(s, from); c; c = strstr(c + fl, from))
        k++;
    if (!k) return s;
    char *o = malloc(strlen(s) + k * tl + 1), *w = o;
    if (!o) {
        free(s);
        return NULL;
    }
    const char *c = s;
    for (const char *h = strstr(c, from); h; h = strstr(c, from)) {
        memcpy(w, c, (size_t)(h - c));
        w += h - c;
        memcpy(w, to, tl);
        w += tl;
        c = h + fl;
    }
    strcpy(w, c);
    free(s);
    return o;
}

char *qsweep_trained_names_apply(const qsweep_trained_names *t, const char *text) {
    char *s = strdup(text);
    for (size_t i = 0; s && i < t->n; i++)
        s = replace_all(s, t->v[i].path, t->v[i].name);
    for (size_t i = 0; s && i < t->n; i++)
        s = replace_all(s, t->v[i].key, t->v[i].name);
    return s;
}
