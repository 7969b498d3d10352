/* The FP8 E4M3 operand of the CUDA training GEMM (kernels/cuda/fp8_operand_core.h) on the host
 * against the CPU quantizer (qk_quantize of fp8_e4m3): the decode scale equals the packed
 * tensor's S_dec, every code byte its code, the padding columns up to ld +0, for RNE, RZ and SR
 * (the SR stream at the element's index) and for a given tensor amax that clips. Since the
 * device kernels call these functions, this is what the GPU's codes are checked by before any
 * device runs them (tests/gpu/test_train_quant_cuda.c then checks the GEMM). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "format.h"
#include "fp8_operand_core.h"
#include "quant.h"

static uint64_t rs = 0x243F6A8885A308D3ull;

static float urand(void) {
    rs ^= rs >> 12;
    rs ^= rs << 25;
    rs ^= rs >> 27;
    return (float)((double)((rs * 2685821657736338717ull) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* One tensor [rows x k] padded to ld: codes and scale against qk_quantize. */
static void operand_case(size_t rows, size_t k, size_t ld, qk_rounding rnd, float given) {
    const qk_format *f = qk_format_by_name("fp8_e4m3");
    assert_non_null(f);
    float *x = malloc(rows * k * sizeof *x);
    for (size_t i = 0; i < rows * k; i++)
        x[i] = urand() * (i % 7 == 0 ? 300.0f : 3.0f);
    x[rows * k / 2] = INFINITY; /* excluded from amax, saturates as the CPU's does */
    qk_quant_options o = {0};
    o.rounding = rnd;
    o.seed = 91;
    o.tensor_id = 4;
    o.step = 12;
    o.threads = 1;
    if (given > 0) {
        o.tensor_amax_given = 1;
        o.tensor_amax = given;
    }
    qs_error err = {0};
    qk_packed p = {0};
    assert_int_equal(qk_packed_init(&p, f, &o, rows, k, &err), QS_OK);
    assert_int_equal(qk_quantize(f, &o, x, rows, k, &p, &err), QS_OK);
    float amax = 0.0f;
    for (size_t i = 0; i < rows * k; i++)
        if (isfinite(x[i]) && fabsf(x[i]) > amax) amax = fabsf(x[i]);
    if (given > 0) amax = given;
    assert_true(amax == p.tensor_amax);
    float enc = 0.0f, dec = 0.0f;
    qk_fp8_operand_scales_hd(f, f->elem, amax, &enc, &dec);
    assert_true(dec == p.tensor_scale);
    size_t differ = 0;
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < ld; c++) {
            uint8_t got =
                qk_fp8_operand_code_hd(f->elem, x, k, r, c, enc, rnd, o.seed, o.tensor_id, o.step);
            uint8_t want = c < k ? p.codes[r * p.row_bytes + c] : 0;
            differ += got != want;
        }
    printf("%s %zu x %zu (ld %zu)%s: S_dec %.9g, %zu of %zu codes differ\n",
           rnd == QK_ROUND_SR   ? "SR "
           : rnd == QK_ROUND_RZ ? "RZ "
                                : "RNE",
           rows, k, ld, given > 0 ? ", amax given" : "", (double)dec, differ, rows * ld);
    assert_int_equal(differ, 0);
    qk_packed_release(&p);
    free(x);
}

static void fp8_operand_is_the_cpu_quantizers_codes(void **s) {
    (void)s;
    qk_rounding rs3[3] = {QK_ROUND_RNE, QK_ROUND_RZ, QK_ROUND_SR};
    for (int i = 0; i < 3; i++) {
        operand_case(7, 72, 80, rs3[i], 0.0f); /* K not a multiple of 16: padded */
        operand_case(4, 128, 128, rs3[i], 0.0f);
        operand_case(3, 16, 32, rs3[i], 1.5f); /* a given amax below the tensor's: clips */
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fp8_operand_is_the_cpu_quantizers_codes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
