/* coord_deps: job dependencies end to end, against a real private PostgreSQL, the real
 * qsweep-coordinator and qsweep-worker processes over ipc://, jobs submitted through the
 * store API `qsweep submit` uses (qc_store_submit with depends_on) and the real `qsweep`
 * command for the status line (coordinator/server/server.h, Dependencies):
 *   - a dependent job runs only after its dependency succeeded, and waits meanwhile as its
 *     own state in v_experiment_progress and `qsweep status`;
 *   - a dependency that fails for good fails its dependents, and theirs, with
 *     "dependency N failed: <its error>", in the transaction of its own failure, and none of
 *     them gets an attempt;
 *   - a cancelled dependency cancels its dependents;
 *   - killing the coordinator while the dependency runs and starting it again keeps the
 *     dependency and runs nothing twice; a job submitted after its dependency failed fails
 *     the same way when it is loaded;
 *   - a dependency that succeeded in another experiment is met: it is not run again. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fixtures.h"
#include "harness.h"
#include "store.h"

/* One job of the test kinds (sleep, echo, fail: tests/kinds) with its dependencies. */
typedef struct test_job {
    const char *key, *kind, *spec;
    int max_attempts;
    const char *deps[2];
} test_job;

/* Submits jobs as experiment `name` through qc_store_submit. */
static void submit(harness *h, const char *name, const test_job *jobs, size_t n) {
    qc_job_submit js[8];
    assert_true(n <= 8);
    for (size_t i = 0; i < n; i++) {
        size_t nd = 0;
        while (nd < 2 && jobs[i].deps[nd])
            nd++;
        js[i] = (qc_job_submit){.job_key = jobs[i].key,
                                .kind = jobs[i].kind,
                                .spec_json = jobs[i].spec,
                                .max_attempts = jobs[i].max_attempts,
                                .depends_on = jobs[i].deps,
                                .n_depends_on = nd};
    }
    qc_store *s = NULL;
    qs_error err = {0};
    if (qc_store_open(h->conninfo, "test", &s, &err)) fail_msg("open: %s", err.msg);
    qc_submit_counts c;
    if (qc_store_submit(s, name, "", name, NULL, js, n, &c, &err)) fail_msg("submit: %s", err.msg);
    qc_store_close(s);
}

static long id_of(harness *h, const char *key) {
    return h_sql_long(h, "SELECT id FROM jobs WHERE job_key = '%s'", key);
}

static int qsweep_status(harness *h, const char *experiment, char *out, size_t cap) {
    const char *args[] = {"status", experiment, "--db", h->conninfo, NULL};
    return fx_run(QS_QSWEEP_BIN, args, out, cap);
}

static void dependent_runs_only_after_its_dependency_succeeded_and_waits_meanwhile(void **state) {
    harness *h = *state;
    h_begin(h, "coord_deps_wait");
    const test_job jobs[] = {{"train", "sleep", "{\"seconds\": 2}", 1, {NULL}},
                             {"sweep", "echo", "{\"metrics\": {\"kl\": 0.5}}", 1, {"train"}}};
    submit(h, "pipe", jobs, 2);
    long train = id_of(h, "train"), sweep = id_of(h, "sweep");
    assert_int_equal(h_sql_long(h, "SELECT waiting FROM v_experiment_progress"), 1);
    h_start_coordinator(h);
    h_start_worker(h, "w1");
    h_start_worker(h, "w2"); /* idle: the dependent is not given to it */
    assert_true(h_wait_sql(h, 1, 20000,
                           "SELECT count(*) FROM attempts WHERE job = %ld AND outcome = 'running'",
                           train));
    char out[8192];
    assert_int_equal(qsweep_status(h, "pipe", out, sizeof out), 0);
    printf("%s", out); /* the line docs/pipelines.md shows */
    if (!strstr(out, "pending 0  waiting 1  running 1")) fail_msg("status: %s", out);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM attempts WHERE job = %ld", sweep), 0);
    assert_true(h_wait_sql(h, 2, 20000, "SELECT count(*) FROM jobs WHERE state = 'succeeded'"));
    assert_int_equal(h_sql_long(h,
                                "SELECT ((SELECT started_at FROM attempts WHERE job = %ld) >="
                                " (SELECT ended_at FROM attempts WHERE job = %ld))::int",
                                sweep, train),
                     1);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM attempts"), 2);
    assert_int_equal(h_sql_long(h, "SELECT waiting FROM v_experiment_progress"), 0);
    assert_int_equal(qsweep_status(h, "pipe", out, sizeof out), 0);
    if (!strstr(out, "pending 0  waiting 0  running 0  succeeded 2")) fail_msg("status: %s", out);
}

