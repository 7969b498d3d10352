/* bench_dp: data-parallel training throughput of 2 CPU ranks over 1 rank, measured in the same
 * run, each rank given one thread (a CPU rank stands for one device: one core's worth of
 * compute), so the ratio says whether the ranks train concurrently (near 2 on two idle cores) or
 * one after another (near 1). Target (docs/training.md): >= 1.5.
 *
 * Both runs train the same samples: 1 rank with gradient accumulation 2 against 2 ranks with
 * accumulation 1, batch B x ctx T a micro-batch, so a step is 2*B*T tokens in both
 * (trainer.h: R ranks with accumulation A train on the samples of one rank with A*R). Model: a
 * training shape (train_job.h; default tiny, the tiny experiment's), random initialisation, a
 * deterministic token stream. Each run: one warm-up step, then the best of `steps` steps' tokens/s,
 * and the CPU seconds per wall second the process got (near the rank count when every rank had a
 * core; a scheduler that gives the process one core's share whatever its threads caps the ratio
 * near 1). The 2-rank run's final weights and last loss are compared with the 1-rank run's: its
 * gradients are summed in another order, so under fp32 they agree to a bound (1e-5 relative;
 * train_dp holds 1e-6 over 6 steps), checked, and a fast wrong run cannot pass. A recipe that
 * rounds its operands (bf16, the FP4 and FP8 recipes) turns a last-bit difference into a
 * rounding flip that the next steps carry: its difference is printed, not bounded.
 * Usage: bench_dp [recipe (fp32)] [shape (tiny)] [batch (8)] [steps (4)]. Exit 1 on an error or
 * a difference over the bound, 2 on bad arguments. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "clock.h"
#include "comm.h"
#include "data.h"
#include "loadavg.h"
#include "tmodel.h"
#include "train_job.h"
#include "trainer.h"

/* CPU seconds this process has used (user + system, all threads). */
static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
           (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
}

typedef struct dp_result {
    double tps;  /* best step's tokens/s */
    double util; /* CPU seconds per wall second over the timed steps */
    double loss; /* the last step's training loss */
    float *p;    /* rank 0's final parameters (malloc'd) */
} dp_result;

/* Trains `steps` + 1 steps of recipe r on R ranks of one thread each, accumulation 2 / R, from
 * stream. Returns 0, or 1 after printing the error. */
static int run(const qw_config *c, const qw_recipe *r, int B, int T, int R, int steps,
               const uint32_t *stream, size_t ntok, dp_result *out) {
    qs_error err = {0};
    qw_tmodel *m[2] = {NULL, NULL};
    qw_data d = {0};
    qw_group g = {0};
    qw_trainer tr = {0};
    int have_d = 0, have_g = 0, have_tr = 0;
    memset(out, 0, sizeof *out);
    qs_status st = QS_OK;
    for (int i = 0; i < R && st == QS_OK; i++) {
        st = qw_tmodel_create(c, B, T, 1, &m[i], &err);
        if (st == QS_OK) st = qw_tmodel_set_recipe(m[i], r, 1, &err);
    }
    /* rank 0 only: the trainer copies it to the others */
    if (st == QS_OK) st = qw_tmodel_init_random(m[0], 1, 0.02f, &err);
    if (st == QS_OK) have_d = (st = qw_data_init(&d, stream, ntok, 0.0, T, 1, &err)) == QS_OK;
    if (st == QS_OK) have_g = (st = qw_group_cpu(&g, R, 1, &err)) == QS_OK;
    qw_train_config tc = {0};
    tc.steps = steps + 1;
    tc.accum = 2 / R;
    tc.sched = (qw_lr_schedule){1e-3f, 1e-4f, 0, 0, QW_DECAY_COSINE};
    tc.adamw = (qw_adamw){0.9f, 0.95f, 1e-8f, 0.1f};
    tc.clip = 1.0f;
    tc.diverge_loss = 1e9;
    if (st == QS_OK)
        have_tr = (st = qw_trainer_create_dp(&tr, m, R, &g, &d, &tc, 1, &err)) == QS_OK;
    qw_step_metrics mt = {0};
    if (st == QS_OK) st = qw_trainer_step(&tr, &mt, &err); /* warm-up */
    double c0 = cpu_s(), w0 = qs_clock_s();
    for (int s = 0; s < steps && st == QS_OK; s++) {
        double t0 = qs_clock_s();
        st = qw_trainer_step(&tr, &mt, &err);
        double dt = qs_clock_s() - t0;
        if (st == QS_OK && dt > 0 && 2.0 * B * T / dt > out->tps) out->tps = 2.0 * B * T / dt;
    }
    double wall = qs_clock_s() - w0;
    if (st == QS_OK) {
        out->util = wall > 0 ? (cpu_s() - c0) / wall : 0.0;
        out->loss = mt.train_loss;
        size_t n = qw_tmodel_n_params(m[0]);
        if (!(out->p = malloc(n * sizeof *out->p)))
            st = qs_error_set(&err, QS_ENOMEM, "%zu parameters", n);
        else
            st = qw_tmodel_fetch(m[0], QW_TMODEL_PARAMS, out->p, &err);
    }
    if (st != QS_OK) fprintf(stderr, "bench_dp: %s, %d ranks: %s\n", r->name, R, err.msg);
    if (have_tr) qw_trainer_free(&tr);
    if (have_g) qw_group_destroy(&g);
    if (have_d) qw_data_free(&d);
    for (int i = 0; i < R; i++)
        qw_tmodel_destroy(m[i]);
    return st == QS_OK ? 0 : 1;
}

