/* qc_srv_grow: the one way the coordinator's in-memory tables grow (coordinator/server only). */
#ifndef QC_SERVER_GROW_H
#define QC_SERVER_GROW_H

#include <stddef.h>

/* Grows the array p of *cap elements of elem bytes to hold need (doubling from 64); aborts
 * without memory (the queue cannot be kept consistent without it). */
void *qc_srv_grow(void *p, size_t *cap, size_t need, size_t elem);

#endif
