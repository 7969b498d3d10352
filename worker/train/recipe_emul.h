/* The scale-folded BF16 emulation of a block-scaled GEMM, on the CPU: what a GPU without the
 * format's tensor cores (recipe_path.h emulated_bf16) computes, written out so that a CPU run
 * can judge a GPU one.
 *
 *   C[M x N] = alpha * (A_bf16[M x K] B_bf16[N x K]^T) + beta C,   alpha = S_A S_B (FP32)
 *
 * A_bf16 is A's codes times its block scales only (qk_dequantize with the tensor scale set to
 * 1): an E2M1 code (2 significant bits) times a UE4M3 block scale (4 bits) or a UE8M0 power of
 * two, or an E4M3 value (4 bits), is exact in BF16 (8 significant bits, FP32's exponents), so
 * the conversion to BF16 is exact and checked. S_A is A's FP32 tensor scale (NVFP4 amax/2688,
 * FP8 amax/448, MX 1) times 2^tensor_scale_exp2. Each product of two BF16 values is exact in
 * FP32 (16 significant bits; unless it underflows FP32), and the products are summed in FP32
 * in k order 0..K-1, one row of C at a time, as a tensor core's FP32 accumulator does in some
 * order of its own.
 *
 * Against the fake-quantized FP32 GEMM qlinear.c runs (Aq = fake quant of A, so Aq = RN(A_bf16
 * S_A); C = sum_k RN(Aq Bq) in FP32): where S_A and S_B are powers of two (MX formats always),
 * Aq and every product are exact and the partial sums are the emulation's scaled by S_A S_B, so
 * the two are bit-identical in the same summation order; otherwise each term differs by at
 * most 3 roundings and the sums by the FP32 summation bound, |emul - ref| <= (2K + 8) 2^-24
 * sum_k |Aq Bq| (the test's bound, tests/train/test_recipe_emul.c). */
#ifndef QW_TRAIN_RECIPE_EMUL_H
#define QW_TRAIN_RECIPE_EMUL_H

#include <stdint.h>

#include "error.h"
#include "quant.h"

/* A's codes times block scales as BF16 bits into out [A->rows x A->k], *scale = S_A (header
 * comment). Errors: QS_EINVAL (a finite value not exact in BF16, naming row and column: a format
 * this emulation does not hold), the numeric core's. */
qs_status qw_emul_operand_bf16(const qk_packed *A, uint16_t *out, float *scale, qs_error *err);

/* C [A->rows x B->rows] = alpha A_bf16 B_bf16^T + beta C (beta 0: C is not read). Allocates
 * its two BF16 copies. Errors: QS_EINVAL (A->k != B->k, naming both), QS_ENOMEM, as
 * qw_emul_operand_bf16. */
qs_status qw_emul_gemm_abt(float *C, const qk_packed *A, const qk_packed *B, float beta,
                           qs_error *err);

/* BF16 bits to FP32 (exact). */
static inline float qw_bf16_to_f32(uint16_t h) {
    union {
        uint32_t u;
        float f;
    } v = {(uint32_t)h << 16};
    return v.f;
}

#endif
