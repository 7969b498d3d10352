/* The thread count a default ("threads: 0", no --threads) means, by the rule OpenMP programs
 * and coreutils' nproc follow: OMP_NUM_THREADS when it is set, else the CPUs this process may
 * run on (its affinity mask, as taskset, cgroups' cpusets and SLURM set it), capped by
 * OMP_THREAD_LIMIT. */
#ifndef QS_COMMON_THREADS_H
#define QS_COMMON_THREADS_H

/* The default thread count, >= 1:
 * - OMP_NUM_THREADS's first entry ("4" or "4,2": the outer level) when it is a positive
 *   decimal integer; an empty, malformed or zero value is ignored, as libgomp ignores it;
 * - else CPU_COUNT of sched_getaffinity(0), else sysconf(_SC_NPROCESSORS_ONLN), else 1;
 * - then at most OMP_THREAD_LIMIT when that is a positive integer.
 * Reads the environment at each call (no caching). */
int qs_default_threads(void);

/* The CPUs this process may run on: CPU_COUNT of sched_getaffinity(0) (masks of up to 8192
 * CPUs), else the online CPUs; >= 1. The environment plays no part. */
int qs_affinity_cpus(void);

#endif
