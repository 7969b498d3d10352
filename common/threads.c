/* Default thread count (threads.h). */
#include "threads.h"

#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

/* A positive decimal integer ending at the end of s or at a comma; 0 otherwise. */
static int positive_prefix(const char *s) {
    if (!s) return 0;
    while (*s == ' ' || *s == '\t')
        s++;
    long v = 0;
    const char *p = s;
    for (; *p >= '0' && *p <= '9'; p++) {
        v = v * 10 + (*p - '0');
        if (v > INT_MAX) return 0;
    }
    while (*p == ' ' || *p == '\t')
        p++;
    if (p == s || (*p && *p != ',')) return 0;
    return (int)v;
}

int qs_affinity_cpus(void) {
    size_t size = CPU_ALLOC_SIZE(8192);
    cpu_set_t *set = CPU_ALLOC(8192);
    int n = 0;
    if (set && sched_getaffinity(0, size, set) == 0) n = CPU_COUNT_S(size, set);
    CPU_FREE(set);
    if (n > 0) return n;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 0 ? (online > INT_MAX ? INT_MAX : (int)online) : 1;
}

int qs_default_threads(void) {
    int n = positive_prefix(getenv("OMP_NUM_THREADS"));
    if (n <= 0) n = qs_affinity_cpus();
    int limit = positive_prefix(getenv("OMP_THREAD_LIMIT"));
    if (limit > 0 && n > limit) n = limit;
    return n;
}
