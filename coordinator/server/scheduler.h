/* qc_sched: which pending job a ready worker gets, as a pure function of the queue, the
 * worker and its resources: no sockets, no clocks, no database, so the
 * rule of server.h is unit-tested on its own (tests/coordinator/test_scheduler.c).
 *
 * The rule: among pending jobs whose backoff is over and whose dependencies are met, only
 * those that fit the worker's resources (qc_sched_fits: its first max(gpus, 1) GPUs each have
 * gpu_mem_mb and, when asked, native FP4; a job asking for neither GPUs, GPU memory nor native
 * FP4 fits every worker, CPU-only ones included); among them the first whose model the worker
 * holds, else the first, in queue order: higher priority first, then older (smaller id).
 * A worker that advertised its job kinds (HELLO kinds) gets only jobs of those kinds; a job
 * whose last attempt failed transiently on a worker goes to another one first: that worker
 * gets it only from avoid_until_ms on.
 *
 * Numerics paths (qc_sched_on_path), as a cluster scheduler's node constraint: a worker
 * announces the one path its jobs run on (HELLO numerics_path: "cpu-qsweep-fixed2",
 * "cuda-cc90-auto", ...). A job may ask for a path (its spec's "numerics": "cpu" or "cuda", any
 * path of that backend, or one path exactly) and follows its experiment's pin (the path the
 * experiment's first dispatched job went to, kept in experiment_numerics): it goes only to a
 * worker whose path matches both. "any" asks for no path and follows no pin. */
#ifndef QC_SCHEDULER_H
#define QC_SCHEDULER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What the scheduler knows of a job. The server embeds one in each of its jobs. */
typedef struct qc_sched_job {
    int64_t id;            /* jobs.id: the age order */
    int priority;          /* higher runs first */
    int gpus;              /* GPUs it needs (jobs.resources: its tensor-parallel degree);
                              0: none (a CPU worker will do, unless the fields below ask) */
    int64_t gpu_mem_mb;    /* GPU memory it needs on each, MiB; 0: any */
    bool native_fp4;       /* needs native FP4 GEMMs on each (compute capability >= 10.0) */
    const char *model_key; /* its model's affinity key, "" for none */
    int64_t not_before_ms; /* backoff end, ms on the caller's (monotonic) clock */
    bool pending;          /* waiting for a worker; other entries are skipped */
    const char *kind;      /* its job kind; NULL: any worker's */
    const char *avoid;     /* the worker its last attempt failed on transiently, or NULL */
    int64_t avoid_until_ms; /* until when `avoid` does not get it (same clock) */
    const char *numerics;   /* the path its spec asks for ("cpu", "cuda", a path, "any");
                               NULL: none (the pin alone decides) */
    const char *const *pinned; /* where its experiment's pinned path is kept (*pinned NULL: not
                                  pinned yet); NULL: it follows no pin */
} qc_sched_job;

/* At most this many GPUs of one worker are kept (a HELLO naming more keeps the first ones). */
#define QC_SCHED_GPUS_MAX 64

/* One GPU of a worker, as its HELLO reported it (proto/qsweep.proto Gpu). */
typedef struct qc_sched_gpu {
    int64_t mem_mb;  /* total memory, MiB (memory_bytes >> 20) */
    bool native_fp4; /* FP4 tensor cores (compute capability >= 10.0) */
} qc_sched_gpu;

/* What the scheduler knows of a worker that asks for work. */
typedef struct qc_sched_worker {
    int n_gpus;                /* 0: a CPU-only worker */
    const qc_sched_gpu *gpus;  /* its GPUs (n_gpus of them) in the order of its `--gpus`: a
                                  job needing k GPUs runs on the first k */
    const char *const *models; /* affinity keys of the models it holds (n_models of them) */
    int n_models;
    const char *name;         /* its worker id (for qc_sched_job.avoid); NULL: none */
    const char *const *kinds; /* the job kinds it runs (n_kinds); n_kinds 0: not advertised,
                                 any kind */
    int n_kinds;
    const char *numerics_path; /* the path its jobs run on (HELLO); NULL or "": not announced */
} qc_sched_worker;

/* Queue order for qsort over an array of qc_sched_job pointers: higher priority first,
 * then smaller id. */
int qc_sched_compare(const void *a, const void *b);

/* Whether job j fits worker w's resources: k = max(j->gpus, 1 when j asks for GPU memory or
 * native FP4, else 0) GPUs needed; k = 0 fits any worker; otherwise w needs n_gpus >= k and
 * each of its first k GPUs mem_mb >= j->gpu_mem_mb (the per-GPU figure: kinds/resources.h
 * computes it per tensor-parallel rank) and native_fp4 when j->native_fp4. */
bool qc_sched_fits(const qc_sched_worker *w, const qc_sched_job *j);

/* Whether worker w runs j's kind: it advertised none, j has none, or j's is among them. */
bool qc_sched_runs_kind(const qc_sched_worker *w, const qc_sched_job *j);

/* Whether worker w is on a numerics path job j may run on (the rule above): j asks for "any";
 * or j asks for nothing and its experiment is not pinned; or w announced a path that matches
 * j's request (when it has one: common/numerics_path.h qs_numerics_path_matches) and equals
 * its experiment's pin (when pinned). A worker that
 * announced no path gets only jobs of neither request nor pin. */
bool qc_sched_on_path(const qc_sched_worker *w, const qc_sched_job *j);

/* Whether any of the n workers is on a path j may run on (qsweep status and qsweep run name the
 * jobs that wait for a path no worker offers). */
bool qc_sched_on_path_any(const qc_sched_worker *const *workers, size_t n, const qc_sched_job *j);

/* Whether any of the n workers fits j (qsweep status names the pending jobs none can ever
 * take, rather than leaving them silently pending). */
bool qc_sched_fits_any(const qc_sched_worker *const *workers, size_t n, const qc_sched_job *j);

/* Reads a worker's GPUs from the JSON array the coordinator stores in workers.gpus
 * (server.c: [{"name", "memory_mb", "cc", "native_fp4"}, ...]) into gpus[0..cap): *n gets
 * how many (at most cap). Returns false (and *n = 0) when text is not such an array. */
bool qc_sched_gpus_from_json(const char *text, qc_sched_gpu *gpus, int cap, int *n);

/* Whether worker w holds job j's model (never for a job without one). */
bool qc_sched_holds_model(const qc_sched_worker *w, const qc_sched_job *j);

/* Whether j's dependencies have all succeeded; ctx is the caller's. */
typedef bool (*qc_sched_deps_fn)(const qc_sched_job *j, void *ctx);

/* The job for worker w among queue[0..n) (sorted by qc_sched_compare) at time now_ms, by the
 * rule above (on_path included); deps_met (NULL: no job has dependencies) is asked only of jobs
 * that are due and fit. Returns its index, or -1 when none. *next_wake_ms (when not NULL) is
 * lowered to the earliest backoff end still ahead among the pending jobs it passed over. */
ptrdiff_t qc_sched_pick(const qc_sched_worker *w, qc_sched_job *const *queue, size_t n,
                        int64_t now_ms, qc_sched_deps_fn deps_met, void *ctx,
                        int64_t *next_wake_ms);

#endif
