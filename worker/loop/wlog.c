/* The worker's log lines (wlog.h). */
#include <stdarg.h>
#include <stdio.h>

#include "wlog.h"

void qw_loop_wlog(const worker *w, const char *fmt, ...) {
    if (w->o->quiet) return;
    char line[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "qsweep-worker %s: %s\n", w->id, line);
}
