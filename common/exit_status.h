/* How a child process ended, in words, for supervisors (qsweep run, the tests): the exit
 * status or the signal, and "out of memory" where the kernel says so, read from the memory
 * cgroup's OOM-kill counter (cgroup v2 memory.events, v1 memory.oom_control: "oom_kill N").
 * A supervisor reads the counter of the child's cgroup when it starts the child and again
 * when it reaps it; a count that grew while a SIGKILL ended it names the OOM killer. */
#ifndef QS_COMMON_EXIT_STATUS_H
#define QS_COMMON_EXIT_STATUS_H

#include <stddef.h>
#include <sys/types.h>

#include "error.h"

/* The exit codes of every qsweep program (qsweep and its subcommands, qsweep-coordinator,
 * qsweep-worker), one table (docs/failures.md):
 *   0 success; 1 usage (unknown option, missing argument); 2 bad input (QS_EINVAL,
 *   QS_EFORMAT, QS_EUNSUPPORTED, QS_ENOTFOUND); 3 database (QS_EDB); 4 runtime (I/O,
 *   sockets, memory, a refusal such as another coordinator holding the database:
 *   QS_EIO, QS_ENOMEM, QS_ENET, QS_ESTATE); 5 the sweep ran but jobs failed (qsweep run);
 *   130 interrupted (QS_ECANCELLED, SIGINT/SIGTERM). */
enum {
    QS_EXIT_OK = 0,
    QS_EXIT_USAGE = 1,
    QS_EXIT_INPUT = 2,
    QS_EXIT_DB = 3,
    QS_EXIT_RUNTIME = 4,
    QS_EXIT_JOBS_FAILED = 5,
    QS_EXIT_INTERRUPTED = 130,
};

/* The exit code for a failure status, by the table above. */
int qs_exit_code(qs_status st);

/* The OOM kills counted so far in the memory cgroup of process pid (0: this process), or -1
 * when it cannot be read (no memory controller, no permission). */
long qs_cgroup_oom_kills(pid_t pid);

/* Same, for the cgroup directory dir (e.g. /sys/fs/cgroup/memory/x, or a v2 directory). */
long qs_cgroup_dir_oom_kills(const char *dir);

/* Describes wait status st (waitpid) into out (cap bytes): "exit status N", or "killed by
 * signal N (SIGNAME)", followed by "; out of memory: the kernel's OOM killer ended it (cgroup
 * oom_kill +K)" when oom_delta > 0 and the signal was SIGKILL. */
void qs_exit_describe(int st, long oom_delta, char *out, size_t cap);

#endif
