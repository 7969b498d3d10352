/* store_deps: job dependencies through the store API `qsweep submit` uses (qc_store_submit's
 * depends_on), against a real private PostgreSQL:
 *   - the edges are stored with the jobs (job_deps) and come back from qc_store_load, as the
 *     coordinator rebuilds itself after a restart;
 *   - a dependency that already succeeded, in another experiment (the job shared by job_key),
 *     is met: the dependent waits on nothing;
 *   - v_experiment_progress counts the pending jobs waiting on a dependency as `waiting`,
 *     and v_waiting_jobs names what each one waits on;
 *   - a job whose dependency failed or was cancelled is loaded with that dependency's id,
 *     state and error, for its own error message. */
#include "../lib/pgtest.h"

#include "store.h"

static qc_store *fresh_store(const char *db) {
    char ci[1024];
    pgtest_fresh_db(srv, db, ci, sizeof ci);
    qc_store *s = NULL;
    qs_error err = {0};
    qs_status st = qc_store_open(ci, "test", &s, &err);
    if (st) fail_msg("open: %s", err.msg);
    return s;
}

static void ok(qs_status st, const qs_error *err) {
    if (st) fail_msg("unexpected %s: %s", qs_status_name(st), err->msg);
}

static long sql_long(qc_store *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static long sql_long(qc_store *s, const char *fmt, ...) {
    char sql[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    return pgtest_long(qc_store_pgconn(s), sql);
}

static int64_t job_id(qc_store *s, const char *key) {
    return sql_long(s, "SELECT id FROM jobs WHERE job_key = '%s'", key);
}

/* A job of the test kinds with no resources: key, spec, dependencies. */
static qc_job_submit job(const char *key, const char *const *deps, size_t n_deps) {
    return (qc_job_submit){.job_key = key,
                           .kind = "echo",
                           .spec_json = "{\"metrics\": {\"x\": 1}}",
                           .max_attempts = 1,
                           .depends_on = deps,
                           .n_depends_on = n_deps};
}

/* Ends job id with state st (and error) as the coordinator's batch does. */
static void end_job(qc_store *s, int64_t id, qc_job_state st, const char *error) {
    qc_store_batch *b = qc_store_batch_new();
    qs_error err = {0};
    ok(qc_store_batch_job_state(b, id, st, 1, 0, error, &err), &err);
    ok(qc_store_flush(s, b, NULL, &err), &err);
    qc_store_batch_free(b);
}

static qc_progress progress_of(qc_store *s, const char *experiment) {
    qc_progress *rows = NULL;
    size_t n = 0;
    qs_error err = {0};
    ok(qc_store_progress(s, experiment, &rows, &n, &err), &err);
    assert_int_equal(n, 1);
    qc_progress p = rows[0];
    free(rows);
    return p;
}

static void edges_are_stored_with_the_jobs_and_come_back_on_load(void **state) {
    (void)state;
    qc_store *s = fresh_store("deps_edges");
    const char *on_a[] = {"a"}, *on_ab[] = {"a", "b"};
    qc_job_submit jobs[] = {job("a", NULL, 0), job("b", on_a, 1), job("c", on_ab, 2)};
    qc_submit_counts c;
    qs_error err = {0};
    ok(qc_store_submit(s, "e", "", "grid", NULL, jobs, 3, &c, &err), &err);
    int64_t a = job_id(s, "a"), b = job_id(s, "b"), cc = job_id(s, "c");
    assert_int_equal(sql_long(s, "SELECT count(*) FROM job_deps"), 3);
    assert_int_equal(sql_long(s,
                              "SELECT count(*) FROM job_deps WHERE job = %lld AND "
                              "depends_on IN (%lld, %lld)",
                              (long long)cc, (long long)a, (long long)b),
                     2);
    /* a new connection (a restarted coordinator) reads them back */
    qc_store_close(s);
    char ci[1024];
    snprintf(ci, sizeof ci, "%s dbname=deps_edges", qc_pgserver_conninfo(srv));
    ok(qc_store_open(ci, "test", &s, &err), &err);
    qc_store_snapshot snap;
    ok(qc_store_load(s, 0, &snap, &err), &err);
    assert_int_equal(snap.n_jobs, 3);
    assert_int_equal(snap.jobs[0].n_waiting_on, 0);
    assert_int_equal(snap.jobs[1].n_waiting_on, 1);
    assert_int_equal(snap.jobs[1].waiting_on[0], a);
    assert_int_equal(snap.jobs[2].n_waiting_on, 2);
    assert_int_equal(snap.jobs[2].waiting_on[0], a);
    assert_int_equal(snap.jobs[2].waiting_on[1], b);
    qc_store_snapshot_free(&snap);
    /* b and c wait; a is ready */
    qc_progress p = progress_of(s, "e");
    assert_int_equal(p.pending, 3);
    assert_int_equal(p.waiting, 2);
    assert_int_equal(sql_long(s, "SELECT waiting FROM v_experiment_progress WHERE experiment = "
                                 "'e'"),
                     2);
    assert_int_equal(sql_long(s,
                              "SELECT count(*) FROM v_waiting_jobs WHERE job_id = %lld AND "
                              "waiting_on = ARRAY[%lld, %lld]::bigint[] AND waiting_states = "
                              "ARRAY['pending', 'pending']",
                              (long long)cc, (long long)a, (long long)b),
                     1);
    /* a succeeds: b is ready, c still waits on b */
    end_job(s, a, QC_JOB_SUCCEEDED, NULL);
    p = progress_of(s, "e");
    assert_int_equal(p.pending, 2);
    assert_int_equal(p.waiting, 1);
    assert_int_equal(sql_long(s,
                              "SELECT count(*) FROM v_waiting_jobs WHERE job_id = %lld AND "
                              "waiting_on = ARRAY[%lld]::bigint[]",
                              (long long)cc, (long long)b),
                     1);
    ok(qc_store_load(s, 0, &snap, &err), &err);
    assert_int_equal(snap.n_jobs, 2);
    assert_int_equal(snap.jobs[1].id, cc);
    assert_int_equal(snap.jobs[1].n_waiting_on, 1);
    assert_int_equal(snap.jobs[1].waiting_on[0], b);
    qc_store_snapshot_free(&snap);
    qc_store_close(s);
}

static void dependency_that_succeeded_in_another_experiment_is_met(void **state) {
    (void)state;
    qc_store *s = fresh_store("deps_reuse");
    qc_job_submit first[] = {job("train-1", NULL, 0)};
    qc_submit_counts c;
    qs_error err = {0};
    ok(qc_store_submit(s, "train", "", "grid 1", NULL, first, 1, &c, &err), &err);
    int64_t t = job_id(s, "train-1");
    end_job(s, t, QC_JOB_SUCCEEDED, NULL);
    /* a second experiment names the same job (same key) and one that depends on it */
    const char *on_t[] = {"train-1"};
    qc_job_submit second[] = {job("train-1", NULL, 0), job("sweep-1", on_t, 1)};
    ok(qc_store_submit(s, "pipeline", "", "grid 2", NULL, second, 2, &c, &err), &err);
    assert_int_equal(c.jobs_new, 1);
    assert_int_equal(c.reused_done, 1);
    assert_int_equal(sql_long(s, "SELECT count(*) FROM jobs WHERE job_key = 'train-1'"), 1);
    qc_store_snapshot snap;
    ok(qc_store_load(s, 0, &snap, &err), &err);
    assert_int_equal(snap.n_jobs, 1);
    assert_string_equal(snap.jobs[0].job_key, "sweep-1");
    assert_int_equal(snap.jobs[0].n_waiting_on, 0);
    assert_int_equal(snap.jobs[0].n_deps_failed, 0);
    qc_store_snapshot_free(&snap);
    qc_progress p = progress_of(s, "pipeline");
    assert_int_equal(p.succeeded, 1);
    assert_int_equal(p.pending, 1);
    assert_int_equal(p.waiting, 0);
    /* a dependency only stored (not in the submission) is found by its key as well */
    const char *on_sweep[] = {"sweep-1"};
    qc_job_submit third[] = {job("report-1", on_sweep, 1)};
    ok(qc_store_submit(s, "report", "", "grid 3", NULL, third, 1, &c, &err), &err);
    assert_int_equal(progress_of(s, "report").waiting, 1);
    /* one that is neither is refused by name, nothing written */
    const char *on_none[] = {"nowhere"};
    qc_job_submit bad[] = {job("x", on_none, 1)};
    assert_int_equal(qc_store_submit(s, "bad", "", "grid 4", NULL, bad, 1, &c, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "nowhere"));
    assert_int_equal(sql_long(s, "SELECT count(*) FROM jobs WHERE job_key = 'x'"), 0);
    qc_store_close(s);
}

static void failed_or_cancelled_dependency_is_loaded_with_its_error(void **state) {
    (void)state;
    qc_store *s = fresh_store("deps_failed");
    qc_job_submit jobs[] = {job("f", NULL, 0), job("k", NULL, 0)};
    qc_submit_counts c;
    qs_error err = {0};
    ok(qc_store_submit(s, "first", "", "grid 1", NULL, jobs, 2, &c, &err), &err);
    int64_t f = job_id(s, "f"), k = job_id(s, "k");
    end_job(s, f, QC_JOB_FAILED, "CUDA out of memory");
    end_job(s, k, QC_JOB_CANCELLED, "cancelled on request");
    /* submitted after its dependency ended: loaded with that dependency's end */
    const char *on_f[] = {"f"}, *on_kf[] = {"k", "f"};
    qc_job_submit later[] = {job("after-f", on_f, 1), job("after-kf", on_kf, 2)};
    ok(qc_store_submit(s, "second", "", "grid 2", NULL, later, 2, &c, &err), &err);
    qc_store_snapshot snap;
    ok(qc_store_load(s, 0, &snap, &err), &err);
    assert_int_equal(snap.n_jobs, 2);
    assert_int_equal(snap.jobs[0].n_deps_failed, 1);
    assert_int_equal(snap.jobs[0].dep_failed_id, f);
    assert_int_equal(snap.jobs[0].dep_failed_state, QC_JOB_FAILED);
    assert_string_equal(snap.jobs[0].dep_failed_error, "CUDA out of memory");
    /* two ended dependencies: the first by id is named */
    assert_int_equal(snap.jobs[1].n_deps_failed, 2);
    assert_int_equal(snap.jobs[1].dep_failed_id, f < k ? f : k);
    assert_int_equal(snap.jobs[1].dep_failed_state, f < k ? QC_JOB_FAILED : QC_JOB_CANCELLED);
    qc_store_snapshot_free(&snap);
    qc_store_close(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(edges_are_stored_with_the_jobs_and_come_back_on_load),
        cmocka_unit_test(dependency_that_succeeded_in_another_experiment_is_met),
        cmocka_unit_test(failed_or_cancelled_dependency_is_loaded_with_its_error),
    };
    return cmocka_run_group_tests(tests, pgtest_setup, pgtest_teardown);
}
