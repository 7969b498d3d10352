/* Training checkpoints: everything a run needs to continue bit-identically elsewhere, in one
 * file replaced atomically (atomic_file.h).
 *
 * There is no RNG state to save: stochastic rounding and the RHT signs are counter-based
 * (Philox keyed by seed, tensor and step) and the data order is a function of (seed, epoch),
 * so (step, epoch, position) with the FP32 masters and AdamW moments is the whole state.
 *
 * File layout, little-endian:
 *   offset 0    8 bytes magic "QSWTRCK\0"
 *   offset 8    u32 version = 1, u32 step (optimizer steps done)
 *   offset 16   u64 data epoch, u64 data position, u64 tokens seen, u64 n_params
 *   offset 48   128 bytes identity (NUL-padded text: the job key, checked on load)
 *   offset 176  f32 params[n_params], f32 m[n_params], f32 v[n_params]
 *   end - 32    BLAKE2b-256 (libsodium crypto_generichash) of every byte before it */
#ifndef QW_TRAIN_CKPT_H
#define QW_TRAIN_CKPT_H

#include "error.h"
#include "trainer.h"

#define QW_CKPT_IDENTITY 128

/* Writes tr's state to path. identity: at most 127 bytes. Errors: QS_EINVAL (identity too
 * long), QS_EIO (path and errno text). */
qs_status qw_train_checkpoint_save(const char *path, const qw_trainer *tr, const char *identity,
                                   qs_error *err);

/* Restores tr (its model, moments, step, data position) from path. Errors: QS_ENOTFOUND (no
 * such file), QS_EIO, QS_EFORMAT naming the file and the offset/field (magic, version, size,
 * identity, n_params, checksum). On error tr is unchanged. */
qs_status qw_train_checkpoint_load(const char *path, qw_trainer *tr, const char *identity,
                                   qs_error *err);

#endif
