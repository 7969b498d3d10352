/* The 16-point random Hadamard transform (RHT) of NVIDIA's NVFP4 training recipe
 * ("Pretraining LLMs with NVFP4", arXiv 2509.25149, section 4.2; docs/numerics.md 3.6):
 * every consecutive 16-element tile v of a row (along k) becomes v' = v * H with
 * H = (1/4) * S * H16, H16 the +-1 Sylvester Hadamard matrix (H16[i][j] = (-1)^popcount(i&j))
 * and S = diag(s) a random sign vector fixed by the seed (philox.h). H is orthogonal, so the
 * inverse is v = v' * H^T = (1/4) * H16 * v' followed by the signs. */
#ifndef QK_HADAMARD_H
#define QK_HADAMARD_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The 16 signs (+1.0f or -1.0f) for a seed: bit j of word 0 of Philox4x32-10 at counter
 * {0, 0, 0xFFFFFFFF, 0xFFFFFFFF} with key {lo32(seed), hi32(seed)}; a set bit means -1. */
void qk_rht16_signs(uint64_t seed, float signs[16]);

/* Applies the RHT (inverse = 0) or its inverse (inverse = 1) in place to x [rows x k]
 * (row-major FP32). k must be a multiple of 16. Computed as sign flip (forward), the 4-stage
 * fast Walsh-Hadamard butterfly in a fixed order, and an exact multiply by 0.25, so the bits
 * are the same for any thread count. threads: 0 = all. Errors: QS_EINVAL (k % 16 != 0,
 * empty tensor, NULL x). */
qs_status qk_rht16(float *x, size_t rows, size_t k, uint64_t seed, int inverse, int threads,
                   qs_error *err);

/* The d-point RHT for d = 16 or 32: tiles of d elements along k, v' = v * (1/sqrt(d)) * S * Hd,
 * S = diag of the d signs from bits 0..d-1 of the same Philox word as qk_rht16_signs. d = 16
 * is qk_rht16 bit for bit; d = 32 is the transform of the NVFP4 paper's MXFP4 runs ("MXFP4
 * uses RHT d=32", arXiv 2509.25149 section 5; docs/numerics.md 3.6), matching MXFP4's 32-element
 * blocks. 1/sqrt(32) is one FP32 multiply by its nearest float (not exact, as no scale of an
 * odd power of two is), in the same fixed order, so the bits are the same for any thread
 * count. Errors: as qk_rht16 with d for 16, and QS_EINVAL for d other than 16 or 32. */
qs_status qk_rht(float *x, size_t rows, size_t k, int d, uint64_t seed, int inverse, int threads,
                 qs_error *err);

/* qk_rht (forward, d = 16 or 32) of a source read in either layout, out of place, in one pass,
 * with the tensor amax of the result: dst [rows x k] (row-major) = RHT along k of src [rows x
 * k] (transpose 0) or of src^T where src is [k x rows] (transpose 1: a training operand whose
 * blocks run along the other axis), and *amax = the largest finite |dst| (NaN and +-Inf
 * ignored, 0 when none), the value qk_tensor_amax of dst gives. The same operations per tile
 * as qk_rht, so dst is bit for bit the transpose (or copy) followed by qk_rht, for any thread
 * count; amax may be NULL. Errors: as qk_rht, and QS_EINVAL for a NULL or overlapping src. */
qs_status qk_rht_from(float *dst, const float *src, size_t rows, size_t k, int transpose, int d,
                      uint64_t seed, int threads, float *amax, qs_error *err);
/* qk_rht_from on one path, "portable" or "avx512f" (for tests); QS_EINVAL when the CPU lacks
 * it. */
qs_status qk_rht_from_on(const char *path, float *dst, const float *src, size_t rows, size_t k,
                         int transpose, int d, uint64_t seed, int threads, float *amax,
                         qs_error *err);

#ifdef __cplusplus
}
#endif

#endif
