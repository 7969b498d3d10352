/* Synthetic models: named Llama shapes with seeded random weights, so that scale tests can
 * evaluate a 7B- or 70B-shaped model where no checkpoint can be downloaded.
 *
 * One table (qw_synthetic_shapes) holds the full config of every named shape, taken from the
 * published config.json of each model on the Hugging Face hub (meta-llama/Llama-2-7b-hf,
 * Meta-Llama-3-8B, Llama-3.1-8B, Llama-3.2-1B, SmolLM2-135M-Instruct, ...), plus tiny shapes for
 * tests and the training shapes of the bytes vocabulary (micro, tiny, mini, small). The CLI's grid probe asks it for a shape's facts
 * (blocks, vocabulary, context, parameters), and training from scratch takes its shapes from it
 * (worker/train/train_job.h): one list of named shapes.
 *
 * Weights: drawn as the family initialises a fresh model (transformers'
 * LlamaPreTrainedModel._init_weights: every nn.Linear and nn.Embedding ~ N(0, initializer_range),
 * initializer_range = 0.02 in every Llama 2/3 config.json; RMSNorm weights 1), held as BF16
 * masters (FP32 rounded to nearest even), the engine's weights directly (no file). Normals come
 * from Box-Muller over Philox4x32-10 (kernels/philox.h) keyed by (seed, tensor index, element
 * index), so the weights are the same for any thread count and machine. */
#ifndef QW_SYNTHETIC_H
#define QW_SYNTHETIC_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint.h"
#include "error.h"
#include "weights.h"

/* One named shape. */
typedef struct qw_synthetic_shape {
    const char *name;     /* "llama2-7b", ... (the name grids use after "synthetic:") */
    const char *source;   /* where the config comes from (Hugging Face repo) */
    qw_config cfg;        /* the full config */
    float init_std;       /* initializer_range */
} qw_synthetic_shape;

/* The table; *n receives its length. */
const qw_synthetic_shape *qw_synthetic_shapes(size_t *n);

/* The shape named `name`, or NULL. */
const qw_synthetic_shape *qw_synthetic_shape_by_name(const char *name);

/* Parses "NAME[:SEED]" or "synthetic:NAME[:SEED]" (SEED a decimal integer 0..2^63-1, 0 when
 * absent). Errors: QS_EINVAL quoting spec (unknown shape: the message lists the names; a seed
 * that is not a number). */
qs_status qw_synthetic_parse(const char *spec, const qw_synthetic_shape **shape, uint64_t *seed,
                             qs_error *err);

/* 1 when path names a synthetic model ("synthetic:" prefix). */
int qw_synthetic_is(const char *path);

/* The model digest of a synthetic model path: BLAKE2b-256 (libsodium crypto_generichash) of the
 * path's bytes, hex, as coordinator/grid computes it when it expands the grid. */
void qw_synthetic_digest(const char *path, char hex[65]);

/* Builds the weights of spec (qw_synthetic_parse) with `threads` threads: one owned allocation
 * of BF16 masters (tied shapes: one matrix for embeddings and lm_head) and FP32 norms.
 * Memory: 2 bytes per weight (llama2-7b: 13.5 GB). Errors: those of qw_synthetic_parse,
 * QS_ENOMEM naming the size. On error *out owns nothing. */
qs_status qw_synthetic_build(const char *spec, int threads, qw_weights *out, qs_error *err);

#endif
