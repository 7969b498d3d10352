/* A training linear on the GPU fed as a recipe says: worker/train/qlinear.h's three GEMMs
 *   fprop  y[N x out]   = Xq[N x in] Wq[out x in]^T
 *   dgrad  dx[N x in]   = dYq[N x out] (W^T)q[in x out]^T
 *   wgrad  dW[out x in] += (dY^T)q[out x N] (X^T)q[in x N]^T
 * with the same quantization points, the same operand specs (qw_recipe_operand), the same
 * stochastic-rounding streams (tensor id = linear * QW_N_OPERANDS + operand, env->seed,
 * env->step) and the same RHT16 signs. Each GEMM input is made on the device where the device
 * has the step (transpose; BF16 rounding, qw_round_bf16's bits; fake-quant through
 * qk_cuda_fake_quant and RHT16 through qk_cuda_rht16, each bit-exact with the CPU), and
 * otherwise (what the device refuses) by the CPU's own qw_qlinear_prepare over managed memory:
 * the inputs are bit-identical to the CPU's either way. The GEMMs are cuBLAS SGEMM (FP32
 * accumulate, pedantic): fake-quantized FP4 values are exact in FP32, so only the summation
 * order differs from the CPU.
 *
 * env->buf_a and env->buf_b must be backend (managed) memory of qw_qlinear_scratch_floats
 * floats each; x, W, dy, y, dx, dW backend memory too; env->hook, when set, is called as on the
 * CPU. Errors: those of qw_qlinear_prepare and qk_cuda_fake_quant, QS_EIO (CUDA, cuBLAS),
 * QS_EINVAL (not a CUDA backend). */
#ifndef QW_OPS_CUDA_QLINEAR_H
#define QW_OPS_CUDA_QLINEAR_H

#include "error.h"
#include "ops.h"
#include "qlinear.h"

#ifdef __cplusplus
extern "C" {
#endif

qs_status qw_cuda_qlinear_forward(qw_backend *b, const qw_qlinear_env *env, int layer, int linear,
                                  float *y, const float *x, const float *W, int N, int in, int out,
                                  qs_error *err);

qs_status qw_cuda_qlinear_backward(qw_backend *b, const qw_qlinear_env *env, int layer, int linear,
                                   float *dx, int dx_accumulate, float *dW, const float *dy,
                                   const float *x, const float *W, int N, int in, int out,
                                   qs_error *err);

#ifdef __cplusplus
}
#endif

#endif
