/* coord_recovery: the coordinator's guarantees about failures, against a real private
 * PostgreSQL, the real qsweep-coordinator and qsweep-worker processes and ipc:// sockets:
 *   - kill -9 a worker 2 s into a 10 s job: the job runs again on another worker, exactly
 *     one result set is stored, the first attempt is recorded as lost;
 *   - SIGSTOP a worker past its lease, then SIGCONT: its late result is ignored; exactly one
 *     accepted result;
 *   - kill -9 the coordinator mid-sweep and restart it: no job lost, no job re-run while its
 *     worker was alive, every result exactly once;
 *   - kill -9 the coordinator and every worker mid-job, restart only the coordinator: after
 *     the grace period the orphaned attempts are lost, the job is retried or failed;
 *   - restart PostgreSQL mid-sweep: the coordinator pauses dispatch, reconnects and loses
 *     nothing;
 *   - SIGTERM a worker mid-job: the attempt is preempted and does not count against
 *     max_attempts; without a coordinator the worker still exits promptly;
 *   - the coordinator's write session dies and another session takes the coordinator lock:
 *     the coordinator writes nothing more and stops;
 *   - SIGTERM the coordinator while ASSIGNs wait for their commit: they are committed and
 *     sent, so a restart re-attaches those workers instead of losing the attempts;
 *   - a cancel requested while the coordinator was down reaches the re-attaching worker. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <libpq-fe.h>

#include "harness.h"

/* Waits until job id has a running attempt and returns that attempt's worker id in out. */
static void wait_running_on(harness *h, long id, char *out, size_t cap) {
    assert_true(h_wait_sql(
        h, 1, 20000, "SELECT count(*) FROM attempts WHERE job = %ld AND outcome = 'running'", id));
    h_sql_text(h, out, cap, "SELECT worker FROM attempts WHERE job = %ld AND outcome = 'running'",
               id);
}

static void worker_killed_mid_job_job_reruns_elsewhere_first_attempt_lost(void **state) {
    harness *h = *state;
    h_begin(h, "coord_kill_worker");
    long id = h_insert_job(h, "ten-seconds", "sleep", "{\"seconds\": 10}", 3, 0);
    h_start_coordinator(h);
    pid_t w1 = h_start_worker(h, "w1");
    char worker[64];
    wait_running_on(h, id, worker, sizeof worker);
    assert_string_equal(worker, "w1");
    h_sleep_ms(2000);
    h_signal(h, w1, SIGKILL);
    h_start_worker(h, "w2");
    assert_true(h_wait_sql(h, 1, 40000,
                           "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'succeeded'", id));
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM attempts WHERE job = %ld", id), 2);
    assert_int_equal(
        h_sql_long(h,
                   "SELECT count(*) FROM attempts WHERE job = %ld AND attempt = 1 AND worker = 'w1'"
                   " AND outcome = 'lost'",
                   id),
        1);
    assert_int_equal(
        h_sql_long(h,
                   "SELECT count(*) FROM attempts WHERE job = %ld AND attempt = 2 AND worker = 'w2'"
                   " AND outcome = 'succeeded'",
                   id),
        1);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM results WHERE job = %ld", id), 1);
    assert_int_equal(h_sql_long(h, "SELECT attempt FROM results WHERE job = %ld", id), 2);
    /* w2's heartbeats kept its 2 s lease alive through the 10 s job, also in the database */
    assert_int_equal(
        h_sql_long(
            h,
            "SELECT (lease_expires_at > started_at + interval '6 seconds')::int FROM attempts"
            " WHERE job = %ld AND attempt = 2",
            id),
        1);
}

