/* The GPU each local worker of qsweep run offers (cli.h qsweep_run_worker_gpus). */
#include <stdio.h>

#include "cli.h"

void qsweep_run_worker_gpus(int i, int n_gpus, char *buf, size_t cap) {
    if (n_gpus <= 0 || i < 0)
        snprintf(buf, cap, "none");
    else
        snprintf(buf, cap, "%d", i % n_gpus);
}
