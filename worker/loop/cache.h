/* The models kept across jobs, as the loop reads them (internal to worker/loop). */
#ifndef QW_LOOP_CACHE_H
#define QW_LOOP_CACHE_H

#include "worker_state.h"

/* Model keys held, for HELLO/READY: pointers into the cache (keys change only on the compute
 * thread, under the mutex, which the caller holds while packing). Returns the count. */
size_t qw_loop_cache_keys(worker *w, char **keys);

/* Drops every cache entry (calling its free_fn). */
void qw_loop_cache_clear(worker *w);

#endif
