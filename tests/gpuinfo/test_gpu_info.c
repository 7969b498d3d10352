/* gpu_info: the worker's GPU list (worker/gpu/gpu_info.h): discovery never fails and says why
 * there is no GPU, the test-only fake list, `--gpus` selection and its errors, the words a log
 * line uses. Run again with CUDA_VISIBLE_DEVICES="" (ctest gpu_info_hidden): the runtime then
 * shows no device, and the worker none. `gpu_info_test device` (ctest gpu_info_device, label
 * gpu) checks the real devices of a GPU machine and exits 77 (skipped) on any other. */
#include <setjmp.h>
#include <stdio.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gpu_info.h"

static void discovery_lists_gpus_or_says_why_there_are_none(void **state) {
    (void)state;
    qw_gpu g[QW_GPUS_MAX];
    size_t n = 99;
    char why[256];
    qw_gpu_discover(g, QW_GPUS_MAX, &n, why, sizeof why);
    assert_true(n <= QW_GPUS_MAX);
    if (n == 0) {
        assert_true(why[0] != 0);
        if (!qw_gpu_have_cuda()) assert_non_null(strstr(why, "no CUDA in this build"));
        /* a CUDA build on a machine without a GPU (no driver, or "CUDA driver version is
           insufficient for CUDA runtime version") says first that no GPU is visible */
        if (qw_gpu_have_cuda() && strncmp(why, "no GPU visible (CUDA: ", 22) != 0)
            fail_msg("no GPU, and the reason does not say so: %s", why);
    }
    for (size_t i = 0; i < n; i++) {
        assert_true(g[i].memory_bytes > 0);
        assert_true(g[i].name[0] != 0);
        assert_int_equal(g[i].native_fp4, g[i].cc_major == 10); /* 10.x only: qk_gemm_path.h */
        assert_int_equal(g[i].device, (int)i);
    }
    const char *hidden = getenv("CUDA_VISIBLE_DEVICES");
    if (hidden && !*hidden) assert_int_equal(n, 0); /* the runtime hides every device */
}

static void fake_gpus_are_read_with_native_fp4_from_the_capability(void **state) {
    (void)state;
    qw_gpu g[4];
    size_t n = 0;
    qs_error err = {0};
    assert_int_equal(qw_gpu_parse_fake("H200:141:9.0,B200:180:10.0", g, 4, &n, &err), QS_OK);
    assert_int_equal(n, 2);
    assert_string_equal(g[0].name, "H200");
    assert_int_equal(g[0].memory_bytes, 141ull << 30);
    assert_int_equal(g[0].cc_major, 9);
    assert_int_equal(g[0].cc_minor, 0);
    assert_false(g[0].native_fp4);
    assert_string_equal(g[1].name, "B200");
    assert_int_equal(g[1].memory_bytes, 180ull << 30);
    assert_int_equal(g[1].cc_major, 10);
    assert_true(g[1].native_fp4);
    assert_int_equal(g[1].device, 1);
    /* the GEMM path table's answer (qk_gemm_path.h): B300 10.3 native; Ada 8.9 and the 12.x
       parts (RTX 5090 12.0, DGX Spark 12.1) emulate */
    assert_int_equal(qw_gpu_parse_fake("B300:288:10.3,L40S:48:8.9,RTX5090:32:12.0,GB10:128:12.1", g,
                                       4, &n, &err),
                     QS_OK);
    assert_int_equal(n, 4);
    assert_true(g[0].native_fp4);
    assert_false(g[1].native_fp4);
    assert_false(g[2].native_fp4);
    assert_false(g[3].native_fp4);
    assert_int_equal(qw_gpu_parse_fake("", g, 4, &n, &err), QS_OK);
    assert_int_equal(n, 0);
    const char *bad[] = {"H200:141",   "H200:x:9.0",    ":141:9.0",   "H200:141:9",
                         "H200:0:9.0", "H200:141:9.0,", "H200:-1:9.0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (qw_gpu_parse_fake(bad[i], g, 4, &n, &err) != QS_EINVAL) fail_msg("accepted %s", bad[i]);
        assert_non_null(strstr(err.msg, "fake GPUs: bad item"));
    }
    assert_int_equal(qw_gpu_parse_fake("A:1:9.0,B:1:9.0,C:1:9.0", g, 2, &n, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "more than 2"));
}

static void gpus_option_selects_all_none_or_the_indexes_given(void **state) {
    (void)state;
    qw_gpu all[3], out[QW_GPUS_MAX];
    size_t n_all = 0, n = 0;
    qs_error err = {0};
    assert_int_equal(qw_gpu_parse_fake("A:80:9.0,B:141:9.0,C:180:10.0", all, 3, &n_all, &err),
                     QS_OK);
    assert_int_equal(qw_gpu_select(all, n_all, NULL, "", out, QW_GPUS_MAX, &n, &err), QS_OK);
    assert_int_equal(n, 3);
    assert_int_equal(qw_gpu_select(all, n_all, "all", "", out, QW_GPUS_MAX, &n, &err), QS_OK);
    assert_int_equal(n, 3);
    assert_int_equal(qw_gpu_select(all, n_all, "none", "", out, QW_GPUS_MAX, &n, &err), QS_OK);
    assert_int_equal(n, 0);
    /* in the order given: the job of one GPU runs on the first */
    assert_int_equal(qw_gpu_select(all, n_all, "2,0", "", out, QW_GPUS_MAX, &n, &err), QS_OK);
    assert_int_equal(n, 2);
    assert_string_equal(out[0].name, "C");
    assert_int_equal(out[0].device, 2);
    assert_string_equal(out[1].name, "A");
}

