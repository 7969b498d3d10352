/* coord_scheduling: the coordinator's guarantees on a healthy system, against a real private
 * PostgreSQL, the real qsweep-coordinator and qsweep-worker processes and ipc:// sockets:
 *   - a 9-job grid with 4 workers started at once: exactly 9 executions;
 *   - a job that keeps failing: retried up to max attempts, then failed, message in SQL;
 *   - a second coordinator on the same database refuses to start;
 *   - malformed and oversized messages from a rogue DEALER: logged and dropped, service
 *     goes on;
 * and the scheduler's rules (coordinator/server/server.h): cancellation of a pending and a
 * running job, dependencies (wait for success; a failed dependency fails its dependents),
 * priority order, and model affinity before priority. */
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
#include <zmq.h>

#include "envelope.h"
#include "error.h"
#include "harness.h"

static void grid_of_9_jobs_on_4_workers_runs_exactly_9_executions(void **state) {
    harness *h = *state;
    h_begin(h, "coord_grid");
    for (int i = 0; i < 9; i++) {
        char key[32];
        snprintf(key, sizeof key, "grid-%d", i);
        h_insert_job(h, key, "sleep", "{\"seconds\": 0.3}", 3, 0);
    }
    h_start_coordinator(h);
    const char *ids[] = {"w1", "w2", "w3", "w4"};
    for (int i = 0; i < 4; i++)
        h_start_worker(h, ids[i]);
    assert_true(h_wait_sql(h, 9, 30000, "SELECT count(*) FROM jobs WHERE state = 'succeeded'"));
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM attempts"), 9);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM attempts WHERE outcome = 'succeeded'"), 9);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM results WHERE name = 'seconds' AND final"),
                     9);
    /* all four workers took part: they were started at once */
    assert_int_equal(h_sql_long(h, "SELECT count(DISTINCT worker) FROM attempts"), 4);
    /* four PostgreSQL connections whatever the number of workers: the loop's (reads), the
       writer thread's, the one holding the coordinator lock and the results thread's */
    const char *conns[] = {"coordinator", "coordinator-writer", "coordinator-writer-lock",
                           "coordinator-results"};
    for (int i = 0; i < 4; i++)
        assert_int_equal(h_sql_long(h, "SELECT count(*) FROM pg_stat_activity WHERE "
                                       "application_name LIKE 'qsweep %s %%'",
                                    conns[i]),
                         1);
}

/* A transient failure (a worker error: QS_EIO) is retried, after a backoff, up to
 * max_attempts. */
static void failing_job_is_retried_up_to_max_attempts_then_failed_with_its_message(void **state) {
    harness *h = *state;
    h_begin(h, "coord_failing");
    long id =
        h_insert_job(h, "always-fails", "fail",
                     "{\"message\": \"I/O error reading shard 3\", \"transient\": true}", 3, 0);
    h_start_coordinator(h);
    h_start_worker(h, "w1");
    assert_true(h_wait_sql(h, 1, 30000,
                           "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'failed'", id));
    assert_int_equal(
        h_sql_long(h, "SELECT count(*) FROM attempts WHERE job = %ld AND outcome = 'failed'", id),
        3);
    assert_int_equal(h_sql_long(h, "SELECT attempts_used FROM jobs WHERE id = %ld", id), 3);
    char msg[256];
    h_sql_text(h, msg, sizeof msg, "SELECT last_error FROM jobs WHERE id = %ld", id);
    assert_string_equal(msg, "I/O error reading shard 3");
    h_sql_text(h, msg, sizeof msg, "SELECT error FROM attempts WHERE job = %ld AND attempt = 3",
               id);
    assert_string_equal(msg, "I/O error reading shard 3");
    /* retries waited for the backoff: attempt 2 started >= H_BACKOFF_MS after attempt 1 ended */
    assert_true(
        h_sql_long(
            h,
            "SELECT (extract(epoch from (SELECT started_at FROM attempts WHERE job = %ld AND "
            "attempt = 2)"
            " - (SELECT ended_at FROM attempts WHERE job = %ld AND attempt = 1)) * 1000)::bigint",
            id, id) >= H_BACKOFF_MS - 20);
}

