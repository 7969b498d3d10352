/* One short data-parallel training run on the CPU, as the tests that compare one run against
 * another make it (train_fixture.h's tokens and configuration): the replicas, the recipe, rank
 * 0's random initialisation, the data, the group, the trainer, the steps, the final weights. */
#ifndef QW_TEST_TRAIN_RUN_H
#define QW_TEST_TRAIN_RUN_H

#include <stddef.h>
#include <stdint.h>

#include "ops.h"
#include "tmodel.h"

typedef struct fixture_run {
    const char *recipe;
    qw_config cfg;
    int B, T, steps, accum;
    int threads, ranks; /* ranks <= 2 */
    uint64_t seed;      /* the recipe's */
    const uint32_t *stream;
    size_t ntok;
    /* ops: NULL, the CPU backend qw_tmodel_create makes; else one CPU backend whose table is
     * ops (ranks 1) */
    const qw_ops *ops;
    int single; /* qw_trainer_create instead of qw_trainer_create_dp (ranks 1) */
    /* called on each replica after its recipe (NULL: none) */
    void (*setup)(qw_tmodel *m, void *ctx);
    /* called before and after each step with its 1-based number (NULL: none) */
    void (*before_step)(int step, void *ctx);
    void (*after_step)(int step, void *ctx);
    void *ctx;
} fixture_run;

/* What a run gave. */
typedef struct fixture_outcome {
    double loss[16];    /* each step's training loss (steps <= 16) */
    size_t cache_bytes; /* rank 0's weight cache (qw_tmodel_weight_cache_bytes) */
    size_t tokens_seen;
} fixture_outcome;

/* Runs r, rank 0's final parameters into p [qw_tmodel_n_params]; with two ranks, fails unless
 * the replicas end equal. Any error fails the test with its message. */
void fixture_train(const fixture_run *r, float *p, fixture_outcome *out);

#endif
