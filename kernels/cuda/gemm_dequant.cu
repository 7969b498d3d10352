// Device dequantizer of the emulated FP4 GEMM path (qk_gemm.h qk_gemm_dequant_bf16): FP4
// operand in the cuBLASLt layout -> BF16 e2m1 * block scale, exact, through the same
// qk_lt_value / qk_lt_scale_offset as the host's qk_lt_element (cublaslt_layout.h).
//
// One thread per code byte (two elements), a 2D grid: x over the bytes of a row, y over rows;
// the two BF16 results go out as one 32-bit store when ldy is even.
#include <cuda_runtime.h>

#include <stdint.h>

#include "cublaslt_layout.h"
#include "qk_gemm.h"

namespace {

constexpr int kThreads = 256;

__global__ void dequant_bf16_kernel(const uint8_t *__restrict__ codes,
                                    const uint8_t *__restrict__ scales, qk_lt_layout l,
                                    uint16_t *__restrict__ y, size_t ldy) {
    const size_t bytes_per_row = (l.k + 1) / 2;
    const size_t b = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (b >= bytes_per_row) return;
    for (size_t r = blockIdx.y; r < l.rows; r += gridDim.y) {
        const uint8_t byte = codes[r * l.ld_bytes + b];
        const size_t c = 2 * b; // even column; c and c + 1 share one scale block (vec is even)
        const uint8_t s = scales[qk_lt_scale_offset(r, c / l.vec, l.scale_cols)];
        const uint32_t lo = qk_bits_of(qk_lt_value(l.mode, byte & 0xFu, s)) >> 16;
        const uint32_t hi = qk_bits_of(qk_lt_value(l.mode, byte >> 4, s)) >> 16;
        uint16_t *row = y + r * ldy;
        if ((ldy & 1) == 0 && c + 1 < l.k) {
            *reinterpret_cast<uint32_t *>(row + c) = lo | (hi << 16);
        } else {
            row[c] = (uint16_t)lo;
            if (c + 1 < l.k) row[c + 1] = (uint16_t)hi;
        }
    }
}

} // namespace

extern "C" qs_status qk_gemm_dequant_bf16(const qk_gemm_operand *op, uint16_t *y, size_t ldy,
                                          void *stream, qs_error *err) {
    if (!op || !y || !op->data || !op->scales)
        return qs_error_set(err, QS_EINVAL, "kernels/cuda: gemm dequant: NULL operand or output");
    if (op->type != QK_GEMM_NVFP4 && op->type != QK_GEMM_MXFP4)
        return qs_error_set(err, QS_EINVAL,
                            "kernels/cuda: gemm dequant: operand type %d is not NVFP4 or MXFP4",
                            (int)op->type);
    const qk_lt_layout &l = op->layout;
    if ((op->type == QK_GEMM_NVFP4) != (l.mode == QK_LT_SCALE_VEC16_UE4M3) || l.rows == 0 ||
        l.k == 0 || l.ld_bytes * 2 < l.k)
        return qs_error_set(err, QS_EINVAL,
                            "kernels/cuda: gemm dequant: layout (%zu x %zu, mode %d) does not fit "
                            "the operand type %d",
                            l.rows, l.k, (int)l.mode, (int)op->type);
    if (ldy < l.k)
        return qs_error_set(err, QS_EINVAL, "kernels/cuda: gemm dequant: ldy %zu < k %zu", ldy,
                            l.k);
    if (((uintptr_t)y & 3) != 0)
        return qs_error_set(err, QS_EINVAL, "kernels/cuda: gemm dequant: y is not 4-byte aligned");
    const size_t bytes_per_row = (l.k + 1) / 2;
    dim3 grid((unsigned)((bytes_per_row + kThreads - 1) / kThreads),
              (unsigned)(l.rows < 65535 ? l.rows : 65535));
    dequant_bf16_kernel<<<grid, kThreads, 0, (cudaStream_t)stream>>>((const uint8_t *)op->data,
                                                                     op->scales, l, y, ldy);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return qs_error_set(err, QS_EIO, "kernels/cuda: gemm dequant kernel: %s",
                            cudaGetErrorString(e));
    return QS_OK;
}
