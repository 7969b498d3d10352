/* qsweep run GRID: one command from grid to results on this machine.
 *
 *   1. validates and expands the grid (nothing starts when it is bad: exit 2);
 *   2. uses --db / $QSWEEP_DB, or starts (or adopts) a private PostgreSQL cluster under
 *      ${XDG_DATA_HOME:-~/.local/share}/qsweep/pg (coordinator/store/pgserver.h);
 *   3. submits: jobs already stored by job_key are linked, not added, so a run that was
 *      interrupted and started again only runs what is unfinished;
 *   4. starts `qsweep coordinator` on a private ipc:// endpoint and N `qsweep worker`s as
 *      child processes (their own process group, so a Ctrl-C reaches only this process,
 *      which stops them in order; PR_SET_PDEATHSIG stops them if this process is killed);
 *   5. shows progress until every job of the experiment is finished, stops the workers, the
 *      coordinator and the cluster when it is the last run using it (one started by
 *      qsweep db start is left running; private_db.c), and prints the results tables. When
 *      the jobs left need GPUs no worker of the run has (once its workers have registered),
 *      it says what they need and stops the same way, exit 5 (unrunnable).
 * A worker killed by a signal (a crash in a job, the OOM killer) is started again after
 * RESPAWN_DELAY_MS, up to 3 restarts per worker in all, so the coordinator outlives the
 * crashed attempt's lease, hands the job out again and, when it keeps crashing workers,
 * marks it failed after its max_attempts. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "clock.h"
#include "exit_status.h"
#include "threads.h"
#include "gpu_info.h"
#include "queries.h"
#include "scheduler.h"

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig) {
    stop_signal = sig;
}

enum { RESPAWN_DELAY_MS = 1000, RESTARTS_PER_WORKER = 3, DB_RETRY_MS = 1000 };

/* One child process (coordinator or worker). */
typedef struct child {
    pid_t pid; /* 0 once reaped */
    int status;
    int restarts;         /* times this worker was started again */
    long long respawn_at; /* CLOCK_MONOTONIC ms at which to start it again; 0: not to */
    char name[32];
    char log[PATH_MAX + 32];
    long oom_kills;      /* its memory cgroup's OOM kills when it started, -1: unknown */
    char id[96];         /* the worker id it runs as */
    char prev_id[96];    /* a restarted worker: the id of the process it replaces */
    char prev_exit[300]; /* and how that one ended (exit_status.h) */
} child;

/* Starts `qsweep <argv...>` with stdout and stderr into c->log. */
static qs_status spawn(child *c, char *const argv[], qs_error *err) {
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return qs_error_set(err, QS_EIO, "fork for %s: %s", c->name, strerror(errno));
    if (pid == 0) {
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(127);
        /* a restarted worker appends, so the log of the crash stays */
        int fd = open(c->log, O_WRONLY | O_CREAT | (c->restarts ? O_APPEND : O_TRUNC), 0644);
        int in = open("/dev/null", O_RDONLY);
        if (fd < 0 || in < 0) _exit(127);
        dup2(in, 0);
        dup2(fd, 1);
        dup2(fd, 2);
        execv(qsweep_self_exe(), argv);
        _exit(127);
    }
    c->pid = pid;
    return QS_OK;
}

/* Reaps c if it has exited; returns 1 when it is gone. */
static int reaped(child *c) {
    if (!c->pid) return 1;
    if (waitpid(c->pid, &c->status, WNOHANG) == c->pid) {
        c->pid = 0;
        return 1;
    }
    return 0;
}

/* Waits, up to 60 s, until a coordinator holds the database's coordinator lock
 * (qc_store_coordinator_running) or co has exited (watch then reports how), so that the run
 * says "running" only once its coordinator runs: a second qsweep run started after that line
 * finds it instead of starting a coordinator of its own that may win the lock. Errors: those
 * of qc_store_coordinator_running. */
static qs_status wait_coordinator(qc_store *s, child *co, qs_error *err) {
    for (int i = 0; i < 3000 && !stop_signal && !reaped(co); i++) {
        bool held = false;
        char holder[400];
        qs_status st = qc_store_coordinator_running(s, &held, holder, sizeof holder, err);
        if (st != QS_OK || held) return st;
        usleep(20000);
    }
    return QS_OK;
}

