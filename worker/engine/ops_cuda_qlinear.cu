/* The recipe-driven training linear on the GPU (ops_cuda_qlinear.h). */
#include "ops_cuda_impl.h"

#include <string.h>

#include "qk_cuda.h"

extern "C" {
#include "ops_cuda_qlinear.h"
#include "recipe.h"
}

/* dst[cols x rows] = src[rows x cols]^T (qw_train_transpose). */
__global__ void k_transpose(float *dst, const float *src, int rows, int cols) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)rows * cols;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / (size_t)cols, c = i % (size_t)cols;
        dst[c * rows + r] = src[i];
    }
}

/* qw_round_bf16, bit for bit: RNE, Inf saturated to +-max finite, NaN to 0x7FC0. */
__global__ void k_round_bf16(float *x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t u = __float_as_uint(x[i]);
        if ((u & 0x7F800000u) == 0x7F800000u) {
            u = (u & 0x007FFFFFu) ? 0x7FC00000u : ((u & 0x80000000u) | 0x7F7F0000u);
        } else {
            uint32_t r = u + 0x7FFFu + ((u >> 16) & 1u);
            if ((r & 0x7F800000u) == 0x7F800000u) r = (u & 0x80000000u) | 0x7F7F0000u;
            u = r & 0xFFFF0000u;
        }
        x[i] = __uint_as_float(u);
    }
}

static unsigned grid_of(size_t n) {
    size_t g = (n + 255) / 256;
    return (unsigned)(g < 1 ? 1 : g > 65535 ? 65535 : g);
}

/* GEMM input `op` of src [rows x cols] into dst, as qlinear.c's prep does. */
static qs_status prep(cuda_ctx *c, const qw_qlinear_env *env, int layer, int linear,
                      qw_gemm_operand op, float *dst, const float *src, int rows, int cols,
                      int transpose, qs_error *err) {
    qw_operand_spec spec;
    qw_recipe_operand(env->recipe, layer, env->n_layers, op, &spec);
    int r = transpose ? cols : rows, k = transpose ? rows : cols;
    size_t n = (size_t)rows * cols;
    qs_status st;
    if (transpose)
        k_transpose<<<grid_of(n), 256, 0, c->stream>>>(dst, src, rows, cols);
    else
        cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDefault, c->stream);
    if ((st = qw_cuda_status(c, cudaGetLastError(), "qlinear prepare", err)) != QS_OK) return st;
    st = QS_OK;
    if (spec.mode == QW_MODE_BF16) {
        k_round_bf16<<<grid_of(n), 256, 0, c->stream>>>(dst, n);
        st = qw_cuda_status(c, cudaGetLastError(), "qlinear bf16", err);
    } else if (spec.mode == QW_MODE_QUANT) {
        qs_error e2 = {};
        if (spec.rht && k % 16)
            return qs_error_set(err, QS_EINVAL,
                                "linear %d %s: RHT16 needs k %% 16 == 0, k is %d (tokens per "
                                "micro-batch for wgrad)",
                                linear, qw_gemm_operand_name(op), k);
        /* RHT16 on the device (kernels/cuda: qk_rht16's signs, butterfly order and bits); the
         * 32-point RHT of mxfp4 (recipe.h rht_dim) has no device kernel: the CPU's below. */
        if (spec.rht && spec.rht_dim == 32)
            st = QS_EUNSUPPORTED;
        else if (spec.rht)
            st = qk_cuda_rht16(dst, (size_t)r, (size_t)k, env->seed, 0, c->stream, &e2);
        qk_quant_options opt;
        memset(&opt, 0, sizeof opt);
        opt.rounding = spec.rounding;
        opt.seed = env->seed;
        opt.tensor_id = (uint32_t)linear * QW_N_OPERANDS + (uint32_t)op;
        opt.step = env->step;
        if (st == QS_OK)
            st = qk_cuda_fake_quant(spec.fmt, &opt, dst, (size_t)r, (size_t)k, c->stream, &e2);
        if (st == QS_EUNSUPPORTED) {
            /* Refused by the device (reference_only, exact tiny amax): the CPU's own preparation
             * on managed memory, from the source again (same bits). */
            if ((st = qw_cuda_status(c, cudaStreamSynchronize(c->stream), "qlinear", err)) != QS_OK)
                return st;
            st = qw_qlinear_prepare(env, &spec, linear, op, dst, src, rows, cols, transpose, err);
        } else if (st != QS_OK) {
            st =
                qs_error_set(err, st, "linear %d %s: %s", linear, qw_gemm_operand_name(op), e2.msg);
        }
    }
    if (st == QS_OK && env->hook) {
        if ((st = qw_cuda_status(c, cudaStreamSynchronize(c->stream), "qlinear", err)) != QS_OK)
            return st;
        env->hook(env->hook_user, linear, op, src, rows, cols, dst, r, k);
    }
    return st;
}

