/* bench_scale_search: GPTQ with MR-GPTQ's scale search (kernels/methods/scale_search.h) against
 * GPTQ with the amax rule on the same layer and Hessian, measured alternately in one run; prints
 * the best time of each in seconds and their ratio, one line per (shape, format), and the load
 * average at start and end. Shapes are SmolLM2-135M's down_proj (576 x 1536) and up_proj
 * (1536 x 576), or ROWS x K and K x ROWS; random weights and a random Hessian of T calibration
 * rows (default 1024), on one thread.
 * Usage: bench_scale_search [REPEATS [ROWS K [T]]]   (ROWS and K multiples of 32, MXFP4's group) */
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gptq.h"
#include "loadavg.h"
#include "quant.h"

static double uni(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return (double)((*s * 2685821657736338717ull) >> 11) * 0x1p-52 - 1.0;
}

/* seconds of the best of reps runs of qk_gptq on a copy of w */
static double best_of(const qk_format *f, const float *w, float *q, size_t rows, size_t k,
                      const double *h, int search, int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        memcpy(q, w, rows * k * sizeof *q);
        qk_quant_options o = {0};
        qk_gptq_options g = {.scale_search = search, .threads = 1};
        qs_error err = {0};
        double t0 = omp_get_wtime();
        if (qk_gptq(f, &o, q, rows, k, h, &g, &err)) {
            fprintf(stderr, "bench_scale_search: %s\n", err.msg);
            exit(1);
        }
        double t = omp_get_wtime() - t0;
        if (t < best) best = t;
    }
    return best;
}

/* argv[i] as a whole number in [lo, hi] that is a multiple of mult; exits naming it otherwise */
static long arg_at(char **argv, int i, const char *name, long lo, long hi, long mult) {
    char *end = NULL;
    long v = strtol(argv[i], &end, 10);
    if (end == argv[i] || *end || v < lo || v > hi || v % mult) {
        fprintf(stderr,
                "bench_scale_search: %s '%s': expected a whole number in [%ld, %ld]%s\n"
                "usage: bench_scale_search [REPEATS [ROWS K [T]]]\n",
                name, argv[i], lo, hi, mult > 1 ? ", a multiple of 32" : "");
        exit(2);
    }
    return v;
}

int main(int argc, char **argv) {
    if (argc > 5 || argc == 3) {
        fprintf(stderr, "usage: bench_scale_search [REPEATS [ROWS K [T]]]\n");
        return 2;
    }
    const int reps = argc > 1 ? (int)arg_at(argv, 1, "REPEATS", 1, 1000, 1) : 3;
    size_t shapes[2][2] = {{576, 1536}, {1536, 576}}, t = 1024;
    if (argc > 3) {
        size_t rows = (size_t)arg_at(argv, 2, "ROWS", 32, 16384, 32);
        size_t k = (size_t)arg_at(argv, 3, "K", 32, 16384, 32);
        shapes[0][0] = shapes[1][1] = rows;
        shapes[0][1] = shapes[1][0] = k;
    }
    if (argc > 4) t = (size_t)arg_at(argv, 4, "T", 1, 1 << 20, 1);
    const char *formats[] = {"nvfp4", "mxfp4"};
    bench_print_loadavg("at start");
    printf("%-6s %-11s %12s %12s %8s\n", "format", "rows x k", "amax rule s", "search s", "ratio");
    for (int si = 0; si < 2; si++) {
        size_t rows = shapes[si][0], k = shapes[si][1];
        float *w = malloc(rows * k * sizeof *w), *q = malloc(rows * k * sizeof *q);
        float *x = malloc(t * k * sizeof *x);
        double *h = calloc(k * k, sizeof *h);
        if (!w || !q || !x || !h) {
            fprintf(stderr,
                    "bench_scale_search: out of memory for %zu x %zu weights and %zu calibration "
                    "rows\n",
                    rows, k, t);
            free(w);
            free(q);
            free(x);
            free(h);
            return 1;
        }
        uint64_t s = 0x5eed + (uint64_t)si;
        for (size_t i = 0; i < rows * k; i++)
            w[i] = (float)(0.05 * uni(&s));
        for (size_t i = 0; i < t * k; i++)
            x[i] = (float)uni(&s);
        qk_gptq_hessian_add(h, k, x, t, 0);
        for (int fi = 0; fi < 2; fi++) {
            const qk_format *f = qk_format_by_name(formats[fi]);
            double a = 1e30, b = 1e30;
            for (int r = 0; r < reps; r++) { /* alternate, so a load change hits both */
                double ta = best_of(f, w, q, rows, k, h, 0, 1);
                double tb = best_of(f, w, q, rows, k, h, 1, 1);
                if (ta < a) a = ta;
                if (tb < b) b = tb;
            }
            printf("%-6s %4zu x %-4zu %12.6f %12.6f %8.2f\n", formats[fi], rows, k, a, b, b / a);
        }
        free(w);
        free(q);
        free(x);
        free(h);
    }
    bench_print_loadavg("at end");
    return 0;
}