/* Sends sig, waits up to timeout_ms for the exit, then SIGKILL. */
static void stop_children(child *cs, size_t n, int sig, int timeout_ms) {
    for (size_t i = 0; i < n; i++)
        if (cs[i].pid) kill(cs[i].pid, sig);
    for (int waited = 0;; waited += 20) {
        int alive = 0;
        for (size_t i = 0; i < n; i++)
            alive += !reaped(&cs[i]);
        if (!alive) return;
        if (waited >= timeout_ms) break;
        usleep(20000);
    }
    for (size_t i = 0; i < n; i++)
        if (cs[i].pid) {
            kill(cs[i].pid, SIGKILL);
            waitpid(cs[i].pid, &cs[i].status, 0);
            cs[i].pid = 0;
        }
}

static void describe_exit(const child *c, char *buf, size_t cap) {
    if (WIFEXITED(c->status))
        snprintf(buf, cap, "exit status %d", WEXITSTATUS(c->status));
    else if (WIFSIGNALED(c->status))
        snprintf(buf, cap, "signal %d", WTERMSIG(c->status));
    else
        snprintf(buf, cap, "status %d", c->status);
}

/* The last line of c's log that is not empty (what a child that stopped said last, usually
 * its error) into buf (cap bytes); "" when the log cannot be read or is empty. */
static void last_log_line(const child *c, char *buf, size_t cap) {
    buf[0] = 0;
    FILE *f = fopen(c->log, "r");
    if (!f) return;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        size_t k = strlen(line);
        if (!k) continue;
        if (k >= cap) k = cap - 1; /* cut, as the message it goes in would be */
        memcpy(buf, line, k);
        buf[k] = 0;
    }
    fclose(f);
}

/* A signal during start-up (SIGINT, SIGTERM, SIGHUP): QS_ECANCELLED, so nothing more is
 * started and what was is stopped (qsweep_cmd_run); QS_OK otherwise. A step that failed
 * because of the signal (a child of the cluster's start killed by the terminal's Ctrl-C) is
 * reported as the interruption it is, its own error kept in the message. */
static qs_status startup_check(qs_status st, qs_error *err) {
    if (!stop_signal) return st;
    if (st == QS_OK || st == QS_ECANCELLED)
        return qs_error_set(err, QS_ECANCELLED, "interrupted by signal %d during start-up",
                            (int)stop_signal);
    char was[sizeof err->msg];
    snprintf(was, sizeof was, "%s", err->msg);
    return qs_error_set(err, QS_ECANCELLED, "interrupted by signal %d during start-up (%.300s)",
                        (int)stop_signal, was);
}

/* A fresh log folder for this run, ${XDG_STATE_HOME:-~/.local/state}/qsweep/logs/
 * <YYYYmmdd-HHMMSS>-<experiment> (UTC; characters other than [A-Za-z0-9._-] of the name as
 * '_', a -2, -3, ... suffix when it exists), and logs/latest and logs/latest-<experiment>
 * pointing at it (the newest run of any experiment, and of this one: runs of two experiments
 * side by side each keep theirs), so no run overwrites another's logs. Errors: QS_EIO /
 * QS_EINVAL naming the folder. */
static qs_status run_log_dir(const char *experiment, char *out, size_t cap, qs_error *err) {
    char base[PATH_MAX - 256], name[128];
    qs_status st =
        qsweep_xdg_path("XDG_STATE_HOME", ".local/state", "logs", base, sizeof base, err);
    if (!st) st = qsweep_make_dirs(base, err);
    if (st) return st;
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    size_t k = strftime(name, sizeof name, "%Y%m%d-%H%M%S-", &tm);
    for (const char *p = experiment; *p && k + 1 < 64; p++, k++) {
        char c = *p;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '_' || c == '-';
        name[k] = ok ? c : '_';
    }
    name[k] = 0;
    for (int i = 1; i < 1000; i++) {
        int n = i == 1 ? snprintf(out, cap, "%s/%s", base, name)
                       : snprintf(out, cap, "%s/%s-%d", base, name, i);
        if (n < 0 || (size_t)n >= cap)
            return qs_error_set(err, QS_EINVAL, "log folder under %s: path too long", base);
        if (mkdir(out, 0700) == 0) {
            char link[PATH_MAX];
            snprintf(link, sizeof link, "%s/latest", base);
            unlink(link); /* a best effort: the folder's path is printed anyway */
            if (symlink(out + strlen(base) + 1, link) != 0) link[0] = 0;
            /* name + 16: the experiment's part, after "YYYYmmdd-HHMMSS-" */
            snprintf(link, sizeof link, "%s/latest-%s", base, name + 16);
            unlink(link);
            if (symlink(out + strlen(base) + 1, link) != 0) link[0] = 0;
            return QS_OK;
        }
        if (errno != EEXIST) return qs_error_set(err, QS_EIO, "mkdir %s: %s", out, strerror(errno));
    }
    return qs_error_set(err, QS_EIO, "log folder %s/%s: 999 runs in the same second", base, name);
}