static void stopped_worker_past_its_lease_has_its_late_result_ignored(void **state) {
    harness *h = *state;
    h_begin(h, "coord_sigstop");
    long id = h_insert_job(h, "three-seconds", "sleep", "{\"seconds\": 3}", 3, 0);
    h_start_coordinator(h);
    pid_t w1 = h_start_worker(h, "w1");
    char worker[64];
    wait_running_on(h, id, worker, sizeof worker);
    h_sleep_ms(1000);
    h_signal(h, w1, SIGSTOP);
    /* attempt 1 is lost once the lease runs out; w2 runs attempt 2 */
    h_start_worker(h, "w2");
    assert_true(h_wait_sql(
        h, 1, 20000,
        "SELECT count(*) FROM attempts WHERE job = %ld AND attempt = 1 AND outcome = 'lost'", id));
    assert_true(h_wait_sql(h, 1, 20000,
                           "SELECT count(*) FROM attempts WHERE job = %ld AND attempt = 2", id));
    /* w1 resumes past its job's end (a wall-clock sleep): it reports attempt 1 late */
    h_sleep_ms(2500);
    h_signal(h, w1, SIGCONT);
    assert_true(h_wait_sql(h, 1, 20000,
                           "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'succeeded'", id));
    for (int t = 0; t < 50 && !h_log_contains(h, "ignored"); t++)
        h_sleep_ms(100);
    assert_true(h_log_contains(h, "attempt 1 from worker w1: not the job's current attempt"));
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM results WHERE job = %ld", id), 1);
    assert_int_equal(h_sql_long(h, "SELECT attempt FROM results WHERE job = %ld", id), 2);
    assert_int_equal(
        h_sql_long(h, "SELECT count(*) FROM attempts WHERE job = %ld AND outcome = 'succeeded'",
                   id),
        1);
}

static void coordinator_killed_mid_sweep_and_restarted_loses_and_reruns_nothing(void **state) {
    harness *h = *state;
    h_begin(h, "coord_kill_coord");
    for (int i = 0; i < 6; i++) {
        char key[32];
        snprintf(key, sizeof key, "sweep-%d", i);
        h_insert_job(h, key, "sleep", "{\"seconds\": 2.5}", 3, 0);
    }
    pid_t c = h_start_coordinator(h);
    h_start_worker(h, "w1");
    h_start_worker(h, "w2");
    h_start_worker(h, "w3");
    assert_true(h_wait_sql(h, 3, 20000, "SELECT count(*) FROM attempts WHERE outcome = 'running'"));
    h_sleep_ms(1000);
    h_signal(h, c, SIGKILL);
    h_sleep_ms(1000);
    h_start_coordinator(h);
    assert_true(h_wait_sql(h, 6, 60000, "SELECT count(*) FROM jobs WHERE state = 'succeeded'"));
    /* every job ran exactly once: the running ones re-attached instead of re-running */
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM attempts"), 6);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM attempts WHERE outcome <> 'succeeded'"),
                     0);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM results"), 6);
    assert_true(h_log_contains(h, "re-attached to job"));
}

/* Breaker #2: a coordinator and its workers die together (kill -9) mid-job; the restarted
 * coordinator sees attempts still marked running whose worker never comes back. After
 * grace_ms (plus a lease) each such attempt is lost and counts: a job with attempts left is
 * pending again with a backoff, one at max_attempts has failed; none stays running. */
static void orphaned_attempts_expire_after_grace_when_no_worker_returns(void **state) {
    harness *h = *state;
    h_begin(h, "coord_orphans_expire");
    long retry = h_insert_job(h, "orphan-retry", "sleep", "{\"seconds\": 60}", 3, 0);
    long last = h_insert_job(h, "orphan-last", "sleep", "{\"seconds\": 60}", 1, 0);
    pid_t c = h_start_coordinator(h);
    pid_t w1 = h_start_worker(h, "w1");
    pid_t w2 = h_start_worker(h, "w2");
    assert_true(h_wait_sql(h, 2, 20000, "SELECT count(*) FROM attempts WHERE outcome = 'running'"));
    h_sleep_ms(500);
    h_signal(h, w1, SIGKILL);
    h_signal(h, w2, SIGKILL);
    h_signal(h, c, SIGKILL);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM jobs WHERE state = 'running'"), 2);

    h_start_coordinator(h); /* no worker from here on */
    h_sleep_ms(H_GRACE_MS + H_LEASE_MS + 1000);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM attempts WHERE outcome = 'running'"), 0);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM jobs WHERE state = 'running'"), 0);
    assert_int_equal(
        h_sql_long(h,
                   "SELECT count(*) FROM attempts WHERE job IN (%ld, %ld) AND attempt = 1"
                   " AND outcome = 'lost' AND ended_at IS NOT NULL",
                   retry, last),
        2);
    /* attempts left: pending again, the lost attempt counted, a backoff set */
    assert_int_equal(h_sql_long(h,
                                "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'pending'"
                                " AND attempts_used = 1 AND not_before IS NOT NULL",
                                retry),
                     1);
    /* max_attempts 1 reached: failed */
    assert_int_equal(h_sql_long(h,
                                "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'failed'"
                                " AND attempts_used = 1",
                                last),
                     1);
    assert_true(h_log_contains(h, "did not re-attach within"));
}