/* C[M x Ncol] = A[M x K] B[Ncol x K]^T + beta C (qw_train_gemm_abt), row-major. */
static qs_status gemm_abt(cuda_ctx *c, float *C, const float *A, const float *B, int M, int Ncol,
                          int K, float beta, qs_error *err) {
    float one = 1.0f;
    cublasStatus_t s = cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, Ncol, M, K, &one, B, K, A, K,
                                   &beta, C, Ncol);
    if (s != CUBLAS_STATUS_SUCCESS)
        return qs_error_set(err, QS_EIO, "qlinear: cuBLAS SGEMM [%d x %d x %d]: status %d", M, Ncol,
                            K, (int)s);
    return QS_OK;
}

static int all_fp32(const qw_qlinear_env *env, int layer) {
    qw_operand_spec s;
    qw_recipe_operand(env->recipe, layer, env->n_layers, QW_FPROP_X, &s);
    return s.mode == QW_MODE_FP32;
}

static cuda_ctx *ctx_of(qw_backend *b, qs_error *err) {
    if (!b || !b->ops || strcmp(b->ops->name, "cuda") != 0 || !b->impl) {
        qs_error_set(err, QS_EINVAL, "cuda qlinear: not a CUDA backend");
        return NULL;
    }
    return cuda_ctx_of(b);
}

extern "C" qs_status qw_cuda_qlinear_forward(qw_backend *b, const qw_qlinear_env *env, int layer,
                                             int linear, float *y, const float *x, const float *W,
                                             int N, int in, int out, qs_error *err) {
    cuda_ctx *c = ctx_of(b, err);
    if (!c) return QS_EINVAL;
    const float *A = x, *B = W;
    qs_status st = QS_OK;
    if (!all_fp32(env, layer)) {
        st = prep(c, env, layer, linear, QW_FPROP_X, env->buf_a, x, N, in, 0, err);
        if (st == QS_OK)
            st = prep(c, env, layer, linear, QW_FPROP_W, env->buf_b, W, out, in, 0, err);
        A = env->buf_a;
        B = env->buf_b;
    }
    if (st == QS_OK) st = gemm_abt(c, y, A, B, N, out, in, 0.0f, err);
    if (st == QS_OK) st = qw_cuda_status(c, cudaStreamSynchronize(c->stream), "qlinear", err);
    return st;
}

extern "C" qs_status qw_cuda_qlinear_backward(qw_backend *b, const qw_qlinear_env *env, int layer,
                                              int linear, float *dx, int dx_accumulate, float *dW,
                                              const float *dy, const float *x, const float *W,
                                              int N, int in, int out, qs_error *err) {
    cuda_ctx *c = ctx_of(b, err);
    if (!c) return QS_EINVAL;
    int fp32 = all_fp32(env, layer);
    qs_status st = QS_OK;
    if (dx) {
        /* dgrad: dx = dY W = dY (W^T)^T, the second operand W^T [in x out]. */
        const float *A = dy, *B = env->buf_b;
        if (fp32) {
            k_transpose<<<grid_of((size_t)out * in), 256, 0, c->stream>>>(env->buf_b, W, out, in);
            st = qw_cuda_status(c, cudaGetLastError(), "qlinear dgrad", err);
        } else {
            st = prep(c, env, layer, linear, QW_DGRAD_DY, env->buf_a, dy, N, out, 0, err);
            if (st == QS_OK)
                st = prep(c, env, layer, linear, QW_DGRAD_W, env->buf_b, W, out, in, 1, err);
            A = env->buf_a;
        }
        if (st == QS_OK) st = gemm_abt(c, dx, A, B, N, in, out, dx_accumulate ? 1.0f : 0.0f, err);
        if (st != QS_OK) return st;
    }
    /* wgrad: dW += dY^T X, operands dY^T [out x N] and X^T [in x N]. */
    st = fp32 ? QS_OK : prep(c, env, layer, linear, QW_WGRAD_DY, env->buf_a, dy, N, out, 1, err);
    if (st == QS_OK && fp32) {
        k_transpose<<<grid_of((size_t)N * out), 256, 0, c->stream>>>(env->buf_a, dy, N, out);
        st = qw_cuda_status(c, cudaGetLastError(), "qlinear wgrad", err);
    }
    if (st == QS_OK) {
        if (fp32) {
            k_transpose<<<grid_of((size_t)N * in), 256, 0, c->stream>>>(env->buf_b, x, N, in);
            st = qw_cuda_status(c, cudaGetLastError(), "qlinear wgrad", err);
        } else {
            st = prep(c, env, layer, linear, QW_WGRAD_X, env->buf_b, x, N, in, 1, err);
        }
    }
    if (st == QS_OK) st = gemm_abt(c, dW, env->buf_a, env->buf_b, out, in, N, 1.0f, err);
    if (st == QS_OK) st = qw_cuda_status(c, cudaStreamSynchronize(c->stream), "qlinear", err);
    return st;
}
