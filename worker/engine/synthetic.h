/* Named Llama shapes with seeded random weights, for scale tests where no checkpoint can be
 * downloaded. One table holds each shape's full config from its published config.json on the
 * Hugging Face hub (meta-llama/Llama-2-7b-hf, ..., SmolLM2-135M-Instruct), tiny test shapes and
 * the bytes-vocabulary training shapes; the grid probe and training from scratch read it.
 * Weights as transformers' LlamaPreTrainedModel._init_weights draws them (N(0, 0.02), norms 1),
 * held as BF16 masters; Box-Muller over Philox4x32-10 keyed by (seed, tensor, element), so the
 * same on any machine and thread count. */
#ifndef QW_SYNTHETIC_H
#define QW_SYNTHETIC_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint.h"
#include "error.h"
#include "weights.h"

/* One named shape. */
typedef struct qw_synthetic_shape {
    const char *name;   /* "llama2-7b", ... (the name grids use after "synthetic:") */
    const char *source; /* where the config comes from (Hugging Face repo) */
    qw_config cfg;      /* the full config */
    float init_std;     /* initializer_range */
} qw_synthetic_shape;

/* The table; *n receives its length. */
const qw_synthetic_shape *qw_synthetic_shapes(size_t *n);

/* The shape named `name`, or NULL. */
const qw_synthetic_shape *qw_synthetic_shape_by_name(const char *name);

/* "[synthetic:]NAME[:SEED]" (SEED 0..2^63-1, 0 when absent). Errors: QS_EINVAL quoting spec
 * (an unknown shape lists the names). */
qs_status qw_synthetic_parse(const char *spec, const qw_synthetic_shape **shape, uint64_t *seed,
                             qs_error *err);

/* 1 when path names a synthetic model ("synthetic:" prefix). */
int qw_synthetic_is(const char *path);

/* BLAKE2b-256 hex of the path's bytes: the model digest coordinator/grid gives it. */
void qw_synthetic_digest(const char *path, char hex[65]);

/* The weights of spec on `threads` threads: one owned allocation of BF16 masters (2 bytes a
 * weight; tied shapes share one matrix) and FP32 norms. Errors: those of qw_synthetic_parse,
 * QS_ENOMEM naming the size; on error *out owns nothing. */
qs_status qw_synthetic_build(const char *spec, int threads, qw_weights *out, qs_error *err);

#endif
