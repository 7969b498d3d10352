/* kernels_cuda_gemm_path (CPU): which GEMM path qk_gemm_linear takes, chosen from the device's
 * compute capability and the operand types (kernels/cuda/gemm_path.c, qk_gemm.h): native FP4
 * on 10.x only (docs/numerics.md 4.2: no FP4 tensor cores on sm_90), the exact BF16
 * emulation elsewhere and for W4A16, FP8 from 8.9 (Ada, Hopper), and the `gemm_path` names
 * results carry. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "qk_gemm.h"

static qk_gemm_path path_of(int cc, int force, qk_gemm_type x, qk_gemm_type w) {
    qk_gemm_path p = (qk_gemm_path)-1;
    qs_error err = {0};
    assert_int_equal(qk_gemm_path_select(cc, force, x, w, &p, &err), QS_OK);
    return p;
}

static void fp4_is_native_on_10x_only(void **state) {
    (void)state;
    static const int native[] = {100, 101, 103};
    static const int emulated[] = {80, 89, 90, 110, 120, 121};
    for (size_t i = 0; i < sizeof native / sizeof native[0]; i++) {
        assert_int_equal(path_of(native[i], 0, QK_GEMM_NVFP4, QK_GEMM_NVFP4),
                         QK_GEMM_PATH_NATIVE_FP4);
        assert_int_equal(path_of(native[i], 0, QK_GEMM_MXFP4, QK_GEMM_MXFP4),
                         QK_GEMM_PATH_NATIVE_FP4);
        assert_int_equal(path_of(native[i], 1, QK_GEMM_NVFP4, QK_GEMM_NVFP4),
                         QK_GEMM_PATH_EMULATED_BF16); /* forced, for the tests */
        assert_true(qk_gemm_cc_native_fp4(native[i]));
    }
    for (size_t i = 0; i < sizeof emulated / sizeof emulated[0]; i++) {
        assert_int_equal(path_of(emulated[i], 0, QK_GEMM_NVFP4, QK_GEMM_NVFP4),
                         QK_GEMM_PATH_EMULATED_BF16);
        assert_int_equal(path_of(emulated[i], 0, QK_GEMM_MXFP4, QK_GEMM_MXFP4),
                         QK_GEMM_PATH_EMULATED_BF16);
        assert_false(qk_gemm_cc_native_fp4(emulated[i]));
    }
}

static void w4a16_is_emulated_everywhere(void **state) {
    (void)state;
    for (int cc = 80; cc <= 120; cc += 10) {
        assert_int_equal(path_of(cc, 0, QK_GEMM_BF16, QK_GEMM_NVFP4), QK_GEMM_PATH_EMULATED_BF16);
        assert_int_equal(path_of(cc, 0, QK_GEMM_MXFP4, QK_GEMM_BF16), QK_GEMM_PATH_EMULATED_BF16);
        assert_int_equal(path_of(cc, 0, QK_GEMM_BF16, QK_GEMM_BF16), QK_GEMM_PATH_BF16);
    }
}

static void fp8_needs_ada_or_later(void **state) {
    (void)state;
    assert_int_equal(path_of(89, 0, QK_GEMM_FP8_E4M3, QK_GEMM_FP8_E4M3), QK_GEMM_PATH_FP8);
    assert_int_equal(path_of(90, 0, QK_GEMM_FP8_E4M3, QK_GEMM_FP8_E4M3), QK_GEMM_PATH_FP8);
    assert_int_equal(path_of(100, 0, QK_GEMM_FP8_E4M3, QK_GEMM_FP8_E4M3), QK_GEMM_PATH_FP8);
    qk_gemm_path p;
    qs_error err = {0};
    assert_int_equal(qk_gemm_path_select(80, 0, QK_GEMM_FP8_E4M3, QK_GEMM_FP8_E4M3, &p, &err),
                     QS_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "8.0"));
}

static void mixed_pairings_are_refused_by_name(void **state) {
    (void)state;
    static const qk_gemm_type pairs[][2] = {{QK_GEMM_FP8_E4M3, QK_GEMM_NVFP4},
                                            {QK_GEMM_NVFP4, QK_GEMM_MXFP4},
                                            {QK_GEMM_BF16, QK_GEMM_FP8_E4M3}};
    for (size_t i = 0; i < 3; i++) {
        qk_gemm_path p;
        qs_error err = {0};
        assert_int_equal(qk_gemm_path_select(100, 0, pairs[i][0], pairs[i][1], &p, &err),
                         QS_EUNSUPPORTED);
        assert_non_null(strstr(err.msg, "no GEMM for x of type"));
    }
    qs_error err = {0};
    assert_int_equal(qk_gemm_path_select(100, 0, QK_GEMM_BF16, QK_GEMM_BF16, NULL, &err),
                     QS_EINVAL);
}

static void path_names_are_the_results_gemm_path(void **state) {
    (void)state;
    assert_string_equal(qk_gemm_path_name(QK_GEMM_PATH_BF16), "bf16");
    assert_string_equal(qk_gemm_path_name(QK_GEMM_PATH_FP8), "fp8");
    assert_string_equal(qk_gemm_path_name(QK_GEMM_PATH_NATIVE_FP4), "native_fp4");
    assert_string_equal(qk_gemm_path_name(QK_GEMM_PATH_EMULATED_BF16), "emulated_bf16");
    assert_null(qk_gemm_path_name((qk_gemm_path)17));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fp4_is_native_on_10x_only),
        cmocka_unit_test(w4a16_is_emulated_everywhere),
        cmocka_unit_test(fp8_needs_ada_or_later),
        cmocka_unit_test(mixed_pairings_are_refused_by_name),
        cmocka_unit_test(path_names_are_the_results_gemm_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