/* A coordinator that dies after committing an ASSIGN its worker never read (killed between the
 * commit and the send, as pipeline_restart once caught under load): the restarted coordinator
 * holds the attempt as running on that worker. The worker's HELLO names no job, so the attempt
 * ends at once, as preempted (it never ran: it does not count against max_attempts), and the
 * job runs again on it, instead of waiting out the re-attach grace (during which a worker that
 * leaves when idle would leave the job running for good). Here the worker is a new process
 * under the same id, its predecessor killed with the coordinator: the same HELLO, without a
 * supervisor's previous_exit. */
static void attempt_a_re_registering_worker_does_not_name_ends_at_once(void **state) {
    harness *h = *state;
    h_begin(h, "coord_unnamed_attempt_lost");
    /* max_attempts 1: had the attempt that never ran counted, the job would fail */
    long id = h_insert_job(h, "unnamed-attempt", "sleep", "{\"seconds\": 60}", 1, 0);
    pid_t c = h_start_coordinator(h);
    pid_t w1 = h_start_worker(h, "w1");
    assert_true(h_wait_sql(h, 1, 20000, "SELECT count(*) FROM attempts WHERE outcome = 'running'"));
    h_signal(h, w1, SIGKILL);
    h_signal(h, c, SIGKILL);
    /* a grace of a minute (the last --grace-ms counts), so only the HELLO can end attempt 1 in
       the 30 s waited below */
    const char *const long_grace[] = {"--grace-ms", "60000", NULL};
    h_start_coordinator_env(h, long_grace, NULL);
    h_start_worker(h, "w1");
    /* attempt 1 ended with the reason, attempt 2 running on w1, one attempt counted */
    assert_true(h_wait_sql(h, 1, 30000,
                           "SELECT count(*) FROM attempts WHERE job = %ld AND attempt = 2"
                           " AND outcome = 'running' AND worker = 'w1'",
                           id));
    char err[512];
    h_sql_text(h, err, sizeof err,
               "SELECT outcome || ': ' || error FROM attempts WHERE job = %ld AND attempt = 1", id);
    assert_non_null(strstr(err, "preempted: worker re-registered after the coordinator restart"));
    assert_int_equal(h_sql_long(h, "SELECT attempts_used FROM jobs WHERE id = %ld", id), 0);
    assert_false(h_log_contains(h, "did not re-attach within"));
}

static void postgresql_restart_mid_sweep_pauses_reconnects_and_loses_nothing(void **state) {
    harness *h = *state;
    h_begin(h, "coord_pg_restart");
    for (int i = 0; i < 8; i++) {
        char key[32];
        snprintf(key, sizeof key, "pg-%d", i);
        h_insert_job(h, key, "sleep", "{\"seconds\": 0.8}", 3, 0);
    }
    h_start_coordinator(h);
    h_start_worker(h, "w1");
    h_start_worker(h, "w2");
    assert_true(h_wait_sql(h, 1, 20000, "SELECT (count(*) > 0)::int FROM results"));
    qs_error err;
    qs_status st = qc_pgserver_restart(h->pg, &err);
    if (st != QS_OK) fprintf(stderr, "restart: %s\n", err.msg);
    assert_int_equal(st, QS_OK);
    assert_true(h_wait_sql(h, 8, 60000, "SELECT count(*) FROM jobs WHERE state = 'succeeded'"));
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM results"), 8);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM attempts WHERE outcome = 'succeeded'"), 8);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM attempts WHERE outcome <> 'succeeded'"),
                     0);
    assert_true(h_log_contains(h, "pausing dispatch"));
    assert_true(h_log_contains(h, "PostgreSQL is back"));
}

static void sigterm_preempts_the_attempt_which_does_not_count(void **state) {
    harness *h = *state;
    h_begin(h, "coord_sigterm");
    /* max_attempts 1: had the preempted attempt counted, the job would fail */
    long id = h_insert_job(h, "preempt-me", "sleep", "{\"seconds\": 2}", 1, 0);
    h_start_coordinator(h);
    pid_t w1 = h_start_worker(h, "w1");
    char worker[64];
    wait_running_on(h, id, worker, sizeof worker);
    h_sleep_ms(500);
    h_signal(h, w1, SIGTERM);
    assert_int_equal(h_wait_exit(w1, 10000), 0);
    assert_int_equal(
        h_sql_long(h, "SELECT count(*) FROM attempts WHERE job = %ld AND outcome = 'preempted'",
                   id),
        1);
    h_start_worker(h, "w2");
    assert_true(h_wait_sql(h, 1, 20000,
                           "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'succeeded'", id));
    /* attempts_used counts failed and lost attempts only */
    assert_int_equal(h_sql_long(h, "SELECT attempts_used FROM jobs WHERE id = %ld", id), 0);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM attempts WHERE job = %ld", id), 2);
}