static void run_usage(FILE *out) {
    fprintf(
        out,
        "usage: qsweep run GRID [--set KEY=VALUE]... [--workers N] [--threads T] [--db CONNINFO]\n"
        "                       [--pg-dir DIR] [--lease-ms MS]\n"
        "  Validates GRID, queues its jobs, runs them with a coordinator and N local workers, "
        "shows\n"
        "  progress and prints the results. Interrupted and run again, it runs only what is "
        "unfinished.\n"
        "  --set KEY=VALUE  override a grid value (see qsweep submit --help)\n"
        "  --workers N      local worker processes, 1..256 (default 2)\n"
        "  --threads T      CPU threads per worker, 1..1024 (default: OMP_NUM_THREADS, else the\n"
        "                   CPUs of the affinity mask, divided by N)\n"
        "  --db CONNINFO    use this database (default $QSWEEP_DB); without either, a private\n"
        "                   PostgreSQL cluster in --pg-dir (default "
        "${XDG_DATA_HOME:-~/.local/share}/qsweep/pg)\n"
        "                   is started for the run and stopped by the last run using it (one\n"
        "                   started by qsweep db start is used and left running)\n"
        "  --lease-ms MS    a running job's lease, 1000..2147483647 (default 10000; heartbeats\n"
        "                   renew it)\n"
        "  A worker killed by a signal is restarted (at most 3 times per worker in all).\n"
        "  Logs of the coordinator and workers: one folder per run,\n"
        "  ${XDG_STATE_HOME:-~/.local/state}/qsweep/logs/<date>-<time>-<experiment>/ (logs/latest\n"
        "  links to the newest), its path printed at the start and at the end.\n"
        "  exit codes: 0 all jobs succeeded, 2 bad grid, 3 database, 4 runtime failure,\n"
        "              5 some jobs failed or were cancelled, or some need GPUs no worker of the\n"
        "              run has (said, then the run stops), 130 interrupted\n");
}

typedef struct run_state {
    qc_pgserver *pg;
    int pg_adopted; /* QSWEEP_PG_*: started by this run, adopted (left running) or shared */
    qc_store *store;
    child *children; /* [0] coordinator, [1..n_workers] workers */
    size_t n_children;
    int restarts, max_restarts; /* worker restarts so far, and the budget */
    char ipc_dir[64];
    char endpoint[128], threads[32], host[64];
    int n_gpus;       /* visible GPUs, shared out among the workers (qsweep_run_worker_gpus) */
    int gpus_per_job; /* the most GPUs one job of the grid asks for (qc_job.need.gpus) */
} run_state;

/* Starts worker i (1-based) of r, with a worker id that differs per restart. */
static qs_status spawn_worker(run_state *r, size_t i, qs_error *err) {
    child *w = &r->children[i];
    char id[96];
    if (w->restarts)
        snprintf(id, sizeof id, "%.40s-run%d-w%zu-r%d", r->host, (int)getpid(), i, w->restarts);
    else
        snprintf(id, sizeof id, "%.40s-run%d-w%zu", r->host, (int)getpid(), i);
    char gpus[256];
    qsweep_run_worker_gpus((int)i - 1, r->n_gpus, r->gpus_per_job, gpus, sizeof gpus);
    /* this run supervises its workers itself (each restart a new id): --no-supervise */
    char *av[] = {"qsweep",    "worker",   "--connect", r->endpoint, "--id",           id,
                  "--threads", r->threads, "--gpus",    gpus,        "--no-supervise", NULL,
                  NULL,        NULL,       NULL,        NULL};
    if (w->restarts && w->prev_exit[0]) { /* the coordinator records how the last one ended */
        av[11] = "--previous-id";
        av[12] = w->prev_id;
        av[13] = "--previous-exit";
        av[14] = w->prev_exit;
    }
    snprintf(w->id, sizeof w->id, "%s", id);
    w->oom_kills = qs_cgroup_oom_kills(0); /* the child starts in this process's cgroup */
    return spawn(w, av, err);
}

/* Frees what run_state holds and stops the cluster if it started it. The children are
 * stopped before (workers first). */
static void run_cleanup(run_state *r) {
    free(r->children);
    qc_store_close(r->store);
    if (r->ipc_dir[0]) {
        char sock[128];
        snprintf(sock, sizeof sock, "%s/coordinator", r->ipc_dir);
        unlink(sock);
        rmdir(r->ipc_dir);
    }
    qsweep_private_db_end(r->pg);
}

