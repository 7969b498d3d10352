/* The qsweep command's contract without a database: --help everywhere, the documented exit
 * codes (cli/cli.h), and submit --dry-run on the tiny grid. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fixtures.h"

#define TINY QSWEEP_SOURCE_DIR "/experiments/tiny.yaml"

static char out[1 << 16];

static int qsweep(const char *const *args) {
    return fx_run(QSWEEP_BIN, args, out, sizeof out);
}

static void test_help_everywhere_exits_0(void **state) {
    (void)state;
    const char *cmds[] = {"run",         "submit", "status",  "cancel", "results",
                          "coordinator", "worker", "workers", "db",     "keygen"};
    const char *top[] = {"--help", NULL};
    assert_int_equal(qsweep(top), 0);
    assert_non_null(strstr(out, "exit codes: 0 ok, 1 usage, 2 bad input"));
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        const char *args[] = {cmds[i], "--help", NULL};
        if (qsweep(args) != 0 || !strstr(out, "usage: qsweep"))
            fail_msg("qsweep %s --help: %s", cmds[i], out);
    }
}

static void test_usage_errors_exit_1(void **state) {
    (void)state;
    const char *none[] = {NULL};
    const char *unknown[] = {"frobnicate", NULL};
    const char *no_grid[] = {"submit", "--dry-run", NULL};
    const char *bad_opt[] = {"run", TINY, "--wrokers", "2", NULL};
    assert_int_equal(qsweep(none), 1);
    assert_int_equal(qsweep(unknown), 1);
    assert_non_null(strstr(out, "unknown command 'frobnicate'"));
    assert_int_equal(qsweep(no_grid), 1);
    assert_int_equal(qsweep(bad_opt), 1);
}

static void test_submit_needs_a_database_unless_dry_run(void **state) {
    (void)state;
    unsetenv("QSWEEP_DB");
    const char *args[] = {"submit", TINY, NULL};
    assert_int_equal(qsweep(args), 1);
    assert_non_null(strstr(out, "no database"));
}

/* 1 baseline + nvfp4/mxfp4 x weights/weights+activations x 7 components */
static void test_dry_run_counts_jobs_and_shows_a_sample(void **state) {
    (void)state;
    const char *args[] = {"submit", TINY, "--dry-run", "--sample", "2", NULL};
    assert_int_equal(qsweep(args), 0);
    assert_non_null(strstr(out, "experiment tiny: 29 jobs (1 baseline, 28 component)"));
    assert_non_null(strstr(out, "job 1/29  llama3_gqa baseline"));
    assert_non_null(strstr(out, "job 29/29  llama3_gqa mxfp4 weights+activations component down"));
    const char *blocks[] = {
        "submit", TINY, "--dry-run", "--set", "sensitivity.modes=[block, layer]", NULL};
    assert_int_equal(qsweep(blocks), 0);
    assert_non_null(strstr(out, "experiment tiny: 97 jobs (1 baseline, 12 block, 84 layer)"));
}

static void test_bad_grid_exits_2_naming_the_place(void **state) {
    (void)state;
    const char *args[] = {"submit", TINY, "--dry-run", "--set", "dataset.ctx=1", NULL};
    assert_int_equal(qsweep(args), 2);
    assert_non_null(
        strstr(out, "--set dataset.ctx=1: expected an integer in [2, 1048576] for dataset.ctx"));
    const char *missing[] = {"submit", "/nonexistent/grid.yaml", "--dry-run", NULL};
    assert_int_equal(qsweep(missing), 2);
    assert_non_null(strstr(out, "/nonexistent/grid.yaml: cannot open grid file"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help_everywhere_exits_0),
        cmocka_unit_test(test_usage_errors_exit_1),
        cmocka_unit_test(test_submit_needs_a_database_unless_dry_run),
        cmocka_unit_test(test_dry_run_counts_jobs_and_shows_a_sample),
        cmocka_unit_test(test_bad_grid_exits_2_naming_the_place),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
