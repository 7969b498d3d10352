/* Block Hadamard rotation (block_hadamard.h). */
#include "block_hadamard.h"

#include <math.h>
#include <omp.h>

qs_status qk_block_hadamard(float *x, size_t rows, size_t k, size_t b, int threads, qs_error *err) {
    if (!x || rows == 0 || k == 0)
        return qs_error_set(err, QS_EINVAL, "methods: hadamard: empty tensor (rows=%zu, k=%zu)",
                            rows, k);
    if (b < 2 || (b & (b - 1)))
        return qs_error_set(err, QS_EINVAL, "methods: hadamard: size %zu is not a power of two", b);
    if (k % b)
        return qs_error_set(err, QS_EINVAL,
                            "methods: hadamard: k=%zu is not a multiple of the %zu-point tile "
                            "(a rotation of that size needs it)",
                            k, b);
    const float norm = (float)(1.0 / sqrt((double)b));
    const size_t tiles = rows * (k / b);
    int nt = threads > 0 ? threads : omp_get_max_threads();
#pragma omp parallel for schedule(static) num_threads(nt)
    for (size_t t = 0; t < tiles; t++) {
        float *v = x + t * b;
        for (size_t h = 1; h < b; h <<= 1)
            for (size_t i = 0; i < b; i += 2 * h)
                for (size_t j = i; j < i + h; j++) {
                    float a = v[j], c = v[j + h];
                    v[j] = a + c;
                    v[j + h] = a - c;
                }
        for (size_t j = 0; j < b; j++)
            v[j] *= norm;
    }
    return QS_OK;
}