/* One try at PostgreSQL again while it is unreachable: QS_OK and *down cleared (said on
 * stderr) when it answers; else the error of the try (qc_store_connection_lost true). */
static qs_status reconnect(run_state *r, int *down, qs_error *err) {
    qs_status st = qc_store_reconnect(r->store, err);
    if (st) return st;
    *down = 0;
    fprintf(stderr, "qsweep run: PostgreSQL is back\n");
    return QS_OK;
}

/* Whether the jobs of experiment name still pending can never run on this run's workers:
 * once every live worker of the run (ids "<host>-run<pid>-w...") has registered with the
 * coordinator (a row in workers, not "left"), no job runs, and the pending jobs are all of
 * GPU needs (qc_store_pending_needs) that none of those workers fits (qc_sched_fits_any), or
 * wait for a numerics path (the experiment's pin or its grid's `numerics`,
 * qc_store_pending_paths) that none of those workers is on (qc_sched_on_path).
 * Then *stuck is set and msg (cap bytes) says what they need, as `qsweep status` does;
 * else *stuck is 0. Errors: the store's. */
static qs_status unrunnable(run_state *r, const char *name, const qc_progress *p, int *stuck,
                            char *msg, size_t cap, qs_error *err) {
    *stuck = 0;
    msg[0] = 0;
    if (p->running > 0 || p->pending == 0) return QS_OK;
    size_t alive = 0;
    for (size_t i = 1; i < r->n_children; i++)
        alive += r->children[i].pid != 0;
    if (!alive) return QS_OK;
    qc_worker_row *w = NULL;
    qc_need_row *need = NULL;
    size_t n_w = 0, n_need = 0;
    qs_status st = qc_store_workers(r->store, &w, &n_w, err);
    if (!st) st = qc_store_pending_needs(r->store, name, &need, &n_need, err);
    qc_sched_gpu(*gpus)[QC_SCHED_GPUS_MAX] = n_w ? calloc(n_w, sizeof *gpus) : NULL;
    qc_sched_worker *sw = n_w ? calloc(n_w, sizeof *sw) : NULL;
    const qc_sched_worker **ws = n_w ? calloc(n_w, sizeof *ws) : NULL;
    if (!st && n_w && (!gpus || !sw || !ws)) st = qs_error_set(err, QS_ENOMEM, "out of memory");
    char prefix[96];
    snprintf(prefix, sizeof prefix, "%.40s-run%d-w", r->host, (int)getpid());
    size_t mine = 0;
    int64_t biggest = 0;
    for (size_t i = 0; !st && i < n_w; i++) {
        if (!strcmp(w[i].state, "left") || strncmp(w[i].id, prefix, strlen(prefix)) != 0) continue;
        int ng = 0;
        qc_sched_gpus_from_json(w[i].gpus, gpus[mine], QC_SCHED_GPUS_MAX, &ng);
        sw[mine] = (qc_sched_worker){
            .n_gpus = ng, .gpus = gpus[mine], .numerics_path = w[i].numerics_path};
        for (int g = 0; g < ng; g++)
            if (gpus[mine][g].mem_mb > biggest) biggest = gpus[mine][g].mem_mb;
        ws[mine] = &sw[mine];
        mine++;
    }
    int64_t unfit = 0;
    size_t k = 0;
    if (!st && mine >= alive) { /* every worker of the run has registered */
        for (size_t i = 0; i < n_need; i++) {
            qc_sched_job j = {.gpus = need[i].gpus,
                              .gpu_mem_mb = need[i].gpu_mem_mb,
                              .native_fp4 = need[i].native_fp4,
                              .model_key = ""};
            if (qc_sched_fits_any(ws, mine, &j)) continue;
            unfit += need[i].n_jobs;
            int m =
                snprintf(msg + k, cap - k,
                         "%s%lld pending job%s no worker of this run can take: each needs %d "
                         "GPU%s with %lld MiB%s (this run's %zu worker%s' largest GPU has "
                         "%lld MiB)",
                         k ? "; " : "", (long long)need[i].n_jobs, need[i].n_jobs == 1 ? "" : "s",
                         j.gpus > 0 ? j.gpus : 1, j.gpus > 1 ? "s" : "", (long long)j.gpu_mem_mb,
                         j.native_fp4 ? " and native FP4 (compute capability 10.x)" : "", mine,
                         mine == 1 ? "" : "s", (long long)biggest);
            if (m > 0) k = (size_t)m < cap - k ? k + (size_t)m : cap - 1;
        }
        qc_path_need_row *paths = NULL;
        size_t n_paths = 0;
        /* an experiment's jobs share their resources and path: one reason is enough */
        if (!unfit) st = qc_store_pending_paths(r->store, name, &paths, &n_paths, err);
        for (size_t i = 0; !st && i < n_paths; i++) {
            const char *pin = paths[i].pinned[0] ? paths[i].pinned : NULL;
            qc_sched_job j = {.numerics = paths[i].want[0] ? paths[i].want : NULL, .pinned = &pin};
            if (qc_sched_on_path_any(ws, mine, &j)) continue;
            unfit += paths[i].n_jobs;
            const char *by = paths[i].pinned_by; /* an older experiment sharing the jobs */
            int m = snprintf(msg + k, cap - k,
                             "%s%lld pending job%s waiting: no worker of this run on path %s "
                             "(%s%s%s)",
                             k ? "; " : "", (long long)paths[i].n_jobs,
                             paths[i].n_jobs == 1 ? "" : "s", pin ? pin : paths[i].want,
                             !pin  ? "the grid's numerics"
                             : *by ? "they are also the jobs of experiment "
                                   : "the experiment is pinned to it",
                             pin && *by ? by : "", pin && *by ? ", pinned to it" : "");
            if (m > 0) k = (size_t)m < cap - k ? k + (size_t)m : cap - 1;
        }
        free(paths);
        *stuck = unfit > 0 && unfit >= p->pending;
    }
    free(ws);
    free(sw);
    free(gpus);
    free(need);
    free(w);
    return st;
}

