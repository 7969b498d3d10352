/* Seeded data order over a token stream, with a train/validation split.
 *
 * The stream's first n_train = floor(n * (1 - val_fraction)) tokens are for training, the rest
 * for validation. Training windows are the non-overlapping runs of T+1 tokens starting at
 * w*T (inputs tokens[w*T .. w*T+T-1], targets shifted by one); every epoch visits them in a
 * Fisher-Yates permutation drawn from Philox keyed by (seed, epoch), so the order is a pure
 * function of (seed, epoch) and a run resumes from (epoch, position) alone. Validation windows
 * are the same runs over the validation part, in order. */
#ifndef QW_TRAIN_DATA_H
#define QW_TRAIN_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

typedef struct qw_data {
    const uint32_t *tokens; /* the stream, not owned */
    size_t n, n_train;
    int T;
    size_t n_windows, n_val_windows;
    uint64_t seed;
    uint64_t epoch;  /* current epoch */
    size_t pos;      /* next window of the epoch's order */
    uint32_t *order; /* [n_windows], the only allocation (made in qw_data_init) */
} qw_data;

/* Sets d up over tokens[n]. Errors: QS_EINVAL (T < 1, val_fraction outside [0, 1), fewer
 * than T+1 training tokens, or val_fraction > 0 with fewer than T+1 validation tokens: the
 * message gives the counts), QS_ENOMEM. */
qs_status qw_data_init(qw_data *d, const uint32_t *tokens, size_t n, double val_fraction, int T,
                       uint64_t seed, qs_error *err);

void qw_data_free(qw_data *d);

/* Fills in[B*T] and tg[B*T] with the next B training windows (row b*T + t), moving to the next
 * epoch (a fresh permutation) when one ends. */
void qw_data_next(qw_data *d, int B, uint32_t *in, uint32_t *tg);

/* Moves to (epoch, pos), as recorded in a checkpoint. Errors: QS_EINVAL (pos > n_windows). */
qs_status qw_data_seek(qw_data *d, uint64_t epoch, size_t pos, qs_error *err);

/* Validation batch `index`: windows index*B .. index*B+B-1 (wrapping around the validation
 * windows). Errors: QS_ESTATE when there are no validation windows. */
qs_status qw_data_val(const qw_data *d, size_t index, int B, uint32_t *in, uint32_t *tg,
                      qs_error *err);

#endif
