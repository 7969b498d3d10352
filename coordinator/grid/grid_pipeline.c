/* The pipeline grid kind (grid_kind.h): stages run in order, each the body of a training or a
 * sensitivity grid, where a sensitivity stage names the models a training stage trains by that
 * stage's axes instead of by path (docs/pipelines.md):
 *
 *   kind: pipeline
 *   stages:
 *     train:                         # a stage's name: letters, digits, '-' and '_'
 *       kind: training
 *       training: {shapes: [micro], recipes: [bf16, nvfp4], seeds: [1, 2], ...}
 *     sweep:
 *       kind: sensitivity
 *       models:
 *         - {from: train, recipe: [bf16, nvfp4], seed: all}   # shape, recipe, lr, seed:
 *                                    # "all" (the default), one value or a list of values
 *                                    # the training stage has
 *         - ../models/other.gguf    # any model a sensitivity grid takes, beside them
 *       dataset: {tokens: held-out.tokens, ctx: 64}
 *       sensitivity: {formats: [nvfp4], modes: [component]}
 *
 * A trained model's spec (kinds/spec.h) is {"digest": qs_trained_model_digest(<train key>),
 * "path": "<checkpoint_dir>/<train key>", "trained_by": "<train key>"}: the weights do not exist
 * at submit time, so the job keys derive from the training job's key, which is deterministic;
 * validation takes the model's facts (blocks, vocabulary, context, shape) from the training
 * stage's shape. Each baseline and eval job of a trained model depends on exactly the training
 * job that makes it (and an eval job on its baseline too). The top-level keys priority,
 * max_attempts and resources apply to every stage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grid_kind.h"

enum { STAGES_MAX = 8 };

typedef struct pipe_stage {
    char name[32];
    qc_grid *grid;    /* the stage as a grid of its kind (its parse's result) */
    qc_job_list jobs; /* a training stage's jobs, expanded at parse: their keys name
                         the trained models */
} pipe_stage;

typedef struct pipe_data {
    pipe_stage stages[STAGES_MAX];
    size_t n;
} pipe_data;

extern const qc_grid_kind qc_grid_kind_training;
extern const qc_grid_kind qc_grid_kind_sensitivity;

static void free_data(qc_grid *g) {
    pipe_data *d = g->kind_data;
    if (!d) return;
    for (size_t i = 0; i < d->n; i++) {
        qc_grid_free(d->stages[i].grid);
        qc_job_list_free(&d->stages[i].jobs);
    }
    free(d);
    g->kind_data = NULL;
}

/* A stage's own grid: the pipeline's common keys, the stage's kind. */
static qc_grid *stage_grid(const qc_grid *g, const qc_grid_kind *kind) {
    qc_grid *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->file = strdup(g->file);
    s->name = strdup(g->name);
    s->description = strdup("");
    s->priority = g->priority;
    s->max_attempts = g->max_attempts;
    s->resources = g->resources;
    s->kind = kind;
    if (!s->file || !s->name || !s->description) {
        qc_grid_free(s);
        return NULL;
    }
    return s;
}

/* The values one axis of a `from:` selection keeps: "all" (or no key), a value, or a list. */
typedef struct axis_pick {
    struct fy_node *node; /* NULL: all */
    const char *what;     /* "recipe", ... */
} axis_pick;

/* Whether the training job's axis value `have` (text) is picked; the values are checked
 * against the stage before (check_axis). */
static int picked(const axis_pick *a, const char *have) {
    if (!a->node) return 1;
    if (fy_node_is_scalar(a->node)) {
        const char *v = qc_config_scalar(a->node);
        return !strcmp(v, "all") || !strcmp(v, have);
    }
    void *it = NULL;
    struct fy_node *item;
    while ((item = fy_node_sequence_iterate(a->node, &it)))
        if (qc_config_scalar(item) && !strcmp(qc_config_scalar(item), have)) return 1;
    return 0;
}

/* The shortest %g text of x that reads back as x (at most 17 significant digits): 0.003 stays
 * "0.003", and learning rates that %g would print alike (0.001, 0.0010000001) stay apart. */
static void shortest_g(double x, char *buf, size_t cap) {
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, cap, "%.*g", p, x);
        if (strtod(buf, NULL) == x) return;
    }
}

/* An axis value's text as the selection compares it: shape and recipe names, a learning
 * rate's shortest round-trip text (shortest_g), %ld of a seed. */
