/* bench_ranks: tensor-parallel evaluation throughput of 2 CPU ranks over 1 rank, measured in the
 * same run, each rank given one thread (a CPU rank stands for one device: one core's worth of
 * compute), so the ratio says whether the ranks run concurrently (near 2 on two idle cores) or
 * one after another (near 1). Both runs take the same tokens through the same synthetic model;
 * the 2-rank run's logits are checked against the 1-rank run's to the sharding tolerance of
 * docs/tensor-parallel.md (1e-5 relative, unquantized), so a fast wrong run cannot pass.
 * Usage: bench_ranks [synthetic shape] [ctx] [reps]; defaults small 128 3 (SmolLM2's 9 heads do
 * not split over 2 ranks). The load average is printed at start and end, and each run's CPU
 * seconds per wall second: on a shared machine that gives the process no more CPU for two
 * threads than for one, the ratio cannot exceed what it got. */
#include <math.h>
#include <stdio.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "loadavg.h"
#include "shard.h"
#include "synthetic.h"
#include "weights.h"

/* CPU seconds this process has used (user + system, all threads). */
static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
           (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
}

/* Best-of-reps tokens/s of n ranks over tokens[T], and the CPU seconds per wall second the
 * process got over all reps (*util: near n when the machine gave every rank a core);
 * *logits_out gets a copy of the logits. */
static int run(const qw_weights *wt, int n, const uint32_t *tokens, int T, int reps, double *tps,
               double *util, float **logits_out) {
    qs_error err = {0};
    qw_tp *tp = NULL;
    if (qw_tp_create(wt, T, n, n, NULL, NULL, NULL, &tp, &err) != QS_OK) {
        fprintf(stderr, "bench_ranks: %d ranks: %s\n", n, err.msg);
        return 1;
    }
    size_t V = (size_t)wt->cfg.vocab_size, bytes = (size_t)T * V * sizeof(float);
    double best = 0, c0 = cpu_s(), w0 = qs_clock_s();
    for (int k = 0; k < reps; k++) {
        const float *lg = NULL;
        double t0 = qs_clock_s();
        if (qw_tp_forward(tp, tokens, T, 0, NULL, NULL, &lg, &err) != QS_OK) {
            fprintf(stderr, "bench_ranks: %d ranks: forward: %s\n", n, err.msg);
            qw_tp_destroy(tp);
            return 1;
        }
        double dt = qs_clock_s() - t0;
        if (dt > 0 && T / dt > best) best = T / dt;
        if (k == 0) {
            *logits_out = malloc(bytes);
            if (*logits_out) memcpy(*logits_out, lg, bytes);
        }
    }
    double wall = qs_clock_s() - w0;
    *util = wall > 0 ? (cpu_s() - c0) / wall : 0.0;
    qw_tp_destroy(tp);
    *tps = best;
    return *logits_out ? 0 : 1;
}

int main(int argc, char **argv) {
    const char *shape = argc > 1 ? argv[1] : "small";
    int T = argc > 2 ? atoi(argv[2]) : 128, reps = argc > 3 ? atoi(argv[3]) : 3;
    if (T < 2 || reps < 1) {
        fprintf(stderr, "usage: bench_ranks [synthetic shape] [ctx>=2] [reps>=1]\n");
        return 2;
    }
    qs_error err = {0};
    qw_weights wt;
    if (qw_synthetic_build(shape, 2, &wt, &err) != QS_OK) {
        fprintf(stderr, "bench_ranks: %s\n", err.msg);
        return 1;
    }
    bench_print_loadavg("at start");
    uint32_t *tok = malloc((size_t)T * sizeof *tok);
    if (!tok) return 1;
    uint32_t x = 7;
    for (int t = 0; t < T; t++) {
        x = x * 1664525u + 1013904223u;
        tok[t] = (x >> 8) % (uint32_t)wt.cfg.vocab_size;
    }
    double tps1 = 0, tps2 = 0, u1 = 0, u2 = 0;
    float *l1 = NULL, *l2 = NULL;
    int rc = run(&wt, 1, tok, T, reps, &tps1, &u1, &l1);
    if (rc == 0) rc = run(&wt, 2, tok, T, reps, &tps2, &u2, &l2);
    if (rc == 0) {
        size_t m = (size_t)T * (size_t)wt.cfg.vocab_size;
        double dmax = 0, lmax = 0;
        for (size_t i = 0; i < m; i++) {
            double d = fabs((double)l1[i] - (double)l2[i]), a = fabs((double)l1[i]);
            if (d > dmax) dmax = d;
            if (a > lmax) lmax = a;
        }
        double rel = lmax > 0 ? dmax / lmax : dmax;
        printf("bench_ranks: %s, %d tokens, best of %d, one thread per rank\n", shape, T, reps);
        printf("1 rank:  %.1f tokens/s, %.2f CPU s per wall s\n", tps1, u1);
        printf("2 ranks: %.1f tokens/s, %.2f CPU s per wall s\n", tps2, u2);
        printf("2 ranks over 1 rank: %.2fx (logits max abs difference / max abs logit %.2e, "
               "bound 1e-5)\n",
               tps1 > 0 ? tps2 / tps1 : 0.0, rel);
        if (!(rel <= 1e-5)) {
            fprintf(stderr, "bench_ranks: 2-rank logits differ from 1-rank by %.2e\n", rel);
            rc = 1;
        }
    }
    bench_print_loadavg("at end");
    free(l1);
    free(l2);
    free(tok);
    qw_weights_release(&wt);
    return rc;
}
