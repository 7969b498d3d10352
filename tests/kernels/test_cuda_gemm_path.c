/* kernels_cuda_gemm_path (CPU): which GEMM path qk_gemm_linear takes, chosen from the device's
 * compute capability, the operand formats, the weight's exactness in BF16 and the user's request
 * (kernels/cuda/gemm_path.c, qk_gemm_path.h): native FP4 on 10.x only (NVIDIA's LtNvfp4Matmul
 * sample and TransformerEngine's NVFP4 support: no FP4 tensor cores on sm_90), the exact BF16
 * emulation elsewhere and for W4A16, FP8 from 8.9 (Ada, Hopper), BF16 for weights exact in BF16,
 * FP32 only for weights BF16 would change or when asked for, and the `gemm_path` names results
 * carry. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "qk_gemm_path.h"

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

/* One row of the table in qk_gemm_path.h. */
typedef struct decide_row {
    int cc;
    qk_gemm_type w, x;
    int w_bf16_exact;
    qk_gemm_request req;
    qk_gemm_path want;
} decide_row;

static void the_decision_table(void **state) {
    (void)state;
#define N QK_GEMM_NVFP4
#define M QK_GEMM_MXFP4
#define B QK_GEMM_BF16
#define E QK_GEMM_FP8_E4M3
#define AUTO QK_GEMM_REQ_AUTO
#define F32 QK_GEMM_REQ_FP32
#define R16 QK_GEMM_REQ_BF16
#define EMU QK_GEMM_REQ_EMULATED
#define P16 QK_GEMM_PATH_BF16
#define P8 QK_GEMM_PATH_FP8
#define NAT QK_GEMM_PATH_NATIVE_FP4
#define EM QK_GEMM_PATH_EMULATED_BF16
#define P32 QK_GEMM_PATH_FP32
    static const decide_row rows[] = {
        /* W4A4 NVFP4 / MXFP4: native on Blackwell 10.x, emulated on Ada, Hopper and 12.x */
        {100, N, N, 0, AUTO, NAT},
        {103, M, M, 0, AUTO, NAT},
        {90, N, N, 0, AUTO, EM},
        {89, M, M, 0, AUTO, EM},
        {120, N, N, 0, AUTO, EM},
        {121, M, M, 0, AUTO, EM},
        {100, N, N, 0, EMU, EM},
        {100, N, N, 0, F32, P32},
        {100, N, N, 0, R16, EM},
        /* W4A16: emulated everywhere */
        {100, N, B, 1, AUTO, EM},
        {90, M, B, 1, AUTO, EM},
        {80, N, B, 0, AUTO, EM},
        /* FP8 E4M3: native from 8.9 */
        {89, E, E, 0, AUTO, P8},
        {90, E, E, 0, AUTO, P8},
        {100, E, E, 0, AUTO, P8},
        {80, E, E, 0, AUTO, EM},
        {90, E, E, 0, EMU, EM},
        {90, E, B, 0, AUTO, EM},
        /* unquantized: BF16 when BF16 holds the weight, FP32 when it would change it */
        {90, B, B, 1, AUTO, P16},
        {100, B, B, 1, AUTO, P16},
        {80, B, B, 1, EMU, P16},
        {90, B, B, 0, AUTO, P32},
        {90, B, B, 0, R16, P16},
        {90, B, B, 1, F32, P32},
        /* mixed formats: both dequantized */
        {100, N, M, 0, AUTO, EM},
        {100, B, N, 1, AUTO, EM},
        {100, N, E, 0, AUTO, EM},
        /* an unknown request reads as auto */
        {100, N, N, 0, (qk_gemm_request)9, NAT},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const decide_row *r = &rows[i];
        qk_gemm_decision d = qk_gemm_decide(r->cc, r->w, r->x, r->w_bf16_exact, r->req);
        if (d.path != r->want)
            fail_msg("row %zu: cc %d w %d x %d exact %d req %d: path %s, want %s (%s)", i, r->cc,
                     (int)r->w, (int)r->x, r->w_bf16_exact, (int)r->req, qk_gemm_path_name(d.path),
                     qk_gemm_path_name(r->want), d.why);
        assert_non_null(d.why);
        assert_true(strlen(d.why) > 0);
    }
    /* the native-FP4 flag of the GPU list is the table's NVFP4 W4A4 answer */
    for (int cc = 0; cc < 130; cc++)
        assert_int_equal(qk_gemm_cc_native_fp4(cc),
                         qk_gemm_decide(cc, N, N, 0, AUTO).path == QK_GEMM_PATH_NATIVE_FP4);
#undef N
#undef M
#undef B
#undef E
#undef AUTO
#undef F32
#undef R16
#undef EMU
#undef P16
#undef P8
#undef NAT
#undef EM
#undef P32
}

static void requests_parse_by_name(void **state) {
    (void)state;
    static const char *names[] = {"auto", "fp32", "bf16", "emulated"};
    for (int i = 0; i < 4; i++) {
        qk_gemm_request r = (qk_gemm_request)-1;
        qs_error err = {0};
        assert_int_equal(qk_gemm_request_parse(names[i], &r, &err), QS_OK);
        assert_int_equal((int)r, i);
        assert_string_equal(qk_gemm_request_name(r), names[i]);
    }
    qk_gemm_request r;
    qs_error err = {0};
    assert_int_equal(qk_gemm_request_parse("lt", &r, &err), QS_OK);
    assert_int_equal(r, QK_GEMM_REQ_AUTO);
    assert_int_equal(qk_gemm_request_parse("tf32", &r, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "\"tf32\""));
    assert_null(qk_gemm_request_name((qk_gemm_request)7));
}

static void path_names_are_the_results_gemm_path(void **state) {
    (void)state;
    assert_string_equal(qk_gemm_path_name(QK_GEMM_PATH_BF16), "bf16");
    assert_string_equal(qk_gemm_path_name(QK_GEMM_PATH_FP8), "fp8");
    assert_string_equal(qk_gemm_path_name(QK_GEMM_PATH_NATIVE_FP4), "native_fp4");
    assert_string_equal(qk_gemm_path_name(QK_GEMM_PATH_EMULATED_BF16), "emulated_bf16");
    assert_string_equal(qk_gemm_path_name(QK_GEMM_PATH_FP32), "fp32");
    assert_null(qk_gemm_path_name((qk_gemm_path)17));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fp4_is_native_on_10x_only),
        cmocka_unit_test(w4a16_is_emulated_everywhere),
        cmocka_unit_test(fp8_needs_ada_or_later),
        cmocka_unit_test(mixed_pairings_are_refused_by_name),
        cmocka_unit_test(the_decision_table),
        cmocka_unit_test(requests_parse_by_name),
        cmocka_unit_test(path_names_are_the_results_gemm_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
