/* Philox4x32-10; the rounds live in numerics.h so that CUDA kernels run the same code. The
 * SR stream in bulk (qk_sr_words) has a portable path and an AVX-512F one, chosen at run time
 * as the fixed-order GEMM chooses its ISA; both give qk_sr_bits's words (tested). */
#include "philox.h"

#include <string.h>

#include "numerics.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define QK_PHILOX_AVX512 1
#endif

void qk_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    qk_philox4x32_10_core(ctr, key, out);
}

uint32_t qk_sr_bits(uint64_t seed, uint32_t tensor_id, uint32_t step, uint64_t index) {
    return qk_sr_bits_core(seed, tensor_id, step, index);
}

/* Blocks a portable call runs side by side: fewer, and GCC unrolls the lane loop instead of
 * vectorising it. */
#define SR_LANES 64

/* The words of SR_LANES consecutive blocks blk0, blk0 + 1, ... into out[4 * SR_LANES]: the
 * rounds of qk_philox4x32_10_core lane by lane, so that the compiler runs the lanes as one
 * vector. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx2", "default")))
#endif
static void
sr_words_lanes(uint64_t seed, uint32_t tensor_id, uint32_t step, uint64_t blk0, uint32_t *out) {
    uint32_t c0[SR_LANES], c1[SR_LANES], c2[SR_LANES], c3[SR_LANES];
    for (int j = 0; j < SR_LANES; j++) {
        uint64_t b = blk0 + (uint64_t)j;
        c0[j] = (uint32_t)b;
        c1[j] = (uint32_t)(b >> 32);
        c2[j] = tensor_id;
        c3[j] = step;
    }
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int round = 0; round < 10; round++) {
        if (round > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        for (int j = 0; j < SR_LANES; j++) {
            uint64_t p0 = (uint64_t)0xD2511F53u * c0[j];
            uint64_t p1 = (uint64_t)0xCD9E8D57u * c2[j];
            uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
            uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
            c0[j] = hi1 ^ c1[j] ^ k0;
            c1[j] = lo1;
            c2[j] = hi0 ^ c3[j] ^ k1;
            c3[j] = lo0;
        }
    }
    for (int j = 0; j < SR_LANES; j++) {
        out[4 * j] = c0[j];
        out[4 * j + 1] = c1[j];
        out[4 * j + 2] = c2[j];
        out[4 * j + 3] = c3[j];
    }
}

static void sr_words_portable(uint64_t seed, uint32_t tensor_id, uint32_t step, uint64_t blk0,
                              size_t nblk, uint32_t *out) {
    for (size_t b = 0; b < nblk; b += SR_LANES) {
        if (nblk - b >= SR_LANES) {
            sr_words_lanes(seed, tensor_id, step, blk0 + b, out + 4 * b);
        } else {
            uint32_t tail[4 * SR_LANES];
            sr_words_lanes(seed, tensor_id, step, blk0 + b, tail);
            memcpy(out + 4 * b, tail, 4 * (nblk - b) * sizeof *tail);
        }
    }
}

#if QK_PHILOX_AVX512
/* hi and lo 32 bits of the 16 products a[j] * m (32 x 32 -> 64 bits, unsigned): even lanes
 * from one vpmuludq, odd lanes from another on a shifted down by 32. */
__attribute__((target("avx512f"), always_inline)) static inline void
mul_hi_lo(__m512i a, __m512i m, __m512i *hi, __m512i *lo) {
    __m512i even = _mm512_mul_epu32(a, m);
    __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
    *hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
    *lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
}

/* 16 blocks a vector: lane j holds block blk0 + j's counter words, the rounds run on the
 * four words as four vectors, then a 4 x 16 transpose puts each block's 4 words together. */