static void axis_text(const qc_train_axes *t, int axis, char *buf, size_t cap) {
    switch (axis) {
    case 0: {
        const char *slash = strrchr(t->shape, '/');
        snprintf(buf, cap, "%s", slash ? slash + 1 : t->shape);
        break;
    }
    case 1:
        snprintf(buf, cap, "%s", t->recipe);
        break;
    case 2:
        shortest_g(t->lr, buf, cap);
        break;
    default:
        snprintf(buf, cap, "%ld", t->seed);
    }
}

static const char *const axis_names[4] = {"shape", "recipe", "lr", "seed"};

/* The distinct values an axis takes over the training stage's jobs ("bf16, nvfp4"). */
static void axis_values(const pipe_stage *from, int axis, char *buf, size_t cap) {
    buf[0] = '\0';
    for (size_t i = 0; i < from->jobs.n; i++) {
        qc_train_axes t;
        qs_error e = {0};
        char text[256], padded[300], list[1100];
        if (qc_grid_training_axes(from->grid, i, &t, &e)) continue;
        axis_text(&t, axis, text, sizeof text);
        snprintf(padded, sizeof padded, ", %s,", text);
        snprintf(list, sizeof list, ", %s,", buf);
        if (strstr(list, padded)) continue;
        if (strlen(buf) + strlen(text) + 3 >= cap) break;
        if (buf[0]) strcat(buf, ", ");
        strcat(buf, text);
    }
}

/* One value of an axis pick: refused at its node unless the training stage has it. */
static qs_status check_value(qc_config *c, struct fy_node *n, const pipe_stage *from, int axis,
                             const char *what) {
    const char *v = qc_config_scalar(n);
    if (!v) return qc_config_fail(c, n, QS_EFORMAT, "expected a %s value", what);
    char have[1024], padded[300], list[1100];
    axis_values(from, axis, have, sizeof have);
    snprintf(padded, sizeof padded, ", %s,", v);
    snprintf(list, sizeof list, ", %s,", have);
    if (strstr(list, padded)) return QS_OK;
    return qc_config_fail(c, n, QS_EINVAL, "%s '%s': stage %s has no such %s (it has %s)", what, v,
                          from->name, what, have);
}

/* Every value of an axis pick ("all", one value or a non-empty list) must be one the
 * training stage has. */
static qs_status check_axis(qc_config *c, const pipe_stage *from, int axis, const axis_pick *a) {
    if (!a->node) return QS_OK;
    if (fy_node_is_scalar(a->node)) {
        const char *v = qc_config_scalar(a->node);
        return v && !strcmp(v, "all") ? QS_OK : check_value(c, a->node, from, axis, a->what);
    }
    if (!fy_node_is_sequence(a->node) || fy_node_sequence_item_count(a->node) <= 0)
        return qc_config_fail(c, a->node, QS_EFORMAT,
                              "expected %s as \"all\", a value or a non-empty list of values",
                              a->what);
    void *it = NULL;
    struct fy_node *item;
    while ((item = fy_node_sequence_iterate(a->node, &it))) {
        qs_status st = check_value(c, item, from, axis, a->what);
        if (st) return st;
    }
    return QS_OK;
}

