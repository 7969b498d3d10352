/* The command line's table of job kinds (cli/kind_table.c) against the other registries: a
 * kind must be registered once per layer and the layers must agree, or a sweep of it would
 * queue jobs no `qsweep worker` runs. Checks, with the real job functions:
 *   - qsweep_register_worker_kinds registers a function for every job kind of
 *     kinds/registry.c, and none of the test kinds (sleep, fail, echo);
 *   - every job kind's grid kind has exactly one row, and every row serves a job kind;
 *   - every row's grid kind is one the grid reader knows (coordinator/grid/grid_kind.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cli.h"
#include "grid_kind.h"
#include "loop.h"
#include "registry.h"

static void test_every_job_kind_gets_its_worker_function(void **state) {
    (void)state;
    qs_error err = {0};
    assert_false(qw_kind_registered("eval")); /* nothing before the table registers */
    if (qsweep_register_worker_kinds(&err) != QS_OK) fail_msg("%s", err.msg);
    assert_true(qs_job_kind_count() >= 3);
    for (size_t i = 0; i < qs_job_kind_count(); i++)
        if (!qw_kind_registered(qs_job_kind_at(i)->name))
            fail_msg("job kind %s has no worker function", qs_job_kind_at(i)->name);
    const char *test_kinds[] = {"sleep", "fail", "echo", "alloc"};
    for (size_t i = 0; i < 3; i++)
        if (qw_kind_registered(test_kinds[i]))
            fail_msg("the production table registers the test kind %s", test_kinds[i]);
}

static void test_rows_and_job_kinds_agree(void **state) {
    (void)state;
    const qsweep_kind_row *rows = NULL;
    size_t n = qsweep_kind_rows(&rows);
    assert_true(n >= 2);
    for (size_t i = 0; i < qs_job_kind_count(); i++) {
        const qs_job_kind *k = qs_job_kind_at(i);
        int found = 0;
        for (size_t r = 0; r < n; r++)
            found += !strcmp(rows[r].grid_kind, k->grid_kind);
        if (found != 1)
            fail_msg("job kind %s: %d rows for its grid kind %s (want 1)", k->name, found,
                     k->grid_kind);
    }
    int defaults = 0;
    for (size_t r = 0; r < n; r++) {
        int served = 0;
        for (size_t i = 0; i < qs_job_kind_count(); i++)
            served += !strcmp(rows[r].grid_kind, qs_job_kind_at(i)->grid_kind);
        if (!served) fail_msg("row %s serves no job kind of kinds/registry.c", rows[r].grid_kind);
        if (!qc_grid_kind_find(rows[r].grid_kind))
            fail_msg("row %s is not a grid kind (%s)", rows[r].grid_kind, qc_grid_kind_names());
        assert_non_null(rows[r].register_worker);
        assert_true((rows[r].holds == NULL) == (rows[r].print_results == NULL));
        defaults += rows[r].print_results == NULL;
    }
    assert_int_equal(defaults, 1); /* one family is the default results layout */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_job_kind_gets_its_worker_function),
        cmocka_unit_test(test_rows_and_job_kinds_agree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
