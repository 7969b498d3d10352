/* store_store: the coordinator's store against a real private PostgreSQL: submissions are
 * idempotent and link shared jobs, batched transitions land in one transaction and replay
 * harmlessly, results are stored once, a second coordinator is refused, and the store
 * reconnects after PostgreSQL restarts. */
#include "../lib/pgtest.h"

#include <math.h>
#include <signal.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>
#include <time.h>

#include "migrate.h"
#include "store.h"

/* A fresh database with the schema, and a store on it. */
static qc_store *fresh_store(const char *db, char *ci, size_t cap) {
    pgtest_fresh_db(srv, db, ci, cap);
    qc_store *s = NULL;
    qs_error err = {0};
    qs_status st = qc_store_open(ci, "test", &s, &err);
    if (st) fprintf(stderr, "open: %s\n", err.msg);
    assert_int_equal(st, QS_OK);
    return s;
}

static void ok(qs_status st, const qs_error *err) {
    if (st) fprintf(stderr, "unexpected %s: %s\n", qs_status_name(st), err->msg);
    assert_int_equal(st, QS_OK);
}

/* An eval job of the sensitivity grid (spec keys as `qsweep submit` writes them). */
static void eval_spec(char *out, size_t cap, const char *model_digest, const char *format,
                      const char *mode, const char *part) {
    snprintf(out, cap,
             "{\"kind\": \"eval\", \"model\": {\"path\": \"/m/llama\", \"digest\": \"%s\"}, "
             "\"dataset\": {\"path\": \"/d/wiki\", \"digest\": \"d1\", \"ctx\": 512, "
             "\"max_chunks\": 4}, \"format\": \"%s\", \"quantize\": \"weights\", "
             "\"mode\": \"%s\", \"part\": \"%s\", \"numerics_version\": \"1\"}",
             model_digest, format, mode, part);
}

static long count_where(qc_store *s, const char *sql) {
    return pgtest_long(qc_store_pgconn(s), sql);
}

static int64_t job_id(qc_store *s, const char *key) {
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT id FROM jobs WHERE job_key = '%s'", key);
    return count_where(s, sql);
}

/* ---- submit ---------------------------------------------------------------------------- */

static void test_submit_twice_adds_nothing(void **state) {
    (void)state;
    char ci[1024];
    qc_store *s = fresh_store("st_submit", ci, sizeof ci);
    char specs[3][512];
    eval_spec(specs[0], sizeof specs[0], "m1", "nvfp4", "block", "0");
    eval_spec(specs[1], sizeof specs[1], "m1", "nvfp4", "block", "1");
    eval_spec(specs[2], sizeof specs[2], "m1", "mxfp4", "block", "0");
    const char *dep[] = {"k0"};
    qc_job_submit jobs[] = {
        {"k0", "eval", specs[0], 5, 1, 4000, "m1", 3, NULL, 0, false, NULL},
        {"k1", "eval", specs[1], 0, 1, 4000, "m1", 3, dep, 1, false, NULL},
        {"k2", "eval", specs[2], 0, 0, 0, NULL, 2, NULL, 0, false, NULL},
    };
    qc_submit_counts c;
    qs_error err = {0};
    ok(qc_store_submit(s, "sens", "block sweep", "grid: a", NULL, jobs, 3, &c, &err), &err);
    assert_true(c.experiment_new);
    assert_int_equal(c.jobs_new, 3);
    assert_int_equal(c.reused_done + c.reused_pending + c.reused_failed, 0);
    int64_t exp_id = c.experiment_id;

    ok(qc_store_submit(s, "sens", "block sweep", "grid: a", NULL, jobs, 3, &c, &err), &err);
    assert_false(c.experiment_new);
    assert_int_equal(c.experiment_id, exp_id);
    assert_int_equal(c.jobs_new, 0);
    assert_int_equal(c.reused_pending, 3);
    assert_int_equal(count_where(s, "SELECT count(*) FROM jobs"), 3);
    assert_int_equal(count_where(s, "SELECT count(*) FROM experiment_jobs"), 3);
    assert_int_equal(count_where(s, "SELECT count(*) FROM job_deps"), 1);
    assert_int_equal(count_where(s, "SELECT count(*) FROM experiments"), 1);
    /* Fields landed where the schema says. */
    assert_int_equal(count_where(s, "SELECT count(*) FROM jobs WHERE job_key = 'k0' AND "
                                    "priority = 5 AND resources = '{\"gpus\": 1, "
                                    "\"gpu_mem_mb\": 4000}' AND model_key = 'm1' AND "
                                    "max_attempts = 3 AND state = 'pending' AND "
                                    "spec ->> 'mode' = 'block'"),
                     1);
    qc_store_close(s);
}

/* A pinned submission writes the pin with the experiment, keeps a pin the experiment already
 * has, and refuses what is not one path (a family, "any", a misspelling) writing nothing. */
static void test_submit_pinned_pins_in_its_transaction(void **state) {
    (void)state;
    char ci[1024];
    qc_store *s = fresh_store("st_submit_pin", ci, sizeof ci);
    char spec[512];
    eval_spec(spec, sizeof spec, "m1", "nvfp4", "block", "0");
    qc_job_submit jobs[] = {{"k0", "eval", spec, 0, 0, 0, NULL, 3, NULL, 0, false, NULL}};
    qc_submit_counts c;
    qs_error err = {0};
    const char *bad[] = {"cpu", "cuda", "any", "cpu-qsweep-fixed9", "cuda-cc90-fast", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(qc_store_submit_pinned(s, "p", "", "g", NULL, jobs, 1, bad[i], &c, &err),
                         QS_EINVAL);
        if (!strstr(err.msg, "numerics pin")) fail_msg("pin '%s': %s", bad[i], err.msg);
    }
    assert_int_equal(count_where(s, "SELECT count(*) FROM experiments"), 0);
    assert_int_equal(count_where(s, "SELECT count(*) FROM jobs"), 0);
    ok(qc_store_submit_pinned(s, "p", "", "g", NULL, jobs, 1, "cuda-cc90-auto", &c, &err), &err);
    assert_int_equal(count_where(s, "SELECT count(*) FROM experiment_numerics n JOIN experiments "
                                    "e ON e.id = n.experiment WHERE e.name = 'p' AND "
                                    "n.path = 'cuda-cc90-auto'"),
                     1);
    /* submitted again with another pin: the experiment keeps the one it has */
    ok(qc_store_submit_pinned(s, "p", "", "g", NULL, jobs, 1, "cpu-qsweep-fixed2", &c, &err), &err);
    assert_int_equal(count_where(s, "SELECT count(*) FROM experiment_numerics WHERE path = "
                                    "'cuda-cc90-auto'"),
                     1);
    assert_int_equal(count_where(s, "SELECT count(*) FROM experiment_numerics"), 1);
    qc_store_close(s);
}

/* Breaker #9: the same grid text over a changed token file gives other job_keys; adding
 * them to the experiment that holds the old ones is refused (the user picks a new name) and
 * nothing is written; the identical submission still adds nothing. */
static void test_same_name_with_other_jobs_is_refused(void **state) {
    (void)state;
    char ci[1024];
    qc_store *s = fresh_store("st_submit_other_jobs", ci, sizeof ci);
    char a[512], b[512], a2[512];
    eval_spec(a, sizeof a, "m1", "nvfp4", "block", "0");
    eval_spec(b, sizeof b, "m1", "nvfp4", "block", "1");
    eval_spec(a2, sizeof a2, "m1-changed", "nvfp4", "block", "0");
    qc_job_submit first[] = {{"ka", "eval", a, 0, 0, 0, NULL, 3, NULL, 0, false, NULL},
                             {"kb", "eval", b, 0, 0, 0, NULL, 3, NULL, 0, false, NULL}};
    qc_job_submit changed[] = {{"ka2", "eval", a2, 0, 0, 0, NULL, 3, NULL, 0, false, NULL},
                               {"kb", "eval", b, 0, 0, 0, NULL, 3, NULL, 0, false, NULL}};
    qc_job_submit fewer[] = {{"ka", "eval", a, 0, 0, 0, NULL, 3, NULL, 0, false, NULL}};
    qc_submit_counts c;
    qs_error err = {0};
    ok(qc_store_submit(s, "mut", "", "grid: mut", NULL, first, 2, &c, &err), &err);
    assert_int_equal(c.jobs_new, 2);

    assert_int_equal(qc_store_submit(s, "mut", "", "grid: mut", NULL, changed, 2, &c, &err),
                     QS_ESTATE);
    printf("changed: %s\n", err.msg);
    assert_non_null(strstr(err.msg, "experiment 'mut' already exists with other jobs"));
    assert_non_null(strstr(err.msg, "1 of this submission's 2 job_keys are not in it"));
    assert_non_null(strstr(err.msg, "choose a new experiment name"));
    assert_int_equal(c.jobs_new, 0);
    /* A subset of the old jobs is another job set too. */
    assert_int_equal(qc_store_submit(s, "mut", "", "grid: mut", NULL, fewer, 1, &c, &err),
                     QS_ESTATE);
    assert_non_null(strstr(err.msg, "1 of its jobs are not in this submission"));
    /* Nothing written by either refusal. */
    assert_int_equal(count_where(s, "SELECT count(*) FROM jobs"), 2);
    assert_int_equal(count_where(s, "SELECT count(*) FROM jobs WHERE job_key = 'ka2'"), 0);
    assert_int_equal(count_where(s, "SELECT count(*) FROM experiment_jobs"), 2);
    assert_int_equal(count_where(s, "SELECT count(*) FROM experiments"), 1);

    /* The identical grid: accepted, adds nothing. */
    ok(qc_store_submit(s, "mut", "", "grid: mut", NULL, first, 2, &c, &err), &err);
    assert_false(c.experiment_new);
    assert_int_equal(c.jobs_new, 0);
    assert_int_equal(c.reused_pending, 2);
    /* The changed jobs under a new name: accepted, the shared job linked. */
    ok(qc_store_submit(s, "mut-2", "", "grid: mut", NULL, changed, 2, &c, &err), &err);
    assert_true(c.experiment_new);
    assert_int_equal(c.jobs_new, 1);
    assert_int_equal(count_where(s, "SELECT count(*) FROM jobs"), 3);
    assert_int_equal(count_where(s, "SELECT count(*) FROM experiment_jobs"), 4);
    qc_store_close(s);
}

static void test_job_shared_by_two_experiments_is_linked_not_copied(void **state) {
    (void)state;
    char ci[1024];
    qc_store *s = fresh_store("st_shared", ci, sizeof ci);
    char a[512], b[512];
    eval_spec(a, sizeof a, "m1", "nvfp4", "layer", "3.up");
    eval_spec(b, sizeof b, "m1", "nvfp4", "layer", "3.down");
    qc_job_submit first[] = {{"shared", "eval", a, 0, 0, 0, "m1", 3, NULL, 0, false, NULL}};
    qc_job_submit second[] = {{"shared", "eval", a, 0, 0, 0, "m1", 3, NULL, 0, false, NULL},
                              {"own", "eval", b, 0, 0, 0, "m1", 3, NULL, 0, false, NULL}};
    qc_submit_counts c;
    qs_error err = {0};
    ok(qc_store_submit(s, "exp-a", "", "grid: a", NULL, first, 1, &c, &err), &err);
    /* Mark the shared job done, as the coordinator would. */
    qc_store_batch *bt = qc_store_batch_new();
    ok(qc_store_batch_job_state(bt, job_id(s, "shared"), QC_JOB_SUCCEEDED, 1, 0, NULL, &err), &err);
    ok(qc_store_flush(s, bt, NULL, &err), &err);
    ok(qc_store_submit(s, "exp-b", "", "grid: b", "{\"g\": 1}", second, 2, &c, &err), &err);
    assert_true(c.experiment_new);
    assert_int_equal(c.jobs_new, 1);
    assert_int_equal(c.reused_done, 1);
    assert_int_equal(count_where(s, "SELECT count(*) FROM jobs WHERE job_key = 'shared'"), 1);
    assert_int_equal(count_where(s, "SELECT count(*) FROM experiment_jobs ej JOIN jobs j ON "
                                    "j.id = ej.job WHERE j.job_key = 'shared'"),
                     2);
    qc_progress *rows;
    size_t n;
    ok(qc_store_progress(s, "exp-b", &rows, &n, &err), &err);
    assert_int_equal(n, 1);
    assert_int_equal(rows[0].total, 2);
    assert_int_equal(rows[0].succeeded, 1);
    assert_int_equal(rows[0].pending, 1);
    free(rows);
    assert_int_equal(qc_store_progress(s, "no-such", &rows, &n, &err), QS_ENOTFOUND);
    qc_store_batch_free(bt);
    qc_store_close(s);
}

