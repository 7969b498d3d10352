/* How many 512-bit FMAs the core issues per cycle (1 or 2), measured: the fixed-order GEMM
 * (gemm_fixed.h) picks its register tile and K block from it. CPUID cannot say: Intel's
 * Skylake-SP Xeons have one or two 512-bit FMA units under the same family and model
 * (WikiChip, "Skylake (server)"), and AMD's Zen 4 runs a 512-bit FMA as two 256-bit halves. The
 * probe times the same number of independent register-only FMAs on ymm and on zmm registers:
 * every AVX-512 core issues two 256-bit FMAs a cycle, so a zmm loop that takes about as long as
 * the ymm one (twice the FLOPs) means two 512-bit pipes, and one that takes about twice as long
 * means one. A ratio of times needs no clock frequency; AVX-512's lower frequency license on
 * some Intel parts lowers it (hence the threshold 1.5, not 2). Speed only: no GEMM bit depends
 * on the answer. */
#ifndef QW_FMA_PORTS_H
#define QW_FMA_PORTS_H

/* One probe's reading. */
typedef struct qw_fma_probe {
    int ports;         /* 1 or 2: 512-bit FMAs per cycle (1 on a CPU without AVX-512F) */
    double zmm_vs_ymm; /* FLOPs per second of the zmm loop over the ymm loop (0: not run) */
} qw_fma_probe;

/* Measures once per process (about a millisecond, best of 7 alternating rounds; thread-safe)
 * and returns the reading; later calls return the first. */
qw_fma_probe qw_fma_ports(void);

#endif
