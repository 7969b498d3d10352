/* 16- and 32-point random Hadamard transforms; formulas and sources in hadamard.h. */
#include "hadamard.h"

#include <omp.h>

#include "philox.h"

void qk_rht16_signs(uint64_t seed, float signs[16]) {
    const uint32_t ctr[4] = {0, 0, 0xFFFFFFFFu, 0xFFFFFFFFu};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t out[4];
    qk_philox4x32_10(ctr, key, out);
    for (int j = 0; j < 16; j++)
        signs[j] = ((out[0] >> j) & 1u) ? -1.0f : 1.0f;
}

/* In-place unnormalised Walsh-Hadamard transform of 16 values (Sylvester order). */
static void fwht16(float v[16]) {
    for (int h = 1; h < 16; h <<= 1) {
        for (int i = 0; i < 16; i += 2 * h) {
            for (int j = i; j < i + h; j++) {
                float a = v[j], b = v[j + h];
                v[j] = a + b;
                v[j + h] = a - b;
            }
        }
    }
}

qs_status qk_rht16(float *x, size_t rows, size_t k, uint64_t seed, int inverse, int threads,
                   qs_error *err) {
    if (!x || rows == 0 || k == 0)
        return qs_error_set(err, QS_EINVAL, "kernels: rht16: empty tensor (rows=%zu, k=%zu)", rows,
                            k);
    if (k % 16 != 0)
        return qs_error_set(err, QS_EINVAL,
                            "kernels: rht16: k=%zu is not a multiple of the 16-point tile", k);
    if (threads < 0)
        return qs_error_set(err, QS_EINVAL, "kernels: rht16: threads=%d is negative", threads);
    float s[16];
    qk_rht16_signs(seed, s);
    size_t tiles = rows * (k / 16);
    int nt = threads > 0 ? threads : omp_get_max_threads();
#pragma omp parallel for schedule(static) num_threads(nt)
    for (size_t t = 0; t < tiles; t++) {
        float *v = x + t * 16;
        if (!inverse)
            for (int j = 0; j < 16; j++)
                v[j] *= s[j];
        fwht16(v);
        for (int j = 0; j < 16; j++)
            v[j] *= 0.25f;
        if (inverse)
            for (int j = 0; j < 16; j++)
                v[j] *= s[j];
    }
    return QS_OK;
}

/* In-place unnormalised Walsh-Hadamard transform of 32 values (Sylvester order). */
static void fwht32(float v[32]) {
    for (int h = 1; h < 32; h <<= 1) {
        for (int i = 0; i < 32; i += 2 * h) {
            for (int j = i; j < i + h; j++) {
                float a = v[j], b = v[j + h];
                v[j] = a + b;
                v[j + h] = a - b;
            }
        }
    }
}

qs_status qk_rht(float *x, size_t rows, size_t k, int d, uint64_t seed, int inverse, int threads,
                 qs_error *err) {
    if (d == 16) return qk_rht16(x, rows, k, seed, inverse, threads, err);
    if (d != 32) return qs_error_set(err, QS_EINVAL, "kernels: rht: d=%d, expected 16 or 32", d);
    if (!x || rows == 0 || k == 0)
        return qs_error_set(err, QS_EINVAL, "kernels: rht32: empty tensor (rows=%zu, k=%zu)", rows,
                            k);
    if (k % 32 != 0)
        return qs_error_set(err, QS_EINVAL,
                            "kernels: rht32: k=%zu is not a multiple of the 32-point tile", k);
    if (threads < 0)
        return qs_error_set(err, QS_EINVAL, "kernels: rht32: threads=%d is negative", threads);
    const uint32_t ctr[4] = {0, 0, 0xFFFFFFFFu, 0xFFFFFFFFu};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t w[4];
    qk_philox4x32_10(ctr, key, w);
    float s[32];
    for (int j = 0; j < 32; j++)
        s[j] = ((w[0] >> j) & 1u) ? -1.0f : 1.0f;
    const float norm = 0.17677669529663688f; /* 1/sqrt(32) */
    size_t tiles = rows * (k / 32);
    int nt = threads > 0 ? threads : omp_get_max_threads();
#pragma omp parallel for schedule(static) num_threads(nt)
    for (size_t t = 0; t < tiles; t++) {
        float *v = x + t * 32;
        if (!inverse)
            for (int j = 0; j < 32; j++)
                v[j] *= s[j];
        fwht32(v);
        for (int j = 0; j < 32; j++)
            v[j] *= norm;
        if (inverse)
            for (int j = 0; j < 32; j++)
                v[j] *= s[j];
    }
    return QS_OK;
}
