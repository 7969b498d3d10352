/* cuBLASLt 128x4 block-scale swizzle; layout and sources in swizzle.h. */
#include "swizzle.h"

#include <string.h>

static size_t roundup(size_t v, size_t m) {
    return (v + m - 1) / m * m;
}

size_t qk_swizzle_128x4_size(size_t rows, size_t cols) {
    return roundup(rows, 128) * roundup(cols, 4);
}

size_t qk_swizzle_128x4_offset(size_t r, size_t c, size_t cols) {
    size_t cp = roundup(cols, 4);
    return ((r / 128) * (cp / 4) + c / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + (c % 4);
}

qs_status qk_swizzle_128x4(const uint8_t *src, size_t rows, size_t cols, uint8_t *dst,
                           size_t out_len, qs_error *err) {
    if (!src || !dst || rows == 0 || cols == 0)
        return qs_error_set(err, QS_EINVAL, "kernels: swizzle: empty matrix (%zu x %zu)", rows,
                            cols);
    size_t need = qk_swizzle_128x4_size(rows, cols);
    if (out_len < need)
        return qs_error_set(err, QS_EINVAL,
                            "kernels: swizzle: output holds %zu bytes, %zu x %zu scales need %zu",
                            out_len, rows, cols, need);
    memset(dst, 0, need);
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++)
            dst[qk_swizzle_128x4_offset(r, c, cols)] = src[r * cols + c];
    return QS_OK;
}
