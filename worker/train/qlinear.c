/* Quantized linears in training (qlinear.h). */
#include "qlinear.h"

#include <string.h>

#include "bf16_exact.h"
#include "element.h"
#include "hadamard.h"
#include "ops.h"

size_t qw_qlinear_scratch_floats(int N, int in, int out) {
    size_t a = (size_t)N * in, b = (size_t)N * out, c = (size_t)out * in;
    size_t m = a > b ? a : b;
    return m > c ? m : c;
}

qs_status qw_qlinear_prepare(const qw_qlinear_env *env, const qw_operand_spec *spec, int linear,
                             qw_gemm_operand op, float *dst, const float *src, int rows, int cols,
                             int transpose, qs_error *err) {
    int r = transpose ? cols : rows, k = transpose ? rows : cols;
    qw_backend *be = env->be;
    const qw_ops *ops = be->ops;
    qs_status st = transpose ? ops->transpose(be, dst, src, rows, cols, err)
                             : ops->copy(be, dst, src, (size_t)rows * cols * sizeof *dst, err);
    if (st != QS_OK) return st;
    if (spec->mode == QW_MODE_FP32) return QS_OK;
    if (spec->mode == QW_MODE_BF16) return ops->round_bf16(be, dst, (size_t)r * k, err);
    if (spec->rht) {
        int d = spec->rht_dim ? spec->rht_dim : 16;
        if (k % d)
            return qs_error_set(err, QS_EINVAL,
                                "linear %d %s: RHT%d needs k %% %d == 0, k is %d (tokens per "
                                "micro-batch for wgrad)",
                                linear, qw_gemm_operand_name(op), d, d, k);
        st = ops->rht(be, dst, (size_t)r, (size_t)k, d, env->seed, err);
        if (st != QS_OK)
            return qs_error_wrap(err, "linear %d %s", linear, qw_gemm_operand_name(op));
    }
    qk_quant_options opt = {0};
    opt.rounding = spec->rounding;
    opt.seed = env->seed;
    opt.tensor_id = (uint32_t)linear * QW_N_OPERANDS + (uint32_t)op;
    opt.step = env->step;
    opt.threads = be->threads;
    st = ops->fake_quant(be, spec->fmt, &opt, dst, (size_t)r, (size_t)k, err);
    if (st != QS_OK) return qs_error_wrap(err, "linear %d %s", linear, qw_gemm_operand_name(op));
    return QS_OK;
}

static qs_status prep(const qw_qlinear_env *env, int layer, int linear, qw_gemm_operand op,
                      float *dst, const float *src, int rows, int cols, int transpose,
                      qs_error *err) {
    qw_operand_spec spec;
    qw_recipe_operand(env->recipe, layer, env->n_layers, op, &spec);
    qs_status st = qw_qlinear_prepare(env, &spec, linear, op, dst, src, rows, cols, transpose, err);
    if (st == QS_OK && env->hook)
        env->hook(env->hook_user, linear, op, src, rows, cols, dst, transpose ? cols : rows,
                  transpose ? rows : cols);
    return st;
}

/* C = A B^T + beta C for GEMM g of a linear of block `layer`: with BF16 operands
 * (gemm_abt_bf16) when both inputs are BF16-exact under the recipe (bf16_exact.h), else FP32
 * (gemm_abt). */
static qs_status gemm(const qw_qlinear_env *env, int layer, qw_linear_gemm g, float *C,
                      const float *A, const float *Bm, int M, int Ncol, int K, float beta,
                      qs_error *err) {
    qw_backend *be = env->be;
    if (qw_recipe_gemm_bf16(env->recipe, layer, env->n_layers, g))
        return be->ops->gemm_abt_bf16(be, C, A, Bm, M, Ncol, K, beta, err);
    return be->ops->gemm_abt(be, C, A, Bm, M, Ncol, K, beta, err);
}

static int all_fp32(const qw_qlinear_env *env, int layer) {
    qw_operand_spec s;
    qw_recipe_operand(env->recipe, layer, env->n_layers, QW_FPROP_X, &s);
    return s.mode == QW_MODE_FP32;
}

qs_status qw_qlinear_forward(const qw_qlinear_env *env, int layer, int linear, float *y,
                             const float *x, const float *W, int N, int in, int out,
                             qs_error *err) {
    qw_backend *be = env->be;
    if (all_fp32(env, layer)) return be->ops->gemm_abt(be, y, x, W, N, out, in, 0.0f, err);
    qs_status st = prep(env, layer, linear, QW_FPROP_X, env->buf_a, x, N, in, 0, err);
    if (st == QS_OK) st = prep(env, layer, linear, QW_FPROP_W, env->buf_b, W, out, in, 0, err);
    if (st != QS_OK) return st;
    return gemm(env, layer, QW_GEMM_FPROP, y, env->buf_a, env->buf_b, N, out, in, 0.0f, err);
}

qs_status qw_qlinear_backward(const qw_qlinear_env *env, int layer, int linear, float *dx,
                              int dx_accumulate, float *dW, const float *dy, const float *x,
                              const float *W, int N, int in, int out, qs_error *err) {
    qw_backend *be = env->be;
    if (all_fp32(env, layer))
        return be->ops->linear_bwd(be, dx, dx_accumulate, dW, dy, x, W, N, in, out, err);
    qs_status st = QS_OK;
    if (dx) {
        st = prep(env, layer, linear, QW_DGRAD_DY, env->buf_a, dy, N, out, 0, err);
        if (st == QS_OK) st = prep(env, layer, linear, QW_DGRAD_W, env->buf_b, W, out, in, 1, err);
        if (st != QS_OK) return st;
        st = gemm(env, layer, QW_GEMM_DGRAD, dx, env->buf_a, env->buf_b, N, in, out,
                  dx_accumulate ? 1.0f : 0.0f, err);
        if (st != QS_OK) return st;
    }
    st = prep(env, layer, linear, QW_WGRAD_DY, env->buf_a, dy, N, out, 1, err);
    if (st == QS_OK) st = prep(env, layer, linear, QW_WGRAD_X, env->buf_b, x, N, in, 1, err);
    if (st != QS_OK) return st;
    return gemm(env, layer, QW_GEMM_WGRAD, dW, env->buf_a, env->buf_b, out, in, N, 1.0f, err);
}
