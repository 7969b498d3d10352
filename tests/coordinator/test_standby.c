/* coord_standby: a standby coordinator (--standby) waits on the coordinator lock and takes
 * over when the active one is killed with SIGKILL; workers given both endpoints move to the one
 * that answers, re-attach their running attempts and deliver to it. Two kills during a sweep of
 * 200 short jobs (three in 1000 in the long form): every job succeeds once, with one final
 * result, no attempt lost, and each takeover within 10 s of the kill. Real coordinator and worker
 * processes, real signals, a real private PostgreSQL; counts read from SQL. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <signal.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"

/* Kills the active coordinator (SIGKILL) and returns how long the standby took to take over. */
static long kill_and_time_takeover(harness *h, pid_t active, const char *standby_log) {
    assert_true(h_wait_in_file(standby_log, "standby, waiting", 1000) >= 0);
    assert_false(h_file_contains(standby_log, "took the coordinator lock"));
    assert_false(h_file_contains(standby_log, "listening on")); /* not bound: not active */
    h_signal(h, active, SIGKILL);
    long ms = h_wait_in_file(standby_log, "took the coordinator lock", 1500);
    fprintf(stderr, "takeover after %ld ms (%ld jobs succeeded at the kill)\n", ms,
            h_sql_long(h, "SELECT count(*) FROM jobs WHERE state = 'succeeded'"));
    return ms;
}

/* jobs short jobs on four workers given two endpoints; the active coordinator is killed
 * kills times, spread over the sweep, a new standby started on the dead one's endpoint after
 * each kill. Returns nothing: asserts from SQL. */
static void sweep_with_kills(harness *h, const char *db, int jobs, int kills) {
    h_begin(h, db);
    for (int i = 0; i < jobs; i++) {
        char key[32];
        snprintf(key, sizeof key, "sb-%d", i);
        h_insert_job(h, key, "sleep", "{\"seconds\": 0.1}", 1, 0);
    }
    char eps[2][160], both[330], logs[2][160];
    snprintf(eps[0], sizeof eps[0], "%s", h->endpoint);
    snprintf(eps[1], sizeof eps[1], "ipc://%s/coord-b.sock", h->dir);
    snprintf(both, sizeof both, "%s,%s", eps[0], eps[1]);
    pid_t active = h_start_coordinator(h);
    assert_true(h_wait_in_file(h->coord_log, "listening on", 2000) >= 0); /* it holds the lock */
    pid_t standby = h_start_standby(h, "standby-1", eps[1], logs[1], sizeof logs[1]);
    const char *extra[] = {"--endpoint", both, NULL};
    const char *ids[] = {"w1", "w2", "w3", "w4"};
    for (int i = 0; i < 4; i++)
        h_start_worker_args(h, ids[i], extra);
    long worst = 0, left = 0;
    for (int k = 1; k <= kills; k++) {
        /* the k-th kill once k/(kills+1) of the sweep succeeded */
        assert_true(h_wait_sql(h, 1, 60000,
                               "SELECT (count(*) >= %d)::int FROM jobs WHERE state = 'succeeded'",
                               jobs * k / (kills + 1)));
        left = jobs - h_sql_long(h, "SELECT count(*) FROM jobs WHERE state = 'succeeded'");
        int sb = k % 2; /* the standby's endpoint and log: 1, 0, 1, ... */
        long ms = kill_and_time_takeover(h, active, logs[sb]);
        assert_true(ms >= 0 && ms < 10000);
        if (ms > worst) worst = ms;
        active = standby;
        char name[32];
        snprintf(name, sizeof name, "standby-%d", k + 1);
        standby = h_start_standby(h, name, eps[1 - sb], logs[1 - sb], sizeof logs[1 - sb]);
    }
    assert_true(h_wait_sql(h, jobs, 60000, "SELECT count(*) FROM jobs WHERE state = 'succeeded'"));
    int reattached = 0;
    for (int i = 0; i < 2; i++)
        reattached += h_file_contains(logs[i], "re-attached to job");
    char outcomes[200];
    h_sql_text(h, outcomes, sizeof outcomes,
               "SELECT string_agg(outcome || ' ' || n, ', ' ORDER BY outcome) FROM (SELECT "
               "outcome::text, count(*) n FROM attempts GROUP BY outcome) s");
    long ran_twice = h_sql_long(h, "SELECT count(*) FROM jobs j WHERE (SELECT count(*) FROM "
                                   "attempts a WHERE a.job = j.id AND a.outcome = 'succeeded') "
                                   "<> 1");
    long finals = h_sql_long(h, "SELECT count(*) FROM results WHERE final");
    long wrong = h_sql_long(h, "SELECT count(*) FROM results WHERE final AND value <> 0.1");
    long twice = h_sql_long(h, "SELECT count(*) - count(DISTINCT (job, name, step)) FROM results");
    long lost = h_sql_long(h, "SELECT count(*) FROM attempts WHERE outcome IN ('lost', 'failed')");
    long used = h_sql_long(h, "SELECT COALESCE(sum(attempts_used), 0) FROM jobs");
    fprintf(stderr,
            "standby: %d jobs, %d kills (%ld jobs left at the last); slowest takeover %ld ms; "
            "attempts %s; jobs without exactly one succeeded attempt %ld; final results %ld, "
            "wrong %ld, twice %ld; lost or failed %ld; attempts used %ld\n",
            jobs, kills, left, worst, outcomes, ran_twice, finals, wrong, twice, lost, used);
    assert_int_equal(ran_twice, 0);
    assert_int_equal(finals, jobs);
    assert_int_equal(wrong, 0);
    assert_int_equal(twice, 0);
    assert_int_equal(lost, 0);
    assert_int_equal(used, 0);
    assert_int_equal(h_wait_exit(active, 0), -1); /* the last one to take over still runs */
    /* attempts running at a kill kept running and were delivered to the next coordinator */
    assert_true(reattached > 0);
}

static void standby_takes_over_twice_with_nothing_lost_or_run_twice(void **state) {
    sweep_with_kills(*state, "coord_standby", 200, 2);
}

/* The long form (label long): 1000 jobs, three kills. */
static void standby_takes_over_three_times_in_a_thousand_jobs(void **state) {
    sweep_with_kills(*state, "coord_standby_long", 1000, 3);
}

int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(standby_takes_over_twice_with_nothing_lost_or_run_twice,
                                        h_setup, h_teardown),
        cmocka_unit_test_setup_teardown(standby_takes_over_three_times_in_a_thousand_jobs, h_setup,
                                        h_teardown),
    };
    return cmocka_run_group_tests(tests, h_group_setup, h_group_teardown);
}
