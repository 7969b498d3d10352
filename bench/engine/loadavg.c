/* The load average line of the benchmarks (loadavg.h). */
#include "loadavg.h"

#include <stdio.h>
#include <string.h>

void bench_print_loadavg(const char *when) {
    char buf[128] = "?";
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (!fgets(buf, sizeof buf, f)) strcpy(buf, "?");
        fclose(f);
    }
    buf[strcspn(buf, "\n")] = 0;
    printf("load average %s: %s\n", when, buf);
}
