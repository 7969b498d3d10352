/* qw_supervise: a worker process that outlives its own crash, so the worker itself says why
 * it died under any launcher (SLURM, systemd, a shell), not only under `qsweep run`.
 *
 * The process a launcher starts becomes a small supervisor: it forks the real worker as its
 * child (before any thread, CUDA context or socket exists), passes SIGTERM, SIGINT, SIGHUP,
 * SIGQUIT, SIGUSR1 and SIGUSR2 on to it, and reaps it. A child that exits (any code) ends the
 * supervisor with that code, as does a child ended after a signal was passed on (128 + the
 * signal). A child ended by a signal with none passed on (SIGSEGV, SIGABRT,
 * SIGKILL from the OOM killer or anyone) is described (common/exit_status.h: the signal, and
 * "out of memory" when the memory cgroup's oom_kill count grew, with the cgroup's limit) and
 * started again with that description as its previous exit (qw_options.previous_exit, sent
 * in HELLO), so the coordinator records it on the attempt the dead process was running.
 * The child dies with the supervisor (PR_SET_PDEATHSIG SIGKILL). */
#ifndef QW_SUPERVISE_H
#define QW_SUPERVISE_H

#include <stdbool.h>
#include <stddef.h>

#include "loop.h"

/* Restarts a supervisor makes by default before it gives up (exit 4). */
#define QW_SUPERVISE_RESTARTS 100

/* Forks the worker. Returns true in the child, which then runs the worker with prev_exit
 * (cap bytes) as its previous exit ("" on the first start). In the supervisor it returns
 * false once it is done, with *exit_code the code to exit with: the child's exit code, 128 +
 * the signal when it ended after a signal was passed on, 4 after max_restarts restarts or when fork
 * fails (said on stderr, prefixed by prog). quiet: no line per start. */
bool qw_supervise(const char *prog, int max_restarts, bool quiet, char *prev_exit, size_t cap,
                  int *exit_code);

/* qw_supervise for the worker of options o: unless o names one, o's worker id becomes
 * "<host>-<supervisor pid>" (in id, id_cap bytes) so every restart keeps it; in the child a
 * previous crash becomes o's previous exit (in prev, prev_cap bytes). Returns as qw_supervise. */
bool qw_supervise_worker(const char *prog, int max_restarts, bool quiet, qw_options *o, char *id,
                         size_t id_cap, char *prev, size_t prev_cap, int *exit_code);

/* The memory limit of this process's cgroup (v2 memory.max, v1 memory.limit_in_bytes) in
 * bytes; 0 when there is none or it cannot be read. */
unsigned long long qw_cgroup_memory_limit(void);

#endif
