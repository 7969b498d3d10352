/* qc_sched: which pending job a ready worker gets, as a pure function of the queue, the
 * worker and its resources (issue 10 item 5): no sockets, no clocks, no database, so the
 * rule of server.h is unit-tested on its own (tests/coordinator/test_scheduler.c).
 *
 * The rule: among pending jobs whose backoff is over and whose dependencies are met, only
 * those that fit the worker's resources (gpus <= its GPU count; gpu_mem_mb <= its smallest
 * GPU's memory, and a job asking for GPU memory needs a GPU); among them the first whose
 * model the worker holds, else the first, in queue order: higher priority first, then older
 * (smaller id). */
#ifndef QC_SCHEDULER_H
#define QC_SCHEDULER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What the scheduler knows of a job. The server embeds one in each of its jobs. */
typedef struct qc_sched_job {
    int64_t id;            /* jobs.id: the age order */
    int priority;          /* higher runs first */
    int gpus;              /* GPUs it needs (jobs.resources) */
    int64_t gpu_mem_mb;    /* GPU memory it needs on each, MiB; 0: any */
    const char *model_key; /* its model's affinity key, "" for none */
    int64_t not_before_ms; /* backoff end, ms on the caller's (monotonic) clock */
    bool pending;          /* waiting for a worker; other entries are skipped */
} qc_sched_job;

/* What the scheduler knows of a worker that asks for work. */
typedef struct qc_sched_worker {
    int n_gpus;
    int64_t min_gpu_mem_mb;    /* its smallest GPU's memory, MiB */
    const char *const *models; /* affinity keys of the models it holds (n_models of them) */
    int n_models;
} qc_sched_worker;

/* Queue order for qsort over an array of qc_sched_job pointers: higher priority first,
 * then smaller id. */
int qc_sched_compare(const void *a, const void *b);

/* Whether job j fits worker w's resources. */
bool qc_sched_fits(const qc_sched_worker *w, const qc_sched_job *j);

/* Whether worker w holds job j's model (never for a job without one). */
bool qc_sched_holds_model(const qc_sched_worker *w, const qc_sched_job *j);

/* Whether j's dependencies have all succeeded; ctx is the caller's. */
typedef bool (*qc_sched_deps_fn)(const qc_sched_job *j, void *ctx);

/* The job for worker w among queue[0..n) (sorted by qc_sched_compare) at time now_ms, by the
 * rule above; deps_met (NULL: no job has dependencies) is asked only of jobs that are due
 * and fit. Returns its index, or -1 when none. *next_wake_ms (when not NULL) is lowered to
 * the earliest backoff end still ahead among the pending jobs it passed over. */
ptrdiff_t qc_sched_pick(const qc_sched_worker *w, qc_sched_job *const *queue, size_t n,
                        int64_t now_ms, qc_sched_deps_fn deps_met, void *ctx,
                        int64_t *next_wake_ms);

#endif