/* Appends to sweep's models the trained models a `{from: STAGE, ...}` item selects. */
static qs_status add_trained(qc_config *c, struct fy_node *n, const pipe_data *d, size_t self,
                             qc_grid *sweep, size_t *cap) {
    static const char *const keys[] = {"from", "shape", "recipe", "lr", "seed", NULL};
    qs_status st = qc_config_check_keys(c, n, "a trained model selection", keys);
    if (st) return st;
    struct fy_node *from_n = qc_config_lookup(n, "from");
    const char *from = NULL;
    if ((st = qc_config_string(c, from_n, "the stage a model comes from", &from))) return st;
    const pipe_stage *fs = NULL;
    size_t fi = 0;
    char names[256] = "";
    for (size_t i = 0; i < self; i++)
        if (d->stages[i].grid->kind == &qc_grid_kind_training) {
            if (!strcmp(d->stages[i].name, from)) {
                fs = &d->stages[i];
                fi = i;
            }
            if (strlen(names) + strlen(d->stages[i].name) + 3 < sizeof names) {
                if (names[0]) strcat(names, ", ");
                strcat(names, d->stages[i].name);
            }
        }
    if (!fs)
        return qc_config_fail(c, from_n, QS_EINVAL,
                              "from: '%s' is not a training stage before this one (expected %s)",
                              from, names[0] ? names : "a training stage listed earlier");
    axis_pick picks[4];
    for (int a = 0; a < 4; a++) {
        picks[a] = (axis_pick){qc_config_lookup(n, axis_names[a]), axis_names[a]};
        if ((st = check_axis(c, fs, a, &picks[a]))) return st;
    }
    int many_lrs = 0;
    qc_train_axes t0;
    qs_error e = {0};
    for (size_t i = 0; i < fs->jobs.n; i++) {
        qc_train_axes t;
        qc_grid_training_axes(fs->grid, i, &t, &e);
        if (i == 0) t0 = t;
        many_lrs |= t.lr != t0.lr;
    }
    for (size_t i = 0; i < fs->jobs.n; i++) {
        qc_train_axes t;
        if (qc_grid_training_axes(fs->grid, i, &t, &e))
            return qc_config_fail(c, n, QS_EINVAL, "%s", e.msg);
        char text[4][256];
        int keep = 1;
        for (int a = 0; a < 4; a++) {
            axis_text(&t, a, text[a], sizeof text[a]);
            keep &= picked(&picks[a], text[a]);
        }
        if (!keep) continue;
        const char *key = fs->jobs.jobs[i].key;
        for (size_t k = 0; k < sweep->n_models; k++)
            if (!strcmp(sweep->models[k].trained_by, key))
                return qc_config_fail(c, n, QS_EINVAL,
                                      "the model trained by %s (%s) is selected twice", fs->name,
                                      fs->jobs.jobs[i].label);
        if (sweep->n_models == *cap) {
            size_t nc = *cap ? 2 * *cap : 16;
            qc_grid_model *m = realloc(sweep->models, nc * sizeof *m);
            if (!m) return qc_config_error(c, QS_ENOMEM, "out of memory");
            memset(m + *cap, 0, (nc - *cap) * sizeof *m);
            sweep->models = m;
            *cap = nc;
        }
        qc_grid_model *m = &sweep->models[sweep->n_models++];
        char name[1200], lr[300] = "";
        if (many_lrs) snprintf(lr, sizeof lr, "/lr=%s", text[2]);
        snprintf(name, sizeof name, "%s/%s/%s%s/seed=%s", fs->name, text[0], text[1], lr, text[3]);
        size_t plen = strlen(t.checkpoint_dir) + 66;
        m->path = malloc(plen);
        m->name = strdup(name);
        if (!m->path || !m->name) return qc_config_error(c, QS_ENOMEM, "out of memory");
        snprintf(m->path, plen, "%s/%s", t.checkpoint_dir, key);
        memcpy(m->trained_by, key, 65);
        m->train_stage = fi;
        m->train_job = i;
        m->facts = t.facts;
        /* the trained model is written in FP32 (worker/train/hfsave.c) */
        m->facts.stored_bytes = 4 * (int64_t)t.facts.n_params;
        if (qs_trained_model_digest(key, m->facts.digest, &e))
            return qc_config_fail(c, n, QS_EINVAL, "%s", e.msg);
        m->bos_id = -1;
    }
    return QS_OK;
}

/* A sensitivity stage: its models (trained ones by `from:`, any other as a sensitivity grid
 * takes them), then the rest of its body. */
static qs_status parse_sweep(qc_config *c, struct fy_node *node, const pipe_data *d, size_t self,
                             const qc_grid_probe *probe, qc_grid *sweep) {
    struct fy_node *models = qc_config_lookup(node, "models");
    int count = models && fy_node_is_sequence(models) ? fy_node_sequence_item_count(models) : 0;
    if (count <= 0)
        return qc_config_fail(c, models ? models : node, QS_EFORMAT,
                              "expected 'models' as a non-empty list (of {from: STAGE, ...} "
                              "selections, or model paths)");
    size_t cap = 0;
    void *it = NULL;
    struct fy_node *item;
    qs_status st = QS_OK;
    while (!st && (item = fy_node_sequence_iterate(models, &it))) {
        if (fy_node_is_mapping(item) && qc_config_lookup(item, "from")) {
            st = add_trained(c, item, d, self, sweep, &cap);
            continue;
        }
        if (sweep->n_models == cap) {
            size_t nc = cap ? 2 * cap : 16;
            qc_grid_model *m = realloc(sweep->models, nc * sizeof *m);
            if (!m) return qc_config_error(c, QS_ENOMEM, "out of memory");
            memset(m + cap, 0, (nc - cap) * sizeof *m);
            sweep->models = m;
            cap = nc;
        }
        qc_grid_model *m = &sweep->models[sweep->n_models++];
        if ((st = qc_grid_parse_model(c, item, probe, m))) break;
        for (size_t i = 0; i + 1 < sweep->n_models; i++)
            if (!strcmp(sweep->models[i].facts.digest, m->facts.digest))
                return qc_config_fail(c, item, QS_EINVAL,
                                      "model %s is the same model as %s (equal digests)", m->name,
                                      sweep->models[i].name);
    }
    if (st) return st;
    if ((st = qc_grid_sensitivity_parse_body(c, node, probe, sweep))) return st;
    if ((st = qc_grid_check_tensor_parallel(c, sweep))) return st;
    return QS_OK;
}

