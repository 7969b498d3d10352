/* The machine's load while a benchmark runs: benchmarks print it at start and end, since a
 * speed measured on a shared machine means little without it (docs/benchmarks.md). */
#ifndef BENCH_LOADAVG_H
#define BENCH_LOADAVG_H

/* Prints "load average WHEN: <the first line of /proc/loadavg>" to stdout ("?" when it cannot
 * be read). */
void bench_print_loadavg(const char *when);

#endif
