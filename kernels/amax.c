/* Tensor absolute maxima: max |x| with NaN and +-Inf ignored (kernels/README.md: an Inf
 * saturates in its block instead of setting the scale of the whole tensor), by bits, in
 * per-thread maxima combined with max, which is order-free. */
#include <omp.h>

#include "quant_plan.h"

/* max |v[i]| over the finite values of a chunk, by bits (amax_by_bits without the nonfinite
 * flag), in the widest vectors the CPU has: the first pass of NVFP4 is a pure read and runs
 * at memory speed only when this is not the baseline SSE2 code (no 32-bit integer max). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static float
finite_amax_chunk(const float *v, size_t n) {
    int32_t m = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t b = (int32_t)(qk_bits_of(v[i]) & 0x7FFFFFFFu);
        b = b >= 0x7F800000 ? 0 : b;
        m = b > m ? b : m;
    }
    return qk_float_of((uint32_t)m);
}

float qk_tensor_amax(const float *x, size_t n, int threads) {
    float amax = 0.0f;
    size_t chunks = (n + 4095) / 4096;
#pragma omp parallel num_threads(threads)
    {
        float local = 0.0f;
#pragma omp for schedule(static)
        for (size_t c = 0; c < chunks; c++) {
            size_t lo = c * 4096, len = n - lo < 4096 ? n - lo : 4096;
            float a = finite_amax_chunk(x + lo, len);
            local = a > local ? a : local;
        }
#pragma omp critical(qk_amax)
        amax = local > amax ? local : amax;
    }
    return amax;
}

qs_status qk_joint_amax(const float *const *tensors, const size_t *n, size_t count, int threads,
                        float *amax, qs_error *err) {
    if (!tensors || !n || !amax || count == 0)
        return qs_error_set(err, QS_EINVAL, "kernels: joint amax: %s",
                            count == 0 ? "no tensors (count 0)" : "tensors, n or amax is NULL");
    if (threads < 0)
        return qs_error_set(err, QS_EINVAL, "kernels: joint amax: threads %d is negative", threads);
    for (size_t i = 0; i < count; i++)
        if (n[i] > 0 && !tensors[i])
            return qs_error_set(err, QS_EINVAL, "kernels: joint amax: tensor %zu is NULL", i);
    int th = threads > 0 ? threads : omp_get_max_threads();
    float m = 0.0f;
    for (size_t i = 0; i < count; i++) {
        float a = n[i] ? qk_tensor_amax(tensors[i], n[i], th) : 0.0f;
        m = a > m ? a : m;
    }
    *amax = m;
    return QS_OK;
}
