// GPU fake-quant throughput (kernels/cuda) against a device-to-device cudaMemcpy measured in
// the same run; not a test. Bytes counted: the matrix read once and written once, for both
// (NVFP4 reads it a second time for the tensor amax; not counted). Best of `reps` after one
// warm-up, timed with CUDA events. Usage: bench_cuda_fakequant [rows k [reps]]
#include <stdio.h>
#include <stdlib.h>

#include "bench_cuda_util.cuh"
#include "qk_cuda.h"
#include "quant.h"

int main(int argc, char **argv) {
    qkb_run b;
    int st = qkb_start("bench_cuda_fakequant", argc, argv, &b);
    if (st) return st;
    const size_t rows = b.rows, k = b.k, bytes = b.bytes;
    const int reps = b.reps;
    float *src = b.src, *buf = b.buf, best_copy = b.copy_ms;
    double moved = 2.0 * (double)bytes, copy_gbs = b.copy_gbs;
    printf("bench_cuda_fakequant on %s: %zu x %zu FP32 (%.0f MiB), best of %d\n", b.prop.name, rows,
           k, (double)bytes / 1048576.0, reps);
    printf("%-16s %10s %9s %10s\n", "kernel", "ms", "GB/s", "x memcpy");
    printf("%-16s %10.3f %9.1f %10.2f\n", "cudaMemcpy D2D", best_copy, copy_gbs, 1.0);
    const struct {
        const char *label, *fmt;
        qk_rounding rnd;
    } cases[] = {{"nvfp4 RNE", "nvfp4", QK_ROUND_RNE},
                 {"mxfp4 RNE", "mxfp4", QK_ROUND_RNE},
                 {"nvfp4 SR", "nvfp4", QK_ROUND_SR},
                 {"mxfp4 SR", "mxfp4", QK_ROUND_SR}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        qk_quant_options o = {};
        o.rounding = cases[c].rnd;
        o.seed = 1;
        const qk_format *fmt = qk_format_by_name(cases[c].fmt);
        float best = 0;
        int rc = qkb_fake_quant_ms("bench_cuda_fakequant", fmt, &o, buf, src, rows, k, reps, &best);
        if (rc) return 1;
        double gbs = qkb_gbs(moved, best);
        printf("%-16s %10.3f %9.1f %10.2f\n", cases[c].label, best, gbs, gbs / copy_gbs);
    }
    cudaFree(src);
    cudaFree(buf);
    return 0;
}
