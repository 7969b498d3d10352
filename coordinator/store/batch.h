/* The layout of the coordinator's write queue (internal to qc_store): the array columns of
 * each kind of transition and the binary COPY rows of results, filled by batch.c and written
 * by flush.c. */
#ifndef QC_STORE_BATCH_H
#define QC_STORE_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "sqltext.h"
#include "store.h"

/* One qc_store_batch_results call: its rows are bytes [off, off + len) of the results
 * buffer. */
typedef struct result_set {
    int64_t job;
    int32_t attempt;
    size_t off, len;
    size_t n_final, n_partial;
} result_set;

/* The columns of one kind of transition; `n` columns of `col`. */
#define MAX_COLS 8
typedef struct column_group {
    qc_sqlarray col[MAX_COLS];
    int n;
} column_group;

struct qc_store_batch {
    column_group started; /* job, attempt, worker, lease_s, token_hash (hex) */
    column_group renewed; /* job, attempt, lease_s */
    column_group ended;   /* job, attempt, outcome, error, cause */
    column_group states;  /* job, state, attempts_used, backoff_s, last_error */
    column_group workers; /* id, host, pid, gpus, threads, curve_key, numerics_path, note */
    column_group alive;   /* id, left */
    column_group pins;    /* experiment, numerics path (NULL: unpin) (experiment_numerics) */
    column_group answers; /* unpin request, outcome, message (numerics_unpin_requests) */
    size_t n_unpins;      /* NULL paths in pins */
    qc_sbuf results;      /* COPY binary rows: job, attempt, name, value, step, final */
    size_t n_final, n_partial;
    result_set *sets; /* one per qc_store_batch_results call, in call order */
    size_t n_sets, cap_sets;
    int64_t cancels_upto;     /* 0: none */
};

#endif