static int stage_name_ok(const char *s) {
    size_t n = s ? strlen(s) : 0;
    if (!n || n >= 32) return 0;
    return strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") == n;
}

static qs_status parse(qc_config *c, struct fy_node *root, const qc_grid_probe *probe, qc_grid *g) {
    struct fy_node *stages = qc_config_lookup(root, "stages");
    if (!stages || !fy_node_is_mapping(stages) || fy_node_mapping_item_count(stages) <= 0)
        return qc_config_fail(c, stages ? stages : root, QS_EFORMAT,
                              "expected 'stages' as a mapping of stage name to a training or "
                              "sensitivity grid body");
    if (fy_node_mapping_item_count(stages) > STAGES_MAX)
        return qc_config_fail(c, stages, QS_EINVAL, "at most %d stages", STAGES_MAX);
    pipe_data *d = calloc(1, sizeof *d);
    if (!d) return qc_config_error(c, QS_ENOMEM, "out of memory");
    g->kind_data = d;
    void *it = NULL;
    struct fy_node_pair *pair;
    qs_status st = QS_OK;
    int trains = 0;
    while (!st && (pair = fy_node_mapping_iterate(stages, &it))) {
        struct fy_node *k = fy_node_pair_key(pair), *v = fy_node_pair_value(pair);
        const char *name = qc_config_scalar(k);
        if (!stage_name_ok(name))
            return qc_config_fail(c, k, QS_EINVAL,
                                  "a stage name is 1 to 31 letters, digits, '-' or '_'");
        for (size_t i = 0; i < d->n; i++)
            if (!strcmp(d->stages[i].name, name))
                return qc_config_fail(c, k, QS_EINVAL, "stage '%s' is listed twice", name);
        if (!fy_node_is_mapping(v))
            return qc_config_fail(c, v ? v : k, QS_EFORMAT,
                                  "stage %s: expected a mapping with 'kind' (training or "
                                  "sensitivity) and that kind's keys",
                                  name);
        struct fy_node *kn = qc_config_lookup(v, "kind");
        const char *kind_name = kn ? qc_config_scalar(kn) : NULL;
        const qc_grid_kind *kind = NULL;
        if (kind_name && !strcmp(kind_name, "training")) kind = &qc_grid_kind_training;
        if (kind_name && !strcmp(kind_name, "sensitivity")) kind = &qc_grid_kind_sensitivity;
        if (!kind)
            return qc_config_fail(c, kn ? kn : v, QS_EINVAL,
                                  "stage %s: expected kind training or sensitivity%s%s%s", name,
                                  kind_name ? " (not '" : "", kind_name ? kind_name : "",
                                  kind_name ? "')" : "");
        const char *keys[16];
        size_t nk = 0;
        keys[nk++] = "kind";
        for (size_t i = 0; kind->keys[i] && nk < 15; i++)
            keys[nk++] = kind->keys[i];
        keys[nk] = NULL;
        char what[64];
        snprintf(what, sizeof what, "stage %s", name);
        if ((st = qc_config_check_keys(c, v, what, keys))) return st;
        pipe_stage *ps = &d->stages[d->n++];
        snprintf(ps->name, sizeof ps->name, "%s", name);
        if (!(ps->grid = stage_grid(g, kind)))
            return qc_config_error(c, QS_ENOMEM, "out of memory");
        if (kind == &qc_grid_kind_training) {
            trains++;
            if ((st = kind->parse(c, v, probe, ps->grid))) return st;
            qs_error e = {0};
            /* the keys of its jobs name the models later stages sweep */
            if ((st = qc_grid_expand(ps->grid, &ps->jobs, &e)))
                return qc_config_fail(c, v, st, "stage %s: %s", name, e.msg);
        } else {
            st = parse_sweep(c, v, d, d->n - 1, probe, ps->grid);
        }
    }
    if (!st && !trains)
        return qc_config_fail(c, stages, QS_EINVAL,
                              "a pipeline needs a training stage (a sensitivity grid alone is "
                              "kind: sensitivity)");
    return st;
}

