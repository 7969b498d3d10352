/* Block Hadamard rotation along k: every consecutive tile of b elements of a row becomes
 * v' = v * H_b / sqrt(b), H_b the +-1 Sylvester Hadamard matrix (H_b[i][j] = (-1)^popcount(i&j)),
 * so H = H_b / sqrt(b) is orthonormal and symmetric (H H^T = I, H^T = H, its own inverse). With
 * the same rotation on a linear's weight rows W [out x k] and its input rows X [T x k],
 * (X H)(W H)^T = X H H^T W^T = X W^T: the product is unchanged in exact arithmetic, while the
 * quantizer sees values whose outliers are spread over the tile. b equal to the format's group
 * is the block rotation of MR-GPTQ (arXiv 2509.23202) and of "Block Rotation is All You Need for
 * MXFP4" (arXiv 2511.04214); b = k is the global rotation (QuaRot, arXiv 2404.00456) they compare
 * against. No random signs: the deterministic H of the MR-GPTQ reference code. */
#ifndef QK_BLOCK_HADAMARD_H
#define QK_BLOCK_HADAMARD_H

#include <stddef.h>

#include "error.h"

/* x [rows x k] <- x H in place, tiles of b along k; the butterfly in a fixed order, then one
 * FP32 multiply by the float nearest 1/sqrt(b) (exact when b is a power of 4), so the bits
 * are the same for any thread count. threads: 0 = all.
 * Errors: QS_EINVAL (b not a power of two >= 2, k not a multiple of b, empty or NULL x). */
qs_status qk_block_hadamard(float *x, size_t rows, size_t k, size_t b, int threads, qs_error *err);

#endif
