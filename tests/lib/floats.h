/* Float arrays for the C tests that compare two kernels bit for bit: a deterministic fill (no
 * data file) and the count of elements whose bits differ. Header-only (static inline functions)
 * so each test binary stays one file. */
#ifndef QS_TESTS_LIB_FLOATS_H
#define QS_TESTS_LIB_FLOATS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* x[n] in [-a, a) from a 32-bit LCG (Numerical Recipes' constants) started at seed. */
static inline void qwt_fill(float *x, size_t n, uint32_t seed, float a) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = a * ((float)(seed >> 8) / 8388608.0f - 1.0f);
    }
}

/* Elements i < n whose bit patterns differ between a and b (NaNs compare by their bits). */
static inline size_t qwt_differing(const float *a, const float *b, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += memcmp(&a[i], &b[i], sizeof a[i]) != 0;
    return bad;
}

#endif
