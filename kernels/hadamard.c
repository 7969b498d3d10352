/* 16- and 32-point random Hadamard transforms; formulas and sources in hadamard.h. */
#include "hadamard.h"

#include <omp.h>
#include <string.h>

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

/* The d signs (d = 16 or 32) and the normalisation of qk_rht's tiles. */
static void rht_signs(uint64_t seed, int d, float *s, float *norm) {
    const uint32_t ctr[4] = {0, 0, 0xFFFFFFFFu, 0xFFFFFFFFu};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t w[4];
    qk_philox4x32_10(ctr, key, w);
    for (int j = 0; j < d; j++)
        s[j] = ((w[0] >> j) & 1u) ? -1.0f : 1.0f;
    *norm = d == 16 ? 0.25f : 0.17677669529663688f; /* 1/sqrt(32), as qk_rht */
}

/* |x|'s bits when x is finite, else 0: the integer order of these is the numeric order. */
static inline int32_t finite_abs_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    u &= 0x7FFFFFFFu;
    return u >= 0x7F800000u ? 0 : (int32_t)u;
}

/* One tile column block of qk_rht_from: the d x 16 tile t[j][c] of the transform's inputs
 * (element j of the RHT vector of output row c), transformed column by column with the
 * operations of qk_rht (signs, the butterfly of fwht16/fwht32 in its order, the norm), 16
 * columns as one vector. Returns the largest finite |result| bits. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static int32_t
rht_tile_columns(float t[32][16], int d, const float *s, float norm) {
    for (int j = 0; j < d; j++)
        for (int c = 0; c < 16; c++)
            t[j][c] *= s[j];
    for (int h = 1; h < d; h <<= 1)
        for (int i = 0; i < d; i += 2 * h)
            for (int j = i; j < i + h; j++)
                for (int c = 0; c < 16; c++) {
                    float a = t[j][c], b = t[j + h][c];
                    t[j][c] = a + b;
                    t[j + h][c] = a - b;
                }
    int32_t m = 0;
    for (int j = 0; j < d; j++)
        for (int c = 0; c < 16; c++) {
            t[j][c] *= norm;
            int32_t b = finite_abs_bits(t[j][c]);
            m = b > m ? b : m;
        }
    return m;
}

qs_status qk_rht_from(float *dst, const float *src, size_t rows, size_t k, int transpose, int d,
                      uint64_t seed, int threads, float *amax, qs_error *err) {
    if (d != 16 && d != 32)
        return qs_error_set(err, QS_EINVAL, "kernels: rht_from: d=%d, expected 16 or 32", d);
    if (!dst || !src || rows == 0 || k == 0)
        return qs_error_set(err, QS_EINVAL, "kernels: rht_from: empty tensor (rows=%zu, k=%zu)",
                            rows, k);
    if (k % (size_t)d != 0)
        return qs_error_set(err, QS_EINVAL,
                            "kernels: rht_from: k=%zu is not a multiple of the %d-point tile", k,
                            d);
    if (threads < 0)
        return qs_error_set(err, QS_EINVAL, "kernels: rht_from: threads=%d is negative", threads);
    size_t n = rows * k;
    if (src < dst + n && dst < src + n)
        return qs_error_set(err, QS_EINVAL, "kernels: rht_from: src and dst overlap");
    float s[32], norm;
    rht_signs(seed, d, s, &norm);
    /* work items: (tile along k, block of 16 output rows) */
    size_t ktiles = k / (size_t)d, rblocks = (rows + 15) / 16;
    int nt = threads > 0 ? threads : omp_get_max_threads();
    int32_t m = 0;
#pragma omp parallel for schedule(static) num_threads(nt) reduction(max : m)
    for (size_t w = 0; w < ktiles * rblocks; w++) {
        size_t kt = w / rblocks, r0 = (w % rblocks) * 16;
        size_t nr = rows - r0 < 16 ? rows - r0 : 16;
        size_t k0 = kt * (size_t)d;
        float t[32][16];
        /* t[j][c] = input element k0 + j of output row r0 + c */
        for (int j = 0; j < d; j++) {
            if (transpose) { /* src [k x rows]: row k0 + j, columns r0.. are contiguous */
                const float *sr = src + (k0 + (size_t)j) * rows + r0;
                for (size_t c = 0; c < nr; c++)
                    t[j][c] = sr[c];
            } else {
                for (size_t c = 0; c < nr; c++)
                    t[j][c] = src[(r0 + c) * k + k0 + (size_t)j];
            }
            for (size_t c = nr; c < 16; c++)
                t[j][c] = 0.0f; /* columns past the last row: transformed, never stored */
        }
        int32_t tm = rht_tile_columns(t, d, s, norm);
        m = tm > m ? tm : m;
        for (size_t c = 0; c < nr; c++) {
            float *o = dst + (r0 + c) * k + k0;
            for (int j = 0; j < d; j++)
                o[j] = t[j][c];
        }
    }
    if (amax) memcpy(amax, &m, sizeof *amax);
    return QS_OK;
}