static void gpus_option_errors_name_the_index_and_what_is_there(void **state) {
    (void)state;
    qw_gpu all[2], out[QW_GPUS_MAX];
    size_t n_all = 0, n = 7;
    qs_error err = {0};
    assert_int_equal(qw_gpu_parse_fake("H200:141:9.0,H200:141:9.0", all, 2, &n_all, &err), QS_OK);
    assert_int_equal(qw_gpu_select(all, n_all, "0,2", "", out, QW_GPUS_MAX, &n, &err), QS_EINVAL);
    assert_string_equal(err.msg,
                        "--gpus: GPU 2 is not present: this machine has 2 (0 H200, 1 H200)");
    assert_int_equal(
        qw_gpu_select(NULL, 0, "0", "no CUDA in this build", out, QW_GPUS_MAX, &n, &err),
        QS_EINVAL);
    assert_string_equal(err.msg, "--gpus: GPU 0 is not present: this machine has none (no CUDA "
                                 "in this build)");
    assert_int_equal(qw_gpu_select(NULL, 0, "0",
                                   "no GPU visible (CUDA: CUDA driver version is insufficient "
                                   "for CUDA runtime version)",
                                   out, QW_GPUS_MAX, &n, &err),
                     QS_EINVAL);
    assert_string_equal(err.msg, "--gpus: GPU 0 is not present: no GPU visible (CUDA: CUDA "
                                 "driver version is insufficient for CUDA runtime version)");
    assert_int_equal(qw_gpu_select(all, n_all, "1,1", "", out, QW_GPUS_MAX, &n, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "GPU 1 is named twice"));
    const char *bad[] = {"", "0,", "x", "0,x", "-1", " 1", "1 "};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (qw_gpu_select(all, n_all, bad[i], "", out, QW_GPUS_MAX, &n, &err) != QS_EINVAL)
            fail_msg("accepted '%s'", bad[i]);
        assert_non_null(strstr(err.msg, "is not a list of GPU indexes"));
    }
}

static void a_gpu_is_described_with_memory_capability_and_fp4(void **state) {
    (void)state;
    qw_gpu g[2];
    size_t n = 0;
    qs_error err = {0};
    assert_int_equal(qw_gpu_parse_fake("H200:141:9.0,B200:180:10.0", g, 2, &n, &err), QS_OK);
    char d[160];
    qw_gpu_describe(&g[0], d, sizeof d);
    assert_string_equal(d, "H200 141.0 GiB cc 9.0 FP4 emulated");
    qw_gpu_describe(&g[1], d, sizeof d);
    assert_string_equal(d, "B200 180.0 GiB cc 10.0 FP4 native");
}

/* On a GPU machine: every visible device listed with its facts, and --gpus over them. */
static int device_check(void) {
    qw_gpu g[QW_GPUS_MAX], out[QW_GPUS_MAX];
    size_t n = 0, k = 0;
    char why[256];
    qw_gpu_discover(g, QW_GPUS_MAX, &n, why, sizeof why);
    if (n == 0) {
        printf("gpu_info_device: skipped: no GPU (%s)\n", why);
        return 77;
    }
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        char d[160];
        qw_gpu_describe(&g[i], d, sizeof d);
        printf("gpu_info_device: GPU %zu: %s\n", i, d);
        /* every CUDA 12+ device is compute capability >= 5.0 with at least 1 GiB */
        bad |= !g[i].name[0] || g[i].memory_bytes < (1ull << 30) || g[i].cc_major < 5 ||
               g[i].native_fp4 != (g[i].cc_major == 10) || g[i].device != (int)i;
    }
    qs_error err = {0};
    char spec[16];
    snprintf(spec, sizeof spec, "%zu", n);
    bad |= qw_gpu_select(g, n, "0", "", out, QW_GPUS_MAX, &k, &err) != QS_OK || k != 1;
    bad |= qw_gpu_select(g, n, spec, "", out, QW_GPUS_MAX, &k, &err) != QS_EINVAL;
    printf("gpu_info_device: %s\n", bad ? "NOT OK" : "OK");
    return bad;
}

/* A driver runs every runtime of its CUDA major or older (minor-version compatibility); below
 * that the worker lists no GPU and says both versions. */
static void a_driver_older_than_the_runtime_is_named_with_both_versions(void **state) {
    (void)state;
    char why[256] = "";
    assert_int_equal(qw_gpu_driver_check(13000, 13000, why, sizeof why), 1);
    assert_int_equal(qw_gpu_driver_check(13020, 13000, why, sizeof why), 1);
    assert_int_equal(qw_gpu_driver_check(13000, 13020, why, sizeof why), 1); /* 13.0 runs 13.2 */
    assert_int_equal(qw_gpu_driver_check(12080, 12000, why, sizeof why), 1);
    assert_string_equal(why, "");
    assert_int_equal(qw_gpu_driver_check(12040, 13000, why, sizeof why), 0);
    assert_string_equal(why, "no GPU usable (CUDA driver too old: it supports CUDA 12.4, this "
                             "build's runtime is CUDA 13.0 and needs a driver of CUDA 13 or "
                             "later)");
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "device")) return device_check();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(discovery_lists_gpus_or_says_why_there_are_none),
        cmocka_unit_test(fake_gpus_are_read_with_native_fp4_from_the_capability),
        cmocka_unit_test(gpus_option_selects_all_none_or_the_indexes_given),
        cmocka_unit_test(gpus_option_errors_name_the_index_and_what_is_there),
        cmocka_unit_test(a_gpu_is_described_with_memory_capability_and_fp4),
        cmocka_unit_test(a_driver_older_than_the_runtime_is_named_with_both_versions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
