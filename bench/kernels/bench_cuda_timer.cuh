// Best-of-reps timing with CUDA events and the CUDA error check, shared by the GPU benchmarks
// (bench_cuda_util.cuh's quantizer benchmarks and bench_cuda_gemm). Header only.
#ifndef QK_BENCH_CUDA_TIMER_CUH
#define QK_BENCH_CUDA_TIMER_CUH

#include <cuda_runtime.h>

#include <stdio.h>

// Returns 1 from the calling function (printing file, line and CUDA's message) when call fails.
#define CHECK(call)                                                                                \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

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
static inline int qkb_no_prep() {
    return 0;
}

#endif
