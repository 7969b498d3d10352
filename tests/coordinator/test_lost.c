/* coord_lost: an attempt this coordinator assigned whose worker process dies is lost and
 * counts against max_attempts, whatever comes back: the same worker id restarted at once (as
 * systemd's Restart=always or a shell loop does), or another id. A job of max_attempts 2 whose
 * worker is SIGKILLed under every attempt ends failed after 2 counted attempts; no attempt is
 * called preempted or blamed on a coordinator restart. Real coordinator and worker processes,
 * real signals, a real private PostgreSQL; counts read from SQL. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <signal.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"

/* Waits until attempt n of job id runs and worker wid has started it (its log says so: the
 * ASSIGN goes out once the attempt row is committed). */
static void wait_running(harness *h, long id, int n, const char *wid) {
    assert_true(h_wait_sql(h, 1, 20000,
                           "SELECT count(*) FROM attempts WHERE job = %ld AND attempt = %d AND "
                           "outcome = 'running'",
                           id, n));
    char log[256], line[64];
    snprintf(log, sizeof log, "%s/worker-%s.log", h->dir, wid);
    snprintf(line, sizeof line, "job %ld attempt %d (", id, n);
    assert_true(h_wait_in_file(log, line, 2000) >= 0);
}

/* The job failed after exactly 2 lost, counted attempts, each saying its worker's process
 * went and none naming a coordinator restart. */
static void expect_failed_after_two_lost(harness *h, long id, const char *scenario) {
    assert_true(h_wait_sql(h, 1, 20000,
                           "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'failed'", id));
    h_sleep_ms(H_LEASE_MS + 500); /* time for an attempt that should not happen */
    char outcomes[200], errors[1200];
    h_sql_text(h, outcomes, sizeof outcomes,
               "SELECT string_agg(attempt || ' ' || outcome, ', ' ORDER BY attempt) FROM attempts "
               "WHERE job = %ld",
               id);
    h_sql_text(h, errors, sizeof errors,
               "SELECT string_agg(attempt || ': ' || error, ' | ' ORDER BY attempt) FROM attempts "
               "WHERE job = %ld",
               id);
    fprintf(stderr, "%s: attempts %s; used %ld; errors %s\n", scenario, outcomes,
            h_sql_long(h, "SELECT attempts_used FROM jobs WHERE id = %ld", id), errors);
    assert_string_equal(outcomes, "1 lost, 2 lost");
    assert_int_equal(h_sql_long(h, "SELECT attempts_used FROM jobs WHERE id = %ld", id), 2);
    assert_int_equal(h_sql_long(h,
                                "SELECT count(*) FROM attempts WHERE job = %ld AND (error LIKE "
                                "'%%coordinator restart%%' OR outcome = 'preempted')",
                                id),
                     0);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM results"), 0);
}

/* kill -9 under every attempt, the same --id started again at once: the restarted process's
 * HELLO names no attempt, so the one it had is lost once its lease expires unrenewed. */
static void worker_killed_and_restarted_with_its_id_uses_up_the_attempts(void **state) {
    harness *h = *state;
    h_begin(h, "coord_lost_same_id");
    long id = h_insert_job(h, "crash-loop", "sleep", "{\"seconds\": 60}", 2, 0);
    h_start_coordinator(h);
    pid_t w = h_start_worker(h, "w1");
    for (int n = 1; n <= 2; n++) {
        wait_running(h, id, n, "w1");
        h_signal(h, w, SIGKILL);
        w = h_start_worker(h, "w1");
    }
    expect_failed_after_two_lost(h, id, "same id");
    assert_true(h_log_contains(h, "re-registered from a new connection without this attempt"));
}

/* The same with a new worker id each time: the dead worker's lease expires. */
static void worker_killed_and_replaced_by_another_id_uses_up_the_attempts(void **state) {
    harness *h = *state;
    h_begin(h, "coord_lost_new_id");
    long id = h_insert_job(h, "crash-loop", "sleep", "{\"seconds\": 60}", 2, 0);
    h_start_coordinator(h);
    pid_t w = h_start_worker(h, "w1");
    const char *next[] = {"w2", "w3"};
    for (int n = 1; n <= 2; n++) {
        wait_running(h, id, n, n == 1 ? "w1" : next[n - 2]);
        h_signal(h, w, SIGKILL);
        w = h_start_worker(h, next[n - 1]);
    }
    expect_failed_after_two_lost(h, id, "new id");
    assert_true(h_log_contains(h, "lease expired: no heartbeat from worker w1"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            worker_killed_and_restarted_with_its_id_uses_up_the_attempts, h_setup, h_teardown),
        cmocka_unit_test_setup_teardown(
            worker_killed_and_replaced_by_another_id_uses_up_the_attempts, h_setup, h_teardown),
    };
    return cmocka_run_group_tests(tests, h_group_setup, h_group_teardown);
}
