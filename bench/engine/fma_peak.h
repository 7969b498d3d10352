/* The core's FP32 FMA peak, measured: a register-only loop of independent fused multiply-add
 * chains per vector ISA the CPU has, so a benchmark can state its GFLOP/s as a fraction of
 * what the cores can do at all. */
#ifndef BENCH_FMA_PEAK_H
#define BENCH_FMA_PEAK_H

/* One measured peak. */
typedef struct fma_peak {
    const char *isa; /* "avx2+fma" (8-wide ymm) or "avx512f" (16-wide zmm) */
    double gflops;   /* FP32 GFLOP/s over `threads` threads (an FMA counts 2 FLOPs) */
} fma_peak;

/* Measures each ISA the CPU supports (__builtin_cpu_supports: AVX2 and FMA, then AVX-512F)
 * with `threads` OpenMP threads, each running 12 independent FMA chains (more than latency x
 * throughput, 4-5 cycles x 2 pipes, on current x86 cores) for about 4 ms; the best of 30
 * runs. Fills out[0..] and returns how many (0 on a CPU without AVX2+FMA, or not x86-64). */
int fma_peak_measure(int threads, fma_peak out[2]);

#endif
