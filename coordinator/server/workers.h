/* The workers the coordinator knows (coordinator/server only): one per connection, found by
 * its ZeroMQ routing id, and the table that holds them sorted for binary search. */
#ifndef QC_SERVER_WORKERS_H
#define QC_SERVER_WORKERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "job.h"
#include "scheduler.h"

enum { RID_MAX = 255, NAME_MAX_ = 200, MODELS_MAX = 8, KEY_MAX = 127 };
/* A CURVE key in Z85 (40 characters). */
enum { CURVE_Z85 = 40 };
/* Job kinds a worker's HELLO may advertise, and the longest name kept. */
enum { KINDS_MAX = 64, KIND_MAX = 63 };
/* The longest numerics path a HELLO may announce (a longer one is not kept: not announced). */
enum { NUMERICS_PATH_MAX = 160 };

struct worker {
    char rid[RID_MAX]; /* ZeroMQ routing id (the DEALER's ZMQ_ROUTING_ID) */
    size_t rid_len;
    char name[NAME_MAX_ + 1]; /* HELLO worker_id */
    char key[CURVE_Z85 + 1];  /* the connection's CURVE key (User-Id), "" without CURVE */
    int n_gpus;
    qc_sched_gpu gpus[QC_SCHED_GPUS_MAX]; /* HELLO's GPUs, the first n_gpus */
    char models[MODELS_MAX][KEY_MAX + 1];
    int n_models;
    char kinds[KINDS_MAX][KIND_MAX + 1]; /* HELLO kinds; n_kinds 0: not advertised (any) */
    int n_kinds;
    char numerics_path[NUMERICS_PATH_MAX + 1]; /* HELLO numerics_path; "": not announced */
    bool ready;
    job *job;
    int64_t last_seen;
    int64_t next_alive; /* monotonic ms: when workers.last_seen is refreshed next */
};

/* The registered workers, sorted by routing id. */
typedef struct qc_worker_table {
    worker **all;
    size_t n, cap;
} qc_worker_table;

/* The worker with this routing id, or NULL (binary search). */
worker *qc_srv_find_worker(const qc_worker_table *t, const char *rid, size_t len);

/* Adds a worker with routing id rid (rid_len <= RID_MAX bytes, not yet registered), keeping
 * the table sorted; its other fields are zero. Aborts without memory. */
worker *qc_srv_worker_add(qc_worker_table *t, const char *rid, size_t rid_len);

/* Removes w from the table and frees it; its job, if any, forgets it and keeps its lease
 * (which decides). Writes nothing. */
void qc_srv_drop_worker(qc_worker_table *t, worker *w);

/* The registered worker named name on a connection other than except (NULL: any), or NULL. */
worker *qc_srv_find_worker_named(const qc_worker_table *t, const char *name, const worker *except);

/* Frees every worker and the table. */
void qc_srv_workers_free(qc_worker_table *t);

#endif