static void second_coordinator_on_the_same_database_refuses_to_start(void **state) {
    harness *h = *state;
    h_begin(h, "coord_second");
    h_start_coordinator(h);
    /* the first one holds the lock once it logs that it listens */
    for (int t = 0; t < 1000 && !h_log_contains(h, "listening on"); t++) /* 100 s: a hang */
        h_sleep_ms(100);
    if (!h_log_contains(h, "listening on"))
        fail_msg("gave up after 100 s waiting for \"listening on\" in %s", h->coord_log);
    char log[4096];
    int status = h_run_second_coordinator(h, log, sizeof log);
    assert_int_equal(status, 4); /* runtime: the exit table of every qsweep program */
    assert_non_null(
        strstr(log, "another coordinator is already running on database 'coord_second'"));
    /* the first one still serves: a job completes */
    long id = h_insert_job(h, "after-second", "echo", "{\"metrics\": {\"ppl\": 7.25}}", 1, 0);
    h_start_worker(h, "w1");
    assert_true(h_wait_sql(h, 1, 20000,
                           "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'succeeded'", id));
}

static void send_body(void *sock, const void *buf, size_t len) {
    assert_true(zmq_send(sock, buf, len, 0) == (int)len);
}

static void rogue_dealer_messages_are_logged_and_dropped_and_service_goes_on(void **state) {
    harness *h = *state;
    h_begin(h, "coord_rogue");
    h_start_coordinator(h);
    void *ctx = zmq_ctx_new();
    void *rogue = zmq_socket(ctx, ZMQ_DEALER);
    zmq_setsockopt(rogue, ZMQ_ROUTING_ID, "rogue", 5);
    int linger = 0;
    zmq_setsockopt(rogue, ZMQ_LINGER, &linger, sizeof linger);
    assert_int_equal(zmq_connect(rogue, h->endpoint), 0);

    /* malformed: a length-delimited field claiming more bytes than follow */
    const uint8_t malformed[] = {0x52, 0x10, 0x01, 0x02};
    send_body(rogue, malformed, sizeof malformed);
    /* another protocol version: a valid READY stamped version 99 */
    Qsweep__Ready ready = QSWEEP__READY__INIT;
    Qsweep__Envelope env = QSWEEP__ENVELOPE__INIT;
    env.body_case = QSWEEP__ENVELOPE__BODY_READY;
    env.ready = &ready;
    env.version = 99;
    uint8_t vbuf[64];
    size_t vlen = qsweep__envelope__pack(&env, vbuf);
    send_body(rogue, vbuf, vlen);
    /* oversized: one byte over the protocol limit */
    size_t big = QS_PROTO_MAX_BYTES + 1;
    uint8_t *junk = calloc(1, big);
    assert_non_null(junk);
    send_body(rogue, junk, big);
    free(junk);
    /* a multi-frame message */
    assert_true(zmq_send(rogue, "a", 1, ZMQ_SNDMORE) == 1);
    send_body(rogue, "b", 1);

    for (int t = 0; t < 100 && !h_log_contains(h, "message of 2 frames"); t++)
        h_sleep_ms(100);
    assert_true(h_log_contains(h, "dropped: peer rogue: malformed message"));
    assert_true(h_log_contains(h, "dropped: peer rogue: protocol version 99"));
    assert_true(
        h_log_contains(h, "dropped: peer rogue: message of 4194305 bytes exceeds the limit"));
    assert_true(h_log_contains(h, "dropped: peer rogue: message of 2 frames"));
    zmq_close(rogue);
    zmq_ctx_term(ctx);

    /* the service goes on */
    assert_int_equal(h_wait_exit(h->coord, 0), -1);
    long id = h_insert_job(h, "after-rogue", "echo", "{\"metrics\": {\"kl\": 0.125}}", 1, 0);
    h_start_worker(h, "w1");
    assert_true(h_wait_sql(h, 1, 20000,
                           "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'succeeded'", id));
    char v[64];
    h_sql_text(h, v, sizeof v, "SELECT value FROM results WHERE job = %ld AND name = 'kl'", id);
    assert_string_equal(v, "0.125");
}

