/* The CUDA auto path's GEMM of each master dtype (worker/engine/master_gemm.h), on any machine:
 * a pure table, checked here against the FP16 and BF16 value sets themselves. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <math.h>

#include "master_gemm.h"

/* FP16 bits h as FP32, through the checkpoint reader's converter (qw_dtype_to_f32). */
static float f16_value(uint16_t h) {
    uint8_t b[2] = {(uint8_t)(h & 0xff), (uint8_t)(h >> 8)};
    float f = 0.0f;
    qw_dtype_to_f32(QW_DT_F16, b, 1, &f);
    return f;
}

static void each_master_runs_its_own_precision(void **state) {
    (void)state;
    qw_master_gemm g = qw_master_gemm_of(QW_DT_BF16, 0, 0);
    assert_int_equal(g.weight, QW_ELEM_BF16);
    assert_int_equal(g.act, QW_ELEM_BF16);
    assert_int_equal(g.pedantic, 0);
    assert_int_equal(g.bytes, 2);
    assert_string_equal(g.path, "bf16");
    g = qw_master_gemm_of(QW_DT_F16, 1, 1); /* Llama 2: FP16 on the tensor cores, never BF16 */
    assert_int_equal(g.weight, QW_ELEM_F16);
    assert_int_equal(g.act, QW_ELEM_F16);
    assert_int_equal(g.pedantic, 0);
    assert_int_equal(g.bytes, 2);
    assert_string_equal(g.path, "fp16");
    g = qw_master_gemm_of(QW_DT_F32, 0, 0); /* FP32 values: FP32 without TF32, one copy */
    assert_int_equal(g.weight, QW_ELEM_F32);
    assert_int_equal(g.act, QW_ELEM_BF16);
    assert_int_equal(g.pedantic, 1);
    assert_int_equal(g.bytes, 4);
    assert_string_equal(g.path, "fp32");
    /* FP32-valued masters whose values a 16-bit type holds: that type (BF16 first), so a
       tensor-parallel slice's FP32 copy runs its master's GEMM */
    assert_int_equal(qw_master_gemm_of(QW_DT_F32, 1, 0).weight, QW_ELEM_BF16);
    assert_int_equal(qw_master_gemm_of(QW_DT_F32, 1, 1).weight, QW_ELEM_BF16);
    assert_int_equal(qw_master_gemm_of(QW_DT_F32, 0, 1).weight, QW_ELEM_F16);
    assert_int_equal(qw_master_gemm_of(QW_DT_F32, 0, 1).act, QW_ELEM_F16);
    /* every GGUF block type decodes to FP32 values: the F32 rows */
    for (int dt = QW_DT_Q8_0; dt < QW_DT_COUNT; dt++) {
        assert_int_equal(qw_master_gemm_of((qw_dtype)dt, 0, 0).weight, QW_ELEM_F32);
        assert_int_equal(qw_master_gemm_bytes((qw_dtype)dt), 4);
    }
    assert_int_equal(qw_master_gemm_bytes(QW_DT_BF16), 2);
    assert_int_equal(qw_master_gemm_bytes(QW_DT_F16), 2);
    assert_string_equal(qw_gemm_elem_name(QW_ELEM_F16), "F16");
}

/* Every finite FP16 value is exact in FP16 (and none between two of them is); some are not
 * BF16 values, which is why an FP16 master cannot run a BF16 GEMM without changing weights. */
static void fp16_values_are_exact_in_fp16_not_all_in_bf16(void **state) {
    (void)state;
    int not_bf16 = 0, finite = 0;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        float f = f16_value((uint16_t)h);
        if (!isfinite(f)) {
            assert_false(qw_f32_exact_f16(f));
            continue;
        }
        finite++;
        assert_true(qw_f32_exact_f16(f));
        if (!qw_f32_exact_bf16(f)) not_bf16++;
        /* the midpoint to the next value of the same sign is no FP16 value */
        if ((h & 0x7fffu) < 0x7bffu) {
            float g = f16_value((uint16_t)(h + 1));
            float mid = f + (g - f) / 2.0f;
            assert_false(qw_f32_exact_f16(mid));
        }
    }
    assert_int_equal(finite, 63488); /* 2 x (31 exponents x 1024) + 2 x 1024 - 2048 ... */
    assert_true(not_bf16 > 0);
    assert_false(qw_f32_exact_bf16(f16_value(0x3c01))); /* 1 + 2^-10 */
    assert_true(qw_f32_exact_bf16(1.0f + 1.0f / 128.0f));
    assert_false(qw_f32_exact_f16(65520.0f));
    assert_false(qw_f32_exact_f16(ldexpf(1.0f, -25)));
    assert_true(qw_f32_exact_f16(ldexpf(3.0f, -24)));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(each_master_runs_its_own_precision),
        cmocka_unit_test(fp16_values_are_exact_in_fp16_not_all_in_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
