/* The model-and-tokens fixture of the engine tests: a model (a checkpoint or a synthetic one)
 * and, in a fresh temporary directory, a token file of deterministic ids that it has loaded,
 * beside the path a baseline file of the test goes to. */
#ifndef QW_TEST_MODEL_FIXTURE_H
#define QW_TEST_MODEL_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint.h"
#include "model.h"
#include "tokens.h"

/* Deterministic token ids [n] in [0, vocab): xorshift32 (13, 17, 5) from seed (0 counts as 1),
 * so a test needs no data file. */
void fill_tokens(uint32_t *ids, size_t n, uint32_t vocab, uint32_t seed);

typedef struct model_fixture {
    char dir[512];           /* the temporary directory ("" once closed) */
    char tokens_path[600];   /* dir/text.tokens */
    char baseline_path[600]; /* dir/baseline.blp, not written here */
    qw_checkpoint *ck;       /* NULL for a synthetic model */
    qw_model *m;
    qw_tokens toks; /* text.tokens as loaded: n_tokens ids of the model's vocabulary */
} model_fixture;

/* Opens `model`, a checkpoint path or a "synthetic:SHAPE[:SEED]" spec (model.h), with max_ctx
 * positions and `threads` threads (0: the default); writes n_tokens ids of fill_tokens(seed)
 * in the model's vocabulary to tokens_path and loads them. Returns 0, or -1 with a message on
 * stderr naming the model or file; either way model_fixture_close frees what was opened. */
int model_fixture_open(model_fixture *f, const char *model, int max_ctx, int threads,
                       size_t n_tokens, uint32_t seed);

/* Frees the model, checkpoint and tokens of f and removes its directory; f is zeroed, so a
 * second close does nothing. */
void model_fixture_close(model_fixture *f);

#endif
