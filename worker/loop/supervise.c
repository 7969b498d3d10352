/* The worker's supervisor: fork, forward stop signals, reap, describe, restart (supervise.h). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "exit_status.h"
#include "supervise.h"

static volatile sig_atomic_t child_pid;   /* the running worker, 0 between starts */
static volatile sig_atomic_t stop_signal; /* a forwarded stop signal: no restart after it */

/* A signal sent to the supervisor is the launcher's word for the worker: passed on, and a
 * child it ends is not started again. */
static void forward(int sig) {
    stop_signal = sig;
    if (child_pid > 0) kill((pid_t)child_pid, sig);
}

/* The value of cgroup control file dir/name as a number; 0 for "max" or none. */
static unsigned long long read_limit(const char *dir, const char *name) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    unsigned long long v = 0;
    if (fscanf(f, "%llu", &v) != 1) v = 0;
    fclose(f);
    return v >= (1ULL << 62) ? 0 : v; /* v1 says "no limit" with a page-rounded 2^63 - 1 */
}

unsigned long long qw_cgroup_memory_limit(void) {
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return 0;
    char line[4096], dir[4200];
    unsigned long long v = 0;
    while (!v && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c = strstr(line, ":memory:");
        if (strncmp(line, "0::", 3) == 0) {
            snprintf(dir, sizeof dir, "/sys/fs/cgroup%.4096s", line + 3);
            v = read_limit(dir, "memory.max");
        } else if (c) {
            snprintf(dir, sizeof dir, "/sys/fs/cgroup/memory%.4096s", c + 8);
            v = read_limit(dir, "memory.limit_in_bytes");
        }
    }
    fclose(f);
    return v;
}

/* Words for wait status st of a child started when the cgroup's OOM-kill count was oom0:
 * exit_status.h's, and for an OOM kill the cgroup's memory limit, the figure the job
 * exceeded. */
static void describe(int st, long oom0, char *out, size_t cap) {
    long oom1 = qs_cgroup_oom_kills(0);
    qs_exit_describe(st, oom0 >= 0 && oom1 >= 0 ? oom1 - oom0 : 0, out, cap);
    unsigned long long limit = qw_cgroup_memory_limit();
    size_t n = strlen(out);
    if (strstr(out, "out of memory") && limit && n < cap)
        snprintf(out + n, cap - n, "; the worker's memory cgroup allows %llu bytes (%.0f MiB)",
                 limit, (double)limit / (1024.0 * 1024.0));
}

bool qw_supervise(const char *prog, int max_restarts, bool quiet, char *prev_exit, size_t cap,
                  int *exit_code) {
    prev_exit[0] = '\0';
    struct sigaction sa = {.sa_handler = forward}; /* no SA_RESTART: waitpid sees EINTR */
    sigemptyset(&sa.sa_mask);
    const int sigs[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
    sigset_t block, old;
    sigemptyset(&block);
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) {
        sigaction(sigs[i], &sa, NULL);
        sigaddset(&block, sigs[i]);
    }
    pid_t me = getpid();
    for (int restarts = 0;; restarts++) {
        long oom0 = qs_cgroup_oom_kills(0);
        /* blocked across fork: one that comes meanwhile waits until the child has the
           default action and the supervisor knows the child's pid to pass it on */
        sigprocmask(SIG_BLOCK, &block, &old);
        pid_t pid = stop_signal ? -2 : fork();
        if (pid == 0) {
            struct sigaction dfl = {.sa_handler = SIG_DFL};
            for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
                sigaction(sigs[i], &dfl, NULL);
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            sigprocmask(SIG_SETMASK, &old, NULL);
            if (getppid() != me) _exit(QS_EXIT_RUNTIME); /* the supervisor died already */
            return true;
        }
        if (pid > 0) child_pid = pid;
        sigprocmask(SIG_SETMASK, &old, NULL);
        if (pid == -2) { /* stopped between two children */
            *exit_code = 128 + stop_signal;
            return false;
        }
        if (pid < 0) {
            fprintf(stderr, "%s: supervisor: fork: %s\n", prog, strerror(errno));
            *exit_code = QS_EXIT_RUNTIME;
            return false;
        }
        if (!quiet)
            fprintf(stderr, "%s: supervisor %d: worker process %d started%s%s\n", prog, (int)me,
                    (int)pid, prev_exit[0] ? " again; the previous one was " : "", prev_exit);
        int st = 0;
        while (waitpid(pid, &st, 0) < 0)
            if (errno != EINTR) {
                fprintf(stderr, "%s: supervisor: waitpid: %s\n", prog, strerror(errno));
                *exit_code = QS_EXIT_RUNTIME;
                return false;
            }
        child_pid = 0;
        if (WIFEXITED(st)) {
            *exit_code = WEXITSTATUS(st);
            return false;
        }
        if (WIFSIGNALED(st) && stop_signal) {
            *exit_code = 128 + WTERMSIG(st);
            return false;
        }
        describe(st, oom0, prev_exit, cap);
        fprintf(stderr, "%s: supervisor %d: worker process %d %s\n", prog, (int)me, (int)pid,
                prev_exit);
        if (restarts >= max_restarts) {
            fprintf(stderr, "%s: supervisor %d: %d restarts made, giving up\n", prog, (int)me,
                    restarts);
            *exit_code = QS_EXIT_RUNTIME;
            return false;
        }
    }
}

bool qw_supervise_worker(const char *prog, int max_restarts, bool quiet, qw_options *o, char *id,
                         size_t id_cap, char *prev, size_t prev_cap, int *exit_code) {
    if (!o->worker_id) {
        char host[64] = "";
        gethostname(host, sizeof host - 1);
        snprintf(id, id_cap, "%s-%d", host[0] ? host : "worker", (int)getpid());
        o->worker_id = id;
    }
    if (!qw_supervise(prog, max_restarts, quiet, prev, prev_cap, exit_code)) return false;
    if (prev[0]) {
        o->previous_exit = prev;
        o->previous_worker_id = o->worker_id;
    }
    return true;
}
