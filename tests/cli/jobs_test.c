/* worker/jobs: where the baseline log-probabilities of a (model, dataset, ctx, chunks,
 * numerics) live, the name every local worker agrees on (jobs.h, qw_jobs_baseline_path).
 * The jobs themselves run end to end in run_test.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "fixtures.h"
#include "jobs.h"

static void test_path_from_the_environment(void **state) {
    (void)state;
    char *dir = fx_tempdir("qsweep-jobs");
    assert_non_null(dir);
    char want[1024], got[1024], sub[400];
    snprintf(sub, sizeof sub, "%s/a/b", dir);
    setenv("QSWEEP_BASELINE_DIR", sub, 1);
    qs_error err = {0};
    assert_int_equal(qw_jobs_baseline_path("ab12", "cd34", 512, 4, -1, "1", 1, got, sizeof got, &err),
                     QS_OK);
    snprintf(want, sizeof want, "%s/ab12-cd34-ctx512-chunks4-v1.qswblp", sub);
    assert_string_equal(got, want);
    struct stat sb;
    assert_int_equal(stat(sub, &sb), 0); /* created */
    unsetenv("QSWEEP_BASELINE_DIR");
    setenv("XDG_CACHE_HOME", dir, 1);
    assert_int_equal(qw_jobs_baseline_path("ab12", "cd34", 64, 0, -1, "1", 0, got, sizeof got, &err),
                     QS_OK);
    snprintf(want, sizeof want, "%s/qsweep/baselines/ab12-cd34-ctx64-chunks0-v1.qswblp", dir);
    assert_string_equal(got, want);
    fx_rmtree(dir);
    free(dir);
}

/* Chunks that start with BOS (a text dataset of a tokenizer that adds one) are another
 * baseline than the same ids without: the name says the id, and only then. */
static void test_bos_is_part_of_the_name(void **state) {
    (void)state;
    setenv("QSWEEP_BASELINE_DIR", "/tmp/qsweep-bos", 1);
    char got[600];
    qs_error err = {0};
    assert_int_equal(qw_jobs_baseline_path("ab", "cd", 8, 2, 1, "1", 0, got, sizeof got, &err),
                     QS_OK);
    assert_string_equal(got, "/tmp/qsweep-bos/ab-cd-ctx8-chunks2-bos1-v1.qswblp");
    assert_int_equal(qw_jobs_baseline_path("ab", "cd", 8, 2, -1, "1", 0, got, sizeof got, &err),
                     QS_OK);
    assert_string_equal(got, "/tmp/qsweep-bos/ab-cd-ctx8-chunks2-v1.qswblp");
    unsetenv("QSWEEP_BASELINE_DIR");
}

/* The numerics path is part of a baseline's identity: a GPU path or another CPU path gets a
 * file of its own, the CPU's fixed-order path keeps the name it always had, and the path of a
 * job is named from where it runs (device capability and GEMM request). */
static void test_numerics_path_is_part_of_the_name(void **state) {
    (void)state;
    setenv("QSWEEP_BASELINE_DIR", "/tmp/qsweep-np", 1);
    char got[600], np[64];
    qs_error err = {0};
    qw_jobs_numerics_path(false, 0, 2, "cpu-qsweep-fixed2", np, sizeof np);
    assert_string_equal(np, "cpu-qsweep-fixed2");
    assert_int_equal(qw_jobs_baseline_path_for("ab", "cd", 8, 2, -1, "2", np, 0, got, sizeof got,
                                               &err),
                     QS_OK);
    assert_string_equal(got, "/tmp/qsweep-np/ab-cd-ctx8-chunks2-v2.qswblp"); /* as before */
    qw_jobs_numerics_path(true, 90, 2, "cpu-qsweep-fixed2", np, sizeof np);
    assert_string_equal(np, "cuda-cc90-auto");
    assert_int_equal(qw_jobs_baseline_path_for("ab", "cd", 8, 2, -1, "2", np, 0, got, sizeof got,
                                               &err),
                     QS_OK);
    assert_string_equal(got, "/tmp/qsweep-np/ab-cd-ctx8-chunks2-v2-pcuda-cc90-auto.qswblp");
    qw_jobs_numerics_path(true, 100, 3, NULL, np, sizeof np);
    assert_string_equal(np, "cuda-cc100-emulated");
    qw_jobs_numerics_path(true, 120, 0, NULL, np, sizeof np);
    assert_string_equal(np, "cuda-cc120-fp32");
    assert_int_equal(qw_jobs_baseline_path_for("ab", "cd", 8, 2, 1, "2",
                                               "cpu-openblas-0.3.21-haswell", 0, got, sizeof got,
                                               &err),
                     QS_OK);
    assert_string_equal(got,
                        "/tmp/qsweep-np/ab-cd-ctx8-chunks2-bos1-v2-pcpu-openblas-0.3.21-haswell"
                        ".qswblp");
    assert_int_equal(qw_jobs_baseline_path_for("ab", "cd", 8, 2, -1, "2", "cuda/../x", 0, got,
                                               sizeof got, &err),
                     QS_EINVAL);
    assert_non_null(strstr(err.msg, "numerics path 'cuda/../x'"));
    unsetenv("QSWEEP_BASELINE_DIR");
}

/* A digest is a file name component: anything that could leave the directory is refused. */
static void test_digest_that_is_not_hex_is_refused(void **state) {
    (void)state;
    setenv("QSWEEP_BASELINE_DIR", "/tmp", 1);
    char got[600];
    qs_error err = {0};
    assert_int_equal(
        qw_jobs_baseline_path("../../etc/passwd", "cd", 8, 0, -1, "1", 0, got, sizeof got, &err),
        QS_EINVAL);
    assert_non_null(strstr(err.msg, "is not a digest"));
    assert_int_equal(qw_jobs_baseline_path("ab", "", 8, 0, -1, "1", 0, got, sizeof got, &err),
                     QS_EINVAL);
    assert_int_equal(qw_jobs_baseline_path("ab", "cd", 8, 0, -1, "1", 0, got, 10, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "buffer too small"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_numerics_path_is_part_of_the_name),
        cmocka_unit_test(test_path_from_the_environment),
        cmocka_unit_test(test_bos_is_part_of_the_name),
        cmocka_unit_test(test_digest_that_is_not_hex_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
