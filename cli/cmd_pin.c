/* qsweep unpin: removes an experiment's numerics pin (docs/gpu.md "Numerics paths and
 * baselines"; coordinator/store/store.h qc_store_unpin). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "exit_status.h"
#include "store.h"

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
    static const struct option opts[] = {{"db", required_argument, 0, 'd'},
                                         {"wait", required_argument, 0, 'w'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *db = NULL;
    int wait_s = 10, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "d:w:h", opts, NULL)) != -1) {
        switch (c) {
        case 'd':
            db = optarg;
            break;
        case 'w':
            if (qsweep_parse_int("unpin", "--wait", optarg, 0, 3600, &wait_s)) return QS_EXIT_USAGE;
            break;
        case 'h':
            unpin_usage(stdout);
            return QS_EXIT_OK;
        default:
            unpin_usage(stderr);
            return QS_EXIT_USAGE;
        }
    }
    if (argc - optind != 1) {
        unpin_usage(stderr);
        return QS_EXIT_USAGE;
    }
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
