/* The one check of standard output at a command's exit (cli.h): a result that did not reach
 * its destination (a full disk, /dev/full, a closed pipe or descriptor) must not exit 0. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

int qsweep_stdout_close(const char *cmd, int rc) {
    errno = 0;
    int flush_failed = fflush(stdout) != 0;
    int e = errno;
    if (!flush_failed && !ferror(stdout)) return rc;
    /* ferror without a failing flush: an earlier write failed and its errno is gone */
    fprintf(stderr, "qsweep%s%s: writing standard output: %s\n", cmd ? " " : "", cmd ? cmd : "",
            flush_failed && e ? strerror(e) : "a write failed");
    return rc != QS_EXIT_OK ? rc : QS_EXIT_RUNTIME;
}
