/* qsweep pin and qsweep unpin: set and remove an experiment's numerics pin (docs/gpu.md
 * "Numerics paths and baselines"; coordinator/store/store.h qc_store_pin, qc_store_unpin). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "exit_status.h"
#include "numerics_path.h"
#include "store.h"

static void pin_usage(FILE *out) {
    fprintf(out,
            "usage: qsweep pin EXPERIMENT PATH [--db CONNINFO] [--wait SECONDS]\n"
            "  Pins the experiment to one numerics path (experiment_numerics): from then on its\n"
            "  jobs go only to workers announcing PATH, even before any job of it has run. PATH\n"
            "  is one path a worker announces (qsweep workers): " QS_NUMERICS_CPU_FIXED ",\n"
            "  cpu-openblas-<version>-<core> or cuda-cc<NN>-<fp32|bf16|auto|emulated>; the\n"
            "  families cpu and cuda and any are a grid's numerics requests, not pins.\n"
            "  Pinning to the path it is pinned to changes nothing; another pin is replaced.\n"
            "  Refused, changing nothing, while a result of the experiment was computed on\n"
            "  another path (submit the grid as a new experiment with numerics: PATH), while a\n"
            "  job of it runs on another path, or when its grid's numerics does not allow PATH.\n"
            "  A running coordinator applies it within a second; --wait (default 10) is how\n"
            "  long to wait for its answer. Without a coordinator the pin is written at once.\n");
}

/* Options of `qsweep <cmd>` (pin, unpin): --db into *db, --wait into *wait_s (default 10), then
 * exactly nargs operands from argv[optind]. -1 when the command goes on, else the exit status
 * (--help: usage on stdout, 0; a bad option or operand count: usage on stderr, 1). */
static int pin_options(int argc, char **argv, const char *cmd, void (*usage)(FILE *), int nargs,
                       const char **db, int *wait_s) {
    static const struct option opts[] = {{"db", required_argument, 0, 'd'},
                                         {"wait", required_argument, 0, 'w'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int c;
    *db = NULL;
    *wait_s = 10;
    optind = 1;
    while ((c = getopt_long(argc, argv, "d:w:h", opts, NULL)) != -1) {
        switch (c) {
        case 'd':
            *db = optarg;
            break;
        case 'w':
            if (qsweep_parse_int(cmd, "--wait", optarg, 0, 3600, wait_s)) return QS_EXIT_USAGE;
            break;
        case 'h':
            usage(stdout);
            return QS_EXIT_OK;
        default:
            usage(stderr);
            return QS_EXIT_USAGE;
        }
    }
    if (argc - optind != nargs) {
        usage(stderr);
        return QS_EXIT_USAGE;
    }
    return -1;
}

int qsweep_cmd_pin(int argc, char **argv) {
    const char *db;
    int wait_s;
    int rc = pin_options(argc, argv, "pin", pin_usage, 2, &db, &wait_s);
    if (rc >= 0) return rc;
    const char *exp = argv[optind], *path = argv[optind + 1];
    if (!qs_numerics_path_valid(path)) { /* before any database: a typo needs none */
        fprintf(stderr,
                "qsweep pin: '%s' is no numerics path a worker announces: give one path, "
                QS_NUMERICS_PATH_FORMS " (cpu, cuda and any are requests a grid's numerics key "
                "makes, not pins)\n",
                path);
        return QS_EXIT_INPUT;
    }
    if (!(db = qsweep_find_db(db, "pin"))) return QS_EXIT_USAGE;
    qs_error err = {0};
    qc_store *s = NULL;
    char msg[1024];
    qs_status st = qsweep_open_existing_store(qsweep_db_arg(db), "pin", &s, &err);
    if (!st) st = qc_store_pin(s, exp, path, wait_s * 1000, msg, sizeof msg, &err);
    qc_store_close(s);
    if (st) return qsweep_fail("pin", &err);
    printf("experiment %s: %s\n", exp, msg);
    return QS_EXIT_OK;
}

static void unpin_usage(FILE *out) {
    fprintf(out,
            "usage: qsweep unpin EXPERIMENT [--db CONNINFO] [--wait SECONDS]\n"
            "  Removes the experiment's numerics pin (experiment_numerics): its next job to be\n"
            "  dispatched pins it again, to the path of the worker that takes it. Refused while\n"
            "  a job of the experiment runs on the pinned path. A running coordinator applies it\n"
            "  within a second; --wait (default 10) is how long to wait for its answer.\n"
            "  Without a coordinator the pin is removed at once.\n");
}

int qsweep_cmd_unpin(int argc, char **argv) {
    const char *db;
    int wait_s;
    int rc = pin_options(argc, argv, "unpin", unpin_usage, 1, &db, &wait_s);
    if (rc >= 0) return rc;
    const char *exp = argv[optind];
    if (!(db = qsweep_find_db(db, "unpin"))) return QS_EXIT_USAGE;
    qs_error err = {0};
    qc_store *s = NULL;
    char msg[512];
    qs_status st = qsweep_open_existing_store(qsweep_db_arg(db), "unpin", &s, &err);
    if (!st) st = qc_store_unpin(s, exp, wait_s * 1000, msg, sizeof msg, &err);
    qc_store_close(s);
    if (st) return qsweep_fail("unpin", &err);
    printf("experiment %s: %s\n", exp, msg);
    return QS_EXIT_OK;
}