/* A job's key and its index in the expanded list, sorted by key to find repeats. */
typedef struct key_at {
    const char *key;
    size_t i;
} key_at;

static int key_at_cmp(const void *a, const void *b) {
    const key_at *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c ? c : (x->i > y->i) - (x->i < y->i);
}

/* The stage of job i of the expanded list, given each stage's first index. */
static size_t stage_of(const long *offset, size_t n, size_t i) {
    size_t si = 0;
    while (si + 1 < n && (size_t)offset[si + 1] <= i)
        si++;
    return si;
}

/* Two stages that make one job (the same job_key: a training stage repeated, a sweep repeating
 * another's models and settings) would count it twice in every count the grid prints and in
 * the DAG, while the store keeps it once: refused, naming both stages and the job. Errors:
 * QS_EINVAL, QS_ENOMEM. */
static qs_status refuse_repeated_jobs(const pipe_data *d, const long *offset,
                                      const qc_job_list *out, qs_error *err) {
    if (out->n < 2) return QS_OK;
    key_at *k = malloc(out->n * sizeof *k);
    if (!k) return qs_error_set(err, QS_ENOMEM, "out of memory");
    for (size_t i = 0; i < out->n; i++)
        k[i] = (key_at){out->jobs[i].key, i};
    qsort(k, out->n, sizeof *k, key_at_cmp);
    qs_status st = QS_OK;
    for (size_t i = 1; !st && i < out->n; i++)
        if (!strcmp(k[i - 1].key, k[i].key)) {
            const qc_job *j = &out->jobs[k[i].i];
            st = qs_error_set(err, QS_EINVAL,
                              "stages %s and %s make the same job (%s %s): a stage may not "
                              "repeat another's jobs",
                              d->stages[stage_of(offset, d->n, k[i - 1].i)].name,
                              d->stages[stage_of(offset, d->n, k[i].i)].name, j->kind,
                              j->label ? j->label : j->key);
        }
    free(k);
    return st;
}

static qs_status expand(const qc_grid *g, qc_job_list *out, qs_error *err) {
    const pipe_data *d = g->kind_data;
    long offset[STAGES_MAX] = {0};
    qs_status st = QS_OK;
    for (size_t si = 0; !st && si < d->n; si++) {
        const pipe_stage *ps = &d->stages[si];
        qc_job_list tmp = {0};
        offset[si] = (long)out->n;
        /* each stage's own grid sizes its jobs' needs (its models' facts) */
        st = qc_grid_expand(ps->grid, &tmp, err);
        size_t first = out->n;
        if (!st) st = qc_job_list_take(out, &tmp, ps->name, err);
        qc_job_list_free(&tmp);
        if (st || ps->grid->kind != &qc_grid_kind_sensitivity) continue;
        /* every job of a trained model also waits for the training job that makes it */
        for (size_t i = first; !st && i < out->n; i++) {
            const qc_grid_model *m = &ps->grid->models[out->jobs[i].model];
            if (m->trained_by[0])
                st = qc_job_list_depend(out, i, offset[m->train_stage] + (long)m->train_job, err);
        }
    }
    if (!st) st = refuse_repeated_jobs(d, offset, out, err);
    return st;
}

static const char *const pipeline_keys[] = {"stages", NULL};

const qc_grid_kind qc_grid_kind_pipeline = {
    .name = "pipeline",
    .keys = pipeline_keys,
    .parse = parse,
    .expand = expand,
    .free_data = free_data,
    .fills_needs = 1,
};

size_t qc_grid_pipeline_stages(const qc_grid *g) {
    return g && g->kind == &qc_grid_kind_pipeline && g->kind_data
               ? ((const pipe_data *)g->kind_data)->n
               : 0;
}

const char *qc_grid_pipeline_stage(const qc_grid *g, size_t i, const char **kind) {
    if (i >= qc_grid_pipeline_stages(g)) return NULL;
    const pipe_stage *ps = &((const pipe_data *)g->kind_data)->stages[i];
    if (kind) *kind = ps->grid->kind->name;
    return ps->name;
}
