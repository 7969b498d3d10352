/* RESULT envelopes from metrics (internal to worker/loop): packing, and slicing a final
 * RESULT into chunks that fit a frame. */
#ifndef QW_LOOP_PACK_H
#define QW_LOOP_PACK_H

#include "worker_state.h"

/* Packs n metrics v into a RESULT envelope in *buf (malloc'd); chunk/chunks as in
 * qsweep.proto (0, 0: not split). */
qs_status qw_loop_pack_result(const worker *w, int64_t job, uint32_t attempt, const metric_rec *v,
                              size_t n, bool final, uint64_t seq, uint32_t chunk, uint32_t chunks,
                              uint8_t **buf, size_t *len);

/* Splits v[0..n) into consecutive slices of at most QS_PROTO_CHUNK_BYTES on the wire (less
 * room for the RESULT's own fields): starts[k] is where slice k begins, *n_slices their
 * count (at least 1); *total the metrics' wire bytes. starts is malloc'd. */
qs_status qw_loop_slice_metrics(const metric_rec *v, size_t n, size_t **starts, uint32_t *n_slices,
                                size_t *total);

#endif
