/* 16- and 32-point random Hadamard transforms; formulas and sources in hadamard.h. qk_rht_from
 * has a portable path and an AVX-512F one, chosen at run time as the fixed-order GEMM chooses
 * its ISA; they give the same bits (tested). */
#include "hadamard.h"

#include <omp.h>
#include <string.h>

#include "philox.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define QK_HADAMARD_AVX512 1
#endif

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

/* One work item of qk_rht_from, portable: the d x 16 tile t[j][c] (element k0 + j of output
 * row r0 + c, zero past the nr rows) gathered from src, transformed by rht_tile_columns, and
 * the nr rows stored. Returns the largest finite |result| bits. */
static int32_t rht_item_portable(float *dst, const float *src, size_t rows, size_t k, int transpose,
                                 int d, const float *s, float norm, size_t r0, size_t nr,
                                 size_t k0) {
    float t[32][16];
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
    int32_t m = rht_tile_columns(t, d, s, norm);
    for (size_t c = 0; c < nr; c++) {
        float *o = dst + (r0 + c) * k + k0;
        for (int j = 0; j < d; j++)
            o[j] = t[j][c];
    }
    return m;
}

#if QK_HADAMARD_AVX512
/* r[i][j] <- r[j][i] for 16 vectors of 16 floats: pairs, then quadruples within 128-bit lanes,
 * then the 128-bit lanes themselves in two steps. */
__attribute__((target("avx512f"), always_inline)) static inline void transpose16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int h = 0; h < 16; h += 8)
        for (int i = 0; i < 4; i++) {
            t[h + i] = _mm512_shuffle_f32x4(r[h + i], r[h + i + 4], 0x88);
            t[h + i + 4] = _mm512_shuffle_f32x4(r[h + i], r[h + i + 4], 0xDD);
        }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
    }
}

/* rht_item_portable with the tile in AVX-512F vectors, t[j] = lane c for output row r0 + c:
 * loaded directly (transpose 1) or as 16 x 16 transposes of the rows (transpose 0), the same
 * multiplications, butterfly and norm on each element, then stored as 16 x 16 transposes. */
__attribute__((target("avx512f"))) static int32_t
rht_item_avx512(float *dst, const float *src, size_t rows, size_t k, int transpose, int d,
                const float *s, float norm, size_t r0, size_t nr, size_t k0) {
    __m512 t[32];
    const __mmask16 live = (__mmask16)((1u << nr) - 1u);
    for (int h = 0; h < d; h += 16) {
        if (transpose) {
            for (int j = 0; j < 16; j++)
                t[h + j] = _mm512_maskz_loadu_ps(live, src + (k0 + (size_t)(h + j)) * rows + r0);
        } else {
            for (size_t c = 0; c < 16; c++)
                t[h + c] = c < nr ? _mm512_loadu_ps(src + (r0 + c) * k + k0 + (size_t)h)
                                  : _mm512_setzero_ps();
            transpose16(t + h);
        }
    }
    for (int j = 0; j < d; j++)
        t[j] = _mm512_mul_ps(t[j], _mm512_set1_ps(s[j]));
    for (int h = 1; h < d; h <<= 1)
        for (int i = 0; i < d; i += 2 * h)
            for (int j = i; j < i + h; j++) {
                __m512 a = t[j], b = t[j + h];
                t[j] = _mm512_add_ps(a, b);
                t[j + h] = _mm512_sub_ps(a, b);
            }
    const __m512 vn = _mm512_set1_ps(norm);
    const __m512i abs = _mm512_set1_epi32(0x7FFFFFFF), inf = _mm512_set1_epi32(0x7F800000);
    __m512i m = _mm512_setzero_si512();
    for (int j = 0; j < d; j++) {
        t[j] = _mm512_mul_ps(t[j], vn);
        __m512i b = _mm512_and_si512(_mm512_castps_si512(t[j]), abs);
        m = _mm512_mask_max_epi32(m, _mm512_cmplt_epi32_mask(b, inf), m, b);
    }
    for (int h = 0; h < d; h += 16) {
        transpose16(t + h);
        for (size_t c = 0; c < nr; c++)
            _mm512_storeu_ps(dst + (r0 + c) * k + k0 + (size_t)h, t[h + c]);
    }
    return _mm512_reduce_max_epi32(m);
}
#endif

/* qk_rht_from's checks and work, its tiles on the AVX-512F path when avx512 is set. */
static qs_status rht_from(int avx512, float *dst, const float *src, size_t rows, size_t k,
                          int transpose, int d, uint64_t seed, int threads, float *amax,
                          qs_error *err) {
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
        int32_t tm;
#if QK_HADAMARD_AVX512
        if (avx512)
            tm = rht_item_avx512(dst, src, rows, k, transpose, d, s, norm, r0, nr, k0);
        else
#endif
            tm = rht_item_portable(dst, src, rows, k, transpose, d, s, norm, r0, nr, k0);
        m = tm > m ? tm : m;
    }
    if (amax) memcpy(amax, &m, sizeof *amax);
    return QS_OK;
}

/* Whether this CPU runs rht_from's AVX-512F path. */
static int have_avx512(void) {
#if QK_HADAMARD_AVX512
    return __builtin_cpu_supports("avx512f");
#else
    return 0;
#endif
}

qs_status qk_rht_from(float *dst, const float *src, size_t rows, size_t k, int transpose, int d,
                      uint64_t seed, int threads, float *amax, qs_error *err) {
    return rht_from(have_avx512(), dst, src, rows, k, transpose, d, seed, threads, amax, err);
}

qs_status qk_rht_from_on(const char *path, float *dst, const float *src, size_t rows, size_t k,
                         int transpose, int d, uint64_t seed, int threads, float *amax,
                         qs_error *err) {
    if (!strcmp(path, "portable"))
        return rht_from(0, dst, src, rows, k, transpose, d, seed, threads, amax, err);
    if (!strcmp(path, "avx512f") && have_avx512())
        return rht_from(1, dst, src, rows, k, transpose, d, seed, threads, amax, err);
    return qs_error_set(err, QS_EINVAL, "kernels: rht_from: path \"%s\" is not available here",
                        path);
}
