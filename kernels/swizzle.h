/* The cuBLASLt "128x4" block-scale layout (docs/numerics.md 4.3; cuBLAS "1D block scaling
 * factors layout", torchao to_blocked, TransformerEngine swizzle.h): a logical row-major
 * scale matrix S[R][C] (R = rows of the operand, C = blocks per row) padded to
 * Rp = roundup(R, 128), Cp = roundup(C, 4), stored as 512-byte tiles of 128 rows x 4
 * columns, tiles in row-tile-major order:
 *   off(r, c) = ((r/128)*(Cp/4) + c/4)*512 + (r%32)*16 + ((r%128)/32)*4 + (c%4). */
#ifndef QK_SWIZZLE_H
#define QK_SWIZZLE_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of the swizzled buffer for R x C scales: roundup(R,128) * roundup(C,4). */
size_t qk_swizzle_128x4_size(size_t rows, size_t cols);

/* Byte offset of S[r][c] in the swizzled buffer of a matrix with `cols` columns. */
size_t qk_swizzle_128x4_offset(size_t r, size_t c, size_t cols);

/* Writes the swizzled form of src [rows x cols] (row-major bytes) into dst, which holds
 * out_len >= qk_swizzle_128x4_size(rows, cols) bytes; padding bytes are 0.
 * Errors: QS_EINVAL (NULL buffer, empty matrix, dst too small). */
qs_status qk_swizzle_128x4(const uint8_t *src, size_t rows, size_t cols, uint8_t *dst,
                           size_t out_len, qs_error *err);

#ifdef __cplusplus
}
#endif

#endif
