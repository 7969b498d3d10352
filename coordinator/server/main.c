/* qsweep-coordinator: a thin command line over qc_server_run (server.h).
 * Usage: qsweep-coordinator --bind ENDPOINT --db CONNINFO [--lease-ms MS] [--grace-ms MS]
 *                           [--backoff-ms MS] [--poll-ms MS] [--exit-when-done] [--quiet]
 *                           [--standby]
 * Exit codes: the table of every qsweep program (common/exit_status.h, docs/failures.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exit_status.h"
#include "server.h"

static int usage(const char *why) {
    fprintf(stderr,
            "qsweep-coordinator: %s\nusage: qsweep-coordinator --bind ENDPOINT --db CONNINFO "
            "[--lease-ms MS] "
            "[--grace-ms MS] [--backoff-ms MS] [--poll-ms MS] [--exit-when-done] [--quiet] "
            "[--standby]\n",
            why);
    return QS_EXIT_USAGE;
}

static bool parse_ms(const char *s, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < 0 || v > 1000000000) return false;
    *out = (int)v;
    return true;
}

int main(int argc, char **argv) {
    qc_server_options o = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--exit-when-done") == 0) {
            o.exit_when_done = true;
            continue;
        }
        if (strcmp(a, "--quiet") == 0) {
            o.quiet = true;
            continue;
        }
        if (strcmp(a, "--standby") == 0) {
            o.standby = true;
            continue;
        }
        const char *v = i + 1 < argc ? argv[++i] : NULL;
        if (!v) return usage("option without a value");
        if (strcmp(a, "--bind") == 0)
            o.bind_endpoint = v;
        else if (strcmp(a, "--db") == 0)
            o.conninfo = v;
        else if (strcmp(a, "--lease-ms") == 0) {
            if (!parse_ms(v, &o.lease_ms)) return usage("--lease-ms: not a number");
        } else if (strcmp(a, "--grace-ms") == 0) {
            if (!parse_ms(v, &o.grace_ms)) return usage("--grace-ms: not a number");
        } else if (strcmp(a, "--backoff-ms") == 0) {
            if (!parse_ms(v, &o.backoff_ms)) return usage("--backoff-ms: not a number");
        } else if (strcmp(a, "--poll-ms") == 0) {
            if (!parse_ms(v, &o.poll_ms)) return usage("--poll-ms: not a number");
        } else
            return usage("unknown option");
    }
    if (!o.bind_endpoint || !o.conninfo) return usage("--bind and --db are required");
    qs_error err;
    qs_status st = qc_server_run(&o, &err);
    if (st != QS_OK) {
        fprintf(stderr, "qsweep-coordinator: %s\n", err.msg);
        return qs_exit_code(st); /* the same table as qsweep coordinator's */
    }
    return 0;
}