/* Watches the experiment until no job of it is pending or running, or (*stuck set, why
 * saying what they need) the pending ones are all jobs no worker of the run can take. Prints a
 * progress line when the counts change (on a terminal: one line rewritten in place). PostgreSQL
 * unreachable: says so once and retries every DB_RETRY_MS while the children go on (the
 * coordinator pauses dispatch and keeps its writes, coordinator/server/server.h), until it
 * answers or a signal stops the run. */
static qs_status watch(run_state *r, const char *name, qc_progress *last, int *stuck, char *why,
                       size_t why_cap, qs_error *err) {
    int tty = isatty(1), db_down = 0;
    qc_progress prev = {0};
    prev.total = -1;
    for (;;) {
        if (stop_signal)
            return qs_error_set(err, QS_ECANCELLED, "interrupted by signal %d", (int)stop_signal);
        if (reaped(&r->children[0])) {
            char how[64], said[600];
            describe_exit(&r->children[0], how, sizeof how);
            last_log_line(&r->children[0], said, sizeof said);
            return qs_error_set(err, QS_EIO, "the coordinator stopped (%s)%s%s; see %s", how,
                                said[0] ? ": " : "", said, r->children[0].log);
        }
        size_t alive = 0, respawning = 0;
        for (size_t i = 1; i < r->n_children; i++) {
            child *w = &r->children[i];
            int was = w->pid != 0;
            if (!reaped(w)) {
                alive++;
            } else if (was) {
                char how[320];
                describe_exit(w, how, sizeof how);
                /* a signal is a crash (or the OOM killer): start it again; an exit status is
                 * the worker's own decision (bad options, no coordinator) and would repeat */
                if (WIFSIGNALED(w->status) && r->restarts < r->max_restarts) {
                    long oom = qs_cgroup_oom_kills(0);
                    qs_exit_describe(w->status,
                                     oom >= 0 && w->oom_kills >= 0 ? oom - w->oom_kills : 0,
                                     w->prev_exit, sizeof w->prev_exit);
                    snprintf(w->prev_id, sizeof w->prev_id, "%s", w->id);
                    snprintf(how, sizeof how, "%s", w->prev_exit);
                    r->restarts++;
                    w->restarts++;
                    w->respawn_at = qs_clock_ms() + RESPAWN_DELAY_MS;
                    fprintf(stderr,
                            "\nqsweep run: %s stopped (%s); restarting it in %d ms (restart %d "
                            "of %d); see %s\n",
                            w->name, how, RESPAWN_DELAY_MS, r->restarts, r->max_restarts, w->log);
                } else {
                    fprintf(stderr, "\nqsweep run: %s stopped (%s); see %s\n", w->name, how,
                            w->log);
                }
            }
            if (!w->pid && w->respawn_at) {
                if (qs_clock_ms() < w->respawn_at) {
                    respawning++;
                    continue;
                }
                w->respawn_at = 0;
                qs_status st = spawn_worker(r, i, err);
                if (st) return st;
                alive++;
            }
        }
        if (!alive && !respawning)
            return qs_error_set(err, QS_EIO, "every worker stopped; see their logs");
        qc_progress *rows = NULL;
        size_t n = 0;
        qs_status st = db_down ? reconnect(r, &db_down, err) : QS_OK;
        if (!st) st = qc_store_progress(r->store, name, &rows, &n, err);
        if (st && qc_store_connection_lost(r->store)) {
            /* Not a reason to stop: the coordinator keeps its writes queued and its workers
               go on; stopping them now would lose their preemptions. */
            if (!db_down) {
                if (tty) fputs("\r\033[K", stdout);
                fflush(stdout);
                fprintf(stderr,
                        "qsweep run: PostgreSQL unreachable (%s); the coordinator keeps what it "
                        "has to write, the workers go on; retrying every %d ms (Ctrl-C "
                        "stops the run)\n",
                        err->msg, DB_RETRY_MS);
            }
            db_down = 1;
            usleep(DB_RETRY_MS * 1000);
            continue;
        }
        if (st) return st;
        *last = rows[0];
        free(rows);
        int changed = prev.total != last->total || prev.pending != last->pending ||
                      prev.running != last->running || prev.succeeded != last->succeeded ||
                      prev.failed != last->failed || prev.cancelled != last->cancelled ||
                      prev.waiting != last->waiting;
        if (tty || changed) {
            if (tty) fputs("\r\033[K", stdout); /* rewrite the line in place */
            qsweep_print_progress(r->store, last, stdout);
            if (!tty) putchar('\n');
            fflush(stdout);
        }
        prev = *last;
        if (last->pending + last->running == 0) {
            if (tty) putchar('\n');
            return QS_OK;
        }
        st = unrunnable(r, name, last, stuck, why, why_cap, err);
        if (st && qc_store_connection_lost(r->store)) continue; /* retried as above */
        if (st) return st;
        if (*stuck) {
            if (tty) putchar('\n');
            return QS_OK;
        }
        usleep(tty ? 500000 : 250000);
    }
}

