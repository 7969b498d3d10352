/* Quantized linears in training (qlinear.h). */
#include "qlinear.h"

#include <omp.h>
#include <string.h>

#include "element.h"
#include "hadamard.h"
#include "ops.h"

size_t qw_qlinear_scratch_floats(int N, int in, int out) {
    size_t a = (size_t)N * in, b = (size_t)N * out, c = (size_t)out * in;
    size_t m = a > b ? a : b;
    return m > c ? m : c;
}

float qw_round_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7F800000u) == 0x7F800000u) {
        /* Inf stays (saturated like the codec: +-max finite); NaN becomes the codec's 0x7FC0 */
        u = (u & 0x007FFFFFu) ? 0x7FC00000u : ((u & 0x80000000u) | 0x7F7F0000u);
    } else {
        uint32_t r = u + 0x7FFFu + ((u >> 16) & 1u); /* round to nearest, ties to even */
        if ((r & 0x7F800000u) == 0x7F800000u) r = (u & 0x80000000u) | 0x7F7F0000u; /* saturate */
        u = r & 0xFFFF0000u;
    }
    memcpy(&x, &u, 4);
    return x;
}

static void round_bf16(float *x, size_t n, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t i = 0; i < n; i++)
        x[i] = qw_round_bf16(x[i]);
}

qs_status qw_qlinear_prepare(const qw_qlinear_env *env, const qw_operand_spec *spec, int linear,
                             qw_gemm_operand op, float *dst, const float *src, int rows, int cols,
                             int transpose, qs_error *err) {
    int r = transpose ? cols : rows, k = transpose ? rows : cols;
    if (transpose)
        qw_train_transpose(dst, src, rows, cols, env->nt);
    else
        memcpy(dst, src, (size_t)rows * cols * sizeof *dst);
    if (spec->mode == QW_MODE_FP32) return QS_OK;
    if (spec->mode == QW_MODE_BF16) {
        round_bf16(dst, (size_t)r * k, env->nt);
        return QS_OK;
    }
    if (spec->rht) {
        int d = spec->rht_dim ? spec->rht_dim : 16;
        if (k % d)
            return qs_error_set(err, QS_EINVAL,
                                "linear %d %s: RHT%d needs k %% %d == 0, k is %d (tokens per "
                                "micro-batch for wgrad)",
                                linear, qw_gemm_operand_name(op), d, d, k);
        qs_status st = qk_rht(dst, (size_t)r, (size_t)k, d, env->seed, 0, env->nt, err);
        if (st != QS_OK)
            return qs_error_wrap(err, "linear %d %s", linear, qw_gemm_operand_name(op));
    }
    qk_quant_options opt = {0};
    opt.rounding = spec->rounding;
    opt.seed = env->seed;
    opt.tensor_id = (uint32_t)linear * QW_N_OPERANDS + (uint32_t)op;
    opt.step = env->step;
    opt.threads = env->nt;
    qs_status st = qk_fake_quant(spec->fmt, &opt, dst, (size_t)r, (size_t)k, NULL, err);
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

static int all_fp32(const qw_qlinear_env *env, int layer) {
    qw_operand_spec s;
    qw_recipe_operand(env->recipe, layer, env->n_layers, QW_FPROP_X, &s);
    return s.mode == QW_MODE_FP32;
}

qs_status qw_qlinear_forward(const qw_qlinear_env *env, int layer, int linear, float *y,
                             const float *x, const float *W, int N, int in, int out,
                             qs_error *err) {
    if (all_fp32(env, layer)) {
        qw_train_linear_forward(y, x, W, N, in, out, env->nt);
        return QS_OK;
    }
    qs_status st = prep(env, layer, linear, QW_FPROP_X, env->buf_a, x, N, in, 0, err);
    if (st == QS_OK) st = prep(env, layer, linear, QW_FPROP_W, env->buf_b, W, out, in, 0, err);
    if (st != QS_OK) return st;
    qw_train_gemm_abt(y, env->buf_a, env->buf_b, N, out, in, 0.0f, env->nt);
    return QS_OK;
}

qs_status qw_qlinear_backward(const qw_qlinear_env *env, int layer, int linear, float *dx,
                              int dx_accumulate, float *dW, const float *dy, const float *x,
                              const float *W, int N, int in, int out, qs_error *err) {
    if (all_fp32(env, layer)) {
        qw_train_linear_backward(dx, dx_accumulate, dW, dy, x, W, N, in, out, env->nt);
        return QS_OK;
    }
    qs_status st = QS_OK;
    if (dx) {
        st = prep(env, layer, linear, QW_DGRAD_DY, env->buf_a, dy, N, out, 0, err);
        if (st == QS_OK) st = prep(env, layer, linear, QW_DGRAD_W, env->buf_b, W, out, in, 1, err);
        if (st != QS_OK) return st;
        qw_train_gemm_abt(dx, env->buf_a, env->buf_b, N, in, out, dx_accumulate ? 1.0f : 0.0f,
                          env->nt);
    }
    st = prep(env, layer, linear, QW_WGRAD_DY, env->buf_a, dy, N, out, 1, err);
    if (st == QS_OK) st = prep(env, layer, linear, QW_WGRAD_X, env->buf_b, x, N, in, 1, err);
    if (st != QS_OK) return st;
    qw_train_gemm_abt(dW, env->buf_a, env->buf_b, out, in, N, 1.0f, env->nt);
    return QS_OK;
}