static void test_bad_submissions_write_nothing(void **state) {
    (void)state;
    char ci[1024];
    qc_store *s = fresh_store("st_badsub", ci, sizeof ci);
    char good[512];
    eval_spec(good, sizeof good, "m1", "nvfp4", "block", "0");
    qc_submit_counts c;
    qs_error err = {0};

    qc_job_submit bad_json[] = {
        {"j1", "eval", good, 0, 0, 0, NULL, 3, NULL, 0, false, NULL},
        {"j2", "eval", "{\"kind\": \"eval\",\n \"model\": }", 0, 0, 0, NULL, 3, NULL, 0, false, NULL}};
    assert_int_equal(qc_store_submit(s, "e", "", "g", NULL, bad_json, 2, &c, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "j2"));
    assert_non_null(strstr(err.msg, "line 2"));

    const char *missing[] = {"nowhere"};
    qc_job_submit bad_dep[] = {{"j1", "eval", good, 0, 0, 0, NULL, 3, missing, 1, false, NULL}};
    assert_int_equal(qc_store_submit(s, "e", "", "g", NULL, bad_dep, 1, &c, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "nowhere"));

    char other[512];
    eval_spec(other, sizeof other, "m2", "nvfp4", "block", "0");
    qc_job_submit clash[] = {{"j1", "eval", good, 0, 0, 0, NULL, 3, NULL, 0, false, NULL},
                             {"j1", "eval", other, 0, 0, 0, NULL, 3, NULL, 0, false, NULL}};
    assert_int_equal(qc_store_submit(s, "e", "", "g", NULL, clash, 2, &c, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "j1"));

    qc_job_submit zero_attempts[] = {{"j1", "eval", good, 0, 0, 0, NULL, 0, NULL, 0, false, NULL}};
    assert_int_equal(qc_store_submit(s, "e", "", "g", NULL, zero_attempts, 1, &c, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "max_attempts"));

    assert_int_equal(count_where(s, "SELECT count(*) FROM jobs"), 0);
    assert_int_equal(count_where(s, "SELECT count(*) FROM experiments"), 0);

    /* The same job twice in one submission is one job. */
    qc_job_submit twice[] = {{"j1", "eval", good, 0, 0, 0, NULL, 3, NULL, 0, false, NULL},
                             {"j1", "eval", good, 0, 0, 0, NULL, 3, NULL, 0, false, NULL}};
    ok(qc_store_submit(s, "e", "", "g", NULL, twice, 2, &c, &err), &err);
    assert_int_equal(c.jobs_new, 1);
    /* Same name, other grid: refused, by name. */
    assert_int_equal(qc_store_submit(s, "e", "", "other grid", NULL, twice, 2, &c, &err),
                     QS_ESTATE);
    assert_non_null(strstr(err.msg, "'e'"));
    assert_int_equal(count_where(s, "SELECT count(*) FROM jobs"), 1);
    qc_store_close(s);
}

/* ---- transitions and rebuild ----------------------------------------------------------- */

static void test_batched_transitions_and_rebuild(void **state) {
    (void)state;
    char ci[1024];
    qc_store *s = fresh_store("st_batch", ci, sizeof ci);
    char a[512], b[512];
    eval_spec(a, sizeof a, "m1", "nvfp4", "component", "up");
    eval_spec(b, sizeof b, "m1", "nvfp4", "component", "down");
    const char *dep[] = {"ja"};
    qc_job_submit jobs[] = {{"ja", "eval", a, 1, 1, 1000, "m1", 3, NULL, 0, false, NULL},
                            {"jb", "eval", b, 0, 1, 1000, "m1", 2, dep, 1, false, NULL}};
    qc_submit_counts c;
    qs_error err = {0};
    ok(qc_store_submit(s, "e", "", "g", NULL, jobs, 2, &c, &err), &err);
    int64_t ja = job_id(s, "ja"), jb = job_id(s, "jb");

    qc_store_snapshot snap;
    ok(qc_store_load(s, 0, &snap, &err), &err);
    assert_int_equal(snap.n_jobs, 2);
    assert_int_equal(snap.jobs[0].id, ja);
    assert_int_equal(snap.jobs[1].n_waiting_on, 1);
    assert_int_equal(snap.jobs[1].waiting_on[0], ja);
    assert_int_equal(snap.jobs[0].gpu_mem_mb, 1000);
    assert_string_equal(snap.jobs[0].model_key, "m1");
    assert_int_equal(snap.max_job_id, jb);
    qc_store_snapshot_free(&snap);

    /* Worker w1 takes ja: one batch, one transaction. */
    qc_store_batch *bt = qc_store_batch_new();
    ok(qc_store_batch_worker_seen(bt, "w1", "gpu-host-1", 4242,
                                  "[{\"name\": \"B200\", \"memory_mb\": 183000}]", 16, &err),
       &err);
    ok(qc_store_batch_attempt_started(bt, ja, 1, "w1", 30, &err), &err);
    ok(qc_store_batch_job_state(bt, ja, QC_JOB_RUNNING, 0, 0, NULL, &err), &err);
    ok(qc_store_batch_lease_renewed(bt, ja, 1, 60, &err), &err);
    ok(qc_store_batch_lease_renewed(bt, ja, 1, 600, &err), &err); /* coalesced: last wins */
    assert_int_equal(qc_store_batch_size(bt), 5);
    qc_flush_stats fs;
    ok(qc_store_flush(s, bt, &fs, &err), &err);
    assert_int_equal(qc_store_batch_size(bt), 0);
    assert_int_equal(fs.workers_seen, 1);
    assert_int_equal(fs.attempts_started, 1);
    assert_int_equal(fs.leases_renewed, 1);
    assert_int_equal(fs.jobs_changed, 1);
    assert_int_equal(count_where(s, "SELECT count(*) FROM attempts WHERE lease_expires_at > "
                                    "now() + interval '500 seconds' AND outcome = 'running'"),
                     1);

    /* Rebuild after a "restart": the running attempt comes back with worker and lease. */
    ok(qc_store_load(s, 0, &snap, &err), &err);
    assert_int_equal(snap.n_running, 1);
    assert_int_equal(snap.running[0].job, ja);
    assert_int_equal(snap.running[0].attempt, 1);
    assert_string_equal(snap.running[0].worker, "w1");
    assert_true(snap.running[0].lease_expires_at > snap.running[0].started_at + 500);
    assert_int_equal(snap.jobs[0].state, QC_JOB_RUNNING);
    assert_int_equal(snap.jobs[0].last_attempt, 1);
    qc_store_snapshot_free(&snap);

    /* Attempt 1 is lost (lease expired); the job is requeued with backoff. The same batch
     * flushed twice (a retry after an unknown COMMIT outcome) changes nothing more. */
    for (int replay = 0; replay < 2; replay++) {
        ok(qc_store_batch_attempt_ended(bt, ja, 1, QC_ATTEMPT_LOST, "lease expired", &err), &err);
        ok(qc_store_batch_job_state(bt, ja, QC_JOB_PENDING, 1, 120, "attempt 1 lost: lease expired",
                                    &err),
           &err);
        ok(qc_store_flush(s, bt, &fs, &err), &err);
        assert_int_equal(fs.attempts_ended, replay == 0 ? 1 : 0);
    }
    assert_int_equal(count_where(s, "SELECT count(*) FROM attempts WHERE outcome = 'lost' AND "
                                    "error = 'lease expired' AND ended_at IS NOT NULL"),
                     1);
    ok(qc_store_load(s, 0, &snap, &err), &err);
    assert_int_equal(snap.n_running, 0);
    assert_int_equal(snap.jobs[0].attempts_used, 1);
    assert_true(snap.jobs[0].not_before > snap.jobs[0].created_at + 100);
    assert_string_equal(snap.jobs[0].last_error, "attempt 1 lost: lease expired");
    qc_store_snapshot_free(&snap);

    /* Attempt 2 succeeds; the dependent job is then free to run. A later state without an
     * error keeps the stored last_error. */
    ok(qc_store_batch_attempt_started(bt, ja, 2, "w1", 30, &err), &err);
    ok(qc_store_batch_attempt_ended(bt, ja, 2, QC_ATTEMPT_SUCCEEDED, NULL, &err), &err);
    ok(qc_store_batch_attempt_ended(bt, ja, 2, QC_ATTEMPT_FAILED, "too late", &err), &err);
    ok(qc_store_batch_job_state(bt, ja, QC_JOB_RUNNING, 1, 0, NULL, &err), &err);
    ok(qc_store_batch_job_state(bt, ja, QC_JOB_SUCCEEDED, 2, 0, NULL, &err), &err);
    ok(qc_store_flush(s, bt, &fs, &err), &err);
    assert_int_equal(count_where(s, "SELECT count(*) FROM attempts WHERE attempt = 2 AND "
                                    "outcome = 'succeeded' AND error IS NULL"),
                     1);
    assert_int_equal(count_where(s, "SELECT count(*) FROM jobs WHERE state = 'succeeded' AND "
                                    "attempts_used = 2 AND not_before IS NULL AND "
                                    "last_error = 'attempt 1 lost: lease expired'"),
                     1);
    ok(qc_store_load(s, 0, &snap, &err), &err);
    assert_int_equal(snap.n_jobs, 1);
    assert_int_equal(snap.jobs[0].id, jb);
    assert_int_equal(snap.jobs[0].n_waiting_on, 0);
    assert_int_equal(snap.jobs[0].n_deps_failed, 0);
    qc_store_snapshot_free(&snap);

    /* Only jobs submitted after a watermark. */
    char d[512];
    eval_spec(d, sizeof d, "m1", "nvfp4", "component", "gate");
    qc_job_submit more[] = {{"jc", "eval", d, 0, 0, 0, "m1", 1, NULL, 0, false, NULL}};
    ok(qc_store_submit(s, "e2", "", "g2", NULL, more, 1, &c, &err), &err);
    ok(qc_store_load(s, jb, &snap, &err), &err);
    assert_int_equal(snap.n_jobs, 1);
    assert_string_equal(snap.jobs[0].job_key, "jc");
    assert_int_equal(snap.max_job_id, job_id(s, "jc"));
    qc_store_snapshot_free(&snap);

    /* A job whose dependency failed for good is reported as such (it can never run). */
    char f[512];
    eval_spec(f, sizeof f, "m1", "nvfp4", "component", "o");
    const char *on_jc[] = {"jc"};
    qc_job_submit after[] = {{"jd", "eval", f, 0, 0, 0, "m1", 1, on_jc, 1, false, NULL}};
    ok(qc_store_submit(s, "e3", "", "g3", NULL, after, 1, &c, &err), &err);
    ok(qc_store_batch_job_state(bt, job_id(s, "jc"), QC_JOB_FAILED, 1, 0, "boom", &err), &err);
    ok(qc_store_flush(s, bt, NULL, &err), &err);
    ok(qc_store_load(s, 0, &snap, &err), &err);
    assert_int_equal(snap.n_jobs, 2); /* jb and jd; jc has failed */
    assert_string_equal(snap.jobs[1].job_key, "jd");
    assert_int_equal(snap.jobs[1].n_waiting_on, 0);
    assert_int_equal(snap.jobs[1].n_deps_failed, 1);
    assert_int_equal(snap.jobs[1].dep_failed_id, job_id(s, "jc"));
    assert_string_equal(snap.jobs[1].dep_failed_error, "boom");
    qc_store_snapshot_free(&snap);
    /* The watermark is the highest id of all jobs, terminal ones included, so the next poll
       does not read the terminal jobs above the last active one again. */
    ok(qc_store_batch_job_state(bt, job_id(s, "jd"), QC_JOB_CANCELLED, 0, 0, NULL, &err), &err);
    ok(qc_store_flush(s, bt, NULL, &err), &err);
    ok(qc_store_load(s, 0, &snap, &err), &err);
    assert_int_equal(snap.jobs[snap.n_jobs - 1].id, jb); /* the last active job */
    assert_int_equal(snap.max_job_id, job_id(s, "jd"));
    qc_store_snapshot_free(&snap);
    assert_int_equal(count_where(s, "SELECT count(*) FROM v_failed_jobs WHERE job_key = 'jc' "
                                    "AND last_error = 'boom' AND experiments = 'e2'"),
                     1);

    /* A bad worker document is refused at append time, not at flush. */
    assert_int_equal(qc_store_batch_worker_seen(bt, "w2", "h", 1, "{not json", 1, &err), QS_EINVAL);
    assert_int_equal(qc_store_batch_attempt_ended(bt, ja, 1, QC_ATTEMPT_RUNNING, NULL, &err),
                     QS_EINVAL);
    assert_int_equal(qc_store_batch_size(bt), 0);
    qc_store_batch_free(bt);
    qc_store_close(s);
}

