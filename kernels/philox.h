/* Philox4x32-10, the counter-based generator of Salmon, Moraes, Dror and Shaw, "Parallel
 * Random Numbers: As Easy as 1, 2, 3" (SC11), bit-compatible with Random123's philox4x32
 * with 10 rounds (checked against its known-answer vectors in tests/kernels).
 *
 * qsweep's streams (one layout, shared by the CPU reference and the CUDA kernels):
 * - stochastic rounding: the 32 random bits of element i (row-major index row*k + col) of
 *   tensor t at step s under seed are word (i & 3) of
 *       philox4x32_10(counter = {lo32(i >> 2), hi32(i >> 2), t, s}, key = {lo32(seed), hi32(seed)})
 *   so they are a pure function of (seed, t, s, i), and two tensors (t differs) or two steps
 *   never share a counter.
 * - the random Hadamard sign vector (hadamard.h): word 0 of the counter
 *   {0, 0, 0xFFFFFFFF, 0xFFFFFFFF} under the same key; tensor id 0xFFFFFFFF is reserved. */
#ifndef QK_PHILOX_H
#define QK_PHILOX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One Philox4x32-10 block: out[0..3] from counter ctr[0..3] and key key[0..1]. */
void qk_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* The stochastic-rounding bits of element `index` of tensor `tensor_id` at `step` (layout
 * above). Calling it for 4 consecutive indices costs 4 blocks; bulk users call
 * qk_philox4x32_10 once per 4 elements. */
uint32_t qk_sr_bits(uint64_t seed, uint32_t tensor_id, uint32_t step, uint64_t index);

/* The stochastic-rounding words of blocks blk0 .. blk0 + nblk - 1 of tensor `tensor_id` at
 * `step`, into out[4 * nblk]: out[i] = qk_sr_bits(seed, tensor_id, step, 4 * blk0 + i), in
 * AVX-512F vectors of 8 blocks where the CPU has them. */
void qk_sr_words(uint64_t seed, uint32_t tensor_id, uint32_t step, uint64_t blk0, size_t nblk,
                 uint32_t *out);
/* qk_sr_words on one path, "portable" or "avx512f" (for tests); -1 when the CPU lacks it. */
int qk_sr_words_on(const char *path, uint64_t seed, uint32_t tensor_id, uint32_t step,
                   uint64_t blk0, size_t nblk, uint32_t *out);

#ifdef __cplusplus
}
#endif

#endif
