/* Loading a grid: the common top-level keys, then the grid kind's schema (grid.h). */
#include "grid.h"

#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "grid_kind.h"
#include "numerics_path.h"

/* The kind the root names (default sensitivity). */
static qs_status find_kind(qc_config *c, struct fy_node *root, const qc_grid_kind **out) {
    struct fy_node *n = qc_config_lookup(root, "kind");
    const char *name = n ? qc_config_scalar(n) : "sensitivity";
    *out = qc_grid_kind_find(name);
    if (!*out)
        return qc_config_fail(c, n, QS_EINVAL, "unknown kind '%s' (expected %s)",
                              name ? name : "(not a scalar)", qc_grid_kind_names());
    return QS_OK;
}

/* Every top-level key: the common ones and the kind's. */
static qs_status check_root_keys(qc_config *c, struct fy_node *root, const qc_grid_kind *kind) {
    const char *keys[64];
    size_t n = 0;
    keys[n++] = "name";
    keys[n++] = "description";
    keys[n++] = "kind";
    for (size_t i = 0; kind->keys && kind->keys[i] && n < 60; i++)
        keys[n++] = kind->keys[i];
    keys[n++] = "priority";
    keys[n++] = "max_attempts";
    keys[n++] = "resources";
    keys[n++] = "numerics";
    keys[n] = NULL;
    return qc_config_check_keys(c, root, "the grid", keys);
}

/* The optional `resources` mapping (grid.h); every key optional (0 / false: no need). */
static qs_status parse_resources(qc_config *c, struct fy_node *n, qs_resources *r) {
    if (!n) return QS_OK;
    if (!fy_node_is_mapping(n))
        return qc_config_fail(c, n, QS_EFORMAT,
                              "expected 'resources' as a mapping with 'gpu_count', "
                              "'tensor_parallel', 'gpu_memory_mib', 'gemm' and 'native_fp4'");
    static const char *const keys[] = {"gpu_count", "tensor_parallel", "gpu_memory_mib",
                                       "gemm",      "native_fp4",      NULL};
    qs_status st = qc_config_check_keys(c, n, "resources", keys);
    struct fy_node *v, *tp_node = NULL;
    int gpus = 0, tp = 0, mib = 0, fp4 = 0, emulated = 0;
    if (!st && (v = qc_config_lookup(n, "gpu_count")))
        st = qc_config_int(c, v, "resources.gpu_count", 0, 4096, &gpus);
    if (!st && (tp_node = qc_config_lookup(n, "tensor_parallel")))
        st = qc_config_int(c, tp_node, "resources.tensor_parallel", 1, 4096, &tp);
    if (!st && tp && qc_config_lookup(n, "gpu_count") && gpus != tp)
        return qc_config_fail(c, tp_node, QS_EINVAL,
                              "resources.tensor_parallel %d and resources.gpu_count %d differ "
                              "(a job runs on tensor_parallel GPUs: give one of the two)",
                              tp, gpus);
    if (tp) gpus = tp;
    /* gpu_memory_mib alone asks for one GPU with that memory (a CPU job would ignore it) */
    if (!st && (v = qc_config_lookup(n, "gpu_memory_mib")))
        st = qc_config_int(c, v, "resources.gpu_memory_mib", 0, 1 << 30, &mib);
    if (!st && (v = qc_config_lookup(n, "native_fp4")))
        st = qc_config_bool(c, v, "resources.native_fp4", &fp4);
    if (!st && (v = qc_config_lookup(n, "gemm"))) {
        const char *g = NULL;
        st = qc_config_string(c, v, "resources.gemm", &g);
        if (!st && !strcmp(g, "native_fp4"))
            fp4 = 1;
        else if (!st && !strcmp(g, "emulated"))
            emulated = 1;
        else if (!st && strcmp(g, "any"))
            return qc_config_fail(c, v, QS_EINVAL,
                                  "resources.gemm: unknown '%s' (expected native_fp4, emulated "
                                  "or any)",
                                  g);
        if (!st && emulated && fp4)
            return qc_config_fail(c, v, QS_EINVAL,
                                  "resources.gemm: emulated, but native_fp4 is true");
    }
    if (st) return st;
    if (mib > 0 && gpus == 0) gpus = 1;
    *r = (qs_resources){.present = true,
                        .gpu_count = gpus,
                        .gpu_memory_mib = mib,
                        .native_fp4 = fp4 != 0,
                        .gemm_emulated = emulated != 0};
    return QS_OK;
}

