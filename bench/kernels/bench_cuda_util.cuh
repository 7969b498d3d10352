// Timing and bandwidth helpers shared by the GPU quantizer benchmarks (bench_cuda_fakequant,
// bench_cuda_quantize): the CUDA error check, the input fill, the command line, and best-of-reps
// timing with CUDA events against a device-to-device cudaMemcpy baseline measured in the same
// run. Header only (static functions), one copy per benchmark binary.
#ifndef QK_BENCH_CUDA_UTIL_CUH
#define QK_BENCH_CUDA_UTIL_CUH

#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>

#include "bench_cuda_timer.cuh"
#include "qk_cuda.h"

// x[0..n): a hash of i mapped to [-2, 2), one in 256 elements to [-32, 32) (largest 32).
__global__ static void qkb_fill(float *x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)(i * 2654435761u);
        x[i] = ((float)(h >> 8) * 0x1p-24f - 0.5f) * ((h & 0xFF) == 0 ? 64.0f : 4.0f);
    }
}

// The command line [rows k [reps]]; defaults 16384 x 16384, 10 reps.
static void qkb_args(int argc, char **argv, size_t *rows, size_t *k, int *reps) {
    *rows = 16384;
    *k = 16384;
    *reps = 10;
    if (argc >= 3) {
        *rows = strtoul(argv[1], NULL, 10);
        *k = strtoul(argv[2], NULL, 10);
    }
    if (argc >= 4) *reps = atoi(argv[3]);
}

// GB/s of `bytes` moved in `ms` milliseconds.
static double qkb_gbs(double bytes, float ms) {
    return bytes / (ms * 1e-3) / 1e9;
}

// The baseline: best time of a device-to-device cudaMemcpy of `bytes` from src to dst.
static int qkb_copy_ms(float *dst, const float *src, size_t bytes, int reps, float *best_ms) {
    return qkb_best_of(
        reps, qkb_no_prep,
        [&]() -> int {
            CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
            return 0;
        },
        best_ms);
}

// Best time of qk_cuda_fake_quant(fmt, o) in place on buf [rows x k], buf refreshed from src
// (untimed) before each run; `who` prefixes the error message. Returns 0, or 1 on any error.
static int qkb_fake_quant_ms(const char *who, const qk_format *fmt, const qk_quant_options *o,
                             float *buf, const float *src, size_t rows, size_t k, int reps,
                             float *best_ms) {
    size_t bytes = rows * k * sizeof(float);
    return qkb_best_of(
        reps,
        [&]() -> int {
            CHECK(cudaMemcpy(buf, src, bytes, cudaMemcpyDeviceToDevice));
            return 0;
        },
        [&]() -> int {
            qs_error err = {};
            if (qk_cuda_fake_quant(fmt, o, buf, rows, k, NULL, &err) == QS_OK) return 0;
            fprintf(stderr, "%s: %s\n", who, err.msg);
            return 1;
        },
        best_ms);
}

// What a quantizer benchmark starts from (qkb_start).
struct qkb_run {
    size_t rows, k, bytes; // the FP32 input [rows x k], bytes of it
    int reps;
    cudaDeviceProp prop; // device 0
    float *src, *buf;    // the input (qkb_fill) and a work buffer of its size
    float copy_ms;       // the baseline: best D2D copy of bytes
    double copy_gbs;     // its rate, bytes read + written
};

// The command line, device 0, src filled, buf, and the copy baseline, for benchmark `who`,
// printed as the head of a table whose first column is `width` wide. Returns 0; 77 (printed)
// when no CUDA device is visible; 1 on a CUDA error.
static int qkb_start(const char *who, int width, int argc, char **argv, qkb_run *r) {
    qkb_args(argc, argv, &r->rows, &r->k, &r->reps);
    if (qk_cuda_device_count() == 0) {
        printf("%s: no CUDA device\n", who);
        return 77;
    }
    CHECK(cudaGetDeviceProperties(&r->prop, 0));
    r->bytes = r->rows * r->k * sizeof(float);
    CHECK(cudaMalloc((void **)&r->src, r->bytes));
    CHECK(cudaMalloc((void **)&r->buf, r->bytes));
    qkb_fill<<<1024, 256>>>(r->src, r->rows * r->k);
    CHECK(cudaDeviceSynchronize());
    if (qkb_copy_ms(r->buf, r->src, r->bytes, r->reps, &r->copy_ms)) return 1;
    r->copy_gbs = qkb_gbs(2.0 * (double)r->bytes, r->copy_ms);
    printf("%s on %s: %zu x %zu FP32 (%.0f MiB), best of %d\n", who, r->prop.name, r->rows, r->k,
           (double)r->bytes / 1048576.0, r->reps);
    printf("%-*s %10s %9s %10s\n", width, "kernel", "ms", "GB/s", "x memcpy");
    printf("%-*s %10.3f %9.1f %10.2f\n", width, "cudaMemcpy D2D", r->copy_ms, r->copy_gbs, 1.0);
    return 0;
}

#endif
