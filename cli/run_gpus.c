/* The GPUs each local worker of qsweep run offers (cli.h qsweep_run_worker_gpus). */
#include <stdio.h>

#include "cli.h"

void qsweep_run_worker_gpus(int i, int n_gpus, int per_job, char *buf, size_t cap) {
    if (cap == 0) return;
    if (n_gpus <= 0 || i < 0) {
        snprintf(buf, cap, "none");
        return;
    }
    int per = per_job > 1 ? per_job : 1;
    if (per > n_gpus) per = n_gpus;
    size_t k = 0;
    buf[0] = 0;
    for (int j = 0; j < per && k < cap; j++) {
        int g = (int)(((long long)i * per + j) % n_gpus);
        int m = snprintf(buf + k, cap - k, "%s%d", j ? "," : "", g);
        if (m < 0) break;
        k += (size_t)m;
    }
}
