/* How a child process ended (exit_status.h). */
#include "exit_status.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* The value of "oom_kill N" in the file at path, or -1. */
static long read_oom_kill(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[256];
    long v = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "oom_kill ", 9) == 0) v = strtol(line + 9, NULL, 10);
    fclose(f);
    return v;
}

long qs_cgroup_dir_oom_kills(const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%.4000s/memory.events", dir); /* v2 */
    long v = read_oom_kill(path);
    if (v >= 0) return v;
    snprintf(path, sizeof path, "%.4000s/memory.oom_control", dir); /* v1 */
    return read_oom_kill(path);
}

long qs_cgroup_oom_kills(pid_t pid) {
    char path[64];
    if (pid)
        snprintf(path, sizeof path, "/proc/%d/cgroup", (int)pid);
    else
        snprintf(path, sizeof path, "/proc/self/cgroup");
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[4096], dir[4200];
    long v = -1;
    while (v < 0 && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        const char *rel = NULL, *base = NULL;
        if (strncmp(line, "0::", 3) == 0) { /* v2 */
            rel = line + 3;
            base = "/sys/fs/cgroup";
        } else {
            char *c = strstr(line, ":memory:");
            if (c) {
                rel = c + 8;
                base = "/sys/fs/cgroup/memory";
            }
        }
        if (!rel) continue;
        snprintf(dir, sizeof dir, "%s%.4096s", base, rel);
        v = qs_cgroup_dir_oom_kills(dir);
        if (v < 0) v = qs_cgroup_dir_oom_kills(base); /* a cgroup namespace: its root */
    }
    fclose(f);
    return v;
}

int qs_exit_code(qs_status st) {
    switch (st) {
    case QS_OK:
        return QS_EXIT_OK;
    case QS_EINVAL:
    case QS_EFORMAT:
    case QS_EUNSUPPORTED:
    case QS_ENOTFOUND:
        return QS_EXIT_INPUT;
    case QS_EDB:
        return QS_EXIT_DB;
    case QS_ECANCELLED:
        return QS_EXIT_INTERRUPTED;
    default:
        return QS_EXIT_RUNTIME;
    }
}

void qs_exit_describe(int st, long oom_delta, char *out, size_t cap) {
    if (WIFEXITED(st)) {
        snprintf(out, cap, "exit status %d", WEXITSTATUS(st));
    } else if (WIFSIGNALED(st)) {
        int sig = WTERMSIG(st);
        const char *name = sigabbrev_np(sig);
        int n = snprintf(out, cap, "killed by signal %d (SIG%s)", sig, name ? name : "?");
        if (sig == SIGKILL && oom_delta > 0 && n >= 0 && (size_t)n < cap)
            snprintf(out + n, cap - (size_t)n,
                     "; out of memory: the kernel's OOM killer ended it (cgroup oom_kill +%ld)",
                     oom_delta);
    } else {
        snprintf(out, cap, "wait status %d", st);
    }
}