static void cancel_requests_cancel_a_pending_and_a_running_job(void **state) {
    harness *h = *state;
    h_begin(h, "coord_cancel");
    long running = h_insert_job(h, "long-run", "sleep", "{\"seconds\": 30}", 3, 10);
    long pending = h_insert_job(h, "never-run", "sleep", "{\"seconds\": 30}", 3, 0);
    h_start_coordinator(h);
    h_start_worker(h, "w1");
    assert_true(h_wait_sql(h, 1, 20000,
                           "SELECT count(*) FROM attempts WHERE job = %ld AND outcome = 'running'",
                           running));
    h_sql_exec(h, "INSERT INTO cancel_requests (job, reason) VALUES (%ld, 'test'), (%ld, 'test')",
               running, pending);
    assert_true(h_wait_sql(h, 2, 20000, "SELECT count(*) FROM jobs WHERE state = 'cancelled'"));
    assert_int_equal(
        h_sql_long(h, "SELECT count(*) FROM attempts WHERE job = %ld AND outcome = 'cancelled'",
                   running),
        1);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM attempts WHERE job = %ld", pending), 0);
    assert_true(
        h_wait_sql(h, 0, 5000, "SELECT count(*) FROM cancel_requests WHERE handled_at IS NULL"));
}

/* A cancel that arrives while the job's ASSIGN waits for its commit: the worker is told to
 * cancel right after the ASSIGN reaches it (a CANCEL sent before would be dropped by a worker
 * that has no such job yet), and the job ends cancelled, not succeeded. The commit is held
 * back by a lock on attempts taken from another session. */
static void cancel_while_the_assign_waits_for_its_commit_is_not_lost(void **state) {
    harness *h = *state;
    h_begin(h, "coord_cancel_pending_assign");
    long victim = h_insert_job(h, "victim", "sleep", "{\"seconds\": 2}", 3, 0);
    h_start_coordinator(h);
    PGconn *locker = PQconnectdb(h->conninfo);
    assert_int_equal(PQstatus(locker), CONNECTION_OK);
    PGresult *r = PQexec(locker, "BEGIN; LOCK TABLE attempts IN SHARE MODE");
    assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
    PQclear(r);
    h_start_worker(h, "w1");
    /* the writer is blocked inserting the attempt row: the ASSIGN waits for that commit */
    assert_true(h_wait_sql(h, 1, 20000,
                           "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE "
                           "'qsweep coordinator-writer %%' AND wait_event_type = 'Lock'"));
    h_sql_exec(h, "INSERT INTO cancel_requests (job, reason) VALUES (%ld, 'test')", victim);
    h_sleep_ms(1500); /* cancel requests are polled every second */
    r = PQexec(locker, "COMMIT");
    assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
    PQclear(r);
    PQfinish(locker);
    assert_true(h_wait_sql(h, 1, 20000,
                           "SELECT count(*) FROM jobs WHERE id = %ld AND state <> 'running' "
                           "AND state <> 'pending'",
                           victim));
    char state_[32];
    h_sql_text(h, state_, sizeof state_, "SELECT state FROM jobs WHERE id = %ld", victim);
    assert_string_equal(state_, "cancelled");
    assert_int_equal(
        h_sql_long(h, "SELECT count(*) FROM attempts WHERE job = %ld AND outcome = 'cancelled'",
                   victim),
        1);
}

/* workers.last_seen follows a running worker's heartbeats (refreshed every half lease), and
 * left_at records its BYE; a new HELLO clears it. */
static void workers_table_follows_heartbeats_and_records_a_bye(void **state) {
    harness *h = *state;
    h_begin(h, "coord_workers_table");
    long id = h_insert_job(h, "long-sleep", "sleep", "{\"seconds\": 30}", 3, 0);
    h_start_coordinator(h);
    pid_t w1 = h_start_worker(h, "w1");
    assert_true(h_wait_sql(h, 1, 20000,
                           "SELECT count(*) FROM attempts WHERE job = %ld AND outcome = 'running'",
                           id));
    char first[64];
    h_sql_text(h, first, sizeof first, "SELECT last_seen FROM workers WHERE id = 'w1'");
    /* a busy worker sends only heartbeats; the row must still move (lease 2 s: every 1 s) */
    assert_true(h_wait_sql(h, 1, 5000,
                           "SELECT count(*) FROM workers WHERE id = 'w1' AND left_at IS NULL AND "
                           "last_seen > '%s'::timestamptz",
                           first));
    h_signal(h, w1, SIGTERM);
    assert_int_equal(h_wait_exit(w1, 10000), 0);
    assert_true(h_wait_sql(h, 1, 10000,
                           "SELECT count(*) FROM workers WHERE id = 'w1' AND left_at IS NOT NULL"));
    h_start_worker(h, "w1");
    assert_true(h_wait_sql(h, 1, 10000,
                           "SELECT count(*) FROM workers WHERE id = 'w1' AND left_at IS NULL"));
}

