/* kernels_cuda_bitexact: GPU fake-quant (kernels/cuda) against the CPU reference, bit for bit,
 * on random matrices with NaN, +-Inf, -0 and subnormals, ragged k, every MX scale rule, the
 * NVFP4 clamp options, RNE and stochastic rounding. Prints OK / NOT OK per case (llm.c style);
 * exits 77 (ctest: skipped) when no GPU is present. NaN outputs compare equal whatever their
 * payload (GPUs canonicalise NaN; qk_cuda.h). Plain C without cmocka so that the binary runs
 * on a bare GPU host. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_test_util.h"
#include "philox.h"
#include "qk_cuda.h"
#include "quant.h"

int main(void) {
    if (qk_cuda_device_count() == 0) {
        printf("kernels_cuda_bitexact: no CUDA device, skipped\n");
        return 77;
    }
    static const struct {
        size_t rows, k;
    } shapes[] = {{1024, 4096}, {33, 172}, {7, 1}, {5, 48}, {300, 1000}, {64, 1001}};
    static const struct {
        const char *fmt;
        qk_mx_scale_rule rule;
        qk_nvfp4_clamp clamp;
    } cfg[] = {{"nvfp4", QK_MX_RCEIL, QK_NVFP4_CLAMP_NONE},
               {"nvfp4", QK_MX_RCEIL, QK_NVFP4_CLAMP_TORCHAO},
               {"nvfp4", QK_MX_RCEIL, QK_NVFP4_CLAMP_ZERO_TO_ONE},
               {"mxfp4", QK_MX_RCEIL, QK_NVFP4_CLAMP_NONE},
               {"mxfp4", QK_MX_FLOOR, QK_NVFP4_CLAMP_NONE},
               {"mxfp4", QK_MX_CEIL, QK_NVFP4_CLAMP_NONE},
               {"mxfp4", QK_MX_EVEN, QK_NVFP4_CLAMP_NONE}};
    int failed = 0, cases = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        size_t rows = shapes[s].rows, k = shapes[s].k, n = rows * k;
        float *x = qkt_random_matrix(rows, k, 100 + s, 3.0f, 300.0f, QKT_SPECIALS | QKT_ZERO);
        float *cpu = malloc(n * sizeof *cpu), *gpu = malloc(n * sizeof *gpu);
        if (!x || !cpu || !gpu) {
            fprintf(stderr, "out of memory\n");
            return 1;
        }
        for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
            for (int rnd = QK_ROUND_RNE; rnd <= QK_ROUND_SR; rnd += QK_ROUND_SR - QK_ROUND_RNE) {
                qk_quant_options o = {.rounding = (qk_rounding)rnd,
                                      .mx_rule = cfg[c].rule,
                                      .nvfp4_clamp = cfg[c].clamp,
                                      .seed = 12345 + s,
                                      .tensor_id = (uint32_t)c,
                                      .step = 3};
                const qk_format *f = qk_format_by_name(cfg[c].fmt);
                qs_error err = {0};
                memcpy(cpu, x, n * sizeof *x);
                memcpy(gpu, x, n * sizeof *x);
                qs_status a = qk_fake_quant(f, &o, cpu, rows, k, NULL, &err);
                qs_status b = a ? a : qk_cuda_fake_quant_host(f, &o, gpu, rows, k, &err);
                size_t first = 0, diff = !a && !b ? qkt_mismatches(cpu, gpu, n, &first) : 0;
                int ok = !a && !b && diff == 0;
                printf("%-6s %s %s rule %d clamp %d  %4zu x %-5zu  %s", ok ? "OK" : "NOT OK",
                       cfg[c].fmt, rnd == QK_ROUND_SR ? "SR " : "RNE", (int)cfg[c].rule,
                       (int)cfg[c].clamp, rows, k, ok ? "\n" : "");
                if (!ok) {
                    if (a || b)
                        printf(" (%s)\n", err.msg);
                    else
                        printf(" (%zu differ; first at %zu: x=%a cpu=%a gpu=%a)\n", diff, first,
                               (double)x[first], (double)cpu[first], (double)gpu[first]);
                    failed++;
                }
                cases++;
            }
        }
        free(x);
        free(cpu);
        free(gpu);
    }
    /* options the GPU does not implement are refused, never silently ignored */
    {
        float v[16] = {1.0f};
        qs_error err = {0};
        qk_quant_options given = {.tensor_amax_given = 1, .tensor_amax = 2.0f};
        qk_quant_options tiny = {.tiny_amax = QK_TINY_EXACT};
        const qk_format *f = qk_format_by_name("nvfp4");
        int ok = qk_cuda_fake_quant_host(f, &given, v, 1, 16, &err) == QS_EUNSUPPORTED &&
                 qk_cuda_fake_quant_host(f, &tiny, v, 1, 16, &err) == QS_EUNSUPPORTED;
        printf("%-6s nvfp4 tensor_amax_given / tiny_amax exact refused\n", ok ? "OK" : "NOT OK");
        failed += !ok;
        cases++;
    }
    printf("kernels_cuda_bitexact: %d of %d cases bit-identical\n", cases - failed, cases);
    return failed ? 1 : 0;
}
