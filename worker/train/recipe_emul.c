/* The scale-folded BF16 emulation of a block-scaled GEMM (recipe_emul.h). */
#include "recipe_emul.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

qs_status qw_emul_operand_bf16(const qk_packed *A, uint16_t *out, float *scale, qs_error *err) {
    size_t n = A->rows * A->k;
    float *y = malloc(n * sizeof *y);
    if (!y) return qs_error_set(err, QS_ENOMEM, "emulated GEMM: %zu floats", n);
    qk_packed unscaled = *A; /* the same codes and block scales, the tensor scale left out */
    unscaled.tensor_scale = 1.0f;
    unscaled.tensor_scale_exp2 = 0;
    qs_status st = qk_dequantize(&unscaled, y, 1, err);
    for (size_t i = 0; st == QS_OK && i < n; i++) {
        uint32_t u;
        memcpy(&u, &y[i], sizeof u);
        if (isnan(y[i]))
            u = 0x7FC00000u;
        else if (u & 0xFFFFu)
            st = qs_error_set(err, QS_EINVAL,
                              "emulated GEMM: %s row %zu column %zu: %g is not exact in BF16",
                              qk_format_name(A->fmt), i / A->k, i % A->k, (double)y[i]);
        out[i] = (uint16_t)(u >> 16);
    }
    free(y);
    if (st == QS_OK) *scale = ldexpf(A->tensor_scale, A->tensor_scale_exp2);
    return st;
}

qs_status qw_emul_gemm_abt(float *C, const qk_packed *A, const qk_packed *B, float beta,
                           qs_error *err) {
    if (A->k != B->k)
        return qs_error_set(err, QS_EINVAL, "emulated GEMM: A has k %zu, B has k %zu", A->k, B->k);
    size_t M = A->rows, N = B->rows, K = A->k;
    uint16_t *a = malloc(M * K * sizeof *a), *b = malloc(N * K * sizeof *b);
    qs_status st =
        a && b ? QS_OK
               : qs_error_set(err, QS_ENOMEM, "emulated GEMM: %zu x %zu, %zu x %zu", M, K, N, K);
    float sa = 1.0f, sb = 1.0f;
    if (st == QS_OK) st = qw_emul_operand_bf16(A, a, &sa, err);
    if (st == QS_OK) st = qw_emul_operand_bf16(B, b, &sb, err);
    if (st == QS_OK) {
        float alpha = sa * sb; /* the two tensor scales, folded into alpha as cuBLASLt takes it */
        for (size_t m = 0; m < M; m++)
            for (size_t j = 0; j < N; j++) {
                const uint16_t *ar = a + m * K, *br = b + j * K;
                float acc = 0.0f;
                for (size_t k = 0; k < K; k++)
                    acc += qw_bf16_to_f32(ar[k]) * qw_bf16_to_f32(br[k]);
                float *c = &C[m * N + j];
                *c = beta == 0.0f ? alpha * acc : alpha * acc + beta * *c;
            }
    }
    free(a);
    free(b);
    return st;
}