static void failed_dependency_fails_its_dependents_transitively_with_the_reason(void **state) {
    harness *h = *state;
    h_begin(h, "coord_deps_fail");
    const test_job jobs[] = {{"train", "fail", "{\"message\": \"diverged at step 40\"}", 1, {NULL}},
                             {"sweep", "echo", "{\"metrics\": {\"x\": 1}}", 1, {"train"}},
                             {"report", "echo", "{\"metrics\": {\"x\": 2}}", 1, {"sweep"}},
                             {"other", "echo", "{\"metrics\": {\"x\": 3}}", 1, {NULL}}};
    submit(h, "pipe", jobs, 4);
    long train = id_of(h, "train"), sweep = id_of(h, "sweep"), report = id_of(h, "report");
    h_start_coordinator(h);
    h_start_worker(h, "w1");
    assert_true(h_wait_sql(h, 3, 20000, "SELECT count(*) FROM jobs WHERE state = 'failed'"));
    assert_true(h_wait_sql(h, 1, 20000,
                           "SELECT count(*) FROM jobs WHERE state = 'succeeded' AND "
                           "job_key = 'other'"));
    char msg[1024], want[1024];
    h_sql_text(h, msg, sizeof msg, "SELECT last_error FROM jobs WHERE id = %ld", sweep);
    snprintf(want, sizeof want, "dependency %ld failed: diverged at step 40", train);
    assert_string_equal(msg, want);
    h_sql_text(h, msg, sizeof msg, "SELECT last_error FROM jobs WHERE id = %ld", report);
    snprintf(want, sizeof want, "dependency %ld failed: dependency %ld failed: diverged at step 40",
             sweep, train);
    assert_string_equal(msg, want);
    /* no attempt for the dependents; the three ends in one transaction (one now()) */
    assert_int_equal(
        h_sql_long(h, "SELECT count(*) FROM attempts WHERE job IN (%ld, %ld)", sweep, report), 0);
    assert_int_equal(h_sql_long(h,
                                "SELECT count(DISTINCT updated_at) FROM jobs WHERE id IN "
                                "(%ld, %ld, %ld)",
                                train, sweep, report),
                     1);
    assert_int_equal(h_sql_long(h, "SELECT failed FROM v_experiment_progress"), 3);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM v_failed_jobs"), 3);
}

static void cancelled_dependency_cancels_its_dependents(void **state) {
    harness *h = *state;
    h_begin(h, "coord_deps_cancel");
    const test_job jobs[] = {{"train", "sleep", "{\"seconds\": 30}", 1, {NULL}},
                             {"sweep", "echo", "{\"metrics\": {\"x\": 1}}", 1, {"train"}}};
    submit(h, "pipe", jobs, 2);
    long train = id_of(h, "train"), sweep = id_of(h, "sweep");
    h_start_coordinator(h);
    h_start_worker(h, "w1");
    assert_true(h_wait_sql(h, 1, 20000,
                           "SELECT count(*) FROM attempts WHERE job = %ld AND outcome = 'running'",
                           train));
    qc_store *s = NULL;
    qs_error err = {0};
    if (qc_store_open(h->conninfo, "test", &s, &err)) fail_msg("open: %s", err.msg);
    if (qc_store_request_cancel(s, "train", NULL, "not needed", &err))
        fail_msg("cancel: %s", err.msg);
    qc_store_close(s);
    assert_true(h_wait_sql(h, 2, 20000, "SELECT count(*) FROM jobs WHERE state = 'cancelled'"));
    char msg[1024], want[64];
    h_sql_text(h, msg, sizeof msg, "SELECT last_error FROM jobs WHERE id = %ld", sweep);
    snprintf(want, sizeof want, "dependency %ld cancelled", train);
    if (strncmp(msg, want, strlen(want))) fail_msg("last_error \"%s\", want \"%s...\"", msg, want);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM attempts WHERE job = %ld", sweep), 0);
}

