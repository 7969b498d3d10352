/* Fake-quant throughput of the CPU numeric core (issue 2, "Benchmark"), not a test.
 *
 * For a [rows x k] FP32 matrix (default 4096 x 4096, 64 MiB) it times, at 1 thread and at
 * all threads: a parallel memcpy of the matrix (the bandwidth ceiling, measured in this run)
 * and qk_fake_quant in place for NVFP4, MXFP4 (fast path) and NVFP4 through the scalar
 * reference. Bytes counted: the matrix read once and written once (2 * rows * k * 4) for
 * both memcpy and fake-quant, so the ratio compares like with like. Each figure is the best
 * of `reps` runs after one warm-up.
 *
 * Usage: bench_fakequant [rows k [reps]] */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "format.h"
#include "philox.h"
#include "quant.h"
#include "clock.h"

static void copy_parallel(float *dst, const float *src, size_t n, int threads) {
    size_t chunk = (n + (size_t)threads - 1) / (size_t)threads;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int t = 0; t < threads; t++) {
        size_t lo = (size_t)t * chunk;
        if (lo < n) memcpy(dst + lo, src + lo, (n - lo < chunk ? n - lo : chunk) * sizeof *dst);
    }
}

int main(int argc, char **argv) {
    size_t rows = 4096, k = 4096;
    int reps = 5;
    if (argc >= 3) {
        rows = strtoul(argv[1], NULL, 10);
        k = strtoul(argv[2], NULL, 10);
    }
    if (argc >= 4) reps = atoi(argv[3]);
    if (rows == 0 || k == 0 || reps <= 0) {
        fprintf(stderr, "usage: %s [rows k [reps]]\n", argv[0]);
        return 2;
    }
    size_t n = rows * k;
    float *src = malloc(n * sizeof *src), *buf = malloc(n * sizeof *buf);
    if (!src || !buf) {
        fprintf(stderr, "bench_fakequant: cannot allocate 2 x %zu bytes\n", n * sizeof *src);
        return 1;
    }
    int all = omp_get_max_threads();
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        uint32_t r = qk_sr_bits(1, 0, 0, i);
        src[i] = ((float)(r >> 8) * 0x1p-24f - 0.5f) * ((r & 0xFF) == 0 ? 64.0f : 4.0f);
        buf[i] = 0.0f;
    }
    double bytes = 2.0 * (double)n * sizeof(float);
    printf("bench_fakequant: %zu x %zu FP32 (%.1f MiB), best of %d, bytes = read + write\n", rows,
           k, (double)n * sizeof(float) / 1048576.0, reps);
    printf("%-18s %7s %10s %9s %12s\n", "format", "threads", "ms", "GB/s", "x memcpy");

    const int thread_counts[] = {1, all};
    for (int ti = 0; ti < (all > 1 ? 2 : 1); ti++) {
        int th = thread_counts[ti];
        double best_copy = 1e30;
        for (int r = 0; r <= reps; r++) {
            double t0 = qs_clock_s();
            copy_parallel(buf, src, n, th);
            double dt = qs_clock_s() - t0;
            if (r > 0 && dt < best_copy) best_copy = dt;
        }
        double copy_gbs = bytes / best_copy / 1e9;
        printf("%-18s %7d %10.2f %9.2f %12.2f\n", "memcpy", th, best_copy * 1e3, copy_gbs, 1.0);
        const struct {
            const char *label, *format;
            int reference;
        } cases[] = {{"nvfp4", "nvfp4", 0},
                     {"mxfp4", "mxfp4", 0},
                     {"nvfp4 (reference)", "nvfp4", 1},
                     {"mxfp8_e4m3", "mxfp8_e4m3", 0},
                     {"int8_channel", "int8_channel", 0},
                     {"int4_group", "int4_group", 0},
                     {"int8 (reference)", "int8_channel", 1}};
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            const qk_format *f = qk_format_by_name(cases[c].format);
            qk_quant_options o = {.threads = th, .reference_only = cases[c].reference};
            qs_error err = {0};
            double best = 1e30;
            for (int r = 0; r <= reps; r++) {
                copy_parallel(buf, src, n, th); /* fresh input, outside the timed region */
                double t0 = qs_clock_s();
                if (qk_fake_quant(f, &o, buf, rows, k, NULL, &err) != QS_OK) {
                    fprintf(stderr, "bench_fakequant: %s\n", err.msg);
                    return 1;
                }
                double dt = qs_clock_s() - t0;
                if (r > 0 && dt < best) best = dt;
            }
            double gbs = bytes / best / 1e9;
            printf("%-18s %7d %10.2f %9.2f %12.2f\n", cases[c].label, th, best * 1e3, gbs,
                   gbs / copy_gbs);
        }
    }
    free(src);
    free(buf);
    return 0;
}
