/* qsweep: the command a researcher runs. Dispatches to the subcommands (cli.h). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "cli.h"
#include "exit_status.h"
#include "migrate.h"
#include "nearest.h"
#include "probe.h"

int qsweep_cmd_export(int argc, char **argv); /* cmd_export.c */

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
    {"requeue", qsweep_cmd_requeue,
     "EXPERIMENT: queue its failed and cancelled jobs again (coordinator stopped)"},
    {"pin", qsweep_cmd_pin,
     "EXPERIMENT PATH: pin it to one numerics path (its jobs go only to workers of it)"},
    {"unpin", qsweep_cmd_unpin, "EXPERIMENT: remove its numerics pin (its next job pins it again)"},
    {"results", qsweep_cmd_results, "EXPERIMENT: sensitivity tables (--csv, --json)"},
    {"coordinator", qsweep_cmd_coordinator, "serve jobs to workers over ZeroMQ"},
    {"worker", qsweep_cmd_worker, "run jobs from a coordinator"},
    {"workers", qsweep_cmd_workers, "list the workers the coordinator has seen"},
    {"db", qsweep_cmd_db, "migrate | start | stop: schema migrations, the private cluster"},
    {"cache", qsweep_cmd_cache,
     "[list] | prune --older-than DAYS | clear: sizes of the caches, and pruning them"},
    {"keygen", qsweep_cmd_keygen, "print a CURVE key pair for coordinator and workers"},
    {"report", qsweep_cmd_report, "EXPERIMENT -o FILE: one self-contained HTML report"},
    {"slurm", qsweep_cmd_slurm,
     "GRID --workers N --connect EP [-- sbatch options]: queue a grid, start a worker array"},
    {"plan", qsweep_cmd_plan,
     "EXPERIMENT --budget-bits B: per-linear formats under a bits budget, from a sweep"},
    {"tokenize", qsweep_cmd_tokenize, "MODEL TEXT -o FILE: a text through the model's tokenizer"},
    {"export", qsweep_cmd_export,
     "GRID -o DIR: a plan or job as a serving checkpoint (vLLM, llama.cpp)"},
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

/* The connection string the command uses (qsweep_db_arg), so qsweep_fail can redact it. */
static const char *current_conninfo;

int qsweep_parse_int(const char *cmd, const char *flag, const char *arg, long lo, long hi,
                     int *out) {
    char *end = NULL;
    errno = 0;
    long v = strtol(arg, &end, 10);
    /* the whole argument must be the number: "1x", "", " 2" and overflow are refused */
    if (!*arg || *arg == ' ' || *end || errno == ERANGE || v < lo || v > hi) {
        fprintf(stderr, "qsweep %s: %s %s: expected an integer in [%ld, %ld]\n", cmd, flag, arg, lo,
                hi);
        return -1;
    }
    *out = (int)v;
    return 0;
}

void qsweep_redact_conninfo(const char *conninfo, char *out, size_t cap) {
    char *errmsg = NULL;
    PQconninfoOption *opts = PQconninfoParse(conninfo, &errmsg);
    PQfreemem(errmsg);
    if (!opts) {
        /* unparsable: it may still hold a password, so none of it is shown */
        snprintf(out, cap, "(connection string not shown: libpq cannot parse it)");
        return;
    }
    size_t n = 0;
    out[0] = 0;
    for (PQconninfoOption *o = opts; o->keyword; o++) {
        if (!o->val || !*o->val || !strcmp(o->keyword, "password")) continue;
        int quote = strpbrk(o->val, " \t'\\") != NULL || !*o->val;
        int k = snprintf(out + n, n < cap ? cap - n : 0, "%s%s=%s%s%s", n ? " " : "", o->keyword,
                         quote ? "'" : "", o->val, quote ? "'" : "");
        if (k > 0) n += (size_t)k;
        if (n >= cap) break;
    }
    PQconninfoFree(opts);
}

/* Copies msg into out with every occurrence of what replaced by with. */
static void replace_all(const char *msg, const char *what, const char *with, char *out,
                        size_t cap) {
    size_t n = 0, wl = strlen(what);
    while (*msg && n + 1 < cap) {
        if (wl && !strncmp(msg, what, wl)) {
            n += (size_t)snprintf(out + n, cap - n, "%s", with);
            if (n >= cap) n = cap - 1;
            msg += wl;
        } else {
            out[n++] = *msg++;
        }
    }
    out[n < cap ? n : cap - 1] = 0;
}

void qsweep_redact_message(const char *msg, char *out, size_t cap) {
    snprintf(out, cap, "%s", msg);
    if (!current_conninfo || !*current_conninfo) return;
    size_t len = strlen(out) + 1;
    char *tmp = malloc(cap + len), *shown = malloc(cap);
    if (!tmp || !shown) {
        free(tmp);
        free(shown);
        return;
    }
    qsweep_redact_conninfo(current_conninfo, shown, cap);
    replace_all(msg, current_conninfo, shown, tmp, cap);
    /* a password that appears on its own (a server message quoting it) is masked as well */
    PQconninfoOption *opts = PQconninfoParse(current_conninfo, NULL);
    snprintf(out, cap, "%s", tmp);
    for (PQconninfoOption *o = opts; o && o->keyword; o++)
        if (!strcmp(o->keyword, "password") && o->val && *o->val) {
            replace_all(tmp, o->val, "********", out, cap);
        }
    PQconninfoFree(opts);
    free(tmp);
    free(shown);
}

/* "; did you mean 'NAME'?" into out ("" when no experiment of the database is near) for a
 * message saying "no experiment named X" or "'X'": the database is the command's own. */
