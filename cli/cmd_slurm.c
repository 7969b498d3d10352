/* qsweep slurm GRID --workers N --connect ENDPOINT [-- SBATCH OPTIONS]: submits a grid and a
 * SLURM array of N workers in one step. The coordinator runs elsewhere
 * (deploy/systemd/qsweep-coordinator.service); the array's tasks connect to it.
 *
 * The batch script is deploy/slurm/qsweep-worker.sbatch, embedded in the binary
 * (slurm_script.h) and given to sbatch on its standard input; its settings travel in the
 * environment (sbatch's default --export=ALL): QSWEEP_BIN (this binary), QSWEEP_CONNECT,
 * QSWEEP_EXIT_WHEN_IDLE. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "slurm_script.h"

static void slurm_usage(FILE *out) {
    fprintf(out,
            "usage: qsweep slurm GRID --workers N --connect ENDPOINT [--set KEY=VALUE]...\n"
            "                    [--exit-when-idle SECONDS] [--db CONNINFO] [-- SBATCH_OPTION...]\n"
            "       qsweep slurm --print-script\n"
            "  Queues GRID's jobs (as qsweep submit), then submits a SLURM job array of N qsweep\n"
            "  workers (sbatch --array=0-(N-1)) that connect to the coordinator at ENDPOINT. Each\n"
            "  task runs one worker; SIGTERM from SLURM (--signal=B:TERM@120, scancel,\n"
            "  preemption) turns its running attempt into a preempted one, which another worker\n"
            "  takes up; --requeue is set. Prints the SLURM job id.\n"
            "  --workers N             array size, 1..100000\n"
            "  --connect ENDPOINT      the coordinator as the nodes reach it (default\n"
            "                          $QSWEEP_CONNECT), e.g. tcp://coord.example:5555\n"
            "  --exit-when-idle SECONDS  a worker without a job for that long leaves and its\n"
            "                          task ends, so the array drains when the queue is empty\n"
            "                          (default 120; 0: never)\n"
            "  --set KEY=VALUE         grid overrides, as qsweep submit\n"
            "  -- SBATCH_OPTION...     passed to sbatch, e.g. -- --partition=gpu --gres=gpu:1\n"
            "                          --time=04:00:00 --output=logs/%%A_%%a.out\n"
            "  --print-script          print the batch script (deploy/slurm/qsweep-worker.sbatch)\n"
            "  The binary's path must be valid on the nodes; CURVE keys ($QSWEEP_CURVE_*) are\n"
            "  passed on through the environment.\n");
}

/* Runs sbatch with argv (NULL-terminated), the batch script on its standard input and the
 * worker's settings in its environment; *job_id receives the first line sbatch --parsable
 * printed. Errors: QS_EIO (pipes, fork, sbatch not found), QS_EINVAL (sbatch refused: its
 * exit code and output). */
static qs_status run_sbatch(char *const *argv, const char *connect, int idle, char *job_id,
                            size_t cap, qs_error *err) {
    int in[2], out[2];
    if (pipe(in) != 0) return qs_error_set(err, QS_EIO, "pipe: %s", strerror(errno));
    if (pipe(out) != 0) {
        close(in[0]);
        close(in[1]);
        return qs_error_set(err, QS_EIO, "pipe: %s", strerror(errno));
    }
    char idle_s[16];
    snprintf(idle_s, sizeof idle_s, "%d", idle);
    pid_t pid = fork();
    if (pid < 0) {
        close(in[0]);
        close(in[1]);
        close(out[0]);
        close(out[1]);
        return qs_error_set(err, QS_EIO, "fork: %s", strerror(errno));
    }
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        dup2(out[1], 2);
        close(in[0]);
        close(in[1]);
        close(out[0]);
        close(out[1]);
        setenv("QSWEEP_BIN", qsweep_self_exe(), 1);
        setenv("QSWEEP_CONNECT", connect, 1);
        setenv("QSWEEP_EXIT_WHEN_IDLE", idle_s, 1);
        execvp(argv[0], argv);
        fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    /* the script is a few kilobytes: it fits in the pipe before sbatch reads it */
    void (*old)(int) = signal(SIGPIPE, SIG_IGN);
    size_t len = strlen(qsweep_slurm_sbatch), done = 0;
    while (done < len) {
        ssize_t k = write(in[1], qsweep_slurm_sbatch + done, len - done);
        if (k <= 0) break;
        done += (size_t)k;
    }
    close(in[1]);
    char buf[4096];
    size_t n = 0;
    for (ssize_t k; n + 1 < sizeof buf && (k = read(out[0], buf + n, sizeof buf - 1 - n)) > 0;)
        n += (size_t)k;
    buf[n] = 0;
    close(out[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    signal(SIGPIPE, old);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
        buf[--n] = 0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) == 127)
        return qs_error_set(err, QS_EIO, "sbatch: %s", n ? buf : "did not run");
    if (WEXITSTATUS(status) != 0)
        return qs_error_set(err, QS_EINVAL, "sbatch exited %d: %s", WEXITSTATUS(status), buf);
    /* --parsable: "jobid[;cluster]" on the last line (earlier lines may be warnings) */
    char *last = strrchr(buf, '\n');
    last = last ? last + 1 : buf;
    size_t idl = strcspn(last, ";");
    if (idl >= cap) idl = cap - 1;
    memcpy(job_id, last, idl);
    job_id[idl] = 0;
    return QS_OK;
}