/* atoi that refuses anything but a whole number in 1..max: -1 then. */
static int whole(const char *s, int max) {
    char *end;
    long v = strtol(s, &end, 10);
    return *s && !*end && v >= 1 && v <= max ? (int)v : -1;
}

int main(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        printf("usage: bench_dp [recipe (fp32)] [shape (tiny)] [batch (8)] [steps (4)]\n");
        return 0;
    }
    const char *recipe = argc > 1 ? argv[1] : "fp32", *shape = argc > 2 ? argv[2] : "tiny";
    int B = argc > 3 ? whole(argv[3], 4096) : 8, steps = argc > 4 ? whole(argv[4], 1000) : 4;
    if (B < 1 || steps < 1 || argc > 5) {
        fprintf(stderr, "usage: bench_dp [recipe] [shape] [batch 1..4096] [steps 1..1000]\n");
        return 2;
    }
    qs_error err = {0};
    qw_config c;
    qw_recipe r;
    if (qw_recipe_by_name(recipe, &r, &err) != QS_OK) {
        fprintf(stderr, "bench_dp: %s\n", err.msg);
        return 2;
    }
    if (qw_train_shape_by_name(shape, &c, &err) != QS_OK) {
        fprintf(stderr, "bench_dp: %s\n", err.msg);
        return 2;
    }
    int T = c.max_seq_len;
    size_t ntok = (size_t)2 * B * T * (size_t)(steps + 2) + 1;
    uint32_t *stream = malloc(ntok * sizeof *stream);
    if (!stream) return 1;
    for (size_t i = 0; i < ntok; i++)
        stream[i] = (uint32_t)((i * 2654435761u) >> 7) % (uint32_t)c.vocab_size;
    bench_print_loadavg("at start");
    dp_result one = {0}, two = {0};
    int rc = run(&c, &r, B, T, 1, steps, stream, ntok, &one);
    if (rc == 0) rc = run(&c, &r, B, T, 2, steps, stream, ntok, &two);
    if (rc == 0) {
        size_t n = 0, bytes = 0;
        qw_tmodel_plan(&c, B, T, 1, &n, &bytes);
        double dd = 0, ww = 0;
        for (size_t i = 0; i < n; i++) {
            double d = (double)one.p[i] - two.p[i];
            dd += d * d;
            ww += (double)one.p[i] * one.p[i];
        }
        double wrel = ww > 0 ? sqrt(dd / ww) : sqrt(dd);
        double lrel = fabs(one.loss - two.loss) / (fabs(one.loss) > 0 ? fabs(one.loss) : 1.0);
        printf("bench_dp: %s, %s (d %d, %d blocks), micro-batch %d x ctx %d, %d tokens a step, "
               "best of %d steps, one thread per rank\n",
               recipe, shape, c.dim, c.n_layers, B, T, 2 * B * T, steps);
        printf("1 rank, accumulation 2: %.1f tokens/s, %.2f CPU s per wall s\n", one.tps, one.util);
        printf("2 ranks, accumulation 1: %.1f tokens/s, %.2f CPU s per wall s\n", two.tps,
               two.util);
        /* FP32 operands throughout (hp_bf16 0, no format): only the summation order differs */
        int bounded = !r.hp_bf16 && !r.fmt;
        printf("2 ranks over 1 rank: %.2fx (target 1.5; weights ||diff|| / ||w|| %.2e, last loss "
               "relative difference %.2e, %s)\n",
               one.tps > 0 ? two.tps / one.tps : 0.0, wrel, lrel,
               bounded ? "bound 1e-5" : "not bounded: the recipe rounds its operands");
        if (bounded && (!(wrel <= 1e-5) || !(lrel <= 1e-5))) {
            fprintf(stderr, "bench_dp: the 2-rank run differs from the 1-rank run beyond 1e-5\n");
            rc = 1;
        }
    }
    bench_print_loadavg("at end");
    free(one.p);
    free(two.p);
    free(stream);
    return rc;
}