static void suggest_experiment(const char *msg, char *out, size_t cap) {
    out[0] = 0;
    const char *at = strstr(msg, "no experiment named ");
    if (!at || !current_conninfo) return;
    at += strlen("no experiment named ");
    char name[256];
    size_t n = 0;
    if (*at == '\'') at++;
    while (at[n] && at[n] != '\'' && at[n] != ' ' && at[n] != ',' && n + 1 < sizeof name)
        n++;
    memcpy(name, at, n);
    name[n] = 0;
    PGconn *c = PQconnectdb(current_conninfo);
    PGresult *r =
        PQstatus(c) == CONNECTION_OK ? PQexec(c, "SELECT name FROM experiments ORDER BY id") : NULL;
    if (r && PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0) {
        int rows = PQntuples(r);
        const char **names = malloc((size_t)rows * sizeof *names);
        if (names) {
            for (int i = 0; i < rows; i++)
                names[i] = PQgetvalue(r, i, 0);
            const char *near = qs_nearest(name, names, (size_t)rows);
            if (near) snprintf(out, cap, "; did you mean '%s'?", near);
            free(names);
        }
    }
    PQclear(r);
    PQfinish(c);
}

int qsweep_fail(const char *cmd, const qs_error *err) {
    const char *msg = err->msg[0] ? err->msg : qs_status_name(err->code);
    /* a message that already starts with the command's name ("cancel: ...") is not prefixed
     * twice */
    size_t cl = strlen(cmd);
    if (!strncmp(msg, cmd, cl) && msg[cl] == ':' && msg[cl + 1] == ' ') msg += cl + 2;
    char shown[sizeof err->msg + 512], hint[300] = "";
    qsweep_redact_message(msg, shown, sizeof shown);
    if (err->code == QS_ENOTFOUND) suggest_experiment(err->msg, hint, sizeof hint);
    fprintf(stderr, "qsweep %s: %s%s\n", cmd, shown, hint);
    return qs_exit_code(err->code);
}

static const char *invoked = "qsweep";

const char *qsweep_invoked(void) {
    return invoked;
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
    const char *env = getenv("QSWEEP_DB");
    const char *db = (opt && *opt) ? opt : (env && *env) ? env : NULL;
    if (db) current_conninfo = db;
    return db;
}

qs_status qsweep_open_existing_store(const char *conninfo, const char *role, qc_store **out,
                                     qs_error *err) {
    *out = NULL;
    current_conninfo = conninfo;
    PGconn *c = PQconnectdb(conninfo);
    if (!c) return qs_error_set(err, QS_ENOMEM, "out of memory connecting");
    if (PQstatus(c) != CONNECTION_OK) {
        char msg[600];
        snprintf(msg, sizeof msg, "%s", PQerrorMessage(c));
        msg[strcspn(msg, "\n")] = 0;
        PQfinish(c);
        return qs_error_set(err, QS_EDB, "connect to PostgreSQL (%s): %s", conninfo, msg);
    }
    PGresult *r = PQexec(c, "SELECT to_regclass('schema_migrations') IS NULL");
    int missing = PQresultStatus(r) == PGRES_TUPLES_OK && !strcmp(PQgetvalue(r, 0, 0), "t");
    if (PQresultStatus(r) == PGRES_TUPLES_OK && !missing) {
        PQclear(r);
        r = PQexec(c, "SELECT count(*) FROM schema_migrations");
    }
    qs_status st = QS_OK;
    if (missing) {
        st = qs_error_set(err, QS_EDB,
                          "the database has no qsweep schema (%s never creates or migrates it; "
                          "create it with %s db migrate, or %s submit)",
                          role, invoked, invoked);
    } else if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        st = qs_error_set(err, QS_EDB, "reading schema_migrations: %s", PQerrorMessage(c));
    } else {
        long n = strtol(PQgetvalue(r, 0, 0), NULL, 10);
        if ((size_t)n < qc_schema_migrations_count)
            st = qs_error_set(err, QS_EDB,
                              "the database schema has %ld of %zu migrations (%s never creates "
                              "or migrates it; update it with %s db migrate)",
                              n, qc_schema_migrations_count, role, invoked);
    }
    PQclear(r);
    PQfinish(c);
    /* the schema is current, so qc_store_open's migration check applies nothing */
    return st ? st : qc_store_open(conninfo, role, out, err);
}

qs_status qsweep_load_grid(const char *path, const char *const *sets, size_t n_sets, qc_grid **grid,
                           qc_job_list *jobs, qs_error *err) {
    /* a directory, FIFO or device as the grid: refused before an open that could block */
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
        return qs_error_set(err, QS_EINVAL, "%s: not a regular file (%s)", path,
                            S_ISDIR(sb.st_mode) ? "a directory" : "a FIFO, socket or device");
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
    /* a name without a slash was found on PATH: "qsweep" works as printed */
    if (argv[0] && strchr(argv[0], '/')) invoked = argv[0];
    if (argc < 2) {
        usage(stderr);
        return QS_EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return qsweep_stdout_close(NULL, QS_EXIT_OK);
    }
    if (!strcmp(argv[1], "--version")) {
        printf("qsweep 0.1.0 (numerics %s)\n", QS_NUMERICS_VERSION);
        return qsweep_stdout_close(NULL, QS_EXIT_OK);
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) {
            /* getopt names argv[0] in its messages: "qsweep status: unrecognized option" */
            char name[64];
            snprintf(name, sizeof name, "qsweep %s", commands[i].name);
            argv[1] = name;
            /* every command's printed result is checked here, once (stdout_close.c) */
            return qsweep_stdout_close(commands[i].name, commands[i].fn(argc - 1, argv + 1));
        }
    fprintf(stderr, "qsweep: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return QS_EXIT_USAGE;
}