/* ---- results ---------------------------------------------------------------------------- */

/* Reads back a stored value exactly (PostgreSQL 12+ prints float8 as the shortest text that
 * reads back to the same double). */
static double stored_value(qc_store *s, int64_t job, const char *name, long step) {
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT value::text FROM results WHERE job = %lld AND name = '%s' AND step = %ld",
             (long long)job, name, step);
    PGresult *r = PQexec(qc_store_pgconn(s), sql);
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    assert_int_equal(PQntuples(r), 1);
    double v = strtod(PQgetvalue(r, 0, 0), NULL);
    PQclear(r);
    return v;
}

static void test_results_are_stored_once(void **state) {
    (void)state;
    char ci[1024];
    qc_store *s = fresh_store("st_results", ci, sizeof ci);
    char a[512];
    eval_spec(a, sizeof a, "m1", "nvfp4", "block", "7");
    qc_job_submit jobs[] = {{"ja", "eval", a, 0, 0, 0, "m1", 3, NULL, 0, false, NULL}};
    qc_submit_counts c;
    qs_error err = {0};
    ok(qc_store_submit(s, "e", "", "g", NULL, jobs, 1, &c, &err), &err);
    int64_t ja = job_id(s, "ja");
    qc_store_batch *bt = qc_store_batch_new();
    ok(qc_store_batch_attempt_started(bt, ja, 1, "w1", 30, &err), &err);
    ok(qc_store_batch_attempt_started(bt, ja, 2, "w2", 30, &err), &err);
    ok(qc_store_flush(s, bt, NULL, &err), &err);

    /* Values that must survive the round trip (binary COPY) bit for bit. */
    const qc_metric final1[] = {{"ppl", 7.123456789012345, -1},          {"kl_mean", 0.1, -1},
                                {"kl_max", 4.9406564584124654e-324, -1}, /* smallest subnormal */
                                {"sqnr_db.3.up", -INFINITY, -1},         {"top1", NAN, -1},
                                {"name\twith\ttabs\\", 1e300, -1}};
    qc_flush_stats fs;
    ok(qc_store_batch_results(bt, ja, 1, true, final1, 6, &err), &err);
    ok(qc_store_flush(s, bt, &fs, &err), &err);
    assert_int_equal(fs.results_inserted, 6);
    assert_true(stored_value(s, ja, "ppl", -1) == 7.123456789012345);
    assert_true(stored_value(s, ja, "kl_mean", -1) == 0.1);
    assert_true(stored_value(s, ja, "kl_max", -1) == 4.9406564584124654e-324);
    assert_true(isinf(stored_value(s, ja, "sqnr_db.3.up", -1)));
    assert_true(isnan(stored_value(s, ja, "top1", -1)));
    assert_true(stored_value(s, ja, "name\twith\ttabs\\", -1) == 1e300);

    /* The same set again (duplicate RESULT): ignored. */
    ok(qc_store_batch_results(bt, ja, 1, true, final1, 6, &err), &err);
    ok(qc_store_flush(s, bt, &fs, &err), &err);
    assert_int_equal(fs.results_inserted, 0);
    assert_int_equal(fs.results_ignored, 6);

    /* A final set from another attempt (late result of a lost attempt), including a metric
     * the first set did not have: dropped whole. */
    const qc_metric final2[] = {{"ppl", 99.0, -1}, {"nll", 4.6, -1}};
    ok(qc_store_batch_results(bt, ja, 2, true, final2, 2, &err), &err);
    ok(qc_store_flush(s, bt, &fs, &err), &err);
    assert_int_equal(fs.results_inserted, 0);
    assert_int_equal(fs.results_ignored, 2);
    assert_true(stored_value(s, ja, "ppl", -1) == 7.123456789012345);
    assert_int_equal(count_where(s, "SELECT count(*) FROM results WHERE name = 'nll'"), 0);
    assert_int_equal(count_where(s, "SELECT count(*) FROM results WHERE final"), 6);

    /* Curve points: a newer attempt replaces an older one's, never the other way round. */
    const qc_metric curve1[] = {{"loss", 3.0, 0}, {"loss", 2.5, 10}};
    const qc_metric curve2[] = {{"loss", 3.1, 0}};
    ok(qc_store_batch_results(bt, ja, 1, false, curve1, 2, &err), &err);
    ok(qc_store_flush(s, bt, &fs, &err), &err);
    assert_int_equal(fs.results_inserted, 2);
    ok(qc_store_batch_results(bt, ja, 2, false, curve2, 1, &err), &err);
    ok(qc_store_flush(s, bt, &fs, &err), &err);
    assert_true(stored_value(s, ja, "loss", 0) == 3.1);
    ok(qc_store_batch_results(bt, ja, 1, false, curve1, 2, &err), &err);
    ok(qc_store_flush(s, bt, &fs, &err), &err);
    assert_int_equal(fs.results_inserted, 0);
    assert_true(stored_value(s, ja, "loss", 0) == 3.1);
    assert_true(stored_value(s, ja, "loss", 10) == 2.5);

    /* Bad rows are refused when queued. */
    const qc_metric bad[] = {{"ppl", 1.0, 5}};
    assert_int_equal(qc_store_batch_results(bt, ja, 1, true, bad, 1, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "ppl"));
    qc_store_batch_free(bt);
    qc_store_close(s);
}

/* A job's results need the job (schema/004: checked once per statement), a job with results
 * cannot be deleted, and a set queued twice in one batch lands once. */
/* What the before-commit hook of a share does: counts calls, fails when told to. */
typedef struct hook_probe {
    int calls;
    qs_status answer;
} hook_probe;

static qs_status probe_hook(void *ctx, qs_error *err) {
    hook_probe *h = ctx;
    h->calls++;
    if (h->answer) return qs_error_set(err, h->answer, "hook says no");
    return QS_OK;
}

/* A batch written as two shares (coordinator/server/writer.h): each result set goes whole to
 * one share, the two shares together store every row once, a failing hook rolls its share
 * back, and a retry of the whole batch after one share committed stores nothing twice. */
static void test_batch_written_in_two_shares(void **state) {
    (void)state;
    char ci[1024];
    qc_store *s = fresh_store("st_shares", ci, sizeof ci);
    enum { NJ = 5, NM = 40 };
    qc_job_submit jobs[NJ];
    char keys[NJ][16], specs[NJ][512];
    for (int j = 0; j < NJ; j++) {
        snprintf(keys[j], sizeof keys[j], "share-%d", j);
        char part[8];
        snprintf(part, sizeof part, "%d", j);
        eval_spec(specs[j], sizeof specs[j], "m1", "nvfp4", "block", part);
        jobs[j] = (qc_job_submit){keys[j], "eval", specs[j], 0, 0, 0, "m1", 3, NULL, 0, false, NULL};
    }
    qc_submit_counts c;
    qs_error err = {0};
    ok(qc_store_submit(s, "e", "", "g", NULL, jobs, NJ, &c, &err), &err);
    int64_t ids[NJ];
    for (int j = 0; j < NJ; j++)
        ids[j] = job_id(s, keys[j]);
    qc_store_batch *bt = qc_store_batch_new();
    for (int j = 0; j < NJ; j++)
        ok(qc_store_batch_attempt_started(bt, ids[j], 1, "w1", 30, &err), &err);
    ok(qc_store_flush(s, bt, NULL, &err), &err);

    /* Sets of unequal size, so the split is not simply alternating. */
    qc_metric m[NM];
    char names[NM][16];
    for (int k = 0; k < NM; k++) {
        snprintf(names[k], sizeof names[k], "m.%d", k);
        m[k] = (qc_metric){names[k], k + 0.5, -1};
    }
    /* job 1 also sends three curve points, in a set of their own queued after job 2's final
       set: by bytes alone that set would go to the other share than job 1's final set; all of
       a job's sets go to one share */
    const qc_metric curve[] = {{"loss", 2.5, 0}, {"loss", 2.25, 1}, {"loss", 2.0, 2}};
    for (int j = 0; j < NJ; j++) {
        ok(qc_store_batch_results(bt, ids[j], 1, true, m, (size_t)(NM - 7 * j), &err), &err);
        if (j == 2) ok(qc_store_batch_results(bt, ids[1], 1, false, curve, 3, &err), &err);
        ok(qc_store_batch_attempt_ended(bt, ids[j], 1, QC_ATTEMPT_SUCCEEDED, NULL, &err), &err);
        ok(qc_store_batch_job_state(bt, ids[j], QC_JOB_SUCCEEDED, 1, 0, NULL, &err), &err);
    }
    assert_int_equal(qc_store_batch_result_sets(bt), NJ + 1);
    size_t total_rows = 3;
    for (int j = 0; j < NJ; j++)
        total_rows += (size_t)(NM - 7 * j);

    /* The main share's hook refuses: its transaction rolls back, nothing of it is stored. */
    qc_store *s2 = NULL;
    ok(qc_store_open(ci, "results", &s2, &err), &err);
    hook_probe no = {0, QS_EDB};
    qc_flush_stats main_fs, res_fs;
    assert_int_equal(qc_store_flush_share(s, bt, QC_FLUSH_MAIN, probe_hook, &no, &main_fs, &err),
                     QS_EDB);
    assert_int_equal(no.calls, 1);
    assert_non_null(strstr(err.msg, "hook says no"));
    assert_int_equal(count_where(s, "SELECT count(*) FROM results"), 0);
    assert_int_equal(count_where(s, "SELECT count(*) FROM jobs WHERE state = 'succeeded'"), 0);

    /* The results share alone: whole sets only, no transition. */
    ok(qc_store_flush_share(s2, bt, QC_FLUSH_RESULTS, NULL, NULL, &res_fs, &err), &err);
    long res_rows = count_where(s, "SELECT count(*) FROM results");
    assert_true(res_rows > 0 && (size_t)res_rows < total_rows);
    assert_int_equal(res_fs.results_inserted, (size_t)res_rows);
    /* every job stored by this share is stored whole: its final set and its curve points */
    assert_int_equal(count_where(s, "SELECT count(*) FROM (SELECT job, count(*) AS n FROM results "
                                    "GROUP BY job) t JOIN jobs j ON j.id = t.job "
                                    "WHERE t.n <> 40 - 7 * (substr(j.job_key, 7)::int) + "
                                    "CASE WHEN j.job_key = 'share-1' THEN 3 ELSE 0 END"),
                     0);
    assert_int_equal(count_where(s, "SELECT count(*) FROM attempts WHERE outcome = 'running'"), NJ);

    /* The main share: the transitions and the other sets; the hook runs before its COMMIT. */
    hook_probe yes = {0, QS_OK};
    ok(qc_store_flush_share(s, bt, QC_FLUSH_MAIN, probe_hook, &yes, &main_fs, &err), &err);
    assert_int_equal(yes.calls, 1);
    assert_int_equal(main_fs.results_inserted + res_fs.results_inserted, total_rows);
    assert_int_equal(count_where(s, "SELECT count(*) FROM results"), (long)total_rows);
    assert_int_equal(count_where(s, "SELECT count(*) FROM jobs WHERE state = 'succeeded'"), NJ);

    /* A retry of the whole batch (as after a failure between the two commits) adds nothing. */
    qc_flush_stats again;
    ok(qc_store_flush(s, bt, &again, &err), &err);
    assert_int_equal(again.results_inserted, 0);
    assert_int_equal(again.results_ignored, total_rows);
    assert_int_equal(count_where(s, "SELECT count(*) FROM results"), (long)total_rows);
    assert_int_equal(qc_store_batch_size(bt), 0);

    /* An empty share still calls its hook, without a transaction. */
    hook_probe empty = {0, QS_OK};
    ok(qc_store_flush_share(s, bt, QC_FLUSH_MAIN, probe_hook, &empty, NULL, &err), &err);
    assert_int_equal(empty.calls, 1);
    qc_store_close(s2);
    qc_store_batch_free(bt);
    qc_store_close(s);
}

