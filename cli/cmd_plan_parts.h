/* The parts of `qsweep plan` (cmd_plan.c) that its files share: what the sweep measured
 * (cmd_plan_costs.c), what was measured of a plan whole (cmd_plan_measured.c), and the plan
 * written as a grid that measures it (cmd_plan_grid.c). */
#ifndef QSWEEP_CMD_PLAN_PARTS_H
#define QSWEEP_CMD_PLAN_PARTS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>
#include <libpq-fe.h>

#include "cli.h"
#include "checkpoint.h"
#include "plan.h"

/* The seven block linears in forward order, by kind index 0..6. */
extern const char *const qsweep_plan_kinds[7];

/* The fused groups a serving engine keeps in one format (one GEMM): q/k/v, o, gate/up, down.
 * Each entry lists kind indexes, terminated by -1. */
extern const int qsweep_plan_groups[4][4];
extern const char *const qsweep_plan_group_names[4];

/* The command line. */
typedef struct qsweep_plan_opts {
    const char *experiment, *objective, *quantize, *model, *formats;
    const char *methods; /* --methods: the methods whose costs are candidates (NULL: all) */
    double budget;
    int uniform_groups;
    int validate; /* --validate: submit the plan's grid (one policy-mode eval job) */
    const char *output;
    const char *numerics; /* --numerics: the path whose results the plan reads (NULL: pick) */
} qsweep_plan_opts;

/* The measured costs, by (block, kind, candidate): block -1 for component mode. A candidate f
 * is a format (formats[f]) quantized by a method, named by its setting label (methods[f], "rtn"
 * when the job named none; "mr-gptq+search" for mr-gptq with scale_search; "gptq+damp=0.1" where
 * the sweep measured another damp too: kinds/method_label.h qs_method_setting_label). */
typedef struct qsweep_plan_input {
    char *model_path;
    qw_config cfg;     /* the swept model's shape */
    size_t n_negative; /* measured costs below 0, counted as 0 */
    char quantize[64]; /* the sweep setting the costs are for: weights, weights+activations */
    int layer_mode;    /* 1 layer, 0 component */
    int n_layers;
    size_t n_formats;
    char formats[QSWEEP_PLAN_MAX_FORMATS][32];
    char methods[QSWEEP_PLAN_MAX_FORMATS][64];
    int any_method; /* a candidate's method is not rtn */
    double *cost; /* [n_layers or 1][7][n_formats], NAN when not measured */
    char model_digest[65]; /* the swept spec's (a trained model's stand-in, docs/pipelines.md) */
    char file_digest[65];  /* the model file's as the plan found it: the plan grid names it */
    json_t *dataset; /* the sweep's "dataset" spec object (path, digest, ctx, max_chunks) */
    json_t *metrics; /* the sweep's "metrics" array */
    json_t *options; /* {format: its format_options in the sweep} */
    json_t *method_options; /* {setting label: its method_options in the sweep, null without} */
    json_t *calibration;    /* the sweep's "calibration" spec object, NULL when none */
    char numerics[130];     /* the sweep's grid `numerics` (kinds/spec.h), "" when none */
    /* the numerics path every cost and measurement is read from (qsweep_plan_pick_path, in the
       vocabulary of pins): a job's is v_numerics_path's worker_path, else its path; "" when
       the experiment has no result naming one, and then every job is read */
    char path[160];
} qsweep_plan_input;

/* Sets in->path, the one numerics path the plan reads: --numerics (o->numerics, one the
 * experiment has results on), else the only path its results ran on, else, when they ran on
 * several, the path the experiment is pinned to (experiment_numerics), saying so on stderr.
 * Errors: QS_EINVAL naming the paths with their job counts and --numerics, when they ran on
 * several and the experiment is not pinned to one of them, or --numerics names none of them;
 * QS_EDB. */
qs_status qsweep_plan_pick_path(PGconn *c, const qsweep_plan_opts *o, qsweep_plan_input *in,
                                qs_error *err);

/* The cost slot of (block, kind, format f); block -1 in component mode. */
double *qsweep_plan_cost_at(qsweep_plan_input *in, int block, int kind, size_t f);

/* Weights of linear kind k (HF shapes, worker/engine/policy.h). */
uint64_t qsweep_plan_kind_weights(const qw_config *c, int k);

