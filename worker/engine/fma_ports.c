/* The 512-bit FMA port probe (fma_ports.h): ymm and zmm register-only FMA loops, timed
 * alternately. */
#include "fma_ports.h"

#include <pthread.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* 12 chains: more than latency (4 cycles) x 2 pipes on both loops, so neither waits on a chain;
 * ITERS x 12 FMAs is about 0.1 ms a loop at 3 GHz. */
enum { CHAINS = 12, ITERS = 20000, ROUNDS = 7 };

static qw_fma_probe probe = {1, 0.0};
static pthread_once_t probe_once = PTHREAD_ONCE_INIT;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#if defined(__x86_64__)
/* x = x * b + c converges to 1 (no overflow or subnormals); the sum keeps the chains live. */
__attribute__((target("avx2,fma"), noinline)) static float loop_ymm(int iters) {
    __m256 b = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(0.001f), x[CHAINS];
    for (int j = 0; j < CHAINS; j++)
        x[j] = _mm256_set1_ps((float)j);
    for (int i = 0; i < iters; i++)
#pragma GCC unroll 12
        for (int j = 0; j < CHAINS; j++)
            x[j] = _mm256_fmadd_ps(x[j], b, c);
    for (int j = 1; j < CHAINS; j++)
        x[0] = _mm256_add_ps(x[0], x[j]);
    return _mm256_cvtss_f32(x[0]);
}

__attribute__((target("avx512f"), noinline)) static float loop_zmm(int iters) {
    __m512 b = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(0.001f), x[CHAINS];
    for (int j = 0; j < CHAINS; j++)
        x[j] = _mm512_set1_ps((float)j);
    for (int i = 0; i < iters; i++)
#pragma GCC unroll 12
        for (int j = 0; j < CHAINS; j++)
            x[j] = _mm512_fmadd_ps(x[j], b, c);
    for (int j = 1; j < CHAINS; j++)
        x[0] = _mm512_add_ps(x[0], x[j]);
    return _mm512_cvtss_f32(x[0]);
}

/* Best time of each loop over ROUNDS alternating rounds (the first zmm round also wakes the
 * upper halves of the vector units), then the FLOP-rate ratio. */
static void measure(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx2") ||
        !__builtin_cpu_supports("fma"))
        return;
    volatile float sink = 0.0f;
    double best_y = 1e30, best_z = 1e30;
    for (int r = 0; r < ROUNDS; r++) {
        double t0 = now_s();
        sink += loop_ymm(ITERS);
        double t1 = now_s();
        sink += loop_zmm(ITERS);
        double t2 = now_s();
        best_y = t1 - t0 < best_y ? t1 - t0 : best_y;
        best_z = t2 - t1 < best_z ? t2 - t1 : best_z;
    }
    (void)sink;
    probe.zmm_vs_ymm = best_z > 0.0 ? 2.0 * best_y / best_z : 0.0;
    probe.ports = probe.zmm_vs_ymm > 1.5 ? 2 : 1;
}
#else
static void measure(void) {}
#endif

qw_fma_probe qw_fma_ports(void) {
    pthread_once(&probe_once, measure);
    return probe;
}