static void test_results_need_their_job_and_duplicates_in_a_batch_land_once(void **state) {
    (void)state;
    char ci[1024];
    qc_store *s = fresh_store("st_results_rules", ci, sizeof ci);
    char a[512];
    eval_spec(a, sizeof a, "m1", "mxfp4", "block", "2");
    qc_job_submit jobs[] = {{"ja", "eval", a, 0, 0, 0, "m1", 3, NULL, 0, false, NULL}};
    qc_submit_counts c;
    qs_error err = {0};
    ok(qc_store_submit(s, "e", "", "g", NULL, jobs, 1, &c, &err), &err);
    int64_t ja = job_id(s, "ja");
    qc_store_batch *bt = qc_store_batch_new();
    const qc_metric m[] = {{"ppl", 6.5, -1}, {"nll", 1.875, -1}};
    qc_flush_stats fs;
    ok(qc_store_batch_results(bt, ja, 1, true, m, 2, &err), &err);
    ok(qc_store_batch_results(bt, ja, 1, true, m, 2, &err), &err);
    ok(qc_store_flush(s, bt, &fs, &err), &err);
    assert_int_equal(fs.results_inserted, 2);
    assert_int_equal(fs.results_ignored, 2);
    assert_int_equal(count_where(s, "SELECT count(*) FROM results"), 2);

    /* Results of a job that does not exist: the flush fails, names it, and keeps the batch. */
    ok(qc_store_batch_results(bt, ja + 1000, 1, true, m, 2, &err), &err);
    assert_int_equal(qc_store_flush(s, bt, &fs, &err), QS_EDB);
    char id[32];
    snprintf(id, sizeof id, "job %lld", (long long)(ja + 1000));
    assert_non_null(strstr(err.msg, id));
    assert_false(qc_store_connection_lost(s));
    assert_int_equal(qc_store_batch_size(bt), 2);
    qc_store_batch_clear(bt);
    assert_int_equal(count_where(s, "SELECT count(*) FROM results"), 2);

    PGresult *r = PQexec(qc_store_pgconn(s), "DELETE FROM jobs");
    assert_int_equal(PQresultStatus(r), PGRES_FATAL_ERROR);
    /* 23503 foreign_key_violation (PostgreSQL docs, Appendix A). */
    assert_string_equal(PQresultErrorField(r, PG_DIAG_SQLSTATE), "23503");
    assert_non_null(strstr(PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY), "has results"));
    PQclear(r);
    qc_store_batch_free(bt);
    qc_store_close(s);
}

struct collected {
    int rows;
    double ppl;
};

static int collect(void *ctx, const qc_result_row *row) {
    struct collected *c = ctx;
    c->rows++;
    if (!strcmp(row->kind, "eval") && !strcmp(row->metric, "ppl")) {
        assert_string_equal(row->format, "nvfp4");
        assert_string_equal(row->part, "3");
        assert_true(row->final);
        assert_int_equal(row->step, -1);
        c->ppl = row->value;
    }
    return 0;
}

static int stop_at_first(void *ctx, const qc_result_row *row) {
    (void)row;
    ((struct collected *)ctx)->rows++;
    return 1;
}

static void test_sensitivity_view_joins_baseline_and_results_reader(void **state) {
    (void)state;
    char ci[1024];
    qc_store *s = fresh_store("st_sens", ci, sizeof ci);
    char base[512], ev[512];
    snprintf(base, sizeof base,
             "{\"kind\": \"baseline\", \"model\": {\"path\": \"/m/llama\", \"digest\": \"m1\"}, "
             "\"dataset\": {\"path\": \"/d/wiki\", \"digest\": \"d1\", \"ctx\": 512, "
             "\"max_chunks\": 4}, \"format\": \"bf16\", \"mode\": \"none\", "
             "\"numerics_version\": \"1\"}");
    eval_spec(ev, sizeof ev, "m1", "nvfp4", "block", "3");
    const char *dep[] = {"base"};
    qc_job_submit jobs[] = {{"base", "baseline", base, 0, 0, 0, "m1", 3, NULL, 0, false, NULL},
                            {"ev", "eval", ev, 0, 0, 0, "m1", 3, dep, 1, false, NULL}};
    qc_submit_counts c;
    qs_error err = {0};
    ok(qc_store_submit(s, "sens", "", "g", NULL, jobs, 2, &c, &err), &err);
    int64_t jbase = job_id(s, "base"), jev = job_id(s, "ev");
    qc_store_batch *bt = qc_store_batch_new();
    const qc_metric bm[] = {{"ppl", 8.25, -1}};
    const qc_metric em[] = {{"ppl", 8.75, -1}, {"kl_mean", 0.03125, -1}};
    ok(qc_store_batch_results(bt, jbase, 1, true, bm, 1, &err), &err);
    ok(qc_store_batch_results(bt, jev, 1, true, em, 2, &err), &err);
    ok(qc_store_flush(s, bt, NULL, &err), &err);
    /* delta = eval ppl - baseline ppl = 8.75 - 8.25 (exact in binary). */
    assert_int_equal(count_where(s, "SELECT count(*) FROM v_sensitivity WHERE experiment = "
                                    "'sens' AND model = '/m/llama' AND format = 'nvfp4' AND "
                                    "mode = 'block' AND part = '3' AND metric = 'ppl' AND "
                                    "value = 8.75 AND baseline_value = 8.25 AND delta = 0.5"),
                     1);
    assert_int_equal(count_where(s, "SELECT count(*) FROM v_sensitivity WHERE metric = "
                                    "'kl_mean' AND baseline_value IS NULL"),
                     1);
    /* v_sqnr splits sqnr_db.<block>.<kind> into a block number and a linear kind. */
    const qc_metric sq[] = {
        {"sqnr_db.3.up", 21.5, -1}, {"sqnr_db.12.gate", 19.25, -1}, {"sqnr_db.lm_head", 30.0, -1}};
    ok(qc_store_batch_results(bt, jev, 1, true, sq, 3, &err), &err);
    ok(qc_store_flush(s, bt, NULL, &err), &err);
    assert_int_equal(count_where(s, "SELECT count(*) FROM v_sqnr"), 3);
    assert_int_equal(count_where(s, "SELECT count(*) FROM v_sqnr WHERE block = 3 AND kind = 'up' "
                                    "AND sqnr_db = 21.5 AND part = '3' AND format = 'nvfp4'"),
                     1);
    assert_int_equal(count_where(s, "SELECT count(*) FROM v_sqnr WHERE block = 12 AND "
                                    "kind = 'gate' AND sqnr_db = 19.25"),
                     1);
    assert_int_equal(count_where(s, "SELECT count(*) FROM v_sqnr WHERE block IS NULL AND "
                                    "kind = 'lm_head'"),
                     1);
    assert_int_equal(count_where(s, "SELECT count(*) FROM v_sqnr WHERE block = 12"), 1);
    struct collected got = {0, 0};
    ok(qc_store_results(s, "sens", collect, &got, &err), &err);
    assert_int_equal(got.rows, 6); /* baseline ppl; eval ppl, kl_mean and three SQNRs */
    assert_true(got.ppl == 8.75);
    struct collected first = {0, 0};
    assert_int_equal(qc_store_results(s, "sens", stop_at_first, &first, &err), QS_ECANCELLED);
    assert_int_equal(first.rows, 1);
    assert_int_equal(qc_store_results(s, "nope", stop_at_first, &first, &err), QS_ENOTFOUND);
    qc_store_batch_free(bt);
    qc_store_close(s);
}

/* Strings travel inside array literals and COPY rows: every character that means something
 * there must come back as it was written. */
static void test_special_characters_round_trip(void **state) {
    (void)state;
    char ci[1024];
    qc_store *s = fresh_store("st_chars", ci, sizeof ci);
    static const char key[] = "key \"quoted\", {braced}, back\\slash";
    static const char spec[] = "{\"kind\": \"echo\", \"text\": \"a \\\"b\\\" {c}, d\\\\e\"}";
    static const char error[] = "Traceback:\n\tline \"1\", in {x}\r\n\\ end, NULL";
    static const char metric[] = "m,{\"x\"}\\\t\n";
    qc_job_submit jobs[] = {{key, "echo", spec, 0, 0, 0, "NULL", 1, NULL, 0, false, NULL}};
    qc_submit_counts c;
    qs_error err = {0};
    ok(qc_store_submit(s, "chars", "", "g", NULL, jobs, 1, &c, &err), &err);
    qc_store_snapshot snap;
    ok(qc_store_load(s, 0, &snap, &err), &err);
    assert_int_equal(snap.n_jobs, 1);
    assert_string_equal(snap.jobs[0].job_key, key);
    assert_string_equal(snap.jobs[0].model_key, "NULL"); /* the string, not a null */
    int64_t id = snap.jobs[0].id;
    qc_store_snapshot_free(&snap);

    qc_store_batch *bt = qc_store_batch_new();
    ok(qc_store_batch_worker_seen(bt, "NULL", "host \"h\"", 1, "[]", 1, &err), &err);
    ok(qc_store_batch_attempt_started(bt, id, 1, "NULL", 30, &err), &err);
    ok(qc_store_batch_attempt_ended(bt, id, 1, QC_ATTEMPT_FAILED, error, &err), &err);
    ok(qc_store_batch_job_state(bt, id, QC_JOB_FAILED, 1, 0, error, &err), &err);
    const qc_metric m[] = {{metric, 2.0, -1}};
    ok(qc_store_batch_results(bt, id, 1, true, m, 1, &err), &err);
    ok(qc_store_flush(s, bt, NULL, &err), &err);

    PGconn *pc = qc_store_pgconn(s);
    const char *sql = "SELECT (SELECT error FROM attempts), (SELECT last_error FROM jobs), "
                      "(SELECT worker FROM attempts), (SELECT host FROM workers), "
                      "(SELECT name FROM results), (SELECT spec ->> 'text' FROM jobs)";
    PGresult *r = PQexec(pc, sql);
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    assert_string_equal(PQgetvalue(r, 0, 0), error);
    assert_string_equal(PQgetvalue(r, 0, 1), error);
    assert_false(PQgetisnull(r, 0, 2));
    assert_string_equal(PQgetvalue(r, 0, 2), "NULL");
    assert_string_equal(PQgetvalue(r, 0, 3), "host \"h\"");
    assert_string_equal(PQgetvalue(r, 0, 4), metric);
    assert_string_equal(PQgetvalue(r, 0, 5), "a \"b\" {c}, d\\e");
    PQclear(r);
    qc_store_batch_free(bt);
    qc_store_close(s);
}

/* The database is UTF8: text that is not UTF-8 is refused when queued (one bad string would
 * fail every retry of the whole batch), and real UTF-8 is stored as written. Byte sequences
 * from RFC 3629 section 3 / Unicode 15 Table 3-7 (well-formed UTF-8 byte sequences). */
static void test_text_that_is_not_utf8_is_refused_when_queued(void **state) {
    (void)state;
    char ci[1024];
    qc_store *s = fresh_store("st_utf8", ci, sizeof ci);
    qc_job_submit jobs[] = {{"u", "echo", "{\"kind\": \"echo\"}", 0, 0, 0, "", 1, NULL, 0, false, NULL}};
    qc_submit_counts c;
    qs_error err = {0};
    ok(qc_store_submit(s, "utf8", "", "g", NULL, jobs, 1, &c, &err), &err);
    int64_t id = job_id(s, "u");
    static const char *const bad[] = {
        "overlong \xC0\xAF",        /* '/' in two bytes */
        "overlong \xE0\x80\xAF",    /* '/' in three bytes */
        "surrogate \xED\xA0\x80",   /* U+D800 */
        "too big \xF4\x90\x80\x80", /* U+110000 */
        "cut short \xE2\x82",       /* first two bytes of U+20AC */
        "lone continuation \x80",   "invalid lead \xFF",
    };
    qc_store_batch *bt = qc_store_batch_new();
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(qc_store_batch_attempt_ended(bt, id, 1, QC_ATTEMPT_FAILED, bad[i], &err),
                         QS_EINVAL);
        assert_non_null(strstr(err.msg, "UTF-8"));
    }
    const qc_metric m[] = {{"kl\xFF", 1.0, -1}};
    assert_int_equal(qc_store_batch_results(bt, id, 1, true, m, 1, &err), QS_EINVAL);
    assert_int_equal(qc_store_batch_size(bt), 0);
    qc_job_submit bad_key[] = {{"k\xC0\xAF", "echo", "{}", 0, 0, 0, "", 1, NULL, 0, false, NULL}};
    assert_int_equal(qc_store_submit(s, "utf8", "", "g", NULL, bad_key, 1, &c, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "job_key"));

    /* U+00B5, U+20AC, U+FFFD, U+1F600, U+10FFFF: 2, 3, 3, 4 and 4 bytes. */
    static const char good[] =
        "\xC2\xB5 \xE2\x82\xAC \xEF\xBF\xBD \xF0\x9F\x98\x80 \xF4\x8F\xBF\xBF";
    ok(qc_store_batch_attempt_started(bt, id, 1, "w\xC2\xB5", 30, &err), &err);
    ok(qc_store_batch_attempt_ended(bt, id, 1, QC_ATTEMPT_FAILED, good, &err), &err);
    ok(qc_store_flush(s, bt, NULL, &err), &err);
    PGresult *r = PQexec(qc_store_pgconn(s), "SELECT error, length(error) FROM attempts");
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    assert_string_equal(PQgetvalue(r, 0, 0), good);
    assert_string_equal(PQgetvalue(r, 0, 1), "9"); /* 5 characters and 4 spaces */
    PQclear(r);
    qc_store_batch_free(bt);
    qc_store_close(s);
}

