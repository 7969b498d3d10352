/* Register-only FMA loops (fma_peak.h). */
#include "fma_peak.h"

#include <omp.h>

#include "clock.h"

/* Short runs, many of them: on a shared machine a run of a few milliseconds often goes
 * unpreempted, one of 0.1 s seldom does, and the best run is the core's own rate. */
enum { CHAINS = 12, ITERS = 1000000, REPS = 30 };

#if defined(__x86_64__)
#include <immintrin.h>

/* x = x * b + c per chain converges to c / (1 - b) = 1: no overflow, no denormals. The sum is
 * returned so the chains are live. */
__attribute__((target("avx2,fma"))) static float loop_avx2(long iters) {
    __m256 b = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(0.001f), x[CHAINS];
    for (int j = 0; j < CHAINS; j++)
        x[j] = _mm256_set1_ps((float)j);
    for (long i = 0; i < iters; i++)
        for (int j = 0; j < CHAINS; j++)
            x[j] = _mm256_fmadd_ps(x[j], b, c);
    __m256 s = x[0];
    for (int j = 1; j < CHAINS; j++)
        s = _mm256_add_ps(s, x[j]);
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0];
}

__attribute__((target("avx512f"))) static float loop_avx512(long iters) {
    __m512 b = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(0.001f), x[CHAINS];
    for (int j = 0; j < CHAINS; j++)
        x[j] = _mm512_set1_ps((float)j);
    for (long i = 0; i < iters; i++)
        for (int j = 0; j < CHAINS; j++)
            x[j] = _mm512_fmadd_ps(x[j], b, c);
    __m512 s = x[0];
    for (int j = 1; j < CHAINS; j++)
        s = _mm512_add_ps(s, x[j]);
    return _mm512_reduce_add_ps(s);
}

/* GFLOP/s of loop (width floats per vector) over `threads` threads: best of REPS runs. */
static double measure(float (*loop)(long), int width, int threads) {
    double best = 0.0;
    volatile float sink = 0.0f;
    for (int r = 0; r < REPS; r++) {
        double t0 = qs_clock_s();
#pragma omp parallel num_threads(threads)
        {
            float v = loop(ITERS);
#pragma omp critical(fma_peak_sink)
            sink += v;
        }
        double dt = qs_clock_s() - t0;
        double gf = 2.0 * CHAINS * width * (double)ITERS * threads / dt * 1e-9;
        best = gf > best ? gf : best;
    }
    (void)sink;
    return best;
}

int fma_peak_measure(int threads, fma_peak out[2]) {
    int n = 0;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        out[n++] = (fma_peak){"avx2+fma", measure(loop_avx2, 8, threads)};
    if (__builtin_cpu_supports("avx512f"))
        out[n++] = (fma_peak){"avx512f", measure(loop_avx512, 16, threads)};
    return n;
}
#else
int fma_peak_measure(int threads, fma_peak out[2]) {
    (void)threads;
    (void)out;
    return 0;
}
#endif
