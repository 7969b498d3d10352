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
/* 16 blocks a call as two vectors of 8, one block to a 64-bit lane, each counter word in the
 * low half of its lane: vpmuludq reads only the low halves, so a round is two products, two
 * shifts (the high words) and two three-way xors, and the low words of the products go on
 * as they are (their high halves are never read). The counter blk0 + j is a 64-bit add, its
 * high word a shift. At the end each block's four words are packed into two 64-bit lanes and
 * the lanes put in block order. */
__attribute__((target("avx512f"))) static void sr_words_avx512(uint64_t seed, uint32_t tensor_id,
                                                               uint32_t step, uint64_t blk0,
                                                               size_t nblk, uint32_t *out) {
    const __m512i m0 = _mm512_set1_epi64(0xD2511F53u), m1 = _mm512_set1_epi64(0xCD9E8D57u);
    const __m512i iota = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i low = _mm512_set1_epi64(0xFFFFFFFFu);
    /* blocks 0-3 and 4-7 from the unpacked halves (lo: blocks 0, 2, 4, 6; hi: 1, 3, 5, 7) */
    const __m512i first = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);
    const __m512i second = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
    for (size_t b = 0; b < nblk; b += 16) {
        __m512i c0[2], c1[2], c2[2], c3[2];
        for (int h = 0; h < 2; h++) {
            __m512i blk =
                _mm512_add_epi64(_mm512_set1_epi64((long long)(blk0 + b + 8 * (size_t)h)), iota);
            c0[h] = blk;
            c1[h] = _mm512_srli_epi64(blk, 32);
            c2[h] = _mm512_set1_epi64(tensor_id);
            c3[h] = _mm512_set1_epi64(step);
        }
        uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
        for (int round = 0; round < 10; round++) {
            if (round > 0) {
                k0 += 0x9E3779B9u;
                k1 += 0xBB67AE85u;
            }
            const __m512i vk0 = _mm512_set1_epi64(k0), vk1 = _mm512_set1_epi64(k1);
            for (int h = 0; h < 2; h++) {
                __m512i p0 = _mm512_mul_epu32(c0[h], m0), p1 = _mm512_mul_epu32(c2[h], m1);
                c0[h] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p1, 32), c1[h], vk0, 0x96);
                c1[h] = p1;
                c2[h] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p0, 32), c3[h], vk1, 0x96);
                c3[h] = p0;
            }
        }
        for (int h = 0; h < 2 && b + 8 * (size_t)h < nblk; h++) {
            /* words (c0, c1) and (c2, c3) of a block as one 64-bit lane each: hi << 32 | lo */
            __m512i c01 = _mm512_ternarylogic_epi64(_mm512_slli_epi64(c1[h], 32), c0[h], low, 0xF8);
            __m512i c23 = _mm512_ternarylogic_epi64(_mm512_slli_epi64(c3[h], 32), c2[h], low, 0xF8);
            __m512i lo = _mm512_unpacklo_epi64(c01, c23), hi = _mm512_unpackhi_epi64(c01, c23);
            size_t left = nblk - b - 8 * (size_t)h; /* blocks to store, 4 to a vector */
            uint32_t *o = out + 4 * (b + 8 * (size_t)h);
            size_t n0 = left < 4 ? left : 4, n1 = left < 4 ? 0 : (left < 8 ? left - 4 : 4);
            _mm512_mask_storeu_epi64(o, (__mmask8)((1u << (2 * n0)) - 1u),
                                     _mm512_permutex2var_epi64(lo, first, hi));
            if (n1)
                _mm512_mask_storeu_epi64(o + 16, (__mmask8)((1u << (2 * n1)) - 1u),
                                         _mm512_permutex2var_epi64(lo, second, hi));
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
