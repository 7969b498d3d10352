/* Fake-quant throughput of the CPU numeric core, not a test.
 *
 * For a [rows x k] FP32 matrix (default 4096 x 4096, 64 MiB) it times, at 1 thread and at
 * all threads: a parallel memcpy of the matrix (the bandwidth ceiling, measured in this run)
 * and qk_fake_quant in place for NVFP4 (1D and 2D), MXFP4, MXFP8, INT8 per channel and INT4
 * group-wise (fast paths) and NVFP4 and INT8 through the scalar reference. Bytes counted: the
 * matrix read once and written once (2 * rows * k * 4) for both memcpy and fake-quant, so the ratio
 * compares like with like. Two rows explain NVFP4's limit: "amax (read only)" is its first
 * pass alone (qk_joint_amax; bytes = rows * k * 4, read), and "nvfp4 given amax" its second
 * pass alone (the tensor amax passed in options.tensor_amax). "nvfp4 into" is the
 * out-of-place call from the source (qk_fake_quant_into), "memcpy+nvfp4" what a caller keeping
 * its master copy does without it (copy, then in place). The "packed" rows are qk_quantize
 * into packed storage (codes + scales, what the engine keeps), fast paths and "ref" the scalar
 * reference (reference_only; before the packed fast paths, the only one), with bytes = the
 * FP32 matrix read + codes and scales written; the last lines give the NVFP4 packed speedup
 * over the reference. Each case alternates with a
 * memcpy run (so that both meet the same load on a shared machine); each figure is the best
 * of `reps` runs after one warm-up, and "x memcpy" divides the case's GB/s by that memcpy's.
 *
 * Usage: bench_fakequant [rows k [reps [noref]]]   (noref: skip the slow reference rows) */
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
    int noref = argc >= 5 && strcmp(argv[4], "noref") == 0;
    if (rows == 0 || k == 0 || reps <= 0) {
        fprintf(stderr, "usage: %s [rows k [reps [noref]]]\n", argv[0]);
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
    printf("%-18s %7s %10s %9s %10s %10s\n", "format", "threads", "ms", "GB/s", "memcpy ms",
           "x memcpy");

    /* clang-format off */
    const struct {
        const char *label, *format;
        int reference, given, amax_only; /* 1: amax only; 2: out of place; 3: copy first;
                                            4: qk_quantize into packed storage */
    } cases[] = {{"amax (read only)", "nvfp4", 0, 0, 1},
                 {"nvfp4", "nvfp4", 0, 0, 0},
                 {"nvfp4 given amax", "nvfp4", 0, 1, 0},
                 {"nvfp4 into", "nvfp4", 0, 0, 2},
                 {"memcpy+nvfp4", "nvfp4", 0, 0, 3},
                 {"nvfp4_2d", "nvfp4_2d", 0, 0, 0},
                 {"mxfp4", "mxfp4", 0, 0, 0},
                 {"nvfp4 (reference)", "nvfp4", 1, 0, 0},
                 {"mxfp8_e4m3", "mxfp8_e4m3", 0, 0, 0},
                 {"int8_channel", "int8_channel", 0, 0, 0},
                 {"int4_group", "int4_group", 0, 0, 0},
                 {"int8 (reference)", "int8_channel", 1, 0, 0},
                 {"nvfp4 packed", "nvfp4", 0, 0, 4},
                 {"nvfp4 packed ref", "nvfp4", 1, 0, 4},
                 {"nvfp4_2d packed", "nvfp4_2d", 0, 0, 4},
                 {"mxfp4 packed", "mxfp4", 0, 0, 4},
                 {"mxfp8 packed", "mxfp8_e4m3", 0, 0, 4},
                 {"int4 packed", "int4_group", 0, 0, 4},
                 {"int8 packed ref", "int8_channel", 1, 0, 4}};
    /* clang-format on */
    float amax = 0.0f;
    {
        const float *list[1] = {src};
        const size_t len[1] = {n};
        qs_error err = {0};
        if (qk_joint_amax(list, len, 1, 0, &amax, &err) != QS_OK) {
            fprintf(stderr, "bench_fakequant: %s\n", err.msg);
            return 1;
        }
    }
    const int thread_counts[] = {1, all};
    double packed_ms[2] = {0, 0}, packed_ref_ms[2] = {0, 0}, fake_ms[2] = {0, 0};
    for (int ti = 0; ti < (all > 1 ? 2 : 1); ti++) {
        int th = thread_counts[ti];
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            const qk_format *f = qk_format_by_name(cases[c].format);
            if (noref && cases[c].reference) continue;
            qk_quant_options o = {.threads = th,
                                  .reference_only = cases[c].reference,
                                  .tensor_amax_given = cases[c].given,
                                  .tensor_amax = amax};
            qs_error err = {0};
            qk_packed pk = {0};
            if (cases[c].amax_only == 4 && qk_packed_init(&pk, f, &o, rows, k, &err) != QS_OK) {
                fprintf(stderr, "bench_fakequant: %s: %s\n", cases[c].label, err.msg);
                return 1;
            }
            double best = 1e30, best_copy = 1e30;
            /* memcpy and the case alternate, so that both see the same load on a shared
             * machine; the timed memcpy also gives the case its fresh input */
            for (int r = 0; r <= reps; r++) {
                double t0 = qs_clock_s();
                copy_parallel(buf, src, n, th);
                double t1 = qs_clock_s();
                qs_status st;
                if (cases[c].amax_only == 2) { /* out of place, from src: no copy needed */
                    st = qk_fake_quant_into(f, &o, src, buf, rows, k, NULL, &err);
                } else if (cases[c].amax_only == 3) { /* what a caller does without it */
                    copy_parallel(buf, src, n, th);
                    st = qk_fake_quant(f, &o, buf, rows, k, NULL, &err);
                } else if (cases[c].amax_only == 4) {
                    st = qk_quantize(f, &o, buf, rows, k, &pk, &err);
                } else if (cases[c].amax_only) {
                    const float *list[1] = {buf};
                    const size_t len[1] = {n};
                    float a;
                    st = qk_joint_amax(list, len, 1, th, &a, &err);
                } else {
                    st = qk_fake_quant(f, &o, buf, rows, k, NULL, &err);
                }
                double t2 = qs_clock_s();
                if (st != QS_OK) {
                    fprintf(stderr, "bench_fakequant: %s: %s\n", cases[c].label, err.msg);
                    return 1;
                }
                if (r > 0 && t1 - t0 < best_copy) best_copy = t1 - t0;
                if (r > 0 && t2 - t1 < best) best = t2 - t1;
            }
            double case_bytes = cases[c].amax_only == 1 ? bytes / 2.0 : bytes;
            if (cases[c].amax_only == 4) /* FP32 read (twice for the tensor amax formats' two
                                            passes, counted once) + codes and scales written */
                case_bytes = bytes / 2.0 + (double)(rows * pk.row_bytes) +
                             (double)(rows * pk.blocks_per_row) * (pk.scales_f32 ? sizeof(float)
                                                                   : pk.scales   ? 1.0
                                                                                 : 0.0);
            qk_packed_release(&pk);
            double gbs = case_bytes / best / 1e9, copy_gbs = bytes / best_copy / 1e9;
            printf("%-18s %7d %10.2f %9.2f %10.2f %10.2f\n", cases[c].label, th, best * 1e3, gbs,
                   best_copy * 1e3, gbs / copy_gbs);
            if (strcmp(cases[c].label, "nvfp4 packed") == 0) packed_ms[ti] = best * 1e3;
            if (strcmp(cases[c].label, "nvfp4 packed ref") == 0) packed_ref_ms[ti] = best * 1e3;
            if (strcmp(cases[c].label, "nvfp4") == 0) fake_ms[ti] = best * 1e3;
        }
    }
    for (int ti = 0; ti < (all > 1 ? 2 : 1); ti++)
        if (packed_ms[ti] > 0 && packed_ref_ms[ti] > 0)
            printf("nvfp4 packed, %d threads: %.2fx the scalar reference (was the only path), "
                   "%.2fx the time of fake-quant in place\n",
                   thread_counts[ti], packed_ref_ms[ti] / packed_ms[ti],
                   packed_ms[ti] / fake_ms[ti]);
    free(src);
    free(buf);
    return 0;
}
