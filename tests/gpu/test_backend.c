/* Run-time choice of the engine's backend (worker/engine/backend.h), on any machine: the
 * CPU-only answers here, the CUDA ones where a device is visible. Not labelled `gpu`: it runs
 * (and must pass) everywhere, with or without CUDA. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "backend.h"

static void kind_names_parse_and_others_are_refused(void **state) {
    (void)state;
    qw_backend_kind k;
    qs_error err = {0};
    assert_int_equal(qw_backend_kind_parse("auto", &k, &err), QS_OK);
    assert_int_equal(k, QW_BACKEND_AUTO);
    assert_int_equal(qw_backend_kind_parse("cpu", &k, &err), QS_OK);
    assert_int_equal(k, QW_BACKEND_CPU);
    assert_int_equal(qw_backend_kind_parse("cuda", &k, &err), QS_OK);
    assert_int_equal(k, QW_BACKEND_CUDA);
    assert_int_equal(qw_backend_kind_parse("gpu", &k, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "\"gpu\""));
    assert_non_null(strstr(err.msg, "auto, cpu or cuda"));
    assert_int_equal(qw_backend_kind_parse("CPU", &k, &err), QS_EINVAL);
    int g = -1;
    assert_int_equal(qw_backend_gemm_parse("fp32", &g, &err), QS_OK);
    assert_int_equal(g, 0);
    assert_int_equal(qw_backend_gemm_parse("bf16", &g, &err), QS_OK);
    assert_int_equal(g, 1);
    assert_int_equal(qw_backend_gemm_parse("lt", &g, &err), QS_OK);
    assert_int_equal(g, 2);
    assert_int_equal(qw_backend_gemm_parse("fp4", &g, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "\"fp4\""));
}

static void cpu_backend_records_gemm_path_cpu(void **state) {
    (void)state;
    qw_backend b;
    qs_error err = {0};
    qw_backend_choice c = {.kind = QW_BACKEND_CPU, .threads = 2, .max_in = 64};
    assert_int_equal(qw_backend_open(&b, &c, &err), QS_OK);
    assert_string_equal(b.ops->name, "cpu");
    assert_string_equal(qw_backend_gemm_path_name(&b), "cpu");
    qw_backend_close(&b);
    assert_null(b.ops);
    assert_string_equal(qw_backend_gemm_path_name(&b), "none");
    c.threads = 0;
    assert_int_equal(qw_backend_open(&b, &c, &err), QS_EINVAL);
}

/* "cuda" opens a device or says why not; "auto" then picks exactly what "cuda" could open. */
static void auto_is_cuda_where_a_device_is_else_cpu(void **state) {
    (void)state;
    qw_backend b;
    qs_error err = {0};
    qw_backend_choice c = {.kind = QW_BACKEND_CUDA, .threads = 1, .max_in = 64};
    qs_status st = qw_backend_open(&b, &c, &err);
    int has_gpu = st == QS_OK;
    if (!qw_backend_cuda_built()) {
        assert_int_equal(st, QS_EUNSUPPORTED);
        assert_non_null(strstr(err.msg, "without nvcc"));
    } else if (!has_gpu) {
        assert_int_equal(st, QS_EUNSUPPORTED);
        assert_non_null(strstr(err.msg, "no CUDA device"));
    } else {
        assert_string_equal(b.ops->name, "cuda");
        assert_string_equal(qw_backend_gemm_path_name(&b), "fp32");
        qw_backend_close(&b);
        c.gemm = 1;
        assert_int_equal(qw_backend_open(&b, &c, &err), QS_OK);
        assert_string_equal(qw_backend_gemm_path_name(&b), "bf16");
        qw_backend_close(&b);
    }
    assert_null(b.ops);
    c.kind = QW_BACKEND_AUTO;
    c.gemm = 0;
    assert_int_equal(qw_backend_open(&b, &c, &err), QS_OK);
    assert_string_equal(b.ops->name, has_gpu ? "cuda" : "cpu");
    assert_string_equal(qw_backend_gemm_path_name(&b), has_gpu ? "fp32" : "cpu");
    qw_backend_close(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(kind_names_parse_and_others_are_refused),
        cmocka_unit_test(cpu_backend_records_gemm_path_cpu),
        cmocka_unit_test(auto_is_cuda_where_a_device_is_else_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
