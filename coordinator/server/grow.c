/* Growing the coordinator's tables (grow.h). */
#include <stdlib.h>

#include "grow.h"
#include "log.h"

void *qc_srv_grow(void *p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return p;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(p, c * elem);
    if (!q) {
        qc_log("out of memory growing a table to %zu entries", need);
        abort(); /* the in-memory queue cannot be kept consistent without memory */
    }
    *cap = c;
    return q;
}