/* The optional `numerics` key (grid.h): "any", "cpu", "cuda", or one path of either backend in
 * a shape a worker announces (common/numerics_path.h: another would wait for no worker). A
 * pipeline's stages name each other by job key, so its keys cannot take the path afterwards. */
static qs_status parse_numerics(qc_config *c, struct fy_node *n, const qc_grid_kind *kind,
                                qc_grid *g) {
    if (!n) return QS_OK;
    const char *v = NULL;
    qs_status st = qc_config_string(c, n, "numerics", &v);
    if (st) return st;
    if (!strcmp(kind->name, "pipeline"))
        return qc_config_fail(c, n, QS_EINVAL,
                              "numerics: not available in a pipeline grid (its stages name each "
                              "other's jobs by key); the first path to run a job pins it");
    if (strlen(v) > 128 || !qs_numerics_request_valid(v))
        return qc_config_fail(c, n, QS_EINVAL,
                              "numerics: '%s' is not a numerics path (expected any, cpu, cuda, "
                              "%s, cpu-openblas-<version>-<core>, or cuda-cc<compute "
                              "capability>-<fp32|bf16|auto|emulated>, as `qsweep workers` shows "
                              "them)",
                              v, QS_NUMERICS_CPU_FIXED);
    if (!(g->numerics = strdup(v))) return qc_config_error(c, QS_ENOMEM, "out of memory");
    return QS_OK;
}

static qs_status parse_root(qc_config *c, const qc_grid_probe *probe, qc_grid *g) {
    struct fy_node *root = qc_config_root(c);
    if (!root || !fy_node_is_mapping(root))
        return qc_config_fail(c, root, QS_EFORMAT,
                              "expected a mapping (name, models, dataset, sensitivity) at the top");
    const qc_grid_kind *kind = NULL;
    qs_status st = find_kind(c, root, &kind);
    if (!st) st = check_root_keys(c, root, kind);
    if (st) return st;
    g->kind = kind;
    const char *s = NULL;
    struct fy_node *n = qc_config_lookup(root, "name");
    if (!n)
        return qc_config_fail(c, root, QS_EFORMAT, "expected a 'name' key (the experiment name)");
    if ((st = qc_config_string(c, n, "the experiment name", &s))) return st;
    g->name = strdup(s);
    n = qc_config_lookup(root, "description");
    if (n && !fy_node_is_scalar(n))
        return qc_config_fail(c, n, QS_EFORMAT, "expected a string for the description");
    g->description = strdup(n ? qc_config_scalar(n) : "");
    if (!g->name || !g->description) return qc_config_error(c, QS_ENOMEM, "out of memory");
    g->max_attempts = 3;
    if ((n = qc_config_lookup(root, "priority")) &&
        (st = qc_config_int(c, n, "priority", -1000000, 1000000, &g->priority)))
        return st;
    if ((n = qc_config_lookup(root, "max_attempts")) &&
        (st = qc_config_int(c, n, "max_attempts", 1, 100, &g->max_attempts)))
        return st;
    if ((st = parse_resources(c, qc_config_lookup(root, "resources"), &g->resources))) return st;
    if ((st = parse_numerics(c, qc_config_lookup(root, "numerics"), kind, g))) return st;
    return kind->parse(c, root, probe, g);
}

/* Refuses, at the resources key, a tensor-parallel degree (gpu_count > 1) that a model of
 * the grid whose shape is known cannot be split over (kinds/resources.h qs_tp_splits, the
 * rule of the engine's shard plan): such a job could only fail on its worker. */
