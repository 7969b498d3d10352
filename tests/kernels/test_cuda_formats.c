/* kernels_cuda_formats (label gpu): GPU fake-quant of EVERY format (qk_cuda_fake_quant: the
 * fast NVFP4/MXFP4 kernel and the generic one) and the device RHT16 against the CPU reference,
 * bit for bit (NaN payloads aside, qk_cuda.h): every format of format.c, RNE / RZ / SR (same
 * Philox stream), every MX rule, the NVFP4 clamps, a group size, a given tensor amax, ragged
 * shapes with NaN, +-Inf, -0 and subnormals; RHT16 forward and inverse for two seeds.
 * Prints OK / NOT OK per case; exits 77 (ctest: skipped) without a GPU. Plain C, no cmocka. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_test_util.h"
#include "format.h"
#include "hadamard.h"
#include "philox.h"
#include "qk_cuda.h"
#include "quant.h"

static int failures;

static void check(const qk_format *fmt, const qk_quant_options *o, size_t rows, size_t k,
                  uint64_t seed, const char *variant) {
    float *cpu = qkt_random_matrix(rows, k, seed, 3.0f, 300.0f, QKT_SPECIALS),
          *gpu = malloc(rows * k * sizeof *gpu);
    if (!gpu) abort();
    memcpy(gpu, cpu, rows * k * sizeof *cpu);
    qs_error err = {0}, gerr = {0};
    qs_status sc = qk_fake_quant(fmt, o, cpu, rows, k, NULL, &err);
    qs_status sg = qk_cuda_fake_quant_host(fmt, o, gpu, rows, k, &gerr);
    size_t bad = sc == QS_OK && sg == QS_OK ? qkt_mismatches(cpu, gpu, rows * k, NULL) : rows * k;
    printf("%s %s %s [%zu x %zu]: %zu mismatches%s%s\n", bad ? "NOT OK" : "OK", fmt->name, variant,
           rows, k, bad, sg ? " " : "", sg ? gerr.msg : "");
    failures += bad != 0;
    free(cpu);
    free(gpu);
}

static void check_rht(size_t rows, size_t k, uint64_t seed, int inverse) {
    float *cpu = qkt_random_matrix(rows, k, seed + 1, 3.0f, 300.0f, QKT_SPECIALS),
          *gpu = malloc(rows * k * sizeof *gpu);
    for (size_t i = 0; i < rows * k; i++) /* finite inputs: the transform mixes a tile */
        if (!isfinite(cpu[i])) cpu[i] = 1.5f;
    memcpy(gpu, cpu, rows * k * sizeof *cpu);
    qs_error err = {0};
    int ok = qk_rht16(cpu, rows, k, seed, inverse, 1, &err) == QS_OK;
    float *d = NULL;
    ok = ok && cudaMalloc((void **)&d, rows * k * sizeof *d) == cudaSuccess &&
         cudaMemcpy(d, gpu, rows * k * sizeof *d, cudaMemcpyHostToDevice) == cudaSuccess &&
         qk_cuda_rht16(d, rows, k, seed, inverse, NULL, &err) == QS_OK &&
         cudaMemcpy(gpu, d, rows * k * sizeof *d, cudaMemcpyDeviceToHost) == cudaSuccess;
    size_t bad = ok ? qkt_mismatches(cpu, gpu, rows * k, NULL) : rows * k;
    printf("%s rht16 %s seed %llu [%zu x %zu]: %zu mismatches\n", bad ? "NOT OK" : "OK",
           inverse ? "inverse" : "forward", (unsigned long long)seed, rows, k, bad);
    failures += bad != 0;
    cudaFree(d);
    free(cpu);
    free(gpu);
}

/* The shape under test, its index and the rounding's name, for one_variant. */
typedef struct {
    size_t rows, k, s;
    const char *rname;
} shape_ctx;

static void one_variant(void *ctx, const qk_format *fmt, const qk_quant_options *o, qkt_variant v,
                        const char *label) {
    const shape_ctx *c = ctx;
    char name[48];
    if (v == QKT_VAR_BASE)
        snprintf(name, sizeof name, "%s", c->rname);
    else if (v == QKT_VAR_MX_RULE || v == QKT_VAR_CLAMP)
        snprintf(name, sizeof name, "%s %s", c->rname, label);
    else
        snprintf(name, sizeof name, "%s", label);
    check(fmt, o, c->rows, c->k, 200 + 100 * (uint64_t)v + c->s, name);
}

int main(void) {
    if (qk_cuda_device_count() == 0) {
        printf("kernels_cuda_formats: no CUDA device, skipped\n");
        return 77;
    }
    static const size_t shapes[][2] = {{1024, 4096}, {33, 172}, {17, 48}, {5, 1001}, {300, 1000}};
    static const qk_rounding rnd[] = {QK_ROUND_RNE, QK_ROUND_RZ, QK_ROUND_SR};
    static const char *const rname[] = {"rne", "rz", "sr"};
    for (size_t f = 0; f < qk_format_count(); f++) {
        const qk_format *fmt = qk_format_at(f);
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (size_t r = 0; r < 3; r++) {
                if (fmt->rule == QK_RULE_IDENTITY && r > 0) continue;
                qk_quant_options o = {0};
                o.rounding = rnd[r];
                o.seed = 0x5EEDull << 20;
                o.tensor_id = 3;
                o.step = 11;
                shape_ctx c = {shapes[s][0], shapes[s][1], s, rname[r]};
                qkt_for_each_variant(fmt, &o, one_variant, &c);
            }
    }
    for (int inv = 0; inv < 2; inv++) {
        check_rht(1024, 4096, 7, inv);
        check_rht(3, 16, 0xFFFFFFFFFFull, inv);
    }
    printf("kernels_cuda_formats: %d failure(s)\n", failures);
    return failures ? 1 : 0;
}