int qsweep_cmd_slurm(int argc, char **argv) {
    static const struct option opts[] = {{"workers", required_argument, 0, 'w'},
                                         {"connect", required_argument, 0, 'c'},
                                         {"exit-when-idle", required_argument, 0, 'e'},
                                         {"set", required_argument, 0, 's'},
                                         {"db", required_argument, 0, 'd'},
                                         {"print-script", no_argument, 0, 'p'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char **sets = calloc((size_t)argc + 1, sizeof *sets);
    if (!sets) return QS_EXIT_RUNTIME;
    size_t n_sets = 0;
    int workers = 0, idle = 120, c, rc = -1;
    const char *connect = getenv("QSWEEP_CONNECT"), *db = NULL;
    optind = 1;
    while (rc < 0 && (c = getopt_long(argc, argv, "w:c:e:s:d:ph", opts, NULL)) != -1) {
        switch (c) {
        case 'w':
            if (qsweep_parse_int("slurm", "--workers", optarg, 1, 100000, &workers))
                rc = QS_EXIT_USAGE;
            break;
        case 'c':
            connect = optarg;
            break;
        case 'e':
            if (qsweep_parse_int("slurm", "--exit-when-idle", optarg, 0, 2000000, &idle))
                rc = QS_EXIT_USAGE;
            break;
        case 's':
            sets[n_sets++] = optarg;
            break;
        case 'd':
            db = optarg;
            break;
        case 'p':
            fputs(qsweep_slurm_sbatch, stdout);
            rc = QS_EXIT_OK;
            break;
        case 'h':
            slurm_usage(stdout);
            rc = QS_EXIT_OK;
            break;
        default:
            slurm_usage(stderr);
            rc = QS_EXIT_USAGE;
        }
    }
    if (rc >= 0) {
        free(sets);
        return rc;
    }
    /* GRID, then (after "--") the sbatch options */
    const char *conninfo = qsweep_db_arg(db);
    /* GNU getopt moves a "--" to just before the operands: what follows GRID then is for
       sbatch; without it, a second operand is a mistake */
    int dashdash = optind > 0 && !strcmp(argv[optind - 1], "--");
    const char *problem = optind >= argc                   ? "GRID is required"
                          : workers == 0                   ? "--workers N is required"
                          : !connect || !*connect          ? "--connect ENDPOINT is required"
                          : !conninfo                      ? "no database: give --db CONNINFO or "
                                                             "set QSWEEP_DB"
                          : argc - optind > 1 && !dashdash ? "one GRID only (sbatch options go "
                                                             "after --)"
                                                           : NULL;
    if (problem) {
        fprintf(stderr, "qsweep slurm: %s\n", problem);
        slurm_usage(stderr);
        free(sets);
        return QS_EXIT_USAGE;
    }
    const char *grid_path = argv[optind];
    qs_error err = {0};
    qc_grid *g = NULL;
    qc_job_list jobs = {0};
    qc_store *store = NULL;
    qc_submit_counts counts = {0};
    qs_status st = qsweep_load_grid(grid_path, sets, n_sets, &g, &jobs, &err);
    if (!st) st = qc_store_open(conninfo, "slurm", &store, &err);
    if (!st) st = qsweep_submit_jobs(store, g, &jobs, &counts, &err);
    qc_store_close(store);
    if (!st) qsweep_print_submit(g, jobs.n, &counts, stdout);
    char job_id[128] = "";
    if (!st) {
        size_t n_extra = (size_t)(argc - optind - 1);
        char **sb = calloc(n_extra + 4, sizeof *sb);
        char array[64];
        snprintf(array, sizeof array, "--array=0-%d", workers - 1);
        if (!sb) {
            st = qs_error_set(&err, QS_ENOMEM, "slurm");
        } else {
            size_t k = 0;
            sb[k++] = "sbatch";
            sb[k++] = "--parsable";
            sb[k++] = array;
            for (int i = optind + 1; i < argc; i++)
                sb[k++] = argv[i];
            sb[k] = NULL;
            fflush(stdout);
            st = run_sbatch(sb, connect, idle, job_id, sizeof job_id, &err);
            free(sb);
            if (st) {
                char msg[sizeof err.msg];
                snprintf(msg, sizeof msg, "%s", err.msg);
                qs_error_set(&err, st,
                             "%s (the grid's jobs are queued: run workers another way, "
                             "or qsweep cancel %s)",
                             msg, g->name);
            }
        }
    }
    if (!st)
        printf("SLURM job %s: %d worker(s) connecting to %s; squeue -j %s, scancel %s\n", job_id,
               workers, connect, job_id, job_id);
    qc_job_list_free(&jobs);
    qc_grid_free(g);
    free(sets);
    return st ? qsweep_fail("slurm", &err) : QS_EXIT_OK;
}