__attribute__((target("avx512f"))) static void sr_words_avx512(uint64_t seed, uint32_t tensor_id,
                                                               uint32_t step, uint64_t blk0,
                                                               size_t nblk, uint32_t *out) {
    const __m512i m0 = _mm512_set1_epi32((int)0xD2511F53u),
                  m1 = _mm512_set1_epi32((int)0xCD9E8D57u);
    const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i one = _mm512_set1_epi32(1);
    for (size_t b = 0; b < nblk; b += 16) {
        uint64_t base = blk0 + b;
        __m512i lo = _mm512_set1_epi32((int)(uint32_t)base);
        __m512i hi = _mm512_set1_epi32((int)(uint32_t)(base >> 32));
        __m512i c0 = _mm512_add_epi32(lo, iota);
        __m512i c1 = _mm512_mask_add_epi32(hi, _mm512_cmplt_epu32_mask(c0, lo), hi, one);
        __m512i c2 = _mm512_set1_epi32((int)tensor_id), c3 = _mm512_set1_epi32((int)step);
        uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
        for (int round = 0; round < 10; round++) {
            if (round > 0) {
                k0 += 0x9E3779B9u;
                k1 += 0xBB67AE85u;
            }
            __m512i hi0, lo0, hi1, lo1;
            mul_hi_lo(c0, m0, &hi0, &lo0);
            mul_hi_lo(c2, m1, &hi1, &lo1);
            c0 = _mm512_ternarylogic_epi32(hi1, c1, _mm512_set1_epi32((int)k0), 0x96); /* xor3 */
            c1 = lo1;
            c2 = _mm512_ternarylogic_epi32(hi0, c3, _mm512_set1_epi32((int)k1), 0x96);
            c3 = lo0;
        }
        /* in each 128-bit lane L, u0..u3 are blocks 4L..4L+3; then lane L of each to vector L */
        __m512i t0 = _mm512_unpacklo_epi32(c0, c1), t1 = _mm512_unpackhi_epi32(c0, c1);
        __m512i t2 = _mm512_unpacklo_epi32(c2, c3), t3 = _mm512_unpackhi_epi32(c2, c3);
        __m512i u0 = _mm512_unpacklo_epi64(t0, t2), u1 = _mm512_unpackhi_epi64(t0, t2);
        __m512i u2 = _mm512_unpacklo_epi64(t1, t3), u3 = _mm512_unpackhi_epi64(t1, t3);
        __m512i w0 = _mm512_shuffle_i32x4(u0, u1, _MM_SHUFFLE(1, 0, 1, 0));
        __m512i w1 = _mm512_shuffle_i32x4(u2, u3, _MM_SHUFFLE(1, 0, 1, 0));
        __m512i w2 = _mm512_shuffle_i32x4(u0, u1, _MM_SHUFFLE(3, 2, 3, 2));
        __m512i w3 = _mm512_shuffle_i32x4(u2, u3, _MM_SHUFFLE(3, 2, 3, 2));
        __m512i v[4] = {_mm512_shuffle_i32x4(w0, w1, _MM_SHUFFLE(2, 0, 2, 0)),
                        _mm512_shuffle_i32x4(w0, w1, _MM_SHUFFLE(3, 1, 3, 1)),
                        _mm512_shuffle_i32x4(w2, w3, _MM_SHUFFLE(2, 0, 2, 0)),
                        _mm512_shuffle_i32x4(w2, w3, _MM_SHUFFLE(3, 1, 3, 1))};
        size_t left = nblk - b < 16 ? nblk - b : 16; /* blocks to store, 4 to a vector */
        for (size_t i = 0; i < 4 && 4 * i < left; i++) {
            size_t nb = left - 4 * i < 4 ? left - 4 * i : 4;
            _mm512_mask_storeu_epi32(out + 4 * b + 16 * i, (__mmask16)((1u << (4 * nb)) - 1u),
                                     v[i]);
        }
    }
}
#endif

int qk_sr_words_on(const char *path, uint64_t seed, uint32_t tensor_id, uint32_t step,
                   uint64_t blk0, size_t nblk, uint32_t *out) {
    if (!strcmp(path, "portable")) {
        sr_words_portable(seed, tensor_id, step, blk0, nblk, out);
        return 0;
    }
#if QK_PHILOX_AVX512
    if (!strcmp(path, "avx512f") && __builtin_cpu_supports("avx512f")) {
        sr_words_avx512(seed, tensor_id, step, blk0, nblk, out);
        return 0;
    }
#endif
    return -1;
}

void qk_sr_words(uint64_t seed, uint32_t tensor_id, uint32_t step, uint64_t blk0, size_t nblk,
                 uint32_t *out) {
#if QK_PHILOX_AVX512
    if (__builtin_cpu_supports("avx512f")) {
        sr_words_avx512(seed, tensor_id, step, blk0, nblk, out);
        return;
    }
#endif
    sr_words_portable(seed, tensor_id, step, blk0, nblk, out);
}