qs_status qc_grid_check_tensor_parallel(qc_config *c, const qc_grid *g) {
    int tp = g->resources.present ? g->resources.gpu_count : 0;
    if (tp <= 1) return QS_OK;
    struct fy_node *rn = qc_config_lookup(qc_config_root(c), "resources");
    struct fy_node *n = rn ? qc_config_lookup(rn, "tensor_parallel") : NULL;
    if (!n && rn) n = qc_config_lookup(rn, "gpu_count");
    for (size_t i = 0; i < g->n_models; i++) {
        char why[200];
        if (g->models[i].facts.shape.dim <= 0) continue;
        if (!qs_tp_splits(&g->models[i].facts.shape, tp, why, sizeof why))
            return qc_config_fail(c, n ? n : rn, QS_EINVAL, "resources: model %s: %s",
                                  g->models[i].name ? g->models[i].name : "?", why);
    }
    return QS_OK;
}

qs_status qc_grid_load(const char *path, const char *const *sets, size_t n_sets,
                       const qc_grid_probe *probe, qc_grid **out, qs_error *err) {
    if (!out || !path || !probe || (n_sets && !sets))
        return qs_error_set(err, QS_EINVAL, "qc_grid_load: NULL argument");
    *out = NULL;
    qc_grid *g = calloc(1, sizeof *g);
    if (!g || !(g->file = strdup(path))) {
        free(g);
        return qs_error_set(err, QS_ENOMEM, "out of memory");
    }
    qc_config *c = NULL;
    qs_status st = qc_config_load(path, sets, n_sets, &c, err);
    if (!st) {
        struct fy_node *root = qc_config_root(c);
        struct fy_node *desc = qc_config_lookup(root, "description");
        st = qc_config_check_text(c, root, desc);
    }
    if (!st) st = parse_root(c, probe, g);
    if (!st) st = qc_grid_check_tensor_parallel(c, g);
    if (!st && !(g->source = qc_config_emit(c))) st = qs_error_set(err, QS_ENOMEM, "out of memory");
    qc_config_free(c);
    if (st) {
        qc_grid_free(g);
        return st;
    }
    *out = g;
    return QS_OK;
}

qs_status qc_grid_expand(const qc_grid *g, qc_job_list *out, qs_error *err) {
    if (!g || !out || !g->kind)
        return qs_error_set(err, QS_EINVAL, "qc_grid_expand: NULL argument");
    memset(out, 0, sizeof *out);
    qs_status st = g->kind->expand(g, out, err);
    for (size_t i = 0; !st && g->numerics && i < out->n; i++)
        st = qc_job_set_numerics(&out->jobs[i], g->numerics, err);
    for (size_t i = 0; !st && !g->kind->fills_needs && i < out->n; i++) {
        qc_job *j = &out->jobs[i];
        const qc_model_facts *f = j->model < g->n_models ? &g->models[j->model].facts : NULL;
        qs_model_size size = {0};
        if (f && f->shape.dim > 0)
            size = (qs_model_size){.shape = f->shape,
                                   .master_bytes = f->master_bytes};
        json_t *spec = json_loads(j->spec, 0, NULL);
        st = spec
                 ? qs_job_resources(j->kind, spec, size.shape.dim > 0 ? &size : NULL, &j->need, err)
                 : qs_error_set(err, QS_ENOMEM, "out of memory");
        json_decref(spec);
        if (st) st = qs_error_wrap(err, "job %zu (%s)", i + 1, j->label);
    }
    if (st) qc_job_list_free(out);
    return st;
}

void qc_grid_free(qc_grid *g) {
    if (!g) return;
    if (g->kind && g->kind->free_data) g->kind->free_data(g);
    for (size_t i = 0; i < g->n_models; i++) {
        free(g->models[i].name);
        free(g->models[i].path);
        free(g->models[i].ref_path);
        free(g->models[i].ref_name);
    }
    for (size_t i = 0; i < g->n_formats; i++) {
        free(g->formats[i].name);
        free(g->formats[i].options_json);
    }
    free(g->models);
    free(g->formats);
    free(g->file);
    free(g->name);
    free(g->description);
    free(g->source);
    free(g->numerics);
    free(g->dataset_path);
    free(g->metrics_json);
    free(g);
}