/* ---- cancel ----------------------------------------------------------------------------- */

static void test_cancel_requests_reach_the_coordinator_once(void **state) {
    (void)state;
    char ci[1024];
    qc_store *s = fresh_store("st_cancel", ci, sizeof ci);
    char a[512], b[512], d[512];
    eval_spec(a, sizeof a, "m1", "nvfp4", "layer", "0.q");
    eval_spec(b, sizeof b, "m1", "nvfp4", "layer", "0.k");
    eval_spec(d, sizeof d, "m1", "nvfp4", "layer", "0.v");
    qc_job_submit e1[] = {{"a", "eval", a, 0, 0, 0, "", 3, NULL, 0, false, NULL},
                          {"b", "eval", b, 0, 0, 0, "", 3, NULL, 0, false, NULL}};
    qc_job_submit e2[] = {{"d", "eval", d, 0, 0, 0, "", 3, NULL, 0, false, NULL}};
    qc_submit_counts c;
    qs_error err = {0};
    ok(qc_store_submit(s, "e1", "", "g", NULL, e1, 2, &c, &err), &err);
    ok(qc_store_submit(s, "e2", "", "g", NULL, e2, 1, &c, &err), &err);

    /* `qsweep cancel` runs in another process: another store. */
    qc_store *cli = NULL;
    ok(qc_store_open(ci, "cancel", &cli, &err), &err);
    ok(qc_store_request_cancel(cli, NULL, "e1", "wrong grid", &err), &err);
    ok(qc_store_request_cancel(cli, "d", NULL, NULL, &err), &err);
    assert_int_equal(qc_store_request_cancel(cli, "zzz", NULL, NULL, &err), QS_ENOTFOUND);
    assert_non_null(strstr(err.msg, "zzz"));
    assert_int_equal(qc_store_request_cancel(cli, "a", "e1", NULL, &err), QS_EINVAL);
    qc_store_close(cli);

    int64_t *ids;
    size_t n;
    int64_t upto;
    ok(qc_store_poll_cancels(s, &ids, &n, &upto, &err), &err);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], job_id(s, "a"));
    assert_int_equal(ids[1], job_id(s, "b"));
    assert_int_equal(ids[2], job_id(s, "d"));
    assert_int_equal(upto, 2);
    qc_store_batch *bt = qc_store_batch_new();
    for (size_t i = 0; i < n; i++)
        ok(qc_store_batch_job_state(bt, ids[i], QC_JOB_CANCELLED, 0, 0, "cancelled", &err), &err);
    ok(qc_store_batch_cancels_handled(bt, upto, &err), &err);
    ok(qc_store_flush(s, bt, NULL, &err), &err);
    free(ids);
    ok(qc_store_poll_cancels(s, &ids, &n, &upto, &err), &err);
    assert_int_equal(n, 0);
    assert_int_equal(upto, 0);
    free(ids);
    assert_int_equal(count_where(s, "SELECT count(*) FROM jobs WHERE state = 'cancelled'"), 3);
    qc_store_batch_free(bt);
    qc_store_close(s);
}

/* Breaker #19: cancelling a job or an experiment with nothing unfinished stores the request
 * as handled (no coordinator may come to mark it); an unfinished one stays open. */
static void test_cancel_with_nothing_left_is_handled_at_once(void **state) {
    (void)state;
    char ci[1024];
    qc_store *s = fresh_store("st_cancel_finished", ci, sizeof ci);
    char a[512], b[512];
    eval_spec(a, sizeof a, "m1", "nvfp4", "layer", "0.q");
    eval_spec(b, sizeof b, "m1", "nvfp4", "layer", "0.k");
    qc_job_submit done[] = {{"a", "eval", a, 0, 0, 0, "", 3, NULL, 0, false, NULL}};
    qc_job_submit open[] = {{"b", "eval", b, 0, 0, 0, "", 3, NULL, 0, false, NULL}};
    qc_submit_counts c;
    qs_error err = {0};
    ok(qc_store_submit(s, "done", "", "g", NULL, done, 1, &c, &err), &err);
    ok(qc_store_submit(s, "open", "", "g", NULL, open, 1, &c, &err), &err);
    qc_store_batch *bt = qc_store_batch_new();
    ok(qc_store_batch_job_state(bt, job_id(s, "a"), QC_JOB_SUCCEEDED, 1, 0, NULL, &err), &err);
    ok(qc_store_flush(s, bt, NULL, &err), &err);
    qc_store_batch_free(bt);

    ok(qc_store_request_cancel(s, NULL, "done", NULL, &err), &err);
    ok(qc_store_request_cancel(s, "a", NULL, NULL, &err), &err);
    assert_int_equal(count_where(s, "SELECT count(*) FROM cancel_requests"), 2);
    assert_int_equal(
        count_where(s, "SELECT count(*) FROM cancel_requests WHERE handled_at IS NULL"), 0);
    int64_t *ids;
    size_t n;
    int64_t upto;
    ok(qc_store_poll_cancels(s, &ids, &n, &upto, &err), &err);
    assert_int_equal(n, 0);
    assert_int_equal(upto, 0);
    free(ids);

    ok(qc_store_request_cancel(s, NULL, "open", NULL, &err), &err);
    assert_int_equal(
        count_where(s, "SELECT count(*) FROM cancel_requests WHERE handled_at IS NULL"), 1);
    ok(qc_store_poll_cancels(s, &ids, &n, &upto, &err), &err);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], job_id(s, "b"));
    free(ids);
    qc_store_close(s);
}

/* Breaker #8: failed and cancelled jobs of an experiment go back to pending with no attempts
 * used; succeeded ones stay; open cancel requests are closed; refused while a coordinator
 * runs (it would not see the rows). */
static void test_requeue_resets_failed_and_cancelled_jobs(void **state) {
    (void)state;
    char ci[1024];
    qc_store *s = fresh_store("st_requeue", ci, sizeof ci);
    char a[512], b[512], d[512];
    eval_spec(a, sizeof a, "m1", "nvfp4", "layer", "0.q");
    eval_spec(b, sizeof b, "m1", "nvfp4", "layer", "0.k");
    eval_spec(d, sizeof d, "m1", "nvfp4", "layer", "0.v");
    qc_job_submit jobs[] = {{"ok", "eval", a, 0, 0, 0, "", 3, NULL, 0, false, NULL},
                            {"bad", "eval", b, 0, 0, 0, "", 3, NULL, 0, false, NULL},
                            {"stopped", "eval", d, 0, 0, 0, "", 3, NULL, 0, false, NULL}};
    qc_submit_counts c;
    qs_error err = {0};
    ok(qc_store_submit(s, "rq", "", "g", NULL, jobs, 3, &c, &err), &err);
    qc_store_batch *bt = qc_store_batch_new();
    ok(qc_store_batch_job_state(bt, job_id(s, "ok"), QC_JOB_SUCCEEDED, 1, 0, NULL, &err), &err);
    ok(qc_store_batch_job_state(bt, job_id(s, "bad"), QC_JOB_FAILED, 3, 0, "boom", &err), &err);
    ok(qc_store_flush(s, bt, NULL, &err), &err);
    qc_store_batch_free(bt);
    ok(qc_store_request_cancel(s, "stopped", NULL, NULL, &err), &err); /* open: pending */
    bt = qc_store_batch_new();
    ok(qc_store_batch_job_state(bt, job_id(s, "stopped"), QC_JOB_CANCELLED, 0, 0, "cancelled",
                                &err),
       &err);
    ok(qc_store_flush(s, bt, NULL, &err), &err);
    qc_store_batch_free(bt);

    size_t n = 99;
    qc_store *coord = NULL;
    ok(qc_store_open(ci, "coordinator", &coord, &err), &err);
    ok(qc_store_lock_coordinator(coord, &err), &err);
    assert_int_equal(qc_store_requeue(s, "rq", &n, &err), QS_ESTATE);
    printf("running: %s\n", err.msg);
    assert_non_null(strstr(err.msg, "a coordinator is running"));
    assert_int_equal(n, 0);
    assert_int_equal(count_where(s, "SELECT count(*) FROM jobs WHERE state = 'pending'"), 0);
    qc_store_close(coord);
    const char *locks = "SELECT count(*) FROM pg_locks WHERE relation = "
                        "'qsweep_coordinator_lock'::regclass";
    for (int t = 0; t < 500 && count_where(s, locks) > 0; t++) /* 50 s: only a hang */
        nanosleep(&(struct timespec){0, 100000000L}, NULL);
    if (count_where(s, locks) > 0)
        fail_msg("gave up after 50 s waiting for the closed store's coordinator lock to go");

    assert_int_equal(qc_store_requeue(s, "nosuch", &n, &err), QS_ENOTFOUND);
    assert_non_null(strstr(err.msg, "'nosuch'"));
    ok(qc_store_requeue(s, "rq", &n, &err), &err);
    assert_int_equal(n, 2);
    assert_int_equal(count_where(s, "SELECT count(*) FROM jobs WHERE state = 'pending' AND "
                                    "attempts_used = 0 AND last_error IS NULL AND not_before IS "
                                    "NULL AND job_key IN ('bad', 'stopped')"),
                     2);
    assert_int_equal(
        count_where(s, "SELECT count(*) FROM jobs WHERE job_key = 'ok' AND state = 'succeeded'"),
        1);
    assert_int_equal(
        count_where(s, "SELECT count(*) FROM cancel_requests WHERE handled_at IS NULL"), 0);
    /* The coordinator's next start loads them as pending. */
    qc_store_snapshot snap;
    ok(qc_store_load(s, 0, &snap, &err), &err);
    assert_int_equal(snap.n_jobs, 2);
    qc_store_snapshot_free(&snap);
    ok(qc_store_requeue(s, "rq", &n, &err), &err);
    assert_int_equal(n, 0);
    qc_store_close(s);
}

/* ---- concurrency ------------------------------------------------------------------------ */

/* Two `qsweep submit` of the same grid at the same moment, each with its own connection,
 * on a database neither has migrated yet. */
struct racer {
    const char *conninfo;
    qc_submit_counts counts;
    qs_status st;
    qs_error err;
};

static void *race_submit(void *arg) {
    struct racer *r = arg;
    char specs[40][64], keys[40][16];
    qc_job_submit jobs[40];
    for (int i = 0; i < 40; i++) {
        snprintf(keys[i], sizeof keys[i], "race-%d", i);
        snprintf(specs[i], sizeof specs[i], "{\"kind\": \"sleep\", \"n\": %d}", i);
        jobs[i] = (qc_job_submit){keys[i], "sleep", specs[i], 0, 0, 0, "", 2, NULL, 0, false, NULL};
    }
    qc_store *s = NULL;
    r->st = qc_store_open(r->conninfo, "racer", &s, &r->err);
    if (!r->st)
        r->st = qc_store_submit(s, "race", "", "grid: race", NULL, jobs, 40, &r->counts, &r->err);
    qc_store_close(s);
    return NULL;
}

