/* The running attempts by worker name (coordinator/server only): every job whose current
 * attempt names a worker (j->worker_name: assigned by this process, or loaded running after a
 * restart), sorted by (worker_name, id), so a HELLO finds the attempts of its worker id by
 * binary search instead of walking every job the coordinator holds. */
#ifndef QC_SERVER_RUNNING_H
#define QC_SERVER_RUNNING_H

#include <stddef.h>

#include "job.h"

typedef struct qc_running {
    job **all; /* sorted by (worker_name, id) */
    size_t n, cap;
} qc_running;

/* Adds j, whose attempt has just been given j->worker_name (NULL: nothing to add); an entry
 * already there stays one. Aborts without memory. */
void qc_srv_running_add(qc_running *r, job *j);

/* Removes j while j->worker_name still names its worker (before it is cleared or replaced);
 * a job not there is left alone. */
void qc_srv_running_remove(qc_running *r, job *j);

/* The jobs whose attempt names worker `name`, by increasing id: their count, and *first
 * pointing at the first of them in r (valid until the next add or remove, so a caller that
 * ends attempts copies them first; NULL when the count is 0). */
size_t qc_srv_running_of(const qc_running *r, const char *name, job *const **first);

/* Frees the index (not the jobs). */
void qc_srv_running_free(qc_running *r);

#endif
