// Timing and bandwidth helpers shared by the GPU quantizer benchmarks (bench_cuda_fakequant,
// bench_cuda_quantize): the CUDA error check, the input fill, the command line, and best-of-reps
// timing with CUDA events against a device-to-device cudaMemcpy baseline measured in the same
// run. Header only (static functions), one copy per benchmark binary.
#ifndef QK_BENCH_CUDA_UTIL_CUH
#define QK_BENCH_CUDA_UTIL_CUH

#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>

#include "qk_cuda.h"

// Returns 1 from the calling function (printing file, line and CUDA's message) when call fails.
#define CHECK(call)                                                                                \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

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

// The best time in ms of reps runs after one warm-up: prep() untimed, then body() between two
// CUDA events. Each returns 0 on success; their first non-zero return is returned (*best_ms
// then unset). Either may use CHECK.
template <class Prep, class Body>
static int qkb_best_of(int reps, Prep prep, Body body, float *best_ms) {
    cudaEvent_t t0, t1;
    CHECK(cudaEventCreate(&t0));
    CHECK(cudaEventCreate(&t1));
    float best = 1e30f;
    int rc = 0;
    for (int r = 0; r <= reps && rc == 0; r++) {
        if ((rc = prep()) != 0) break;
        CHECK(cudaEventRecord(t0));
        if ((rc = body()) != 0) break;
        CHECK(cudaEventRecord(t1));
        CHECK(cudaEventSynchronize(t1));
        float ms;
        CHECK(cudaEventElapsedTime(&ms, t0, t1));
        if (r > 0 && ms < best) best = ms;
    }
    cudaEventDestroy(t0);
    cudaEventDestroy(t1);
    if (rc == 0) *best_ms = best;
    return rc;
}

// Nothing to prepare before a timed run.
static int qkb_no_prep() {
    return 0;
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

#endif
