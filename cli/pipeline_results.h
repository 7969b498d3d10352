/* qsweep results for pipeline experiments (cli/pipeline_results.c): sensitivity sweeps of
 * models that a training stage made, each recipe side by side with its spread over seeds,
 * from the pipeline views (schema/130_pipeline_views.sql). */
#ifndef QSWEEP_PIPELINE_RESULTS_H
#define QSWEEP_PIPELINE_RESULTS_H

#include <stdio.h>

#include "error.h"
#include "store.h"

/* *is_pipeline = 1 when a baseline or eval job of experiment name has "trained_by" in its
 * spec's "model" object (a model a training job made), else 0. Errors: QS_EDB. */
qs_status qsweep_is_pipeline_experiment(qc_store *db, const char *name, int *is_pipeline,
                                        qs_error *err);

/* Prints experiment name's pipeline results. format 0: the training runs per recipe (final
 * validation loss, mean +- half the range over seeds), then one table per (shape, steps, lr,
 * format, options, quantize, mode): a row per part (components in model order, blocks in
 * block order) and per recipe its mean KL and relative perplexity increase over seeds, each
 * +- half its range, then the query behind it. 1 CSV, 2 JSON: the tables' rows, one per
 * (table, part, recipe) (shape, steps, lr, format, options, quantize, mode, part, recipe,
 * seeds, kl_mean, kl_min, kl_max, delta_ppl, delta_ppl_min, delta_ppl_max, rel_delta_ppl,
 * rel_delta_ppl_min, rel_delta_ppl_max, final_val_loss). Errors: QS_EDB, QS_EIO (JSON). */
qs_status qsweep_print_pipeline_results(qc_store *db, const char *name, int format, FILE *out,
                                        qs_error *err);

#endif
