/* The C library's double-precision exp, several lanes at a time, bit for bit (exp_vec.c): the
 * evaluation's log-sum-exp and KL divergence (ops_cpu_score.c) sum exp() of every vocabulary
 * entry of every scored row, and one libm call per entry was most of a compare job's scoring. */
#ifndef QW_EXP_VEC_H
#define QW_EXP_VEC_H

#include <stddef.h>

/* y[i] = exp(x[i]) for i < n, the same bits as the C library's exp() on this machine: the vector
 * paths run, lane by lane, the operations of glibc's exp (since 2.28, after ARM's
 * optimized-routines: 2^(k/128) from a table of 128 pairs, a degree-5 polynomial, FMA-contracted
 * as the library's FMA build is), and take libm's exp() for a lane outside its main range
 * (|x| < 2^-54, |x| >= 512, Inf, NaN). They are used only on a CPU with AVX2+FMA or AVX-512F
 * whose exp() gives the same bits on a set of check inputs at first use; otherwise every
 * element is an exp() call. x and y may be the same array. */
void qw_exp_vec(const double *x, double *y, size_t n);

/* The path qw_exp_vec takes: "avx512f", "avx2+fma" or "libm" (the C library's exp per element). */
const char *qw_exp_vec_path(void);

/* qw_exp_vec on the named path whatever was chosen (tests: every path against exp()); -1 when
 * this CPU or build has no such path, else 0. */
int qw_exp_vec_on(const char *path, const double *x, double *y, size_t n);

#endif
