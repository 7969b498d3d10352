/* The coordinator's log lines. Contract: log.h. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>

void qc_log(const char *fmt, ...) {
    char line[1400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "qsweep-coordinator: %s\n", line);
}
