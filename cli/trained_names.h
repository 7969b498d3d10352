/* The names a pipeline gives the models its training stages make (docs/pipelines.md):
 * `STAGE/shape/recipe/seed=N`, or `STAGE/shape/recipe/lr=X/seed=N` when the stage has more
 * than one learning rate, as coordinator/grid/grid_pipeline.c names them at submit time. Read
 * back from the store for the tables, so that a trained model is named as its grid names it,
 * not by its folder (checkpoint_dir/<train job_key>) or its key. */
#ifndef QSWEEP_TRAINED_NAMES_H
#define QSWEEP_TRAINED_NAMES_H

#include <stddef.h>

#include <libpq-fe.h>

#include "error.h"

/* One trained model: its training job's key, its folder, its pipeline name, and the model
 * digest its training job recorded (v_trained_models; "" until it has). */
typedef struct qsweep_trained_name {
    char key[65];
    char digest[65];
    char *path; /* checkpoint_dir/<key> */
    char *name; /* STAGE/shape/recipe[/lr=X]/seed=N */
} qsweep_trained_name;

typedef struct qsweep_trained_names {
    qsweep_trained_name *v;
    size_t n;
} qsweep_trained_names;

/* The names of every train job of experiment `experiment` (none when it is not a pipeline).
 * The stage is the one `qsweep submit` stored with the job's link to the experiment
 * (experiment_jobs.stage); for a link stored without one (before that column), the training
 * stage of the experiment's stored grid (experiments.grid) whose shapes, recipes and seeds
 * hold the job's, else its first training stage. The lr is in the name when that stage of the
 * grid has more than one;
 * shape is the shape's name, or the file or folder name of an {init: path} model; lr its
 * shortest decimal that reads back as the same number (PostgreSQL's float8 text). Free with
 * qsweep_trained_names_free. Errors: QS_EDB, QS_ENOMEM. */
qs_status qsweep_trained_names_load(PGconn *c, const char *experiment, qsweep_trained_names *out,
                                    qs_error *err);
void qsweep_trained_names_free(qsweep_trained_names *t);

/* The name of the trained model whose training job has key `key`, or NULL. */
const char *qsweep_trained_name_by_key(const qsweep_trained_names *t, const char *key);

/* The trained model whose folder is path, or NULL. */
const qsweep_trained_name *qsweep_trained_model_by_path(const qsweep_trained_names *t,
                                                        const char *path);

/* The name of the trained model whose folder is path, or NULL. */
const char *qsweep_trained_name_by_path(const qsweep_trained_names *t, const char *path);

/* text with every trained model's folder, then every training job key left, replaced by the
 * model's name (malloc'd; free it). NULL only without memory. */
char *qsweep_trained_names_apply(const qsweep_trained_names *t, const char *text);

#endif
