/* FP32 copies of weight pieces (the QW_GEMM_COLS-row slices a linear multiplies, ops.h) kept
 * between forwards within a byte budget, LRU, so BF16, F16, GGUF or packed weights are
 * converted once. A piece holds qw_weight_rows_f32's values and the GEMM reads it with the same
 * dimensions, so results are the same bits (tests/engine test_convcache). A piece is held as
 * rows or as the fixed GEMM's packed panels (qw_convcache_get_panels). Keys: layout, form, data,
 * version (qk_packed.version, qw_weight.version), shape, first row, rows: a tensor replaced at
 * the same address under a new version misses. Packed pieces are dropped when a policy
 * replaces the packed tensors (their memory may be reused). get and release are thread-safe; a
 * pinned piece is never evicted. */
#ifndef QW_CONVCACHE_H
#define QW_CONVCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "weights.h"

typedef struct qw_convcache qw_convcache;

/* Counters since creation; bytes held now (spares included), spare (buffers of dropped packed
 * pieces kept for reuse), budget. */
typedef struct qw_convcache_stats {
    uint64_t hits;      /* get found the piece */
    uint64_t misses;    /* get converted the piece and kept it */
    uint64_t bypassed;  /* get converted nothing: no room even after evicting (caller converts) */
    uint64_t evictions; /* pieces dropped to make room (not counting drop_packed) */
    uint64_t dropped;   /* packed pieces dropped by qw_convcache_drop_packed */
    size_t entries, bytes, spare, budget;
} qw_convcache_stats;

/* A cache of at most budget_bytes (0: keeps nothing). Errors: QS_ENOMEM. */
qs_status qw_convcache_create(size_t budget_bytes, qw_convcache **out, qs_error *err);

/* Frees every piece and the cache; NULL is a no-op. No piece may be pinned. */
void qw_convcache_destroy(qw_convcache *c);

/* FP32 rows [r0, r0+n) of w [n x cols], pinned until qw_convcache_release: cached, or
 * converted now and kept. NULL (nothing pinned) for FP32 in place, no room, or a failure: the
 * caller converts into its own scratch. c NULL keeps nothing. */
const float *qw_convcache_get(qw_convcache *c, const qw_weight *w, int64_t r0, int64_t n);

/* The same rows as op(B) of qw_gemm_fixed_packed: qw_gemm_fixed_pack_b(1, n, cols, rows, cols),
 * pinned until qw_convcache_release, so that the fixed GEMM reads a weight's panels packed once
 * for every forward instead of packing them per call; converted through scratch [n x cols]
 * (the caller's) on a miss. NULL as qw_convcache_get, or for scratch NULL. */
const float *qw_convcache_get_panels(qw_convcache *c, const qw_weight *w, int64_t r0, int64_t n,
                                     float *scratch);

/* dst [n x cols] = FP32 rows [r0, r0+n) of w through pieces of piece_rows rows, kept where
 * they fit (a policy reading a whole master reuses its GEMMs' pieces, panels or rows). Serial.
 * Errors: QS_EINVAL (rows outside the weight, piece_rows < 1). */
qs_status qw_convcache_rows_f32(qw_convcache *c, const qw_weight *w, int64_t r0, int64_t n,
                                int64_t piece_rows, float *dst, qs_error *err);

/* Unpins a piece qw_convcache_get returned. */
void qw_convcache_release(qw_convcache *c, const float *piece);

/* Drops every packed piece (none pinned) before packed tensors are released or replaced; their
 * buffers stay as spares for the next policy's pieces (a fresh page costs more than the
 * conversion). NULL is a no-op. */
void qw_convcache_drop_packed(qw_convcache *c);

/* The counters and sizes now. */
void qw_convcache_get_stats(qw_convcache *c, qw_convcache_stats *out);

/* $QSWEEP_CONVERT_CACHE_MB MiB when set (0 = off), else a quarter of the free memory now, so
 * the workers of one machine leave room for each other. */
size_t qw_convcache_default_bytes(void);

#endif
