/* Read-only queries of the qsweep command (status, workers, cancel): what the CLI shows, read
 * through the store rather than with SQL of its own on the store's
 * connection. Each is one statement; none writes anything. Errors: QS_EDB with the server's
 * message (and a lost connection noted, as every qc_store call), QS_ENOMEM. */
#ifndef QC_STORE_QUERIES_H
#define QC_STORE_QUERIES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"

/* The pace of an experiment's attempts, for an ETA. */
typedef struct qc_pace {
    double mean_attempt_s; /* mean wall time of its succeeded attempts, s; -1 when none yet */
    int64_t running_live;  /* its attempts running now on a live worker: an unexpired lease, or
                              a worker seen within QC_WORKER_SILENT_S that has not left */
    int64_t workers_live;  /* workers seen within QC_WORKER_SILENT_S that have not left, of any
                              experiment (busy elsewhere or idle) */
} qc_pace;

/* Pace of experiment experiment_id (qc_progress.experiment_id). */
qs_status qc_store_pace(qc_store *s, int64_t experiment_id, qc_pace *out, qs_error *err);

/* One worker the coordinator has seen (table workers, schema 001 and 009). */
typedef struct qc_worker_row {
    char id[256], host[256];
    int32_t pid, threads;
    char gpus[2048];    /* JSON array text, "[]" for none (16 GPUs of ~90 bytes fit) */
    int64_t seen_s_ago; /* seconds since its last message, rounded */
    char running[512];  /* ids of the jobs it runs now, comma-separated, "-" for none */
    char state[16];     /* "connected" (seen within QC_WORKER_SILENT_S), "silent", "lost" (not
                           seen for QC_WORKER_LOST_S, no BYE), "left" (BYE or timed out) */
    char numerics_path[192]; /* the path its HELLO announced, "" for none (schema/180) */
    char backend_note[384];  /* why its --backend auto runs on the CPU, "" for no fallback */
} qc_worker_row;

/* A worker not seen for this long is shown "silent" (s): a hang, killed (SIGKILL), or its
 * coordinator down. The coordinator refreshes last_seen every 5 s while a worker sends
 * anything (coordinator/server/state.h QC_SRV_ALIVE_MS): 20 s is four refreshes missed. */
#define QC_WORKER_SILENT_S 20
/* Not seen for this long, and it never said BYE nor was timed out by a coordinator, a worker
 * is "lost" (s): killed with SIGKILL, its machine gone, or the coordinator restarted without
 * it. Its attempts are not waited for: their leases ended them long before. */
#define QC_WORKER_LOST_S 300

/* Every worker, those still there first, most recently seen first. *rows is malloc'ed (free
 * it); longer texts are cut to the field. */
qs_status qc_store_workers(qc_store *s, qc_worker_row **rows, size_t *n, qs_error *err);

/* Pending jobs that ask for GPUs (jobs.resources gpus > 0, gpu_mem_mb > 0 or native_fp4),
 * grouped by experiment and need, so `qsweep status` can name those no registered worker can
 * ever take. */
typedef struct qc_need_row {
    char experiment[256];
    int32_t gpus;
    int64_t gpu_mem_mb;
    bool native_fp4;
    int64_t n_jobs;
} qc_need_row;

/* Pending jobs by experiment and the numerics path they may run on (schema/180_numerics_pin.sql):
 * the path the experiment is pinned to and the one its jobs' specs ask for, so `qsweep status`
 * can name the jobs that wait for a worker on a path none offers. Experiments whose jobs ask
 * for "any" path are left out. */
typedef struct qc_path_need_row {
    char experiment[256];
    char pinned[192];    /* the pin its jobs follow (experiment_numerics.path of their oldest
                            experiment, as the scheduler reads it), "" when none */
    char pinned_by[256]; /* that oldest experiment's name when it is another, else "" */
    char want[192];   /* the jobs' spec "numerics", "" when none */
    int64_t n_jobs;
} qc_path_need_row;

/* The pending jobs' numerics paths of experiment (NULL: of every experiment), by experiment
 * name. *rows is malloc'ed (free it). */
qs_status qc_store_pending_paths(qc_store *s, const char *experiment, qc_path_need_row **rows,
                                 size_t *n, qs_error *err);

/* The pending GPU needs of experiment (NULL: of every experiment), by experiment name, then
 * need. *rows is malloc'ed (free it). */
qs_status qc_store_pending_needs(qc_store *s, const char *experiment, qc_need_row **rows, size_t *n,
                                 qs_error *err);

/* State of the job job_key ("pending", "running", "succeeded", "failed", "cancelled") into
 * state (cap bytes). QS_ENOTFOUND naming the key when no job has it. */
qs_status qc_store_job_state(qc_store *s, const char *job_key, char *state, size_t cap,
                             qs_error *err);

#endif