static void dependent_waits_for_success_and_fails_when_its_dependency_fails(void **state) {
    harness *h = *state;
    h_begin(h, "coord_deps");
    long a = h_insert_job(h, "dep-a", "sleep", "{\"seconds\": 0.5}", 1, 0);
    long b = h_insert_job(h, "dep-b", "echo", "{\"metrics\": {\"x\": 1}}", 1, 100);
    long f = h_insert_job(h, "dep-f", "fail", "{\"message\": \"broken\"}", 1, 0);
    long c = h_insert_job(h, "dep-c", "echo", "{\"metrics\": {\"x\": 2}}", 1, 100);
    h_sql_exec(h, "INSERT INTO job_deps (job, depends_on) VALUES (%ld, %ld), (%ld, %ld)", b, a, c,
               f);
    h_start_coordinator(h);
    h_start_worker(h, "w1");
    h_start_worker(h, "w2");
    assert_true(h_wait_sql(h, 4, 20000,
                           "SELECT count(*) FROM jobs WHERE state IN ('succeeded', 'failed')"));
    assert_int_equal(
        h_sql_long(h, "SELECT count(*) FROM jobs WHERE id IN (%ld, %ld) AND state = 'succeeded'", a,
                   b),
        2);
    /* b (priority 100) still waited for a to end */
    assert_int_equal(h_sql_long(h,
                                "SELECT ((SELECT started_at FROM attempts WHERE job = %ld) >="
                                " (SELECT ended_at FROM attempts WHERE job = %ld))::int",
                                b, a),
                     1);
    assert_int_equal(
        h_sql_long(h, "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'failed'", c), 1);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM attempts WHERE job = %ld", c), 0);
    char msg[128];
    h_sql_text(h, msg, sizeof msg, "SELECT last_error FROM jobs WHERE id = %ld", c);
    char want[64];
    snprintf(want, sizeof want, "dependency %ld failed: broken", f);
    assert_string_equal(msg, want);
}

static void higher_priority_runs_first_then_older(void **state) {
    harness *h = *state;
    h_begin(h, "coord_priority");
    long low = h_insert_job(h, "p-low", "echo", "{\"metrics\": {\"x\": 1}}", 1, 0);
    long high = h_insert_job(h, "p-high", "echo", "{\"metrics\": {\"x\": 1}}", 1, 10);
    long mid_old = h_insert_job(h, "p-mid-old", "echo", "{\"metrics\": {\"x\": 1}}", 1, 5);
    long mid_new = h_insert_job(h, "p-mid-new", "echo", "{\"metrics\": {\"x\": 1}}", 1, 5);
    h_start_coordinator(h);
    h_start_worker(h, "w1");
    assert_true(h_wait_sql(h, 4, 20000, "SELECT count(*) FROM jobs WHERE state = 'succeeded'"));
    /* attempts.id is assigned in commit order: the order of dispatch to the one worker */
    char order[128], want[128];
    h_sql_text(h, order, sizeof order,
               "SELECT string_agg(job::text, ',' ORDER BY id) FROM attempts");
    snprintf(want, sizeof want, "%ld,%ld,%ld,%ld", high, mid_old, mid_new, low);
    assert_string_equal(order, want);
}

