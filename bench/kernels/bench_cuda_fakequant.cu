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
    int st = qkb_start("bench_cuda_fakequant", 16, argc, argv, &b);
    if (st) return st;
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
        int rc = qkb_fake_quant_ms("bench_cuda_fakequant", fmt, &o, b.buf, b.src, b.rows, b.k,
                                   b.reps, &best);
        if (rc) return 1;
        double gbs = qkb_gbs(2.0 * (double)b.bytes, best);
        printf("%-16s %10.3f %9.1f %10.2f\n", cases[c].label, best, gbs, gbs / b.copy_gbs);
    }
    cudaFree(b.src);
    cudaFree(b.buf);
    return 0;
}
