/* qsweep-worker: a thin command line over qw_run (loop.h) with the test kinds (test_kinds.h),
 * for tests and benchmarks; production workers are `qsweep worker` (cli/cmd_serve.c).
 * Usage: qsweep-worker --endpoint tcp://host:port [--id NAME] [--threads N]
 *                      [--heartbeat-ms MS] [--timeout-ms MS] [--exit-when-idle-ms MS]
 *                      [--max-result-bytes N] [--gpus LIST] [--fake-gpus SPEC]
 *                      [--previous-id ID --previous-exit TEXT] (a supervisor's restart)
 *                      [--supervise RESTARTS]
 * --supervise: run the worker as the child of a supervisor that restarts it, at most RESTARTS
 * times, when a signal ends it, saying how (supervise.h), as `qsweep worker` does by default;
 * without it this process is the worker (tests that stop or kill it by pid).
 * --gpus as `qsweep worker --gpus` (gpu_info.h); --fake-gpus "H200:141:9.0,B200:180:10.0"
 * advertises made-up GPUs instead of the CUDA runtime's (tests of the scheduler; this binary
 * only, never `qsweep worker`). A --gpus index not present exits 2. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_info.h"
#include "exit_status.h"
#include "loop.h"
#include "supervise.h"
#include "test_kinds.h"
#ifdef QW_WORKER_TRAIN_KIND
#include "train_kind.h" /* the training tests build this file with the train kind too */
#endif

static int usage(const char *why) {
    fprintf(stderr,
            "qsweep-worker: %s\nusage: qsweep-worker --endpoint ENDPOINT [--id NAME] [--threads N] "
            "[--heartbeat-ms MS] [--timeout-ms MS] [--exit-when-idle-ms MS] [--max-result-bytes N] "
            "[--gpus LIST] [--fake-gpus SPEC] [--previous-id ID --previous-exit TEXT] "
            "[--supervise RESTARTS]\n",
            why);
    return QS_EXIT_USAGE;
}

static bool parse_int(const char *s, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < 0 || v > 1000000000) return false;
    *out = (int)v;
    return true;
}

int main(int argc, char **argv) {
    qw_options o = {0};
    const char *gpus_arg = NULL, *fake = NULL;
    int restarts = -1; /* -1: not supervised */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return usage("option without a value");
        if (strcmp(a, "--endpoint") == 0)
            o.endpoint = v;
        else if (strcmp(a, "--id") == 0)
            o.worker_id = v;
        else if (strcmp(a, "--threads") == 0) {
            if (!parse_int(v, &o.threads)) return usage("--threads: not a number");
        } else if (strcmp(a, "--heartbeat-ms") == 0) {
            if (!parse_int(v, &o.heartbeat_ms)) return usage("--heartbeat-ms: not a number");
        } else if (strcmp(a, "--timeout-ms") == 0) {
            if (!parse_int(v, &o.coordinator_timeout_ms))
                return usage("--timeout-ms: not a number");
        } else if (strcmp(a, "--max-result-bytes") == 0) {
            int b;
            if (!parse_int(v, &b)) return usage("--max-result-bytes: not a number");
            o.max_result_bytes = (size_t)b;
        } else if (strcmp(a, "--previous-id") == 0) {
            o.previous_worker_id = v;
        } else if (strcmp(a, "--previous-exit") == 0) {
            o.previous_exit = v;
        } else if (strcmp(a, "--supervise") == 0) {
            if (!parse_int(v, &restarts)) return usage("--supervise: not a number");
        } else if (strcmp(a, "--gpus") == 0) {
            gpus_arg = v;
        } else if (strcmp(a, "--fake-gpus") == 0) {
            fake = v;
        } else if (strcmp(a, "--exit-when-idle-ms") == 0) {
            if (!parse_int(v, &o.exit_when_idle_ms))
                return usage("--exit-when-idle-ms: not a number");
        } else
            return usage("unknown option");
        i++;
    }
    if (!o.endpoint) return usage("--endpoint is required");
    char id[96], prev[512];
    if (restarts >= 0) { /* before any thread, socket or GPU context: the child is a clean copy */
        int code = 0;
        if (!qw_supervise_worker("qsweep-worker", restarts, false, &o, id, sizeof id, prev,
                                 sizeof prev, &code))
            return code;
    }
    qs_error err;
    qw_gpu all[QW_GPUS_MAX], chosen[QW_GPUS_MAX];
    size_t n_all = 0;
    char why[256] = "";
    if (fake) {
        if (qw_gpu_parse_fake(fake, all, QW_GPUS_MAX, &n_all, &err)) return usage(err.msg);
    } else
        qw_gpu_discover(all, QW_GPUS_MAX, &n_all, why, sizeof why);
    if (qw_gpu_select(all, n_all, gpus_arg, why, chosen, QW_GPUS_MAX, &o.n_gpus, &err)) {
        fprintf(stderr, "qsweep-worker: %s\n", err.msg);
        return QS_EXIT_INPUT;
    }
    o.gpus = chosen;
    qs_status st = qw_register_test_kinds(&err); /* this binary is for tests and benchmarks */
#ifdef QW_WORKER_TRAIN_KIND
    if (st == QS_OK) st = qw_train_register(&err);
#endif
    if (st == QS_OK) st = qw_run(&o, &err);
    if (st != QS_OK) {
        fprintf(stderr, "qsweep-worker: %s\n", err.msg);
        return qs_exit_code(st); /* the table of every qsweep program (exit_status.h) */
    }
    return 0;
}
