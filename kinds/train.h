/* The `train` job kind: one FP4 training run, from a named model shape (or
 * an initial checkpoint) and a token stream to a loss curve, final metrics and a trained
 * checkpoint. The grid kind `training` (coordinator/grid/grid_training.c) encodes it, the
 * worker (worker/train/train_kind.c) decodes it, so both sides read the same fields.
 *
 * Canonical JSON (spec.h for the shared parts), keys sorted:
 *   "kind": "train", "numerics_version",
 *   "shape": {"name": "tiny"}               a named shape (worker/train/train_job.h), or
 *   "model": {"digest", "path"}             an initial checkpoint (fine-tuning) instead,
 *   "dataset": {"ctx", "digest", "max_chunks": 0, "path"}   the token stream; ctx = tokens
 *                                           per training sequence,
 *   "tokenizer": "bytes" (dataset.path is UTF-8 text, vocabulary 258) | "file" (a token file),
 *   "val_fraction", "recipe": {"name", "version", "format", "w2d", "rht", "rht_dim", "sr",
 *   "bf16_first", "bf16_last"} (worker/train/recipe.h; the ingredients are explicit, so a renamed
 * recipe is the same job), "lr", "min_lr", "warmup", "decay" (cosine | linear | constant),
 *   "weight_decay", "clip", "beta1", "beta2", "steps", "batch", "accum", "seed",
 *   "eval_every", "eval_batches", "log_every", "checkpoint_every", "diverge_loss",
 *   "checkpoint_dir" (where checkpoints and the final model go: an absolute, canonical path,
 *   coordinator/grid/grid_training.c), "data_parallel" (only when > 1: the job's ranks, one
 *   model replica each, gradients all-reduced; a job without it is one rank, and its key is
 *   what it was before the key existed; resources.gpu_count, when given, must equal it),
 *   "resources" (optional).
 * The job key (spec.h) leaves out model.path, dataset.path and resources, and keeps
 * checkpoint_dir, by what a resume needs: a job's checkpoint is checkpoint_dir/<job_key>.ckpt
 * and its trained model checkpoint_dir/<job_key>/, so the folder is part of what the job
 * produces and where its resumes look. Were it left out, a grid naming another folder would
 * silently reuse the first grid's job, and its researcher would find no model (nor the
 * checkpoints to resume) in the folder the grid names; keyed, two folders are two jobs (the
 * same numbers, computed twice), and one folder however written is one job. */
#ifndef QS_KINDS_TRAIN_H
#define QS_KINDS_TRAIN_H

#include <jansson.h>
#include <stdbool.h>

#include "error.h"
#include "spec.h"

/* The recipe version grids write (the worker's QW_RECIPE_VERSION, worker/train/recipe.h, which
 * says what each version changed; tests/train checks they agree). Part of the job key. */
#define QS_TRAIN_RECIPE_VERSION 2

typedef struct qs_train_spec {
    char shape[32];    /* named shape; "" when init.path is set */
    qs_model_ref init; /* init.path NULL: from scratch */
    qs_dataset_ref dataset;
    char tokenizer[8]; /* "bytes" | "file" */
    double val_fraction;
    char recipe[32]; /* recipe name, for people and views */
    int recipe_version;
    char format[16]; /* "nvfp4" | "mxfp4" | "fp8_e4m3" | "none" */
    int w2d, rht, sr, bf16_first, bf16_last;
    int rht_dim; /* the RHT's tile: 16 or 32 */
    double lr, min_lr;
    int warmup;
    char decay[12];
    double weight_decay, clip, beta1, beta2;
    int steps, batch, accum;
    int data_parallel; /* ranks; 0 (absent) or 1: one */
    long seed;
    int eval_every, eval_batches, log_every, checkpoint_every;
    double diverge_loss;
    char *checkpoint_dir; /* owned */
    char numerics_version[16];
    qs_resources resources;
} qs_train_spec;

/* Range and consistency checks (steps >= 1, batch >= 1, 0 < lr, 0 <= min_lr <= lr, ...).
 * Errors: QS_EINVAL naming the field ("job spec: lr: expected a number > 0"). */
qs_status qs_train_validate(const qs_train_spec *s, qs_error *err);

/* The canonical spec object (validated first); *out a new reference. Errors: validation's,
 * QS_ENOMEM. */
qs_status qs_train_encode(const qs_train_spec *s, json_t **out, qs_error *err);

/* Reads and validates a spec object; unknown keys are refused. Errors: QS_EINVAL naming the
 * field, QS_ENOMEM. On error *out is cleared. */
qs_status qs_train_decode(const json_t *spec, qs_train_spec *out, qs_error *err);

void qs_train_clear(qs_train_spec *s);

#endif
