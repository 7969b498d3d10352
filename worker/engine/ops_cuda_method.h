/* The CUDA table's method_input (ops.h), in ops_cuda_method.cu. */
#ifndef QW_OPS_CUDA_METHOD_H
#define QW_OPS_CUDA_METHOD_H

#include "error.h"
#include "ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest rotation tile the kernel holds: one tile in shared memory, 32 KiB of floats, under
 * the 48 KiB of dynamic shared memory a block gets without opting in on every device. */
#define QW_CUDA_METHOD_MAX_TILE 8192

/* y[T x K] = rotate_tile(x / s) on b's stream (ops.h method_input): y, x and s device (or
 * managed) memory; the CPU entry's bits. Waits only when y is memory the host may read.
 * Errors: QS_EINVAL (as the CPU entry), QS_EUNSUPPORTED (tile > QW_CUDA_METHOD_MAX_TILE),
 * QS_EIO (launch). */
qs_status qw_cuda_method_input(qw_backend *b, float *y, const float *x, int T, int K,
                               const float *s, int tile, qs_error *err);

#ifdef __cplusplus
}
#endif

#endif
