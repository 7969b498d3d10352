/* The conversion cache: FP32 copies of weight pieces (the QW_GEMM_COLS-row slices a linear
 * multiplies one at a time, ops.h) kept between forwards within a byte budget, least recently
 * used first out, so a weight stored as BF16, F16, GGUF blocks or packed FP4 is converted once
 * instead of on every forward pass.
 *
 * A piece is the output of qw_weight_rows_f32 for its rows, stored as it came: the GEMM reads
 * the same FP32 values with the same dimensions and leading dimension as from the per-thread
 * scratch, so results are bit for bit those without the cache (tests/engine test_convcache).
 *
 * Keys are what the piece's values are a function of: the weight's form, its data (the
 * checkpoint view's bytes, or the packed tensor and its codes), its shape and the piece's
 * first row and row count. A stored (checkpoint) piece stays valid while its model lives;
 * packed pieces are dropped (qw_convcache_drop_packed) whenever a policy replaces the packed
 * tensors, since a new packed tensor may reuse the old one's memory.
 *
 * Thread safety: get and release may be called from the threads of a parallel loop; one
 * mutex guards the table and the LRU list, and a piece in use (pinned by get until release)
 * is never evicted. */
#ifndef QW_CONVCACHE_H
#define QW_CONVCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "weights.h"

typedef struct qw_convcache qw_convcache;

/* Counters since creation. bytes: bytes of FP32 buffers held now, spare ones included;
 * spare: of them, buffers of dropped packed pieces kept for new pieces of their size; budget:
 * the most it may hold. */
typedef struct qw_convcache_stats {
    uint64_t hits;      /* get found the piece */
    uint64_t misses;    /* get converted the piece and kept it */
    uint64_t bypassed;  /* get converted nothing: no room even after evicting (caller converts) */
    uint64_t evictions; /* pieces dropped to make room (not counting drop_packed) */
    uint64_t dropped;   /* packed pieces dropped by qw_convcache_drop_packed */
    size_t entries, bytes, spare, budget;
} qw_convcache_stats;

/* A cache holding at most budget_bytes of FP32 pieces (0: a cache that keeps nothing, every
 * get bypassed). Errors: QS_ENOMEM. */
qs_status qw_convcache_create(size_t budget_bytes, qw_convcache **out, qs_error *err);

/* Frees every piece and the cache; NULL is a no-op. No piece may be pinned. */
void qw_convcache_destroy(qw_convcache *c);

/* FP32 rows [r0, r0+n) of w ([n x w->cols] row-major), pinned until qw_convcache_release:
 * the cached piece, or converted now (qw_weight_rows_f32) into a new piece that is kept.
 * NULL, and nothing pinned, when w is FP32 in place (no conversion to save), when the piece
 * is not cached and does not fit in the budget even after evicting every unpinned piece, or
 * when memory or the conversion fails: the caller then converts into its own scratch as
 * without a cache (and its qw_weight_rows_f32 reports a bad row range). A NULL c is a cache
 * that keeps nothing. */
const float *qw_convcache_get(qw_convcache *c, const qw_weight *w, int64_t r0, int64_t n);

/* FP32 rows [r0, r0+n) of w into dst [n x w->cols]: qw_weight_rows_f32's values, copied out of
 * the pieces of piece_rows rows (rows [p*piece_rows, (p+1)*piece_rows), the last one short:
 * QW_GEMM_COLS for the pieces the CPU linear multiplies) that the cache holds or takes, and
 * converted directly where a piece finds no room. For a caller that reads a whole master (a
 * policy quantizing it), so a master converted once serves its GEMMs and its quantization.
 * Serial. Errors: QS_EINVAL (rows outside the weight, piece_rows < 1). */
qs_status qw_convcache_rows_f32(qw_convcache *c, const qw_weight *w, int64_t r0, int64_t n,
                                int64_t piece_rows, float *dst, qs_error *err);

/* Unpins a piece qw_convcache_get returned. */
void qw_convcache_release(qw_convcache *c, const float *piece);

/* Drops every packed piece (none may be pinned): call it before packed tensors are released
 * or replaced. Their buffers stay allocated as spares, within the budget, and the next
 * pieces of the same sizes (the next policy's) are converted into them: a fresh buffer costs
 * a page fault per 4 KiB page on its first write, more than the conversion itself. Spares are
 * freed first when room is needed. NULL is a no-op. */
void qw_convcache_drop_packed(qw_convcache *c);

/* The counters and sizes now. */
void qw_convcache_get_stats(qw_convcache *c, qw_convcache_stats *out);

/* The default budget in bytes: $QSWEEP_CONVERT_CACHE_MB MiB when set (0 turns the cache
 * off), otherwise a quarter of the memory available now (sysconf _SC_AVPHYS_PAGES, the
 * kernel's free pages), so several workers of one machine, each with its own models, leave
 * room for each other and for the page cache. */
size_t qw_convcache_default_bytes(void);

#endif