static void sigterm_without_a_coordinator_exits_within_the_ack_timeout(void **state) {
    harness *h = *state;
    h_begin(h, "coord_sigterm_alone");
    long id = h_insert_job(h, "orphan", "sleep", "{\"seconds\": 30}", 1, 0);
    pid_t c = h_start_coordinator(h);
    pid_t w1 = h_start_worker(h, "w1");
    char worker[64];
    wait_running_on(h, id, worker, sizeof worker);
    h_signal(h, c, SIGKILL);
    h_signal(h, w1, SIGTERM);
    /* the job stops at once; its PREEMPTED report waits H_WORKER_TIMEOUT_MS for an ACK */
    assert_int_equal(h_wait_exit(w1, H_WORKER_TIMEOUT_MS + 3000), 0);
}

/* What the test sees of the stored state: attempts, results, succeeded jobs, last update. */
static void snapshot(harness *h, char *out, size_t cap) {
    h_sql_text(h, out, cap,
               "SELECT (SELECT count(*) FROM attempts) || '/' || (SELECT count(*) FROM "
               "attempts WHERE outcome <> 'running') || '/' || (SELECT count(*) FROM results) "
               "|| '/' || (SELECT count(*) FROM jobs WHERE state = 'succeeded') || '/' || "
               "(SELECT max(updated_at) FROM jobs)");
}

/* Breaker #4 (split brain): the coordinator lock lives on a session of the writer's. The
 * writer's sessions die and, before the coordinator reconnects, another session takes the lock
 * (as a second coordinator would): the coordinator must not write again, and it stops, naming
 * the lock. */
static void coordinator_that_loses_its_lock_writes_nothing_more_and_stops(void **state) {
    harness *h = *state;
    h_begin(h, "coord_lock_lost");
    for (int i = 0; i < 60; i++) {
        char key[32];
        snprintf(key, sizeof key, "lk-%d", i);
        h_insert_job(h, key, "sleep", "{\"seconds\": 0.05}", 3, 0);
    }
    pid_t c = h_start_coordinator(h);
    h_start_worker(h, "w1");
    h_start_worker(h, "w2");
    assert_true(h_wait_sql(h, 1, 20000,
                           "SELECT (count(*) >= 5)::int FROM jobs WHERE state = 'succeeded'"));
    PGconn *rival = PQconnectdb(h->conninfo);
    assert_int_equal(PQstatus(rival), CONNECTION_OK);
    PGresult *r = PQexec(rival, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                                "application_name LIKE 'qsweep coordinator-writer %' OR "
                                "application_name LIKE 'qsweep coordinator-writer-lock %'");
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    assert_int_equal(PQntuples(r), 2); /* its write session and its lock session */
    PQclear(r);
    bool got = false;
    for (int i = 0; i < 500 && !got; i++) { /* free once the terminated backend has exited */
        PQclear(PQexec(rival, "BEGIN"));
        r = PQexec(rival, "LOCK TABLE qsweep_coordinator_lock IN EXCLUSIVE MODE NOWAIT");
        got = PQresultStatus(r) == PGRES_COMMAND_OK;
        PQclear(r);
        if (!got) {
            PQclear(PQexec(rival, "ROLLBACK"));
            h_sleep_ms(10);
        }
    }
    assert_true(got);
    char before[256], after[256];
    snapshot(h, before, sizeof before);
    int status = h_wait_exit(c, 15000);
    assert_true(status > 0);
    assert_true(h_log_contains(h, "another coordinator"));
    snapshot(h, after, sizeof after);
    assert_string_equal(before, after);
    PQfinish(rival);
}

/* Breaker #5: SIGTERM while the writer is held up (a lock on attempts from another session)
 * and a second batch holds the ASSIGNs of two more workers: at exit both batches are
 * committed and their ASSIGNs sent, so after a restart the workers re-attach and no attempt
 * is lost (max_attempts 1 would make a lost attempt fail its job). */