static void test_concurrent_submits_of_one_grid_store_it_once(void **state) {
    (void)state;
    char ci[1024];
    pgtest_fresh_db(srv, "st_race", ci, sizeof ci); /* no schema yet: both migrate */
    struct racer a = {.conninfo = ci}, b = {.conninfo = ci};
    pthread_t ta, tb;
    assert_int_equal(pthread_create(&ta, NULL, race_submit, &a), 0);
    assert_int_equal(pthread_create(&tb, NULL, race_submit, &b), 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    ok(a.st, &a.err);
    ok(b.st, &b.err);
    assert_int_equal(a.counts.jobs_new + b.counts.jobs_new, 40);
    assert_int_equal(a.counts.reused_pending + b.counts.reused_pending, 40);
    assert_true(a.counts.experiment_new != b.counts.experiment_new);
    qc_store *s = NULL;
    qs_error err = {0};
    ok(qc_store_open(ci, "check", &s, &err), &err);
    assert_int_equal(count_where(s, "SELECT count(*) FROM jobs"), 40);
    assert_int_equal(count_where(s, "SELECT count(*) FROM experiment_jobs"), 40);
    /* every embedded migration applied exactly once (versions have gaps: 009 then 020) */
    assert_int_equal(count_where(s, "SELECT count(*) FROM schema_migrations"),
                     (long)qc_schema_migrations_count);
    qc_store_close(s);
}

/* The connection says who it is (application_name) and bounds reconnect attempts
 * (connect_timeout), unless the conninfo chose its own timeout. */
static const char *conn_option(PGconn *c, const char *keyword, char *out, size_t cap) {
    PQconninfoOption *opts = PQconninfo(c);
    out[0] = '\0';
    for (PQconninfoOption *o = opts; o && o->keyword; o++)
        if (!strcmp(o->keyword, keyword) && o->val) snprintf(out, cap, "%s", o->val);
    PQconninfoFree(opts);
    return out;
}

static void test_connection_names_itself_and_bounds_connect_time(void **state) {
    (void)state;
    char ci[1024];
    qc_store *s = fresh_store("st_conn", ci, sizeof ci);
    char v[128];
    assert_string_equal(conn_option(qc_store_pgconn(s), "connect_timeout", v, sizeof v), "10");
    assert_non_null(
        strstr(conn_option(qc_store_pgconn(s), "application_name", v, sizeof v), "qsweep test "));
    qc_store_close(s);
    char own[1100];
    snprintf(own, sizeof own, "%s connect_timeout=3", ci);
    qs_error err = {0};
    ok(qc_store_open(own, "test", &s, &err), &err);
    assert_string_equal(conn_option(qc_store_pgconn(s), "connect_timeout", v, sizeof v), "3");
    qc_store_close(s);
    /* A server that is not there: the error names the conninfo. */
    assert_int_equal(
        qc_store_open("host=/nonexistent-qsweep-dir port=5432 dbname=x", "test", &s, &err), QS_EDB);
    assert_non_null(strstr(err.msg, "/nonexistent-qsweep-dir"));
}

/* ---- coordinator lock and reconnect -------------------------------------------------------- */

static void test_second_coordinator_is_refused(void **state) {
    (void)state;
    char ci[1024];
    qc_store *first = fresh_store("st_lock", ci, sizeof ci);
    qs_error err = {0};
    ok(qc_store_lock_coordinator(first, &err), &err);
    qc_store *second = NULL;
    ok(qc_store_open(ci, "coordinator", &second, &err), &err);
    assert_int_equal(qc_store_lock_coordinator(second, &err), QS_ESTATE);
    assert_non_null(strstr(err.msg, "another coordinator"));
    assert_non_null(strstr(err.msg, "qsweep test")); /* names the holder's application_name */
    /* The lock is per database: another database is free. */
    char other[1024];
    qc_store *elsewhere = fresh_store("st_lock_other", other, sizeof other);
    ok(qc_store_lock_coordinator(elsewhere, &err), &err);
    qc_store_close(elsewhere);
    /* When the first goes away the lock is free. */
    qc_store_close(first);
    ok(qc_store_lock_coordinator(second, &err), &err);
    qc_store_close(second);
}

static void test_reconnect_after_postgres_restarts(void **state) {
    (void)state;
    char ci[1024];
    qc_store *s = fresh_store("st_reconnect", ci, sizeof ci);
    char a[512];
    eval_spec(a, sizeof a, "m1", "nvfp4", "layer", "1.o");
    qc_job_submit jobs[] = {{"a", "eval", a, 0, 0, 0, "", 3, NULL, 0, false, NULL}};
    qc_submit_counts c;
    qs_error err = {0};
    ok(qc_store_submit(s, "e", "", "g", NULL, jobs, 1, &c, &err), &err);
    ok(qc_store_lock_coordinator(s, &err), &err);
    int64_t ja = job_id(s, "a");
    qc_store_batch *bt = qc_store_batch_new();
    const qc_metric m[] = {{"ppl", 5.5, -1}};
    ok(qc_store_batch_results(bt, ja, 1, true, m, 1, &err), &err); /* staging table now exists */
    ok(qc_store_flush(s, bt, NULL, &err), &err);

    ok(qc_pgserver_restart(srv, &err), &err);
    ok(qc_store_batch_attempt_started(bt, ja, 1, "w1", 30, &err), &err);
    ok(qc_store_batch_job_state(bt, ja, QC_JOB_RUNNING, 0, 0, NULL, &err), &err);
    assert_int_equal(qc_store_flush(s, bt, NULL, &err), QS_EDB);
    assert_true(qc_store_connection_lost(s));
    assert_int_equal(qc_store_batch_size(bt), 2); /* kept for the retry */

    /* While the server is down, reconnect fails and says so; then it comes back. */
    ok(qc_pgserver_kill(srv, &err), &err);
    assert_int_equal(qc_store_reconnect(s, &err), QS_EDB);
    assert_true(qc_store_connection_lost(s));
    ok(qc_pgserver_resume(srv, &err), &err);
    ok(qc_store_reconnect(s, &err), &err);
    assert_false(qc_store_connection_lost(s));
    ok(qc_store_flush(s, bt, NULL, &err), &err);
    assert_int_equal(count_where(s, "SELECT count(*) FROM jobs WHERE state = 'running'"), 1);
    /* The lock came back with the connection. */
    qc_store *rival = NULL;
    ok(qc_store_open(ci, "coordinator", &rival, &err), &err);
    assert_int_equal(qc_store_lock_coordinator(rival, &err), QS_ESTATE);
    qc_store_close(rival);
    /* The results staging table and the prepared statements were re-created in the new
       session. */
    const qc_metric m2[] = {{"nll", 1.7, -1}};
    ok(qc_store_batch_results(bt, ja, 1, true, m2, 1, &err), &err);
    ok(qc_store_flush(s, bt, NULL, &err), &err);
    assert_int_equal(count_where(s, "SELECT count(*) FROM results"), 2);
    qc_store_batch_free(bt);
    qc_store_close(s);
}

/* Every connection asks for TCP keepalives and a user timeout, on both ends (libpq keywords;
 * the server's through options), and a coordinator's also for statement, lock and idle
 * transaction timeouts; a conninfo's own values win. */
static void test_connections_bound_silent_peers_and_waits(void **state) {
    (void)state;
    char ci[1024];
    qc_store *s = fresh_store("st_keepalive", ci, sizeof ci);
    char v[256];
    PGconn *c = qc_store_pgconn(s);
    assert_string_equal(conn_option(c, "keepalives", v, sizeof v), "1");
    assert_string_equal(conn_option(c, "keepalives_idle", v, sizeof v), "5");
    assert_string_equal(conn_option(c, "tcp_user_timeout", v, sizeof v), "5000");
    assert_string_equal(conn_option(c, "options", v, sizeof v), QC_STORE_CLIENT_OPTIONS);
    qc_store_close(s);
    qs_error err = {0};
    ok(qc_store_open(ci, "coordinator", &s, &err), &err);
    c = qc_store_pgconn(s);
    assert_string_equal(conn_option(c, "connect_timeout", v, sizeof v), "2");
    assert_non_null(strstr(conn_option(c, "options", v, sizeof v), "lock_timeout=30000"));
    assert_int_equal(count_where(s, "SELECT setting::int FROM pg_settings WHERE name = "
                                    "'lock_timeout'"),
                     30000);
    assert_int_equal(count_where(s, "SELECT setting::int FROM pg_settings WHERE name = "
                                    "'statement_timeout'"),
                     300000);
    qc_store_close(s);
    char own[1100];
    snprintf(own, sizeof own, "%s keepalives_idle=42", ci);
    ok(qc_store_open(own, "coordinator", &s, &err), &err);
    assert_string_equal(conn_option(qc_store_pgconn(s), "keepalives_idle", v, sizeof v), "42");
    qc_store_close(s);
}

/* A coordinator's sessions lost in a way the server does not see (here: libpq closes their
 * sockets while copies of the descriptors keep the connections open, as a partition leaves
 * sessions the server still thinks alive): the lock session still holds the coordinator lock.
 * The reconnect recognises that session as the one it replaced, ends it
 * (pg_terminate_backend) and takes the lock; a live rival's lock is still refused. */
static void test_reconnect_ends_its_own_stale_session_holding_the_lock(void **state) {
    (void)state;
    char ci[1024];
    qc_store *s = fresh_store("st_stale", ci, sizeof ci);
    qc_store_close(s);
    qs_error err = {0};
    ok(qc_store_open(ci, "coordinator-writer", &s, &err), &err);
    ok(qc_store_lock_coordinator(s, &err), &err);
    PGconn *c = qc_store_pgconn(s), *lc = qc_store_lock_pgconn(s);
    assert_non_null(lc);
    int old = PQbackendPID(lc), keep[2];
    PGconn *cut[] = {c, lc};
    for (int k = 0; k < 2; k++) {
        int fd = PQsocket(cut[k]);
        keep[k] = dup(fd); /* the old session stays open through this descriptor */
        assert_true(keep[k] >= 0);
        /* libpq's descriptor now leads to a closed socket pair: a statement fails, a
           Terminate goes nowhere; the server sees nothing */
        int sp[2];
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
        close(sp[1]);
        assert_true(dup2(sp[0], fd) == fd);
        close(sp[0]);
    }
    PQclear(PQexec(c, "SELECT 1"));
    assert_int_equal(PQstatus(c), CONNECTION_BAD);
    ok(qc_store_reconnect(s, &err), &err);
    int now = PQbackendPID(qc_store_pgconn(s));
    assert_int_not_equal(now, old);
    char sql[200];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM pg_stat_activity WHERE pid = %d", old);
    for (int i = 0; i < 1000 && count_where(s, sql) != 0; i++) /* 20 s: only a hang */
        nanosleep(&(struct timespec){0, 20000000L}, NULL);
    if (count_where(s, sql) != 0) fail_msg("gave up after 20 s waiting for (%s) = 0", sql);
    qc_store *rival = NULL;
    ok(qc_store_open(ci, "coordinator", &rival, &err), &err);
    assert_int_equal(qc_store_lock_coordinator(rival, &err), QS_ESTATE);
    qc_store_close(rival);
    close(keep[0]);
    close(keep[1]);
    qc_store_close(s);
}

/* Immediate shutdown (SIGQUIT to the postmaster: its backends quit without a word) between
 * two flushes: the next flush must come back at once as a lost session, not spin or hang in
 * libpq's pipeline (libpq 15 answers a pipeline sent to a dead server with NULL for ever
 * while PQstatus still says CONNECTION_OK), and the batch must survive for the retry. */
static void test_flush_after_an_immediate_shutdown_reports_a_lost_session(void **state) {
    (void)state;
    char ci[1024];
    qc_store *s = fresh_store("st_immediate", ci, sizeof ci);
    char a[512];
    eval_spec(a, sizeof a, "m1", "nvfp4", "layer", "2.q");
    qc_job_submit jobs[] = {{"a", "eval", a, 0, 0, 0, "", 3, NULL, 0, false, NULL}};
    qc_submit_counts c;
    qs_error err = {0};
    ok(qc_store_submit(s, "e", "", "g", NULL, jobs, 1, &c, &err), &err);
    int64_t ja = job_id(s, "a");
    qc_store_batch *bt = qc_store_batch_new();
    ok(qc_store_batch_attempt_started(bt, ja, 1, "w1", 30, &err), &err);
    ok(qc_store_flush(s, bt, NULL, &err), &err); /* the session is prepared and idle */

    pid_t pm = qc_pgserver_pid(srv);
    assert_true(pm > 0);
    assert_int_equal(kill(pm, SIGQUIT), 0);
    for (int i = 0; i < 3000 && qc_pgserver_pid(srv) != 0; i++) /* 60 s: only a hang */
        nanosleep(&(struct timespec){0, 20000000L}, NULL);
    if (qc_pgserver_pid(srv) != 0)
        fail_msg("gave up after 60 s waiting for postmaster %d to quit on SIGQUIT", (int)pm);

    const qc_metric m[] = {{"ppl", 5.5, -1}};
    ok(qc_store_batch_results(bt, ja, 1, true, m, 1, &err), &err);
    ok(qc_store_batch_attempt_ended(bt, ja, 1, QC_ATTEMPT_SUCCEEDED, NULL, &err), &err);
    ok(qc_store_batch_job_state(bt, ja, QC_JOB_SUCCEEDED, 1, 0, NULL, &err), &err);
    assert_int_equal(qc_store_flush(s, bt, NULL, &err), QS_EDB);
    assert_true(qc_store_connection_lost(s));
    assert_int_equal(qc_store_batch_size(bt), 3); /* kept for the retry */

    ok(qc_pgserver_resume(srv, &err), &err);
    ok(qc_store_reconnect(s, &err), &err);
    ok(qc_store_flush(s, bt, NULL, &err), &err);
    assert_int_equal(count_where(s, "SELECT count(*) FROM jobs WHERE state = 'succeeded'"), 1);
    assert_int_equal(count_where(s, "SELECT count(*) FROM results"), 1);
    qc_store_batch_free(bt);
    qc_store_close(s);
}

/* A condition of the server, not of the statement: the database made
 * read-only (what a hot standby answers, SQLSTATE 25006). The flush fails, the store names
 * the condition and reports the session unusable (the coordinator pauses and retries as
 * for a lost connection), the batch is kept, and once the condition is over a reconnect
 * and the same flush store it exactly once. */
static void test_read_only_server_is_a_condition_retried_like_a_lost_session(void **state) {
    (void)state;
    char ci[1024];
    qc_store *s = fresh_store("st_readonly", ci, sizeof ci);
    char a[512];
    eval_spec(a, sizeof a, "m1", "nvfp4", "layer", "3.k");
    qc_job_submit jobs[] = {{"a", "eval", a, 0, 0, 0, "", 3, NULL, 0, false, NULL}};
    qc_submit_counts c;
    qs_error err = {0};
    ok(qc_store_submit(s, "e", "", "g", NULL, jobs, 1, &c, &err), &err);
    int64_t ja = job_id(s, "a");
    assert_null(qc_store_condition(s));

    PGconn *admin = PQconnectdb(qc_pgserver_conninfo(srv));
    assert_int_equal(PQstatus(admin), CONNECTION_OK);
    PQclear(PQexec(admin, "ALTER DATABASE st_readonly SET default_transaction_read_only = on"));
    ok(qc_store_reconnect(s, &err), &err); /* a new session takes the setting */

    qc_store_batch *bt = qc_store_batch_new();
    const qc_metric m[] = {{"ppl", 5.5, -1}, {"kl_mean", 0.25, -1}};
    ok(qc_store_batch_attempt_started(bt, ja, 1, "w1", 30, &err), &err);
    ok(qc_store_batch_results(bt, ja, 1, true, m, 2, &err), &err);
    ok(qc_store_batch_attempt_ended(bt, ja, 1, QC_ATTEMPT_SUCCEEDED, NULL, &err), &err);
    ok(qc_store_batch_job_state(bt, ja, QC_JOB_SUCCEEDED, 1, 0, NULL, &err), &err);
    assert_int_equal(qc_store_flush(s, bt, NULL, &err), QS_EDB);
    assert_true(qc_store_connection_lost(s));
    assert_non_null(qc_store_condition(s));
    assert_non_null(strstr(qc_store_condition(s), "read-only"));
    assert_non_null(strstr(qc_store_condition(s), "25006"));
    assert_non_null(strstr(err.msg, "read-only transaction"));
    assert_int_equal(qc_store_batch_size(bt), 5); /* kept for the retry */

    PQclear(PQexec(admin, "ALTER DATABASE st_readonly RESET default_transaction_read_only"));
    PQfinish(admin);
    ok(qc_store_reconnect(s, &err), &err);
    assert_null(qc_store_condition(s));
    ok(qc_store_flush(s, bt, NULL, &err), &err);
    assert_int_equal(count_where(s, "SELECT count(*) FROM jobs WHERE state = 'succeeded'"), 1);
    assert_int_equal(count_where(s, "SELECT count(*) FROM results"), 2);
    assert_int_equal(count_where(s, "SELECT count(*) FROM attempts"), 1);
    qc_store_batch_free(bt);
    qc_store_close(s);
}

/* Pins and unpins of one experiment in one batch apply in queue order (store.h
 * qc_store_batch_experiment_unpin): pin then unpin leaves none, unpin then pin leaves the new
 * path in place of the stored one; an unpin request is answered once and polled no more. */
static void test_pins_and_unpins_in_one_batch_apply_in_order(void **state) {
    (void)state;
    char ci[1024];
    qc_store *s = fresh_store("st_unpin", ci, sizeof ci);
    qs_error err = {0};
    qc_submit_counts c;
    char a[512], b[512];
    eval_spec(a, sizeof a, "m1", "nvfp4", "layer", "0.q");
    eval_spec(b, sizeof b, "m1", "nvfp4", "layer", "0.k");
    qc_job_submit e1[] = {{"a", "eval", a, 0, 0, 0, "", 3, NULL, 0, false, NULL}};
    qc_job_submit e2[] = {{"b", "eval", b, 0, 0, 0, "", 3, NULL, 0, false, NULL}};
    ok(qc_store_submit(s, "e1", "", "g", NULL, e1, 1, &c, &err), &err);
    ok(qc_store_submit(s, "e2", "", "g", NULL, e2, 1, &c, &err), &err);
    qc_store_batch *bt = qc_store_batch_new();
    ok(qc_store_batch_experiment_pin(bt, 2, "cpu-qsweep-fixed2", &err), &err);
    ok(qc_store_flush(s, bt, NULL, &err), &err);
    qc_store_batch_clear(bt);
    ok(qc_store_batch_experiment_pin(bt, 1, "cpu-qsweep-fixed2", &err), &err);
    ok(qc_store_batch_experiment_unpin(bt, 1, &err), &err);
    ok(qc_store_batch_experiment_unpin(bt, 2, &err), &err);
    ok(qc_store_batch_experiment_pin(bt, 2, "cuda-cc90-auto", &err), &err);
    ok(qc_store_batch_experiment_pin(bt, 2, "cuda-cc100-auto", &err), &err);
    assert_int_equal(qc_store_batch_unpin_answer(bt, 1, "done", "", &err), QS_EINVAL);
    ok(qc_store_flush(s, bt, NULL, &err), &err);
    assert_int_equal(
        count_where(s, "SELECT count(*) FROM experiment_numerics WHERE experiment = 1"), 0);
    assert_int_equal(count_where(s, "SELECT count(*) FROM experiment_numerics WHERE experiment = 2 "
                                    "AND path = 'cuda-cc90-auto'"),
                     1);

    /* `qsweep unpin` against a coordinator holding the lock: the request waits for an answer,
       polled with the experiment's attempts the store holds running on the pinned path */
    pgtest_exec(qc_store_pgconn(s), "INSERT INTO numerics_unpin_requests (experiment) VALUES (2)");
    char sql[256];
    snprintf(sql, sizeof sql,
             "INSERT INTO attempts (job, attempt, worker, numerics_path) VALUES (%lld, 1, 'w1', "
             "'cuda-cc90-auto'), (%lld, 1, 'w2', 'cpu-qsweep-fixed2')",
             (long long)job_id(s, "b"), (long long)job_id(s, "a"));
    pgtest_exec(qc_store_pgconn(s), sql);
    qc_pin_request *rq = NULL;
    size_t n = 0;
    ok(qc_store_poll_pin_requests(s, &rq, &n, &err), &err);
    assert_int_equal(n, 1);
    assert_int_equal(rq[0].experiment, 2);
    assert_string_equal(rq[0].stored_path, "cuda-cc90-auto");
    assert_int_equal(rq[0].running, 1);
    assert_string_equal(rq[0].running_worker, "w1");
    qc_store_batch_clear(bt);
    ok(qc_store_batch_experiment_unpin(bt, 2, &err), &err);
    ok(qc_store_batch_unpin_answer(bt, rq[0].id, "unpinned", "unpinned from cuda-cc90-auto", &err),
       &err);
    free(rq);
    ok(qc_store_flush(s, bt, NULL, &err), &err);
    ok(qc_store_poll_pin_requests(s, &rq, &n, &err), &err);
    assert_int_equal(n, 0);
    free(rq);
    assert_int_equal(count_where(s, "SELECT count(*) FROM numerics_unpin_requests WHERE outcome = "
                                    "'unpinned' AND handled_at IS NOT NULL"),
                     1);
    assert_int_equal(count_where(s, "SELECT count(*) FROM experiment_numerics"), 0);
    qc_store_batch_free(bt);
    qc_store_close(s);
}

/* The pin of experiment name, "" when none. */
static void pin_of(qc_store *s, const char *name, char *out, size_t cap) {
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT coalesce((SELECT n.path FROM experiment_numerics n JOIN experiments e ON "
             "e.id = n.experiment WHERE e.name = '%s'), '')",
             name);
    PGresult *r = PQexec(qc_store_pgconn(s), sql);
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    snprintf(out, cap, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
}

static void assert_pin(qc_store *s, const char *name, const char *want) {
    char got[160];
    pin_of(s, name, got, sizeof got);
    assert_string_equal(got, want);
}

/* `qsweep pin` without a coordinator (store.h qc_store_pin): a pin is written before any job
 * ran, the same pin again changes nothing, another path replaces a pin no result was computed
 * on and says so; a family, `any` or a misspelling, and an unknown experiment, change nothing. */
static void test_pin_without_coordinator_writes_keeps_and_replaces(void **state) {
    (void)state;
    char ci[1024];
    qc_store *s = fresh_store("st_pin", ci, sizeof ci);
    qs_error err = {0};
    qc_submit_counts c;
    char a[512], msg[1024];
    eval_spec(a, sizeof a, "m1", "nvfp4", "layer", "0.q");
    qc_job_submit e1[] = {{"a", "eval", a, 0, 0, 0, "", 3, NULL, 0, false, NULL}};
    ok(qc_store_submit(s, "e1", "", "g", NULL, e1, 1, &c, &err), &err);
    ok(qc_store_pin(s, "e1", "cuda-cc90-auto", 0, msg, sizeof msg, &err), &err);
    assert_string_equal(msg, "pinned to cuda-cc90-auto");
    assert_pin(s, "e1", "cuda-cc90-auto");
    ok(qc_store_pin(s, "e1", "cuda-cc90-auto", 0, msg, sizeof msg, &err), &err);
    assert_string_equal(msg, "already pinned to cuda-cc90-auto");
    ok(qc_store_pin(s, "e1", "cpu-qsweep-fixed2", 0, msg, sizeof msg, &err), &err);
    assert_string_equal(msg, "pinned to cpu-qsweep-fixed2, replacing its pin to cuda-cc90-auto "
                             "(no result of it was computed there)");
    assert_pin(s, "e1", "cpu-qsweep-fixed2");
    const char *bad[] = {"cuda", "cpu", "any", "cuda-cc90-autoo", "", "CPU-qsweep-fixed2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(qc_store_pin(s, "e1", bad[i], 0, msg, sizeof msg, &err), QS_EINVAL);
        if (!strstr(err.msg, "is no numerics path a worker announces"))
            fail_msg("pin '%s': %s", bad[i], err.msg);
    }
    assert_int_equal(qc_store_pin(s, "nope", "cpu-qsweep-fixed2", 0, msg, sizeof msg, &err),
                     QS_ENOTFOUND);
    assert_non_null(strstr(err.msg, "no experiment named 'nope'"));
    assert_pin(s, "e1", "cpu-qsweep-fixed2");
    assert_int_equal(count_where(s, "SELECT count(*) FROM numerics_unpin_requests"), 0);
    qc_store_close(s);
}

/* A pin that would mix paths in one experiment, or strand its jobs, is refused naming the
 * jobs, paths and workers, and nothing changes (store.h qc_store_pin_conflict): final results
 * from an attempt on another path; an attempt running on another path; a grid whose numerics
 * the path does not meet, or `any`. Results on the pinned path itself are no conflict. */
static void test_pin_refuses_to_mix_paths(void **state) {
    (void)state;
    char ci[1024];
    qc_store *s = fresh_store("st_pin_mix", ci, sizeof ci);
    qs_error err = {0};
    qc_submit_counts c;
    char a[512], b[512], g[640], h[640], msg[1024], sql[512];
    eval_spec(a, sizeof a, "m1", "nvfp4", "layer", "0.q");
    eval_spec(b, sizeof b, "m1", "nvfp4", "layer", "0.k");
    eval_spec(g, sizeof g, "m1", "nvfp4", "layer", "0.v");
    eval_spec(h, sizeof h, "m1", "nvfp4", "layer", "0.o");
    snprintf(g + strlen(g) - 1, sizeof g - strlen(g) + 1, ", \"numerics\": \"cuda\"}");
    snprintf(h + strlen(h) - 1, sizeof h - strlen(h) + 1, ", \"numerics\": \"any\"}");
    qc_job_submit e1[] = {{"a", "eval", a, 0, 0, 0, "", 3, NULL, 0, false, NULL}};
    qc_job_submit e2[] = {{"b", "eval", b, 0, 0, 0, "", 3, NULL, 0, false, NULL}};
    qc_job_submit e3[] = {{"g", "eval", g, 0, 0, 0, "", 3, NULL, 0, false, NULL}};
    qc_job_submit e4[] = {{"h", "eval", h, 0, 0, 0, "", 3, NULL, 0, false, NULL}};
    ok(qc_store_submit(s, "e1", "", "g", NULL, e1, 1, &c, &err), &err);
    ok(qc_store_submit(s, "e2", "", "g", NULL, e2, 1, &c, &err), &err);
    ok(qc_store_submit(s, "e3", "", "g", NULL, e3, 1, &c, &err), &err);
    ok(qc_store_submit(s, "e4", "", "g", NULL, e4, 1, &c, &err), &err);
    long ja = job_id(s, "a"), jb = job_id(s, "b");
    snprintf(sql, sizeof sql,
             "INSERT INTO attempts (job, attempt, worker, numerics_path, outcome) VALUES "
             "(%ld, 1, 'cpu-a', 'cpu-qsweep-fixed2', 'succeeded'), "
             "(%ld, 1, 'gpu-1', 'cuda-cc90-auto', 'running')",
             ja, jb);
    pgtest_exec(qc_store_pgconn(s), sql);
    snprintf(sql, sizeof sql,
             "INSERT INTO results (job, attempt, name, value, final) VALUES (%ld, 1, 'ppl', 9.5, "
             "true)",
             ja);
    pgtest_exec(qc_store_pgconn(s), sql);
    ok(qc_store_pin(s, "e1", "cpu-qsweep-fixed2", 0, msg, sizeof msg, &err), &err);

    assert_int_equal(qc_store_pin(s, "e1", "cuda-cc90-auto", 0, msg, sizeof msg, &err),
                     QS_ESTATE);
    snprintf(sql, sizeof sql,
             "pin: experiment 'e1': 1 job(s) of it have results computed on another path, "
             "cpu-qsweep-fixed2 (job %ld, worker(s) cpu-a), and pinning it to cuda-cc90-auto "
             "would mix two paths in one experiment; submit the grid as a new experiment with "
             "numerics: cuda-cc90-auto to measure it there",
             ja);
    assert_string_equal(err.msg, sql);
    assert_pin(s, "e1", "cpu-qsweep-fixed2");

    assert_int_equal(qc_store_pin(s, "e2", "cpu-qsweep-fixed2", 0, msg, sizeof msg, &err),
                     QS_ESTATE);
    snprintf(sql, sizeof sql,
             "pin: experiment 'e2': 1 job(s) of it run on another path, cuda-cc90-auto (job %ld, "
             "worker(s) gpu-1); pin once they have ended (qsweep status) or cancel them (an "
             "attempt left marked running by a coordinator that stopped ends when a coordinator "
             "starts and its worker does not re-attach)",
             jb);
    assert_string_equal(err.msg, sql);
    assert_pin(s, "e2", "");
    ok(qc_store_pin(s, "e2", "cuda-cc90-auto", 0, msg, sizeof msg, &err), &err);

    assert_int_equal(qc_store_pin(s, "e3", "cpu-qsweep-fixed2", 0, msg, sizeof msg, &err),
                     QS_ESTATE);
    assert_non_null(strstr(err.msg, "its grid asks for numerics: cuda, which cpu-qsweep-fixed2 "
                                     "is not on"));
    ok(qc_store_pin(s, "e3", "cuda-cc100-emulated", 0, msg, sizeof msg, &err), &err);
    assert_int_equal(qc_store_pin(s, "e4", "cuda-cc90-auto", 0, msg, sizeof msg, &err),
                     QS_ESTATE);
    assert_non_null(strstr(err.msg, "its grid asks for numerics: any, which follows no pin"));
    assert_pin(s, "e4", "");
    qc_store_close(s);
}

/* With a coordinator holding the lock, `qsweep pin` is a request carrying the path, polled
 * with the stored pin, and its answers (pinned, unchanged) are accepted. */
static void test_pin_with_a_coordinator_is_a_request(void **state) {
    (void)state;
    char ci[1024];
    qc_store *s = fresh_store("st_pin_req", ci, sizeof ci);
    qs_error err = {0};
    qc_submit_counts c;
    char a[512], msg[1024];
    eval_spec(a, sizeof a, "m1", "nvfp4", "layer", "0.q");
    qc_job_submit e1[] = {{"a", "eval", a, 0, 0, 0, "", 3, NULL, 0, false, NULL}};
    ok(qc_store_submit(s, "e1", "", "g", NULL, e1, 1, &c, &err), &err);
    ok(qc_store_pin(s, "e1", "cpu-qsweep-fixed2", 0, msg, sizeof msg, &err), &err);
    qc_store *coord = NULL;
    ok(qc_store_open(ci, "coordinator", &coord, &err), &err);
    ok(qc_store_lock_coordinator(coord, &err), &err);
    assert_int_equal(qc_store_pin(s, "e1", "cuda-cc90-auto", 0, msg, sizeof msg, &err),
                     QS_ESTATE);
    assert_non_null(strstr(err.msg, "the coordinator has not answered in 0 s; request 1 stays "
                                    "queued"));
    assert_pin(s, "e1", "cpu-qsweep-fixed2");
    qc_pin_request *rq = NULL;
    size_t n = 0;
    ok(qc_store_poll_pin_requests(coord, &rq, &n, &err), &err);
    assert_int_equal(n, 1);
    assert_int_equal(rq[0].experiment, 1);
    assert_string_equal(rq[0].path, "cuda-cc90-auto");
    assert_string_equal(rq[0].stored_path, "cpu-qsweep-fixed2");
    qc_store_batch *bt = qc_store_batch_new();
    ok(qc_store_batch_experiment_unpin(bt, 1, &err), &err);
    ok(qc_store_batch_experiment_pin(bt, 1, "cuda-cc90-auto", &err), &err);
    ok(qc_store_batch_unpin_answer(bt, rq[0].id, "pinned", "pinned to cuda-cc90-auto", &err),
       &err);
    free(rq);
    ok(qc_store_flush(coord, bt, NULL, &err), &err);
    assert_pin(s, "e1", "cuda-cc90-auto");
    assert_int_equal(count_where(s, "SELECT count(*) FROM numerics_unpin_requests WHERE outcome "
                                    "= 'pinned' AND path = 'cuda-cc90-auto'"),
                     1);
    ok(qc_store_poll_pin_requests(coord, &rq, &n, &err), &err);
    assert_int_equal(n, 0);
    free(rq);
    qc_store_batch_free(bt);
    qc_store_close(coord);
    qc_store_close(s);
}

/* A request left queued by a coordinator that stopped before answering it is superseded by a
 * pin or unpin made without a coordinator: the next coordinator would otherwise apply the older
 * request over the newer change. The request is answered refused, naming what superseded it. */
static void test_pin_without_coordinator_supersedes_a_queued_request(void **state) {
    (void)state;
    char ci[1024];
    qc_store *s = fresh_store("st_pin_stale", ci, sizeof ci);
    qs_error err = {0};
    qc_submit_counts c;
    char a[512], b[512], msg[1024];
    eval_spec(a, sizeof a, "m1", "nvfp4", "layer", "0.q");
    eval_spec(b, sizeof b, "m1", "nvfp4", "layer", "0.k");
    qc_job_submit e1[] = {{"a", "eval", a, 0, 0, 0, "", 3, NULL, 0, false, NULL}};
    qc_job_submit e2[] = {{"b", "eval", b, 0, 0, 0, "", 3, NULL, 0, false, NULL}};
    ok(qc_store_submit(s, "e1", "", "g", NULL, e1, 1, &c, &err), &err);
    ok(qc_store_submit(s, "e2", "", "g", NULL, e2, 1, &c, &err), &err);
    ok(qc_store_pin(s, "e2", "cpu-qsweep-fixed2", 0, msg, sizeof msg, &err), &err);
    qc_store *coord = NULL;
    ok(qc_store_open(ci, "coordinator", &coord, &err), &err);
    ok(qc_store_lock_coordinator(coord, &err), &err);
    assert_int_equal(qc_store_pin(s, "e1", "cuda-cc90-auto", 0, msg, sizeof msg, &err), QS_ESTATE);
    assert_int_equal(qc_store_unpin(s, "e2", 0, msg, sizeof msg, &err), QS_ESTATE);
    qc_store_close(coord); /* the coordinator stops with both requests queued */
    ok(qc_store_pin(s, "e1", "cpu-qsweep-fixed2", 0, msg, sizeof msg, &err), &err);
    assert_string_equal(msg, "pinned to cpu-qsweep-fixed2");
    ok(qc_store_pin(s, "e2", "cpu-qsweep-fixed2", 0, msg, sizeof msg, &err), &err);
    assert_string_equal(msg, "already pinned to cpu-qsweep-fixed2");
    ok(qc_store_open(ci, "coordinator", &coord, &err), &err);
    ok(qc_store_lock_coordinator(coord, &err), &err);
    qc_pin_request *rq = NULL;
    size_t n = 1;
    ok(qc_store_poll_pin_requests(coord, &rq, &n, &err), &err);
    assert_int_equal(n, 0);
    free(rq);
    assert_int_equal(count_where(s, "SELECT count(*) FROM numerics_unpin_requests WHERE outcome "
                                    "= 'refused' AND message LIKE 'superseded by %'"),
                     2);
    assert_pin(s, "e1", "cpu-qsweep-fixed2");
    assert_pin(s, "e2", "cpu-qsweep-fixed2");
    qc_store_close(coord);
    qc_store_close(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_submit_twice_adds_nothing),
        cmocka_unit_test(test_submit_pinned_pins_in_its_transaction),
        cmocka_unit_test(test_same_name_with_other_jobs_is_refused),
        cmocka_unit_test(test_job_shared_by_two_experiments_is_linked_not_copied),
        cmocka_unit_test(test_bad_submissions_write_nothing),
        cmocka_unit_test(test_batched_transitions_and_rebuild),
        cmocka_unit_test(test_results_are_stored_once),
        cmocka_unit_test(test_batch_written_in_two_shares),
        cmocka_unit_test(test_results_need_their_job_and_duplicates_in_a_batch_land_once),
        cmocka_unit_test(test_sensitivity_view_joins_baseline_and_results_reader),
        cmocka_unit_test(test_special_characters_round_trip),
        cmocka_unit_test(test_text_that_is_not_utf8_is_refused_when_queued),
        cmocka_unit_test(test_cancel_requests_reach_the_coordinator_once),
        cmocka_unit_test(test_cancel_with_nothing_left_is_handled_at_once),
        cmocka_unit_test(test_pins_and_unpins_in_one_batch_apply_in_order),
        cmocka_unit_test(test_pin_without_coordinator_writes_keeps_and_replaces),
        cmocka_unit_test(test_pin_refuses_to_mix_paths),
        cmocka_unit_test(test_pin_with_a_coordinator_is_a_request),
        cmocka_unit_test(test_pin_without_coordinator_supersedes_a_queued_request),
        cmocka_unit_test(test_requeue_resets_failed_and_cancelled_jobs),
        cmocka_unit_test(test_concurrent_submits_of_one_grid_store_it_once),
        cmocka_unit_test(test_connection_names_itself_and_bounds_connect_time),
        cmocka_unit_test(test_second_coordinator_is_refused),
        cmocka_unit_test(test_reconnect_after_postgres_restarts),
        cmocka_unit_test(test_connections_bound_silent_peers_and_waits),
        cmocka_unit_test(test_reconnect_ends_its_own_stale_session_holding_the_lock),
        cmocka_unit_test(test_flush_after_an_immediate_shutdown_reports_a_lost_session),
        cmocka_unit_test(test_read_only_server_is_a_condition_retried_like_a_lost_session),
    };
    return cmocka_run_group_tests(tests, pgtest_setup, pgtest_teardown);
}
