/* Grid kinds: the registry of what a grid's `kind:` can name, and the parts
 * every kind may use: the shared `models` and `dataset` sections and the job list builder.
 *
 * A grid kind is a module of its own (grid_sensitivity.c, grid_training.c, and
 * grid_pipeline.c, whose stages are grids of the other two): its schema (the top-level keys it
 * reads, each checked with the reader's typed getters, config.h) and its expansion into jobs, whose
 * specs are typed job kinds (kinds/registry.h). Adding a kind: its file, one line in grid_kind.c's
 * table, its source in CMakeLists.txt. The common top-level keys (name, description, kind,
 * priority, max_attempts) are read by grid.c before the kind's parse is called.
 *
 * Stable API (the training kind is written against it in parallel): the struct below, the
 * section readers and qc_job_list_add. */
#ifndef QC_GRID_KIND_H
#define QC_GRID_KIND_H

#include <jansson.h>

#include "config.h"
#include "grid.h"

/* One grid kind. */
typedef struct qc_grid_kind {
    const char *name; /* the `kind:` value ("sensitivity") */
    /* Top-level keys the kind reads besides the common ones, NULL-terminated; any other key
     * is refused (naming the allowed ones) before parse is called. */
    const char *const *keys;
    /* Reads the kind's keys from mapping root into g (g->name and the common keys are set),
     * probing files through probe. Errors through qc_config_fail on c (the kind's message at
     * file:line:column); what it allocated before failing is freed by free_data /
     * qc_grid_free. */
    qs_status (*parse)(qc_config *c, struct fy_node *root, const qc_grid_probe *probe, qc_grid *g);
    /* Appends g's jobs to out (qc_job_list_add). Errors: QS_ENOMEM, the job kinds'. */
    qs_status (*expand)(const qc_grid *g, qc_job_list *out, qs_error *err);
    /* Frees g->kind_data (may be NULL when the kind keeps nothing there). */
    void (*free_data)(qc_grid *g);
    /* 1: expand fills each job's need itself (a pipeline: through its stages' own grids, whose
     * models size them); 0: qc_grid_expand computes it over g->models. */
    int fills_needs;
} qc_grid_kind;

/* The kind named name, NULL if none. */
const qc_grid_kind *qc_grid_kind_find(const char *name);

/* The registered kind names, comma-separated, for messages ("sensitivity, training"). */
const char *qc_grid_kind_names(void);

/* The shared `models` section: a non-empty list, each a path (Hugging Face directory or
 * .gguf), or a mapping {path, name} or {synthetic: <shape>, seed, name}. Fills g->models and
 * g->n_models; refuses a model listed twice (equal digests). Synthetic shapes' facts come
 * from probe->synthetic, their digest from qs_synthetic_model. Errors: at the node, as
 * qc_grid_load. */
qs_status qc_grid_parse_models(qc_config *c, struct fy_node *models, const qc_grid_probe *probe,
                               qc_grid *g);

/* One item of `models` (as qc_grid_parse_models reads each) into *m. Errors: at the node. */
qs_status qc_grid_parse_model(qc_config *c, struct fy_node *n, const qc_grid_probe *probe,
                              qc_grid_model *m);

/* The shared `dataset` section: {tokens: path, ctx: 3..2^20 (default 256), max_chunks: >= 0
 * (default 0: all)}. Fills g->dataset_path, g->ctx, g->max_chunks, g->dataset, and checks it
 * against every model already in g (token ids and the header's vocab_size within each model's
 * vocabulary, ctx within max_position_embeddings). Errors: at the node, as qc_grid_load. */
qs_status qc_grid_parse_dataset(qc_config *c, struct fy_node *dataset, const qc_grid_probe *probe,
                                qc_grid *g);

/* Appends one job: its spec (a canonical spec object, see kinds/spec.h; the reference is
 * taken over, also on error), job kind name (a static string), the index of the job it depends
 * on (-1 none), its model's index in g->models (0 for a kind without models), its qs_mode (-1
 * for jobs of no mode) and label. The job_key is computed here (qs_spec_key), and the affinity
 * key from the spec's model.digest when it has one (qs_affinity_key); *index (may be NULL)
 * receives the job's position. The spec must pass its job kind's check (kinds/registry.h
 * qs_job_kind.check), so a spec the worker would refuse fails at expansion, not on the
 * worker. Errors: QS_EINVAL (kind not registered, or its check's message, wrapped with the
 * job's number and label), QS_ENOMEM. */
qs_status qc_job_list_add(qc_job_list *list, json_t *spec, const char *kind, long depends_on,
                          size_t model, int mode, const char *label, long *index, qs_error *err);

/* Adds job index dep (an earlier job of list) to the dependencies of job `job`; a dependency
 * listed already is not added twice. Errors: QS_EINVAL (an index out of range or not earlier,
 * more than QC_JOB_DEPS_MAX dependencies). */
qs_status qc_job_list_depend(qc_job_list *list, size_t job, long dep, qs_error *err);

/* Moves every job of src to the end of dst (dependencies shifted with them, stage set to
 * stage), leaving src empty. Errors: QS_ENOMEM (then both lists are as they were). */
qs_status qc_job_list_take(qc_job_list *dst, qc_job_list *src, const char *stage, qs_error *err);

/* Refuses, at the top-level resources key, a tensor-parallel degree (resources.gpu_count > 1)
 * that a model of g whose shape is known cannot be split over (kinds/resources.h
 * qs_tp_splits). qc_grid_load calls it for g; a pipeline for its sensitivity stages. */
qs_status qc_grid_check_tensor_parallel(qc_config *c, const qc_grid *g);

/* The sensitivity kind's parse after `models`: its `dataset` and `sensitivity` sections read
 * from mapping root, against the models already in g (a pipeline fills them from a training
 * stage). Errors: as the sensitivity kind's parse. */
qs_status qc_grid_sensitivity_parse_body(qc_config *c, struct fy_node *root,
                                         const qc_grid_probe *probe, qc_grid *g);

/* One job of a training grid as a pipeline's sensitivity stage selects it: its axes, the
 * facts of its model (the shape's, from the engine's table, or the init checkpoint's), and
 * where its trained model goes. Strings borrowed from the grid. */
typedef struct qc_train_axes {
    const char *shape;  /* the named shape, or the init checkpoint's path */
    const char *recipe; /* the recipe's name */
    double lr;
    long seed;
    const char *checkpoint_dir; /* absolute, canonical (grid_training.c) */
    qc_model_facts facts;       /* digest empty: the trained model's is not known yet */
} qc_train_axes;

/* The axes of the i-th job of training grid g (its expansion's order: shapes x recipes x lrs
 * x seeds). QS_EINVAL when g is not a training grid or i is out of range. */
qs_status qc_grid_training_axes(const qc_grid *g, size_t i, qc_train_axes *out, qs_error *err);

#endif