static void sigterm_commits_and_sends_the_waiting_assigns(void **state) {
    harness *h = *state;
    h_begin(h, "coord_sigterm_assigns");
    for (int i = 0; i < 6; i++) {
        char key[32];
        snprintf(key, sizeof key, "sa-%d", i);
        h_insert_job(h, key, "sleep", "{\"seconds\": 1}", 1, 0);
    }
    pid_t c = h_start_coordinator(h);
    PGconn *locker = PQconnectdb(h->conninfo);
    assert_int_equal(PQstatus(locker), CONNECTION_OK);
    PGresult *r = PQexec(locker, "BEGIN; LOCK TABLE attempts IN SHARE MODE");
    assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
    PQclear(r);
    h_start_worker(h, "w1"); /* its attempt row: the batch the writer is stuck on */
    assert_true(h_wait_sql(h, 1, 20000,
                           "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE "
                           "'qsweep coordinator-writer %%' AND wait_event_type = 'Lock'"));
    h_start_worker(h, "w2"); /* theirs: the open batch behind it */
    h_start_worker(h, "w3");
    h_sleep_ms(700);
    h_signal(h, c, SIGTERM);
    h_sleep_ms(300);
    r = PQexec(locker, "COMMIT");
    assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
    PQclear(r);
    PQfinish(locker);
    assert_int_equal(h_wait_exit(c, 15000), 0);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM attempts WHERE outcome = 'running'"), 3);
    h_start_coordinator(h);
    assert_true(h_wait_sql(h, 6, 60000, "SELECT count(*) FROM jobs WHERE state = 'succeeded'"));
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM attempts WHERE outcome <> 'succeeded'"),
                     0);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM attempts"), 6);
}

/* Breaker (orphan cancel): a cancel requested while the coordinator was down reaches the
 * job's worker when it re-attaches after the restart, whichever comes first, the poll of
 * cancel requests or the re-attach; the job ends cancelled, not succeeded. */
static void cancel_of_a_job_whose_worker_has_not_re_attached_yet_is_delivered(void **state) {
    harness *h = *state;
    h_begin(h, "coord_cancel_orphan");
    long id = h_insert_job(h, "orphan-cancel", "sleep", "{\"seconds\": 8}", 3, 0);
    pid_t c = h_start_coordinator(h);
    h_start_worker(h, "w1");
    char worker[64];
    wait_running_on(h, id, worker, sizeof worker);
    h_signal(h, c, SIGKILL);
    h_sql_exec(h, "INSERT INTO cancel_requests (job, reason) VALUES (%ld, 'test')", id);
    h_start_coordinator(h);
    assert_true(h_wait_sql(h, 1, 30000,
                           "SELECT count(*) FROM jobs WHERE id = %ld AND state IN ('cancelled', "
                           "'succeeded', 'failed')",
                           id));
    char state_[32];
    h_sql_text(h, state_, sizeof state_, "SELECT state FROM jobs WHERE id = %ld", id);
    assert_string_equal(state_, "cancelled");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            worker_killed_mid_job_job_reruns_elsewhere_first_attempt_lost, h_setup, h_teardown),
        cmocka_unit_test_setup_teardown(stopped_worker_past_its_lease_has_its_late_result_ignored,
                                        h_setup, h_teardown),
        cmocka_unit_test_setup_teardown(
            coordinator_killed_mid_sweep_and_restarted_loses_and_reruns_nothing, h_setup,
            h_teardown),
        cmocka_unit_test_setup_teardown(orphaned_attempts_expire_after_grace_when_no_worker_returns,
                                        h_setup, h_teardown),
        cmocka_unit_test_setup_teardown(
            attempt_a_re_registering_worker_does_not_name_ends_at_once, h_setup, h_teardown),
        cmocka_unit_test_setup_teardown(
            postgresql_restart_mid_sweep_pauses_reconnects_and_loses_nothing, h_setup, h_teardown),
        cmocka_unit_test_setup_teardown(sigterm_preempts_the_attempt_which_does_not_count, h_setup,
                                        h_teardown),
        cmocka_unit_test_setup_teardown(sigterm_without_a_coordinator_exits_within_the_ack_timeout,
                                        h_setup, h_teardown),
        cmocka_unit_test_setup_teardown(
            coordinator_that_loses_its_lock_writes_nothing_more_and_stops, h_setup, h_teardown),
        cmocka_unit_test_setup_teardown(sigterm_commits_and_sends_the_waiting_assigns, h_setup,
                                        h_teardown),
        cmocka_unit_test_setup_teardown(
            cancel_of_a_job_whose_worker_has_not_re_attached_yet_is_delivered, h_setup,
            h_teardown),
    };
    if (getenv("COORD_TEST")) cmocka_set_test_filter(getenv("COORD_TEST")); /* run one scenario */
    return cmocka_run_group_tests(tests, h_group_setup, h_group_teardown);
}
