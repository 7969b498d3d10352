/* qsweep: the command a researcher runs (issue 5). Dispatches to the subcommands (cli.h). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "probe.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *summary;
} commands[] = {
    {"run", qsweep_cmd_run,
     "GRID: from grid to results on this machine (database, coordinator, workers)"},
    {"submit", qsweep_cmd_submit, "GRID: queue a grid's jobs (--dry-run: count and show a sample)"},
    {"status", qsweep_cmd_status,
     "[EXPERIMENT]: progress bar, counts by state and ETA per experiment"},
    {"cancel", qsweep_cmd_cancel, "EXPERIMENT | --job JOB_KEY: ask the coordinator to cancel"},
    {"results", qsweep_cmd_results, "EXPERIMENT: sensitivity tables (--csv, --json)"},
    {"coordinator", qsweep_cmd_coordinator, "serve jobs to workers over ZeroMQ"},
    {"worker", qsweep_cmd_worker, "run jobs from a coordinator"},
    {"workers", qsweep_cmd_workers, "list the workers the coordinator has seen"},
    {"db", qsweep_cmd_db, "migrate | start | stop: schema migrations, the private cluster"},
    {"keygen", qsweep_cmd_keygen, "print a CURVE key pair for coordinator and workers"},
};

static void usage(FILE *out) {
    fprintf(out, "usage: qsweep <command> [options]   (qsweep <command> --help for its "
                 "options)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-12s %s\n", commands[i].name, commands[i].summary);
    fprintf(
        out,
        "\nThe database: --db CONNINFO or $QSWEEP_DB (a libpq connection string); `run` without\n"
        "either starts a private PostgreSQL under ${XDG_DATA_HOME:-~/.local/share}/qsweep/pg.\n"
        "\nexit codes: 0 ok, 1 usage, 2 bad input (grid, model, token file), 3 database,\n"
        "            4 runtime failure, 5 some jobs failed or were cancelled, 130 interrupted\n");
}

int qsweep_exit_code(qs_status st) {
    switch (st) {
    case QS_OK:
        return QSWEEP_EXIT_OK;
    case QS_EINVAL:
    case QS_EFORMAT:
    case QS_EUNSUPPORTED:
    case QS_ENOTFOUND:
        return QSWEEP_EXIT_INPUT;
    case QS_EDB:
        return QSWEEP_EXIT_DB;
    case QS_ECANCELLED:
        return QSWEEP_EXIT_INTERRUPTED;
    default:
        return QSWEEP_EXIT_RUNTIME;
    }
}

int qsweep_fail(const char *cmd, const qs_error *err) {
    fprintf(stderr, "qsweep %s: %s\n", cmd, err->msg[0] ? err->msg : qs_status_name(err->code));
    return qsweep_exit_code(err->code);
}

const char *qsweep_self_exe(void) {
    static char path[PATH_MAX];
    if (!path[0]) {
        ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
        if (n <= 0) return "qsweep";
        path[n] = 0;
    }
    return path;
}

const char *qsweep_db_arg(const char *opt) {
    if (opt && *opt) return opt;
    const char *env = getenv("QSWEEP_DB");
    return (env && *env) ? env : NULL;
}

qs_status qsweep_load_grid(const char *path, const char *const *sets, size_t n_sets, qc_grid **grid,
                           qc_job_list *jobs, qs_error *err) {
    qs_status st = qc_grid_load(path, sets, n_sets, qsweep_probe(), grid, err);
    if (st) return st;
    st = qc_grid_expand(*grid, jobs, err);
    if (st) {
        qc_grid_free(*grid);
        *grid = NULL;
    }
    return st;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return QSWEEP_EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return QSWEEP_EXIT_OK;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("qsweep 0.1.0 (numerics %s)\n", QC_NUMERICS_VERSION);
        return QSWEEP_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "qsweep: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return QSWEEP_EXIT_USAGE;
}
