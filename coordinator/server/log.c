/* The coordinator's log lines. Contract: log.h. */
#include "log.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>

void qc_log(const char *fmt, ...) {
    char line[1400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "qsweep-coordinator: %s\n", line);
}

void qc_srv_peer_name(const char *rid, size_t len, char *out, size_t cap) {
    bool printable = len > 0;
    for (size_t i = 0; i < len && printable; i++)
        printable = rid[i] >= 0x20 && rid[i] < 0x7f;
    if (printable) {
        snprintf(out, cap, "%.*s", (int)len, rid);
        return;
    }
    size_t o = 0;
    o += (size_t)snprintf(out, cap, "0x");
    for (size_t i = 0; i < len && o + 3 < cap; i++)
        o += (size_t)snprintf(out + o, cap - o, "%02x", (unsigned char)rid[i]);
}