static void coordinator_killed_between_dependency_and_dependent_runs_nothing_twice(void **state) {
    harness *h = *state;
    h_begin(h, "coord_deps_restart");
    const test_job jobs[] = {{"train", "sleep", "{\"seconds\": 3}", 3, {NULL}},
                             {"sweep", "echo", "{\"metrics\": {\"kl\": 0.5}}", 3, {"train"}},
                             {"bad", "fail", "{\"message\": \"no such file\"}", 1, {NULL}}};
    submit(h, "pipe", jobs, 3);
    long train = id_of(h, "train"), sweep = id_of(h, "sweep");
    pid_t c = h_start_coordinator(h);
    h_start_worker(h, "w1");
    h_start_worker(h, "w2");
    assert_true(h_wait_sql(h, 1, 20000,
                           "SELECT count(*) FROM attempts WHERE job = %ld AND outcome = 'running'",
                           train));
    assert_true(h_wait_sql(h, 1, 20000, "SELECT count(*) FROM jobs WHERE state = 'failed'"));
    h_signal(h, c, SIGKILL);
    /* submitted while no coordinator runs: one depends on the running job, one on the
       failed one */
    const test_job later[] = {{"train", "sleep", "{\"seconds\": 3}", 3, {NULL}},
                              {"sweep-2", "echo", "{\"metrics\": {\"kl\": 0.25}}", 3, {"train"}},
                              {"after-bad", "echo", "{\"metrics\": {\"x\": 1}}", 1, {"bad"}}};
    submit(h, "pipe-2", later, 3);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM job_deps"), 3);
    h_sleep_ms(500);
    h_start_coordinator(h);
    assert_true(h_wait_sql(h, 3, 30000, "SELECT count(*) FROM jobs WHERE state = 'succeeded'"));
    assert_true(h_wait_sql(h, 2, 30000, "SELECT count(*) FROM jobs WHERE state = 'failed'"));
    /* the dependency re-attached (one attempt), each dependent ran once after it */
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM attempts WHERE job = %ld", train), 1);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM attempts WHERE job = %ld", sweep), 1);
    assert_int_equal(
        h_sql_long(h, "SELECT count(*) FROM attempts WHERE job = %ld", id_of(h, "sweep-2")), 1);
    assert_int_equal(h_sql_long(h,
                                "SELECT count(*) FROM attempts WHERE outcome <> 'succeeded' "
                                "AND job <> %ld",
                                id_of(h, "bad")),
                     0);
    assert_int_equal(h_sql_long(h,
                                "SELECT count(*) FROM attempts a WHERE a.job IN (%ld, %ld) AND "
                                "a.started_at >= (SELECT ended_at FROM attempts WHERE job = %ld)",
                                sweep, id_of(h, "sweep-2"), train),
                     2);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM results WHERE final"), 3);
    assert_true(h_log_contains(h, "re-attached to job"));
    char msg[1024], want[1024];
    h_sql_text(h, msg, sizeof msg, "SELECT last_error FROM jobs WHERE job_key = 'after-bad'");
    snprintf(want, sizeof want, "dependency %ld failed: no such file", id_of(h, "bad"));
    assert_string_equal(msg, want);
}

static void dependency_succeeded_in_another_experiment_is_met_not_rerun(void **state) {
    harness *h = *state;
    h_begin(h, "coord_deps_reuse");
    const test_job first[] = {{"train", "echo", "{\"metrics\": {\"loss\": 1.5}}", 1, {NULL}}};
    submit(h, "train-only", first, 1);
    h_start_coordinator(h);
    h_start_worker(h, "w1");
    assert_true(h_wait_sql(h, 1, 20000, "SELECT count(*) FROM jobs WHERE state = 'succeeded'"));
    const test_job second[] = {{"train", "echo", "{\"metrics\": {\"loss\": 1.5}}", 1, {NULL}},
                               {"sweep", "echo", "{\"metrics\": {\"kl\": 0.5}}", 1, {"train"}}};
    submit(h, "pipeline", second, 2);
    assert_true(h_wait_sql(h, 2, 20000, "SELECT count(*) FROM jobs WHERE state = 'succeeded'"));
    assert_int_equal(
        h_sql_long(h, "SELECT count(*) FROM attempts WHERE job = %ld", id_of(h, "train")), 1);
    assert_int_equal(h_sql_long(h, "SELECT succeeded FROM v_experiment_progress WHERE "
                                   "experiment = 'pipeline'"),
                     2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            dependent_runs_only_after_its_dependency_succeeded_and_waits_meanwhile, h_setup,
            h_teardown),
        cmocka_unit_test_setup_teardown(
            failed_dependency_fails_its_dependents_transitively_with_the_reason, h_setup,
            h_teardown),
        cmocka_unit_test_setup_teardown(cancelled_dependency_cancels_its_dependents, h_setup,
                                        h_teardown),
        cmocka_unit_test_setup_teardown(
            coordinator_killed_between_dependency_and_dependent_runs_nothing_twice, h_setup,
            h_teardown),
        cmocka_unit_test_setup_teardown(dependency_succeeded_in_another_experiment_is_met_not_rerun,
                                        h_setup, h_teardown),
    };
    return cmocka_run_group_tests(tests, h_group_setup, h_group_teardown);
}
