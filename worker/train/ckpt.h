/* Training checkpoints: everything a run needs to continue bit-identically elsewhere, in one
 * file replaced atomically (common/replace_file.h), and what it has reported so far, so that a resumed
 * attempt can report it again.
 *
 * There is no RNG state to save: stochastic rounding and the RHT signs are counter-based
 * (Philox keyed by seed, tensor and step) and the data order is a function of (seed, epoch),
 * so (step, epoch, position) with the FP32 masters and AdamW moments is the whole state.
 *
 * The history (version 2): the wall seconds the earlier attempts spent up to this checkpoint,
 * and every curve point reported up to it. A worker sends curve points with its heartbeats, so
 * points reported just before a kill may never reach the coordinator; the resumed attempt
 * re-sends the history (the store keeps one value per (job, metric, step), the newest
 * attempt's), so the stored curve has every step once whatever was lost.
 *
 * File layout, little-endian:
 *   offset 0    8 bytes magic "QSWTRCK\0"
 *   offset 8    u32 version = 2, u32 step (optimizer steps done)
 *   offset 16   u64 data epoch, u64 data position, u64 tokens seen, u64 n_params
 *   offset 48   128 bytes identity (NUL-padded text: the job key, checked on load)
 *   offset 176  f32 params[n_params], f32 m[n_params], f32 v[n_params]
 *   then        f64 wall seconds before this attempt's end, u64 n_points, and n_points points
 *               of 32 bytes: name (16 bytes, NUL-padded), i64 step, f64 value
 *   end - 32    BLAKE2b-256 (libsodium crypto_generichash) of every byte before it */
#ifndef QW_TRAIN_CKPT_H
#define QW_TRAIN_CKPT_H

#include "error.h"
#include "trainer.h"

#include <stdint.h>

#define QW_CKPT_IDENTITY 128
#define QW_CKPT_METRIC_NAME 16

/* One reported curve point. */
typedef struct qw_curve_point {
    char name[QW_CKPT_METRIC_NAME]; /* "train_loss", ... (at most 15 bytes) */
    int64_t step;
    double value;
} qw_curve_point;

/* What a run has reported: the curve so far and the wall seconds spent, over all attempts.
 * points is heap-owned (qw_train_history_free); n of cap used. */
typedef struct qw_train_history {
    double wall_s;
    qw_curve_point *points;
    size_t n, cap;
} qw_train_history;

/* Appends a point. Errors: QS_EINVAL (name longer than 15 bytes), QS_ENOMEM. */
qs_status qw_train_history_add(qw_train_history *h, const char *name, int64_t step, double value,
                               qs_error *err);
void qw_train_history_free(qw_train_history *h);

/* Writes tr's state and history h (NULL: none) to path. identity: at most 127 bytes. Errors:
 * QS_EINVAL (identity too long), QS_EIO (path and errno text). */
qs_status qw_train_checkpoint_save(const char *path, const qw_trainer *tr, const char *identity,
                                   const qw_train_history *h, qs_error *err);

/* Restores tr (its model, moments, step, data position) and, when h is not NULL, the history
 * (h's old points are freed) from path. Errors: QS_ENOTFOUND (no such file), QS_EIO,
 * QS_EFORMAT naming the file and the offset/field (magic, version, size, identity, n_params,
 * n_points, a point's name, checksum), QS_ENOMEM. On error tr and h are unchanged. */
qs_status qw_train_checkpoint_load(const char *path, qw_trainer *tr, const char *identity,
                                   qw_train_history *h, qs_error *err);

#endif
