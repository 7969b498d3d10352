/* The experiments' numerics pins as the coordinator holds them (coordinator/server only): one
 * entry per experiment whose jobs it holds, with the path the experiment is pinned to
 * (experiment_numerics, schema/180_numerics_pin.sql). Each job points at its experiment's
 * entry, so pinning the experiment at its first dispatch pins every job of it at once
 * (scheduler.h qc_sched_on_path). */
#ifndef QC_SERVER_PINS_H
#define QC_SERVER_PINS_H

#include <stddef.h>
#include <stdint.h>

typedef struct qc_pin {
    int64_t experiment; /* experiments.id */
    char *path;         /* the pinned numerics path (owned); NULL: not pinned yet */
    /* unpinned by this process (qc_srv_pin_clear): a path the store held before is stale, so
       qc_srv_pin_get no longer takes one */
    int cleared;
} qc_pin;

/* Every entry, allocated one by one (a job keeps a pointer to its own). */
typedef struct qc_pin_table {
    qc_pin **all;
    size_t n, cap;
} qc_pin_table;

/* The entry of experiment (added when missing); stored (NULL: none) is the path the store
 * holds for it, taken when the entry has none yet (this process may have pinned it first, in a
 * batch not committed when the store was read). Aborts without memory. */
qc_pin *qc_srv_pin_get(qc_pin_table *t, int64_t experiment, const char *stored);

/* Pins p to path (a copy) when it has no path yet; returns whether it did. Aborts without
 * memory. */
int qc_srv_pin_set(qc_pin *p, const char *path);

/* The entry of experiment, NULL when the table has none. */
qc_pin *qc_srv_pin_find(const qc_pin_table *t, int64_t experiment);

/* Removes p's path (`qsweep unpin`): the experiment's next dispatched job pins it again.
 * Returns whether it had one. */
int qc_srv_pin_clear(qc_pin *p);

/* Frees every entry and the table. */
void qc_srv_pins_free(qc_pin_table *t);

#endif