static void worker_holding_a_model_gets_its_jobs_before_higher_priority_ones(void **state) {
    harness *h = *state;
    h_begin(h, "coord_affinity");
    h_sql_exec(h, "INSERT INTO jobs (job_key, kind, spec, model_key, priority) VALUES"
                  " ('load-b', 'echo', '{\"model_key\": \"llama-b\", \"metrics\": {\"x\": 1}}', "
                  "'llama-b', 0)");
    h_start_coordinator(h);
    h_start_worker(h, "w1");
    assert_true(h_wait_sql(h, 1, 20000, "SELECT count(*) FROM jobs WHERE state = 'succeeded'"));
    /* w1 now holds llama-b: its job wins over a higher-priority job on another model */
    h_sql_exec(h, "INSERT INTO jobs (job_key, kind, spec, model_key, priority) VALUES"
                  " ('other-a', 'echo', '{\"model_key\": \"llama-a\", \"metrics\": {\"x\": 1}}', "
                  "'llama-a', 10),"
                  " ('same-b', 'echo', '{\"model_key\": \"llama-b\", \"metrics\": {\"x\": 1}}', "
                  "'llama-b', 0)");
    assert_true(h_wait_sql(h, 3, 20000, "SELECT count(*) FROM jobs WHERE state = 'succeeded'"));
    char order[128];
    h_sql_text(h, order, sizeof order,
               "SELECT string_agg(j.job_key, ',' ORDER BY a.id) FROM attempts a JOIN jobs j ON "
               "j.id = a.job");
    assert_string_equal(order, "load-b,same-b,other-a");
}

static void curve_points_arrive_while_the_job_runs_and_are_stored_once(void **state) {
    harness *h = *state;
    h_begin(h, "coord_curve_points");
    long id = h_insert_job(
        h, "train-curve", "echo",
        "{\"metrics\": {\"final_loss\": 2.5}, \"curve\": {\"loss\": [4, 3.5, 3, 2.75, 2.5]},"
        " \"step_ms\": 400}",
        1, 0);
    h_start_coordinator(h);
    h_start_worker(h, "w1");
    assert_true(h_wait_sql(h, 1, 20000,
                           "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'succeeded'", id));
    assert_int_equal(
        h_sql_long(
            h, "SELECT count(*) FROM results WHERE job = %ld AND name = 'loss' AND NOT final", id),
        5);
    char v[32];
    h_sql_text(h, v, sizeof v,
               "SELECT value FROM results WHERE job = %ld AND name = 'loss' AND step = 3", id);
    assert_string_equal(v, "2.75");
    h_sql_text(h, v, sizeof v,
               "SELECT value FROM results WHERE job = %ld AND name = 'final_loss' AND final", id);
    assert_string_equal(v, "2.5");
    /* the first points were stored while the job still ran (partial RESULTs), not with the end */
    assert_int_equal(
        h_sql_long(h,
                   "SELECT ((SELECT min(created_at) FROM results WHERE job = %ld AND NOT final)"
                   " < (SELECT ended_at FROM attempts WHERE job = %ld) - interval '800 "
                   "milliseconds')::int",
                   id, id),
        1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(grid_of_9_jobs_on_4_workers_runs_exactly_9_executions,
                                        h_setup, h_teardown),
        cmocka_unit_test_setup_teardown(
            failing_job_is_retried_up_to_max_attempts_then_failed_with_its_message, h_setup,
            h_teardown),
        cmocka_unit_test_setup_teardown(second_coordinator_on_the_same_database_refuses_to_start,
                                        h_setup, h_teardown),
        cmocka_unit_test_setup_teardown(
            rogue_dealer_messages_are_logged_and_dropped_and_service_goes_on, h_setup, h_teardown),
        cmocka_unit_test_setup_teardown(curve_points_arrive_while_the_job_runs_and_are_stored_once,
                                        h_setup, h_teardown),
        cmocka_unit_test_setup_teardown(cancel_requests_cancel_a_pending_and_a_running_job, h_setup,
                                        h_teardown),
        cmocka_unit_test_setup_teardown(cancel_while_the_assign_waits_for_its_commit_is_not_lost,
                                        h_setup, h_teardown),
        cmocka_unit_test_setup_teardown(workers_table_follows_heartbeats_and_records_a_bye, h_setup,
                                        h_teardown),
        cmocka_unit_test_setup_teardown(
            dependent_waits_for_success_and_fails_when_its_dependency_fails, h_setup, h_teardown),
        cmocka_unit_test_setup_teardown(higher_priority_runs_first_then_older, h_setup, h_teardown),
        cmocka_unit_test_setup_teardown(
            worker_holding_a_model_gets_its_jobs_before_higher_priority_ones, h_setup, h_teardown),
    };
    if (getenv("COORD_TEST")) cmocka_set_test_filter(getenv("COORD_TEST")); /* run one scenario */
    return cmocka_run_group_tests(tests, h_group_setup, h_group_teardown);
}