int qsweep_cmd_run(int argc, char **argv) {
    static const struct option opts[] = {
        {"set", required_argument, 0, 's'},     {"workers", required_argument, 0, 'w'},
        {"threads", required_argument, 0, 't'}, {"db", required_argument, 0, 'd'},
        {"pg-dir", required_argument, 0, 'p'},  {"lease-ms", required_argument, 0, 'l'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
    const char **sets = calloc((size_t)argc + 1, sizeof *sets);
    size_t n_sets = 0;
    int workers = 2, threads = 0, lease_ms = 10000, c, bad = 0;
    const char *db = NULL, *pg_dir = NULL;
    if (!sets) return QS_EXIT_RUNTIME;
    optind = 1;
    while ((c = getopt_long(argc, argv, "s:w:t:d:p:l:h", opts, NULL)) != -1) {
        switch (c) {
        case 's':
            sets[n_sets++] = optarg;
            break;
        case 'w':
            bad |= qsweep_parse_int("run", "--workers", optarg, 1, 256, &workers);
            break;
        case 't':
            bad |= qsweep_parse_int("run", "--threads", optarg, 1, 1024, &threads);
            break;
        case 'd':
            db = optarg;
            break;
        case 'p':
            pg_dir = optarg;
            break;
        case 'l':
            bad |= qsweep_parse_int("run", "--lease-ms", optarg, 1000, INT_MAX, &lease_ms);
            break;
        case 'h':
            run_usage(stdout);
            free(sets);
            return QS_EXIT_OK;
        default:
            run_usage(stderr);
            free(sets);
            return QS_EXIT_USAGE;
        }
    }
    if (bad || optind != argc - 1) {
        if (!bad && optind < argc - 1)
            fprintf(stderr, "qsweep run: unexpected argument '%s'\n", argv[optind + 1]);
        if (!bad && optind >= argc) fprintf(stderr, "qsweep run: no GRID given\n");
        run_usage(stderr);
        free(sets);
        return QS_EXIT_USAGE;
    }
    if (!threads) {
        int cpus = qs_default_threads(); /* threads.h: OMP_NUM_THREADS, else the affinity mask */
        threads = cpus > workers ? cpus / workers : 1;
        if (threads > 1024) threads = 1024; /* the range qsweep worker --threads accepts */
    }
    qs_error err = {0};
    qc_grid *g = NULL;
    qc_job_list jobs = {0};
    qs_status st = qsweep_load_grid(argv[optind], sets, n_sets, &g, &jobs, &err);
    free(sets);
    if (st) return qsweep_fail("run", &err);

    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);

    run_state r = {0};
    int stuck = 0; /* jobs left that no worker of this run can take (watch) */
    char stuck_why[1024] = "";
    char logs[PATH_MAX - 64], conn_buf[PATH_MAX + 64];
    int logs_made = 0;
    /* the run's workers write baselines and token files into this machine's cache: its
     * summary says how much (unreadable folders count as empty, the run goes on) */
    int64_t cache_before = 0, cache_after = 0;
    qs_error cache_err = {0};
    bool cache_known = qsweep_cache_derived_bytes(&cache_before, &cache_err) == QS_OK;
    const char *conninfo = qsweep_db_arg(db);
    if (!conninfo) {
        st = qsweep_private_db_start(pg_dir, &r.pg, &r.pg_adopted, &err);
        if (!st) {
            printf("private PostgreSQL cluster in %s%s\n", qc_pgserver_data_dir(r.pg),
                   r.pg_adopted == QSWEEP_PG_ADOPTED ? " (already running: left running)"
                   : r.pg_adopted == QSWEEP_PG_SHARED
                       ? " (started by another qsweep run: shared, the last run to end stops it)"
                       : "");
            snprintf(conn_buf, sizeof conn_buf, "%s", qc_pgserver_conninfo(r.pg));
            conninfo = conn_buf;
        }
    }
    st = startup_check(st, &err);
    if (!st) st = startup_check(qc_store_open(conninfo, "run", &r.store, &err), &err);
    qc_submit_counts counts = {0};
    if (!st) st = startup_check(qsweep_submit_jobs(r.store, g, &jobs, &counts, &err), &err);
    if (!st) qsweep_print_submit(g, jobs.n, &counts, stdout);

    qc_progress prog = {0};
    qc_progress *rows = NULL;
    size_t n = 0;
    if (!st) st = startup_check(qc_store_progress(r.store, g->name, &rows, &n, &err), &err);
    if (!st) prog = rows[0];
    free(rows);

    if (!st && prog.pending + prog.running > 0) {
        /* Another coordinator on this database (a first `qsweep run`, a `qsweep coordinator`)
           would refuse ours with nothing on the screen but "see coordinator.log", while its
           workers run these very jobs: say so, and who it is. */
        bool held = false;
        char holder[400];
        st = qc_store_coordinator_running(r.store, &held, holder, sizeof holder, &err);
        if (!st && held)
            st = qs_error_set(
                &err, QS_ESTATE,
                "another coordinator is already running on this database: %s, probably an "
                "earlier qsweep run or a qsweep coordinator; its workers run the queued jobs, "
                "this experiment's included (%lld pending, %lld running). Follow them with "
                "%s status %s, or stop that run first",
                holder, (long long)prog.pending, (long long)prog.running, qsweep_invoked(),
                g->name);
    }
    if (!st && prog.pending + prog.running > 0) {
        st = run_log_dir(g->name, logs, sizeof logs, &err);
        if (!st) logs_made = 1;
        snprintf(r.ipc_dir, sizeof r.ipc_dir, "/tmp/qsweep-run-XXXXXX");
        if (!st && !mkdtemp(r.ipc_dir)) {
            st = qs_error_set(&err, QS_EIO, "mkdtemp %s: %s", r.ipc_dir, strerror(errno));
            r.ipc_dir[0] = 0;
        }
        r.children = calloc((size_t)workers + 1, sizeof *r.children);
        if (!st && !r.children) st = qs_error_set(&err, QS_ENOMEM, "out of memory");
        char lease[32];
        snprintf(r.endpoint, sizeof r.endpoint, "ipc://%s/coordinator", r.ipc_dir);
        snprintf(lease, sizeof lease, "%d", lease_ms);
        snprintf(r.threads, sizeof r.threads, "%d", threads);
        r.max_restarts = RESTARTS_PER_WORKER * workers;
        qw_gpu gpus[QW_GPUS_MAX]; /* shared out: qsweep_run_worker_gpus */
        size_t n_gpus = 0;
        char why[256];
        qw_gpu_discover(gpus, QW_GPUS_MAX, &n_gpus, why, sizeof why);
        r.n_gpus = (int)n_gpus;
        for (size_t j = 0; j < jobs.n; j++)
            if (jobs.jobs[j].need.gpus > r.gpus_per_job) r.gpus_per_job = jobs.jobs[j].need.gpus;
        if (!st) {
            child *co = &r.children[r.n_children++];
            snprintf(co->name, sizeof co->name, "coordinator");
            snprintf(co->log, sizeof co->log, "%s/coordinator.log", logs);
            /* the connection string goes by environment, not argv, so a password in it does
             * not show in ps */
            if (setenv("QSWEEP_DB", conninfo, 1) != 0)
                st = qs_error_set(&err, QS_EIO, "setenv QSWEEP_DB: %s", strerror(errno));
            /* The coordinator and workers of run talk over a private ipc:// socket in a 0700
             * directory: CURVE keys exported for a cluster (README, Several machines) would
             * make the coordinator demand a handshake its own workers cannot make. */
            const char *curve[] = {"QSWEEP_CURVE_SECRET", "QSWEEP_CURVE_PUBLIC",
                                   "QSWEEP_CURVE_SERVER", "QSWEEP_CURVE_AUTHORIZED"};
            for (size_t k = 0; k < sizeof curve / sizeof curve[0]; k++)
                unsetenv(curve[k]);
            char *av[] = {"qsweep", "coordinator", "--bind", r.endpoint, "--lease-ms", lease, NULL};
            if (!st) st = startup_check(spawn(co, av, &err), &err);
            if (!st) st = startup_check(wait_coordinator(r.store, co, &err), &err);
        }
        snprintf(r.host, sizeof r.host, "local");
        gethostname(r.host, sizeof r.host);
        r.host[sizeof r.host - 1] = 0;
        for (int i = 0; !st && i < workers; i++) {
            child *w = &r.children[r.n_children++];
            snprintf(w->name, sizeof w->name, "worker %d", i + 1);
            snprintf(w->log, sizeof w->log, "%s/worker-%d.log", logs, i + 1);
            st = startup_check(spawn_worker(&r, r.n_children - 1, &err), &err);
        }
        if (!st) {
            if (workers == 1)
                printf("coordinator and 1 worker (%d thread%s) running; logs in %s\n", threads,
                       threads == 1 ? "" : "s", logs);
            else
                printf("coordinator and %d workers (%d thread%s each) running; logs in %s\n",
                       workers, threads, threads == 1 ? "" : "s", logs);
            fflush(stdout);
            st = watch(&r, g->name, &prog, &stuck, stuck_why, sizeof stuck_why, &err);
        }
        if (st == QS_ECANCELLED && r.n_children > 0)
            fprintf(stderr, "\nqsweep run: interrupted; stopping the workers and the coordinator "
                            "(running jobs are reported preempted and rerun next time)\n");
    } else if (!st) {
        qsweep_print_progress(r.store, &prog, stdout);
        putchar('\n');
    }
    /* stop the workers first, so they hand their jobs back to a coordinator still running */
    if (r.n_children > 1) stop_children(r.children + 1, r.n_children - 1, SIGTERM, 15000);
    if (r.n_children > 0) stop_children(r.children, 1, SIGTERM, 15000);
    if (!st) {
        printf("\n");
        st = qsweep_print_results(r.store, g->name, 0, stdout, &err);
        if (!st && r.pg && r.pg_adopted == QSWEEP_PG_ADOPTED)
            printf("(the private cluster was already running, so qsweep run left it running;\n"
                   "   %s db stop stops it)\n",
                   qsweep_invoked());
        else if (!st && r.pg)
            printf(
                "(qsweep run stops its private cluster when the last run using it ends; to query\n"
                "   it, start it with   eval \"$(%s db start)\"   and stop it with\n"
                "   %s db stop)\n",
                qsweep_invoked(), qsweep_invoked());
    }
    if (!st && cache_known && r.n_children > 0 &&
        qsweep_cache_derived_bytes(&cache_after, &cache_err) == QS_OK) {
        char added[32];
        qsweep_format_bytes(cache_after > cache_before ? cache_after - cache_before : 0, added,
                            sizeof added);
        printf("cache: this run added %s of baselines and token files (%s cache lists and "
               "prunes them)\n",
               added, qsweep_invoked());
    }
    if (logs_made) {
        fflush(stdout);
        fprintf(st ? stderr : stdout, "logs of this run's coordinator and workers: %s\n", logs);
    }
    run_cleanup(&r);
    int rc = st                                            ? qsweep_fail("run", &err)
             : (prog.failed + prog.cancelled > 0 || stuck) ? QS_EXIT_JOBS_FAILED
                                                           : QS_EXIT_OK;
    if (!st && stuck)
        fprintf(stderr,
                "qsweep run: stopped with %lld job(s) pending: %s. Run them where workers have "
                "such GPUs (%s worker --connect ...), or change the grid's resources\n",
                (long long)prog.pending, stuck_why, qsweep_invoked());
    if (!st && rc == QS_EXIT_JOBS_FAILED && prog.failed + prog.cancelled > 0)
        fprintf(stderr,
                "qsweep run: %lld job(s) failed and %lld cancelled (SELECT * FROM v_failed_jobs)\n",
                (long long)prog.failed, (long long)prog.cancelled);
    qc_job_list_free(&jobs);
    qc_grid_free(g);
    return rc;
}
