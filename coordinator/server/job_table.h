/* The coordinator's jobs in memory (coordinator/server only): every job it holds, sorted by
 * id, and the pending list the scheduler picks from. A table of its own, so the files above it
 * look jobs up and queue them through these functions instead of through the server. */
#ifndef QC_SERVER_JOB_TABLE_H
#define QC_SERVER_JOB_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "job.h"

typedef struct qc_job_table {
    job **all; /* sorted by id */
    size_t n, cap;
    size_t active;          /* jobs not terminal */
    int64_t last_id;        /* the highest id loaded from the store */
    qc_sched_job **pending; /* dispatch candidates (each the q of a job); entries may have left
                               PENDING (compacted lazily) */
    size_t n_pending, cap_pending;
    bool pending_sorted;
    int64_t next_wake; /* earliest backoff end among pending jobs */
} qc_job_table;

/* The job with this id, or NULL (binary search). */
job *qc_srv_find_job(const qc_job_table *t, int64_t id);

/* Appends j, whose id is above every id held, as an active job. Aborts without memory. */
void qc_srv_jobs_append(qc_job_table *t, job *j);

/* Adds j to the dispatch candidates (lazily deduplicated). Aborts without memory. */
void qc_srv_pending_push(qc_job_table *t, job *j);

/* Sorts the pending list for the scheduler (qc_sched_compare) when anything was pushed since
 * the last sort, dropping entries that left PENDING and repeats of one job. */
void qc_srv_pending_sort(qc_job_table *t);

/* The recorded model digest to send with the ASSIGN of j (proto: Assign.model_digest): for a
 * job with trained_by, its training job's, from that job's final RESULT in this process (a
 * dependency of j) or else from the store at load; NULL for any other job or while none is
 * known. */
const char *qc_srv_trained_digest(const qc_job_table *t, const job *j);

/* Frees every job and the table's arrays. */
void qc_srv_jobs_free(qc_job_table *t);

#endif
