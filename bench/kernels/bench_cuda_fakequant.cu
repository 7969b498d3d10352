// GPU fake-quant throughput (kernels/cuda) against a device-to-device cudaMemcpy measured in
// the same run; not a test. Bytes counted: the matrix read once and written once, for both
// (NVFP4 reads it a second time for the tensor amax; not counted). Best of `reps` after one
// warm-up, timed with CUDA events. Usage: bench_cuda_fakequant [rows k [reps]]
#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>

#include "qk_cuda.h"
#include "quant.h"

#define CHECK(call)                                                                                \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

__global__ void fill(float *x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)(i * 2654435761u);
        x[i] = ((float)(h >> 8) * 0x1p-24f - 0.5f) * ((h & 0xFF) == 0 ? 64.0f : 4.0f);
    }
}

int main(int argc, char **argv) {
    size_t rows = 16384, k = 16384;
    int reps = 10;
    if (argc >= 3) {
        rows = strtoul(argv[1], NULL, 10);
        k = strtoul(argv[2], NULL, 10);
    }
    if (argc >= 4) reps = atoi(argv[3]);
    if (qk_cuda_device_count() == 0) {
        printf("bench_cuda_fakequant: no CUDA device\n");
        return 77;
    }
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    size_t n = rows * k, bytes = n * sizeof(float);
    float *src, *buf;
    CHECK(cudaMalloc((void **)&src, bytes));
    CHECK(cudaMalloc((void **)&buf, bytes));
    fill<<<1024, 256>>>(src, n);
    CHECK(cudaDeviceSynchronize());
    cudaEvent_t t0, t1;
    CHECK(cudaEventCreate(&t0));
    CHECK(cudaEventCreate(&t1));
    double moved = 2.0 * (double)bytes;
    float best_copy = 1e30f;
    for (int r = 0; r <= reps; r++) {
        CHECK(cudaEventRecord(t0));
        CHECK(cudaMemcpy(buf, src, bytes, cudaMemcpyDeviceToDevice));
        CHECK(cudaEventRecord(t1));
        CHECK(cudaEventSynchronize(t1));
        float ms;
        CHECK(cudaEventElapsedTime(&ms, t0, t1));
        if (r > 0 && ms < best_copy) best_copy = ms;
    }
    double copy_gbs = moved / (best_copy * 1e-3) / 1e9;
    printf("bench_cuda_fakequant on %s: %zu x %zu FP32 (%.0f MiB), best of %d\n", prop.name, rows,
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
        float best = 1e30f;
        for (int r = 0; r <= reps; r++) {
            CHECK(cudaMemcpy(buf, src, bytes, cudaMemcpyDeviceToDevice));
            qs_error err = {};
            CHECK(cudaEventRecord(t0));
            if (qk_cuda_fake_quant(qk_format_by_name(cases[c].fmt), &o, buf, rows, k, NULL, &err) !=
                QS_OK) {
                fprintf(stderr, "bench_cuda_fakequant: %s\n", err.msg);
                return 1;
            }
            CHECK(cudaEventRecord(t1));
            CHECK(cudaEventSynchronize(t1));
            float ms;
            CHECK(cudaEventElapsedTime(&ms, t0, t1));
            if (r > 0 && ms < best) best = ms;
        }
        double gbs = moved / (best * 1e-3) / 1e9;
        printf("%-16s %10.3f %9.1f %10.2f\n", cases[c].label, best, gbs, gbs / copy_gbs);
    }
    cudaFree(src);
    cudaFree(buf);
    return 0;
}