/* Reads the sweep's costs into *in, and the method options of each setting label. Errors:
 * QS_ENOTFOUND (no layer/component results), QS_EINVAL (several models or quantize settings and
 * no choice, an unknown format, a part that is not a linear, two settings of one label among
 * the candidates: the message names their setting labels), QS_EDB, QS_ENOMEM; checkpoint errors
 * for the model. */
qs_status qsweep_plan_load_costs(PGconn *c, const qsweep_plan_opts *o, qsweep_plan_input *in,
                                 qs_error *err);

/* The sweep's dataset, metrics, numerics and each format's options, from the stored specs of the
 * jobs the costs came from, so a validation grid measures the plan under the same conditions.
 * Errors: QS_EDB, QS_ENOMEM. */
qs_status qsweep_plan_load_sweep_facts(PGconn *c, const qsweep_plan_opts *o, qsweep_plan_input *in,
                                       qs_error *err);

/* Releases what the loaders allocated in *in. */
void qsweep_plan_input_free(qsweep_plan_input *in);

/* The plan's choices: item i takes format choice[i]. */
typedef struct qsweep_plan_choice {
    const qsweep_plan_opts *o;
    const qsweep_plan_input *in;
    const qsweep_plan_item *items;
    const int *choice;
    size_t n;
} qsweep_plan_choice;

/* The candidate of linear (b, k) under a qsweep_plan_choice. */
size_t qsweep_plan_chosen(const qsweep_plan_choice *pc, int b, int k);

/* The format of linear (b, k) under a qsweep_plan_choice (ctx), or under one format for all (ctx
 * the format's name): the fmt_of of qsweep_plan_map. */
const char *qsweep_plan_chosen_format(const void *ctx, int b, int k);
const char *qsweep_plan_uniform_format(const void *ctx, int b, int k);

/* The (quantized) map of a plan: linear -> format for each linear not in bf16, as the grid
 * puts it in the spec of its policy job (kinds/sensitivity.h). fmt_of(b, k) gives the format
 * of linear k of block b. */
json_t *qsweep_plan_map(const qsweep_plan_input *in, const char *(*fmt_of)(const void *, int, int),
                        const void *ctx);

/* The options of the plan's method "per-linear" (kinds/method.h): "linears" names the method of
 * each quantized linear not by rtn, the GPTQ and SmoothQuant options are the sweep's. *out NULL
 * when every quantized linear is rtn (the plan names no method). Errors: QS_EINVAL (two methods
 * of the plan with different options of one name), QS_ENOMEM. */
qs_status qsweep_plan_method_options(const qsweep_plan_choice *pc, json_t **out, qs_error *err);

/* The final value (kl_mean) or delta (ppl) of the objective for the eval job of this model,
 * dataset and quantize with mode, part, format and format_options, by method (NULL or "rtn":
 * none) with method_options (NULL: none), in any experiment (a job is one computation whoever
 * queued it); NAN when there is none. */
double qsweep_plan_measured(PGconn *c, const qsweep_plan_opts *o, const qsweep_plan_input *in,
                            const char *mode, const char *part, const char *format,
                            const json_t *options, const char *method,
                            const json_t *method_options);

/* The measured damage of a policy map (its policy job) by method, NAN when not measured; id
 * gets the policy id ("" when the map is empty). */
double qsweep_plan_measured_map(PGconn *c, const qsweep_plan_opts *o, const qsweep_plan_input *in,
                                const json_t *map, const char *method, const json_t *method_options,
                                char id[17]);

/* Writes the plan as a grid that measures it (`qsweep submit`/`run`, or --validate): the
 * sweep's model, dataset, metrics and format options, and the sensitivity mode `policy`
 * with an explicit format per linear (all of them, fused groups expanded; bf16 ones are left
 * as they are), with comments on where it came from. method_options (NULL: every linear by
 * rtn) makes it a grid of method per-linear with the sweep's calibration. */
void qsweep_plan_write_grid(FILE *out, const qsweep_plan_choice *pc, const json_t *method_options,
                            double cost, double bits);

/* --validate: the plan's grid (qsweep_plan_write_grid) loaded as `qsweep submit` loads a grid,
 * then submitted into the sweep's database. Written to a private temporary file unless -o named
 * one. Errors: the grid's (a plan whose grid does not load is a bug: the message names the
 * file), the store's, QS_EIO. */
qs_status qsweep_plan_validate(qc_store *s, const qsweep_plan_choice *pc,
                               const json_t *method_options, double cost, double bits,
                               qs_error *err);

#endif
