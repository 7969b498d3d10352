/* What the training tests that compare one run against another share: a token stream and a
 * short AdamW run's configuration, so every comparison trains on the same inputs. */
#ifndef QW_TEST_TRAIN_FIXTURE_H
#define QW_TEST_TRAIN_FIXTURE_H

#include <stdint.h>
#include <stdlib.h>

#include "trainer.h"

/* n token ids below vocab from a fixed xorshift64 stream (malloc'd; NULL when out of memory). */
static inline uint32_t *fixture_tokens(size_t n, uint32_t vocab) {
    uint32_t *t = malloc(n * sizeof *t);
    if (!t) return NULL;
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        t[i] = (uint32_t)(x % vocab);
    }
    return t;
}

/* steps optimizer steps of accum micro-batches: lr 3e-3 cosine to 3e-4 after 1 warm-up step,
 * AdamW (0.9, 0.95, 1e-8, weight decay 0.1), clipping at 1, divergence at loss 20. */
static inline qw_train_config fixture_train_config(int steps, int accum) {
    qw_train_config t = {0};
    t.steps = steps;
    t.accum = accum;
    t.sched = (qw_lr_schedule){3e-3f, 3e-4f, 1, steps, QW_DECAY_COSINE};
    t.adamw = (qw_adamw){0.9f, 0.95f, 1e-8f, 0.1f};
    t.clip = 1.0f;
    t.diverge_loss = 20.0;
    return t;
}

#endif
