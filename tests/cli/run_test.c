/* End to end: the tiny grid (experiments/tiny.yaml) through the real `qsweep` binary, real
 * PostgreSQL clusters, real coordinator and worker processes over ZeroMQ:
 *   - `qsweep run` with 2 workers on its own private cluster finishes every job, and the
 *     numbers are in the database;
 *   - submitting the same grid again adds 0 jobs;
 *   - a run interrupted mid-way and started again runs only the unfinished jobs;
 *   - bad input is refused before any job is queued (syntax error at file:line:column,
 *     missing model, unknown format, tokens beyond the vocabulary), with exit code 2. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <libpq-fe.h>

#include "fixtures.h"
#include "pgserver.h"

#define TINY QSWEEP_SOURCE_DIR "/experiments/tiny.yaml"
#define TINY_JOBS 29 /* 1 baseline + 2 formats x 2 quantize x 7 components */

/* Runs the qsweep binary under test (see fx_run). */
static int qsweep(char *out, size_t cap, const char *const *args) {
    return fx_run(QSWEEP_BIN, args, out, cap);
}

static long query_long(PGconn *c, const char *sql) {
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) fail_msg("%s: %s", sql, PQerrorMessage(c));
    long v = strtol(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return v;
}

static PGconn *connect_db(const char *conninfo) {
    PGconn *c = PQconnectdb(conninfo);
    if (PQstatus(c) != CONNECTION_OK) fail_msg("connect %s: %s", conninfo, PQerrorMessage(c));
    return c;
}

/* Each test gets its own XDG directories, so clusters, logs and baseline files never mix.
 * The cluster and connection a test opens are closed by teardown, also when an assertion
 * ends the test early. */
typedef struct env {
    char *dir;
    char pg_dir[512];
    qc_pgserver *pg;
    PGconn *c;
    pid_t run; /* a background qsweep run still to stop (teardown: SIGKILL), 0: none */
} env;

static int setup(void **state) {
    env *e = calloc(1, sizeof *e);
    e->dir = fx_tempdir("qsweep-e2e");
    if (!e->dir) {
        free(e);
        return -1;
    }
    char buf[600];
    snprintf(buf, sizeof buf, "%s/data", e->dir);
    setenv("XDG_DATA_HOME", buf, 1);
    snprintf(buf, sizeof buf, "%s/state", e->dir);
    setenv("XDG_STATE_HOME", buf, 1);
    snprintf(buf, sizeof buf, "%s/cache", e->dir);
    setenv("XDG_CACHE_HOME", buf, 1);
    unsetenv("QSWEEP_DB");
    unsetenv("QSWEEP_BASELINE_DIR");
    unsetenv("COLUMNS"); /* the progress line's full form, whatever the caller's terminal */
    snprintf(e->pg_dir, sizeof e->pg_dir, "%s/data/qsweep/pg", e->dir);
    *state = e;
    return 0;
}

static int teardown(void **state) {
    env *e = *state;
    if (e->run > 0) {
        kill(e->run, SIGKILL);
        waitpid(e->run, NULL, 0);
    }
    PQfinish(e->c);
    qc_pgserver_destroy(e->pg);
    fx_rmtree(e->dir);
    free(e->dir);
    free(e);
    return 0;
}

/* The main path: no --db, so qsweep run starts a private cluster in XDG_DATA_HOME, runs the
 * sweep with 2 workers, prints the tables and stops the cluster. Then the cluster is started
 * again here to read what was stored, the grid is submitted a second time, and a second
 * experiment that overlaps the first is submitted. */
static void test_run_tiny_grid_then_resubmit_adds_nothing(void **state) {
    env *e = *state;
    static char out[1 << 16];
    const char *run[] = {"run", TINY, "--workers", "2", NULL};
    /* CURVE settings exported for a cluster (README, Several machines) do not reach run's own
       coordinator and workers, which talk over a private ipc:// socket: with them, its
       coordinator would refuse to start (no such allow-list) or its workers. */
    setenv("QSWEEP_CURVE_SECRET", "0000000000000000000000000000000000000000", 1);
    setenv("QSWEEP_CURVE_AUTHORIZED", "/nonexistent/qsweep-workers.keys", 1);
    int rc = qsweep(out, sizeof out, run);
    unsetenv("QSWEEP_CURVE_SECRET");
    unsetenv("QSWEEP_CURVE_AUTHORIZED");
    if (rc != 0) fail_msg("qsweep run exited %d:\n%s", rc, out);
    assert_non_null(strstr(out, "29 jobs: 29 new"));
    assert_non_null(strstr(out, "baseline"));
    assert_non_null(strstr(out, "FROM v_sensitivity"));
    char pid_file[600];
    snprintf(pid_file, sizeof pid_file, "%s/postmaster.pid", e->pg_dir);
    assert_int_not_equal(access(pid_file, F_OK), 0); /* it started the cluster: it stopped it */

    qs_error err = {0};
    assert_int_equal(qc_pgserver_start(e->pg_dir, &e->pg, &err), QS_OK);
    qc_pgserver *pg = e->pg;
    PGconn *c = e->c = connect_db(qc_pgserver_conninfo(pg));
    assert_int_equal(query_long(c, "SELECT count(*) FROM jobs WHERE state = 'succeeded'"),
                     TINY_JOBS);
    assert_int_equal(query_long(c, "SELECT count(*) FROM jobs"), TINY_JOBS);
    assert_int_equal(query_long(c, "SELECT count(DISTINCT worker) FROM attempts"), 2);
    /* every eval has ppl, kl_mean, top1 and a baseline to compare with */
    assert_int_equal(
        query_long(
            c, "SELECT count(*) FROM v_sensitivity WHERE metric = 'ppl' AND baseline_value > 0"),
        TINY_JOBS - 1);
    assert_int_equal(
        query_long(c, "SELECT count(*) FROM v_sensitivity WHERE metric = 'kl_mean' AND value >= 0"),
        TINY_JOBS - 1);
    assert_int_equal(
        query_long(
            c,
            "SELECT count(*) FROM v_sensitivity WHERE metric = 'top1' AND value BETWEEN 0 AND 1"),
        TINY_JOBS - 1);
    /* per-linear SQNR of a component job: one row per block (3 blocks) */
    assert_int_equal(
        query_long(c, "SELECT count(*) FROM v_sensitivity WHERE part = 'down' AND format = 'nvfp4'"
                      " AND quantize = 'weights' AND metric LIKE 'sqnr_db.%.down'"),
        3);
    /* no GPU here: every job (baselines too) ran on the CPU backend and says so, once */
    assert_int_equal(query_long(c, "SELECT count(*) FROM v_gemm_path WHERE gemm_path = 'cpu'"),
                     TINY_JOBS);
    assert_int_equal(query_long(c, "SELECT count(*) FROM results WHERE name LIKE 'gemm\\_path.%'"),
                     TINY_JOBS);
    assert_int_equal(query_long(c, "SELECT count(*) FROM results WHERE name = 'probe_on_cpu'"), 0);
    /* ... and names the CPU numerics path its GEMMs took: the fixed-order GEMM by default */
    assert_int_equal(query_long(c, "SELECT count(*) FROM results WHERE name = "
                                   "'cpu_path.cpu-qsweep-fixed2' AND value = 1 AND final"),
                     TINY_JOBS);
    /* every job stores its time profile (worker/engine/profile.h): 17 phases, the load and
       the total, none negative; the phases and the load never overlap, so they sum to at most
       the total, and they cover most of it (a structural property, not a speed) */
    assert_int_equal(query_long(c, "SELECT count(*) FROM results WHERE name LIKE 'time\\_%\\_s'"
                                   " AND final AND value >= 0"),
                     TINY_JOBS * 19);
    assert_int_equal(query_long(c, "SELECT count(DISTINCT job) FROM results WHERE name LIKE "
                                   "'time\\_gemm\\_%\\_s'"),
                     TINY_JOBS);
    assert_int_equal(
        query_long(c, "SELECT count(*) FROM (SELECT job,"
                      " sum(value) FILTER (WHERE name <> 'time_total_s') AS parts,"
                      " max(value) FILTER (WHERE name = 'time_total_s') AS total"
                      " FROM results WHERE name LIKE 'time\\_%\\_s' GROUP BY job) t"
                      " WHERE parts <= total + 1e-9 AND parts >= 0.5 * total AND total > 0"),
        TINY_JOBS);

    const char *submit[] = {"submit", TINY, "--db", qc_pgserver_conninfo(pg), NULL};
    rc = qsweep(out, sizeof out, submit);
    if (rc != 0) fail_msg("qsweep submit exited %d:\n%s", rc, out);
    assert_non_null(strstr(out, "29 jobs: 0 new, 29 already done"));
    assert_int_equal(query_long(c, "SELECT count(*) FROM jobs"), TINY_JOBS);
    assert_int_equal(query_long(c, "SELECT count(*) FROM experiment_jobs"), TINY_JOBS);

    /* another experiment sharing jobs with this one links them, finished, and adds none */
    const char *other[] = {"submit", TINY,
                           "--set",  "name=tiny-nvfp4",
                           "--set",  "sensitivity.formats=[nvfp4]",
                           "--db",   qc_pgserver_conninfo(pg),
                           NULL};
    rc = qsweep(out, sizeof out, other);
    if (rc != 0) fail_msg("qsweep submit of a second experiment exited %d:\n%s", rc, out);
    assert_non_null(strstr(out, "15 jobs: 0 new, 15 already done"));
    assert_int_equal(query_long(c, "SELECT count(*) FROM jobs"), TINY_JOBS);
    assert_int_equal(query_long(c, "SELECT count(*) FROM experiment_jobs"), TINY_JOBS + 15);
    assert_int_equal(
        query_long(c,
                   "SELECT succeeded FROM v_experiment_progress WHERE experiment = 'tiny-nvfp4'"),
        15);

    /* results reads the same rows back: one line per eval job in the CSV */
    const char *results[] = {"results", "tiny", "--csv", "--db", qc_pgserver_conninfo(pg), NULL};
    assert_int_equal(qsweep(out, sizeof out, results), 0);
    size_t lines = 0;
    for (const char *p = out; *p; p++)
        lines += *p == '\n';
    assert_int_equal(lines, 1 + TINY_JOBS - 1);
    assert_non_null(strstr(out, ",top1,sqnr_db,gemm_path\n"));
    size_t cpu_rows = 0; /* each row's last field */
    for (const char *p = strstr(out, ",cpu\n"); p; p = strstr(p + 1, ",cpu\n"))
        cpu_rows++;
    assert_int_equal(cpu_rows, TINY_JOBS - 1);
    const char *json[] = {"results", "tiny", "--json", "--db", qc_pgserver_conninfo(pg), NULL};
    assert_int_equal(qsweep(out, sizeof out, json), 0);
    json_error_t je;
    json_t *rows = json_loads(out, 0, &je);
    if (!json_is_array(rows)) fail_msg("results --json: %s:\n%s", je.text, out);
    assert_int_equal(json_array_size(rows), TINY_JOBS - 1);
    json_t *first = json_array_get(rows, 0);
    assert_true(json_real_value(json_object_get(first, "ppl")) > 0);
    assert_true(json_is_object(json_object_get(first, "options")));
    for (size_t i = 0; i < json_array_size(rows); i++)
        assert_string_equal(json_string_value(json_object_get(json_array_get(rows, i), "gemm_path")),
                            "cpu");
    json_decref(rows);

    /* the two workers of the run, as the coordinator recorded them */
    const char *workers[] = {"workers", "--db", qc_pgserver_conninfo(pg), NULL};
    assert_int_equal(qsweep(out, sizeof out, workers), 0);
    assert_non_null(strstr(out, "-w1 "));
    assert_non_null(strstr(out, "-w2 "));
    const char *status[] = {"status", "--db", qc_pgserver_conninfo(pg), NULL};
    assert_int_equal(qsweep(out, sizeof out, status), 0);
    assert_non_null(strstr(out, "100%  29/29"));
}

/* A GGUF file of K-quant and IQ4 tensors (tests/checkpoint/fixtures/tiny_kquant.gguf: Q2_K ...
 * Q6_K, IQ4_NL, IQ4_XS) is a model a sweep starts from: the tiny grid on it, NVFP4 weights,
 * runs every job, and every eval has a finite perplexity against its baseline. */
static void test_kquant_gguf_sweeps_end_to_end(void **state) {
    env *e = *state;
    static char out[1 << 16];
    const char *run[] = {"run",
                         TINY,
                         "--workers",
                         "1",
                         "--set",
                         "name=tiny-kquant",
                         "--set",
                         "models.0=" QSWEEP_SOURCE_DIR "/tests/checkpoint/fixtures/tiny_kquant.gguf",
                         "--set",
                         "sensitivity.formats=[nvfp4]",
                         "--set",
                         "sensitivity.quantize=[weights]",
                         "--set",
                         "dataset.max_chunks=2",
                         NULL};
    int rc = qsweep(out, sizeof out, run);
    if (rc != 0) fail_msg("qsweep run exited %d:\n%s", rc, out);
    assert_non_null(strstr(out, "8 jobs: 8 new")); /* 1 baseline + 7 components */
    qs_error err = {0};
    assert_int_equal(qc_pgserver_start(e->pg_dir, &e->pg, &err), QS_OK);
    PGconn *c = e->c = connect_db(qc_pgserver_conninfo(e->pg));
    assert_int_equal(query_long(c, "SELECT count(*) FROM jobs WHERE state = 'succeeded'"), 8);
    assert_int_equal(query_long(c, "SELECT count(*) FROM v_sensitivity WHERE metric = 'ppl'"
                                   " AND model LIKE '%tiny_kquant.gguf' AND baseline_value > 1"
                                   " AND value > 1 AND value < 1e6"),
                     7);
}

/* A checkpoint whose only tokenizer is a SentencePiece tokenizer.model
 * (tests/tokenizer/data/spm/tiny_llama) sweeps a text dataset: the text is tokenized by that
 * model file and every job runs. */
static void test_sentencepiece_model_sweeps_a_text_end_to_end(void **state) {
    env *e = *state;
    static char out[1 << 16];
    char grid[600];
    snprintf(grid, sizeof grid, "%s/spm.yaml", e->dir);
    assert_int_equal(
        fx_write_text(grid, "name: tiny-spm\n"
                            "kind: sensitivity\n"
                            "models:\n"
                            "  - " QSWEEP_SOURCE_DIR "/tests/tokenizer/data/spm/tiny_llama\n"
                            "dataset:\n"
                            "  text: " QSWEEP_SOURCE_DIR "/tests/tokenizer/data/texts/gpl3.txt\n"
                            "  ctx: 64\n"
                            "  max_chunks: 2\n"
                            "sensitivity:\n"
                            "  formats: [nvfp4]\n"
                            "  quantize: [weights]\n"
                            "  modes: [component]\n"
                            "  metrics: [ppl, kl, top1]\n"),
        0);
    const char *run[] = {"run", grid, "--workers", "1", NULL};
    int rc = qsweep(out, sizeof out, run);
    if (rc != 0) fail_msg("qsweep run exited %d:\n%s", rc, out);
    assert_non_null(strstr(out, "8 jobs: 8 new")); /* 1 baseline + 7 components */
    qs_error err = {0};
    assert_int_equal(qc_pgserver_start(e->pg_dir, &e->pg, &err), QS_OK);
    PGconn *c = e->c = connect_db(qc_pgserver_conninfo(e->pg));
    assert_int_equal(query_long(c, "SELECT count(*) FROM jobs WHERE state = 'succeeded'"), 8);
    assert_int_equal(query_long(c, "SELECT count(*) FROM v_sensitivity WHERE metric = 'ppl'"
                                   " AND model LIKE '%tiny_llama' AND baseline_value > 1"),
                     7);
}

/* As start_slow_run, with one more --set (extra, when not NULL), stdout and stderr into the
 * file log (NULL: discarded). */
static pid_t start_run_logged(const char *db, const char *max_chunks, const char *extra,
                              const char *log) {
    char set[64];
    snprintf(set, sizeof set, "dataset.max_chunks=%s", max_chunks);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int null = log ? open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644) : open("/dev/null", O_WRONLY);
        dup2(null, 1);
        dup2(null, 2);
        char *argv[] = {"qsweep", "run",   TINY,          "--workers", "1",
                        "--set",  set,     "--db",        (char *)db,  "--lease-ms",
                        "2000",   "--set", (char *)extra, NULL};
        if (!extra) argv[11] = NULL;
        execv(QSWEEP_BIN, argv);
        _exit(127);
    }
    return pid;
}

/* As start_slow_run, with one more --set (extra, when not NULL). */
static pid_t start_run_with(const char *db, const char *max_chunks, const char *extra) {
    return start_run_logged(db, max_chunks, extra, NULL);
}

/* Starts `qsweep run` on the tiny grid in the background against db, with one worker and
 * max_chunks chunks per job (the grid says 8), so there is time to act while it runs. Output
 * is discarded. Returns its pid. */
static pid_t start_slow_run(const char *db, const char *max_chunks) {
    return start_run_with(db, max_chunks, NULL);
}

/* Waits until n jobs have succeeded, or fails the test saying how many had after ten minutes
 * (a bound for a hang only: a job takes under a second on an idle machine). */
static void wait_succeeded(PGconn *c, long n) {
    long done = 0;
    for (int i = 0; i < 12000 && done < n; i++) {
        usleep(50000);
        PGresult *r = PQexec(c, "SELECT count(*) FROM jobs WHERE state = 'succeeded'");
        if (PQresultStatus(r) == PGRES_TUPLES_OK) done = strtol(PQgetvalue(r, 0, 0), NULL, 10);
        PQclear(r);
    }
    if (done < n)
        fail_msg("gave up after 600 s waiting for %ld succeeded jobs; last saw %ld", n, done);
}

/* Waits for pid and returns its exit code (-1 when it did not exit normally). */
static int wait_exit(pid_t pid) {
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Interrupt `qsweep run` (SIGINT, as Ctrl-C) once some jobs are done; run again: the jobs
 * that had succeeded get no new attempt, the others run, and all end succeeded. */
static void test_interrupted_run_reruns_only_unfinished_jobs(void **state) {
    env *e = *state;
    qs_error err = {0};
    assert_int_equal(qc_pgserver_start_temp(&e->pg, &err), QS_OK);
    const char *db = qc_pgserver_conninfo(e->pg);
    PGconn *c = e->c = connect_db(db);

    pid_t pid = start_slow_run(db, "64"); /* the rerun below must use the same grid */
    wait_succeeded(c, 3);
    kill(pid, SIGINT);
    assert_int_equal(wait_exit(pid), 130);

    long succeeded = query_long(c, "SELECT count(*) FROM jobs WHERE state = 'succeeded'");
    assert_true(succeeded >= 3);
    if (succeeded == TINY_JOBS) fail_msg("the run finished before it could be interrupted");
    PQclear(PQexec(c, "CREATE TABLE before_rerun AS SELECT j.id, j.state, count(a.id) AS attempts"
                      " FROM jobs j LEFT JOIN attempts a ON a.job = j.id GROUP BY j.id"));

    static char out[1 << 16];
    const char *again[] = {"run",  TINY, "--workers",  "2",    "--set", "dataset.max_chunks=64",
                           "--db", db,   "--lease-ms", "2000", NULL};
    int rc = qsweep(out, sizeof out, again);
    if (rc != 0) fail_msg("second qsweep run exited %d:\n%s", rc, out);
    char expect[128];
    snprintf(expect, sizeof expect, "0 new, %ld already done", succeeded);
    if (!strstr(out, expect)) fail_msg("second run did not report '%s':\n%s", expect, out);
    assert_int_equal(query_long(c, "SELECT count(*) FROM jobs WHERE state = 'succeeded'"),
                     TINY_JOBS);
    /* no job that had succeeded got another attempt */
    assert_int_equal(
        query_long(c, "SELECT count(*) FROM before_rerun b WHERE b.state = 'succeeded'"
                      " AND (SELECT count(*) FROM attempts a WHERE a.job = b.id) <> b.attempts"),
        0);
    /* and every job that had not succeeded ran */
    assert_int_equal(
        query_long(c,
                   "SELECT count(*) FROM before_rerun b WHERE b.state <> 'succeeded' AND NOT EXISTS"
                   " (SELECT 1 FROM attempts a WHERE a.job = b.id AND a.outcome = 'succeeded')"),
        0);
}

/* `qsweep cancel EXPERIMENT` while `qsweep run` works on it: the coordinator cancels what is
 * unfinished, the run ends, and its exit code says some jobs were cancelled (5). */
static void test_cancel_ends_the_run_with_exit_5(void **state) {
    env *e = *state;
    qs_error err = {0};
    assert_int_equal(qc_pgserver_start_temp(&e->pg, &err), QS_OK);
    const char *db = qc_pgserver_conninfo(e->pg);
    PGconn *c = e->c = connect_db(db);
    /* the coordinator polls cancel requests every second: jobs of all 256 chunks of the token
       file keep the run going well past that */
    pid_t pid = start_slow_run(db, "256");
    wait_succeeded(c, 1);
    static char out[1 << 12];
    /* the baseline is done, no eval job yet: the baseline's pace says nothing of an eval
       job's, so no ETA is guessed (checked only when no eval job ended meanwhile) */
    const char *evals_done =
        "SELECT count(*) FROM jobs WHERE kind = 'eval' AND state = 'succeeded'";
    const char *status[] = {"status", "tiny", "--db", db, NULL};
    long before = query_long(c, evals_done);
    assert_int_equal(qsweep(out, sizeof out, status), 0);
    if (before == 0 && query_long(c, evals_done) == 0 && !strstr(out, "ETA ?") &&
        !strstr(out, "waiting"))
        fail_msg("status with only the baseline done: %s", out);
    const char *cancel[] = {"cancel", "tiny", "--db", db, NULL};
    assert_int_equal(qsweep(out, sizeof out, cancel), 0);
    assert_int_equal(wait_exit(pid), 5);
    assert_int_equal(
        query_long(c,
                   "SELECT pending + running FROM v_experiment_progress WHERE experiment = 'tiny'"),
        0);
    assert_true(
        query_long(c, "SELECT cancelled FROM v_experiment_progress WHERE experiment = 'tiny'") > 0);
    assert_true(
        query_long(c, "SELECT succeeded FROM v_experiment_progress WHERE experiment = 'tiny'") >=
        1);
}

/* Cancelled jobs are not lost for good: `qsweep requeue EXPERIMENT` (coordinator stopped)
 * puts the cancelled ones back with a fresh attempt budget, and the next run finishes them
 * all while the jobs that had succeeded keep their single attempt. */
static void test_requeue_runs_cancelled_jobs_again(void **state) {
    env *e = *state;
    qs_error err = {0};
    assert_int_equal(qc_pgserver_start_temp(&e->pg, &err), QS_OK);
    const char *db = qc_pgserver_conninfo(e->pg);
    PGconn *c = e->c = connect_db(db);
    pid_t pid = start_slow_run(db, "64");
    wait_succeeded(c, 1);
    static char out[1 << 16];
    const char *cancel[] = {"cancel", "tiny", "--db", db, NULL};
    assert_int_equal(qsweep(out, sizeof out, cancel), 0);
    assert_int_equal(wait_exit(pid), 5);
    long cancelled =
        query_long(c, "SELECT cancelled FROM v_experiment_progress WHERE experiment = 'tiny'");
    assert_true(cancelled > 0);

    const char *requeue[] = {"requeue", "tiny", "--db", db, NULL};
    assert_int_equal(qsweep(out, sizeof out, requeue), 0);
    char expect[96];
    snprintf(expect, sizeof expect, "%ld job(s) of experiment tiny queued again", cancelled);
    if (!strstr(out, expect)) fail_msg("requeue did not say '%s':\n%s", expect, out);

    const char *again[] = {"run",  TINY, "--workers",  "2",    "--set", "dataset.max_chunks=64",
                           "--db", db,   "--lease-ms", "2000", NULL};
    int rc = qsweep(out, sizeof out, again);
    if (rc != 0) fail_msg("run after requeue exited %d:\n%s", rc, out);
    assert_int_equal(query_long(c, "SELECT count(*) FROM jobs WHERE state = 'succeeded'"),
                     TINY_JOBS);
    /* the jobs that had succeeded before the cancel were not run again */
    assert_int_equal(query_long(c, "SELECT count(*) FROM attempts WHERE outcome = 'succeeded'"),
                     TINY_JOBS);
    /* a second requeue has nothing to do */
    assert_int_equal(qsweep(out, sizeof out, requeue), 0);
    if (!strstr(out, "0 job(s) of experiment tiny queued again")) fail_msg("%s", out);
}

/* One bad grid: qsweep run must exit 2 with `what` in its message and queue nothing. */
static void assert_refused(env *e, PGconn *c, const char *db, const char *grid_text,
                           const char *const *sets, const char *what) {
    char grid[600];
    snprintf(grid, sizeof grid, "%s/bad.yaml", e->dir);
    assert_int_equal(fx_write_text(grid, grid_text), 0);
    const char *args[16] = {"run", grid, "--db", db};
    int n = 4;
    for (int i = 0; sets && sets[i]; i++) {
        args[n++] = "--set";
        args[n++] = sets[i];
    }
    args[n] = NULL;
    static char out[1 << 14];
    int rc = qsweep(out, sizeof out, args);
    if (rc != 2 || !strstr(out, what))
        fail_msg("expected exit 2 and '%s', got %d:\n%s", what, rc, out);
    assert_int_equal(query_long(c, "SELECT count(*) FROM jobs"), 0);
    assert_int_equal(query_long(c, "SELECT count(*) FROM experiments"), 0);
}

static void test_bad_input_is_refused_before_anything_is_queued(void **state) {
    env *e = *state;
    qs_error err = {0};
    assert_int_equal(qc_pgserver_start_temp(&e->pg, &err), QS_OK);
    const char *db = qc_pgserver_conninfo(e->pg);
    PGconn *c = e->c = connect_db(db);
    PQclear(PQexec(c, "SELECT 1"));
    /* the schema exists (a database someone migrated), so "nothing queued" is checkable */
    const char *migrate[] = {"db", "migrate", "--db", db, NULL};
    static char out[1 << 12];
    assert_int_equal(qsweep(out, sizeof out, migrate), 0);

    char text[2048];
    const char *data = QSWEEP_SOURCE_DIR;
    snprintf(text, sizeof text,
             "name: bad\n"
             "models: [%s/tests/engine/data/llama3_gqa]\n"
             "dataset: {tokens: %s/experiments/data/gpl3.bytes.tokens, ctx: 64]\n"
             "sensitivity: {formats: [nvfp4]}\n",
             data, data);
    char where[700];
    snprintf(where, sizeof where, "%s/bad.yaml:3:", e->dir);
    assert_refused(e, c, db, text, NULL, where); /* syntax error: file:line:column */
    assert_refused(e, c, db, text, NULL, "YAML syntax error");

    snprintf(text, sizeof text,
             "name: bad\n"
             "models: [%s/tests/engine/data/llama3_gqa]\n"
             "dataset: {tokens: %s/experiments/data/gpl3.bytes.tokens, ctx: 64}\n"
             "sensitivity: {formats: [nvfp4]}\n",
             data, data);
    const char *missing[] = {"models.0=/nonexistent/model.gguf", NULL};
    assert_refused(e, c, db, text, missing,
                   "model file /nonexistent/model.gguf: no such file or directory");
    const char *format[] = {"sensitivity.formats=[nvfp4, fp3]", NULL};
    assert_refused(e, c, db, text, format, "unknown format 'fp3'");
    /* SmolLM2's token ids (vocab 49152) on a test model with 384 tokens */
    char toks[600];
    snprintf(toks, sizeof toks, "dataset.tokens=%s/tests/engine/data/gpl3.smollm2.tokens", data);
    const char *vocab[] = {toks, NULL};
    assert_refused(e, c, db, text, vocab,
                   "beyond the vocabulary of model llama3_gqa (vocab_size 384)");
}

/* A worker killed by a signal (as a job that crashes it would) is started again, so the run
 * goes on: the killed attempt's lease expires, the job is retried, and a job whose every
 * attempt kills its worker ends failed after max_attempts (2 here), not left running. An
 * attempt that finished before its kill landed (a job takes a few hundred ms), or a retry that
 * finished before the test saw it, starts the search again on another job. */
static void
test_worker_killed_by_a_signal_is_restarted_and_the_job_fails_after_max_attempts(void **state) {
    env *e = *state;
    qs_error err = {0};
    assert_int_equal(qc_pgserver_start_temp(&e->pg, &err), QS_OK);
    const char *db = qc_pgserver_conninfo(e->pg);
    PGconn *c = e->c = connect_db(db);
    pid_t run = start_run_with(db, "32", "max_attempts=2");
    long job = 0, last_attempt = 0;
    int kills = 0, restarts = 0;
    for (int i = 0; i < 60000 && kills < 2; i++) { /* 600 s and more: only a hang */
        usleep(10000);
        /* a running attempt that is its worker's newest, so the worker is on it or on a next
           job the database does not show yet; the second case ends 'succeeded' below. No
           window on started_at: it is the batch transaction's start, and on a loaded machine
           the row becomes visible well after it. */
        char sql[768];
        snprintf(sql, sizeof sql,
                 "SELECT a.job, w.pid, a.id FROM attempts a JOIN workers w ON w.id = a.worker"
                 " JOIN jobs j ON j.id = a.job WHERE a.outcome = 'running' AND j.kind = 'eval'"
                 " AND NOT EXISTS (SELECT 1 FROM attempts b WHERE b.worker = a.worker"
                 " AND b.id > a.id)"
                 " AND a.id > %ld AND (%ld = 0 OR a.job = %ld) ORDER BY a.id LIMIT 1",
                 last_attempt, job, job);
        PGresult *r = PQexec(c, sql);
        if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
            PQclear(r);
            if (job) { /* the retry may have come and gone between two looks */
                snprintf(sql, sizeof sql,
                         "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'succeeded'", job);
                if (query_long(c, sql)) {
                    job = 0;
                    kills = 0;
                }
            }
            int status;
            if (waitpid(run, &status, WNOHANG) == run)
                fail_msg("the run ended (status %d) before two attempts of one job were killed;"
                         " killed %d",
                         status, kills);
            continue;
        }
        long attempt_job = strtol(PQgetvalue(r, 0, 0), NULL, 10);
        long attempt = strtol(PQgetvalue(r, 0, 2), NULL, 10);
        assert_int_equal(kill((pid_t)strtol(PQgetvalue(r, 0, 1), NULL, 10), SIGKILL), 0);
        PQclear(r);
        /* the killed attempt ends lost when its lease (2 s) expires, or, when the coordinator's
           own loop stalled meanwhile (a turn over a quarter lease: a loaded machine), after the
           re-attach grace it then gives every running attempt (coordinator/server/lease.c): up
           to a minute is waited */
        snprintf(sql, sizeof sql,
                 "SELECT count(*) FROM attempts WHERE id = %ld AND outcome <> "
                 "'running'",
                 attempt);
        for (int k = 0; k < 12000 && !query_long(c, sql); k++)
            usleep(50000);
        if (!query_long(c, sql))
            fail_msg("gave up after 600 s waiting for attempt %ld of the killed worker to end",
                     attempt);
        snprintf(sql, sizeof sql,
                 "SELECT count(*) FROM attempts WHERE id = %ld AND outcome = "
                 "'lost'",
                 attempt);
        restarts++; /* the worker was killed, whatever its attempt became */
        if (!query_long(c, sql)) {
            snprintf(sql, sizeof sql,
                     "SELECT count(*) FROM attempts WHERE id = %ld AND outcome = 'succeeded'",
                     attempt);
            if (!query_long(c, sql))
                fail_msg("attempt %ld of job %ld was neither lost nor succeeded", attempt,
                         attempt_job);
            /* it had finished before the kill: start again on another job */
            job = 0;
            kills = 0;
            last_attempt = attempt;
            continue;
        }
        job = attempt_job;
        last_attempt = attempt;
        kills++;
    }
    if (kills < 2)
        fail_msg("gave up after 60000 looks for a fresh attempt to kill; killed %d of 2", kills);
    assert_int_equal(wait_exit(run), 5); /* the run went on to the end; one job failed */
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'failed'", job);
    assert_int_equal(query_long(c, sql), 1);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM attempts WHERE job = %ld", job);
    assert_int_equal(query_long(c, sql), 2);
    assert_int_equal(query_long(c, "SELECT count(*) FROM jobs WHERE state = 'succeeded'"),
                     TINY_JOBS - 1);
    assert_int_equal(query_long(c, "SELECT count(*) FROM attempts WHERE outcome = 'running'"), 0);
    /* the first worker and one restart per kill (each with its own id) */
    assert_int_equal(query_long(c, "SELECT count(*) FROM workers"), 1 + restarts);
}

/* The text of file path (static buffer; "" when unreadable). */
static const char *file_text(const char *path) {
    static char text[1 << 16];
    text[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f) return text;
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose(f);
    return text;
}

/* Whether pid has exited (reaped into *rc, its exit code, or -1 for a signal). */
static int exited(pid_t pid, int *rc) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) != pid) return 0;
    *rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return 1;
}

/* The breaker's Ctrl-C during start-up: the signal arrives while `qsweep run` is still
 * starting its private cluster (its postmaster.pid has just appeared). The run must not go
 * on to submit, start a coordinator and workers and only then notice: it stops the cluster
 * it started, starts nothing else (no log folder of a coordinator or worker is made), says
 * it was interrupted during start-up and exits 130. */
static void test_interrupt_during_start_up_stops_cleanly(void **state) {
    env *e = *state;
    char log[600], pidfile[600], logs[600];
    snprintf(log, sizeof log, "%s/run.out", e->dir);
    snprintf(pidfile, sizeof pidfile, "%s/postmaster.pid", e->pg_dir);
    snprintf(logs, sizeof logs, "%s/state/qsweep/logs", e->dir);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        char *argv[] = {"qsweep", "run", TINY, "--workers", "1", NULL};
        execv(QSWEEP_BIN, argv);
        _exit(127);
    }
    e->run = pid;
    struct stat sb;
    int rc = 0, gone = 0;
    for (int i = 0; i < 120000 && stat(pidfile, &sb) != 0 && !(gone = exited(pid, &rc)); i++)
        usleep(5000); /* 600 s: only a hang */
    if (gone) {
        e->run = 0;
        fail_msg("qsweep run exited %d before its cluster started:\n%s", rc, file_text(log));
    }
    if (stat(pidfile, &sb) != 0)
        fail_msg("gave up after 600 s waiting for %s:\n%s", pidfile, file_text(log));
    assert_int_equal(kill(pid, SIGINT), 0);
    for (int i = 0; i < 12000 && !(gone = exited(pid, &rc)); i++)
        usleep(50000);
    if (!gone) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        fail_msg("qsweep run did not stop within 600 s of SIGINT:\n%s", file_text(log));
    }
    e->run = 0;
    const char *out = file_text(log);
    if (rc != 130 || !strstr(out, "interrupted by signal 2 during start-up"))
        fail_msg("qsweep run exited %d:\n%s", rc, out);
    if (strstr(out, "running; logs in") || stat(logs, &sb) == 0)
        fail_msg("a coordinator or workers were started after the signal:\n%s", out);
    /* the cluster it started is stopped again */
    assert_int_not_equal(stat(pidfile, &sb), 0);
}

/* The breaker's second `qsweep run` on a cluster where a first one runs: the second's own
 * coordinator would be refused (one coordinator per database) and it said only "see
 * coordinator.log". It now says that another coordinator runs, who it is, that its workers
 * run the queued jobs and how to follow them, starts nothing, and the first run is not
 * disturbed. */
static void test_second_run_on_the_same_cluster_says_why(void **state) {
    env *e = *state;
    qs_error err = {0};
    assert_int_equal(qc_pgserver_start_temp(&e->pg, &err), QS_OK);
    const char *db = qc_pgserver_conninfo(e->pg);
    PGconn *c = e->c = connect_db(db);
    pid_t first = e->run = start_slow_run(db, "64");
    wait_succeeded(c, 1);
    static char out[1 << 16];
    const char *second[] = {"run",  TINY, "--workers",  "1",    "--set", "dataset.max_chunks=64",
                            "--db", db,   "--lease-ms", "2000", NULL};
    int rc = qsweep(out, sizeof out, second);
    if (rc != 4 || !strstr(out, "another coordinator is already running on this database") ||
        !strstr(out, "coordinator-writer") || !strstr(out, "(server pid") ||
        !strstr(out, "qsweep status tiny"))
        fail_msg("second qsweep run exited %d:\n%s", rc, out);
    if (strstr(out, "coordinator.log") || strstr(out, "running; logs in"))
        fail_msg("the second run started a coordinator or pointed at its log:\n%s", out);
    int first_rc = 0;
    if (exited(first, &first_rc)) fail_msg("the first run stopped (exit %d)", first_rc);
    kill(first, SIGINT);
    assert_int_equal(wait_exit(first), 130);
    e->run = 0;
}

/* The breaker's PostgreSQL stopped under a running `qsweep run`: it exited, its workers were
 * stopped, their preemptions were never written and the attempts were lost. Now the run
 * says once that PostgreSQL is unreachable, keeps its coordinator and workers running and
 * retries; when the server is back (here after 4 s) the sweep finishes: exit 0, every job
 * succeeded, no attempt lost or left running, each job run once. */
static void test_database_outage_during_a_run_loses_nothing(void **state) {
    env *e = *state;
    qs_error err = {0};
    assert_int_equal(qc_pgserver_start_temp(&e->pg, &err), QS_OK);
    const char *db = qc_pgserver_conninfo(e->pg);
    PGconn *c = e->c = connect_db(db);
    char log[600];
    snprintf(log, sizeof log, "%s/run.out", e->dir);
    pid_t run = e->run = start_run_logged(db, "8", NULL, log);
    wait_succeeded(c, 3);
    PQfinish(c);
    c = e->c = NULL;
    assert_int_equal(qc_pgserver_stop(e->pg, &err), QS_OK);
    int rc = 0;
    for (int i = 0; i < 80; i++) { /* 4 s down: the run must still be there */
        usleep(50000);
        if (exited(run, &rc)) {
            e->run = 0;
            fail_msg("qsweep run exited %d with PostgreSQL down:\n%s", rc, file_text(log));
        }
    }
    if (qc_pgserver_resume(e->pg, &err) != QS_OK) fail_msg("resume: %s", err.msg);
    rc = wait_exit(run);
    e->run = 0;
    const char *out = file_text(log);
    if (rc != 0) fail_msg("qsweep run exited %d after the outage:\n%s", rc, out);
    if (!strstr(out, "PostgreSQL unreachable") || !strstr(out, "PostgreSQL is back"))
        fail_msg("the outage was not reported:\n%s", out);
    c = e->c = connect_db(db);
    assert_int_equal(query_long(c, "SELECT count(*) FROM jobs WHERE state = 'succeeded'"),
                     TINY_JOBS);
    assert_int_equal(query_long(c, "SELECT count(*) FROM attempts WHERE outcome IN "
                                   "('running', 'lost')"),
                     0);
    assert_int_equal(query_long(c, "SELECT count(*) FROM attempts"), TINY_JOBS);
}

/* `qsweep run` without a database stops the private cluster only when it started it: one
 * already running (qsweep db start) is used and left running. */
static void test_run_leaves_an_adopted_cluster_running(void **state) {
    env *e = *state;
    static char out[1 << 16];
    const char *start[] = {"db", "start", NULL};
    assert_int_equal(qsweep(out, sizeof out, start), 0);
    char *q = strstr(out, "export QSWEEP_DB='");
    assert_non_null(q);
    char conninfo[600];
    snprintf(conninfo, sizeof conninfo, "%s", q + strlen("export QSWEEP_DB='"));
    conninfo[strcspn(conninfo, "'")] = 0;
    qs_error err = {0};
    assert_int_equal(qc_pgserver_start(e->pg_dir, &e->pg, &err), QS_OK); /* teardown stops it */

    const char *run[] = {"run", TINY, "--workers", "1", "--set", "dataset.max_chunks=1", NULL};
    int rc = qsweep(out, sizeof out, run);
    if (rc != 0) fail_msg("qsweep run exited %d:\n%s", rc, out);
    assert_non_null(strstr(out, "(already running: left running)"));
    PGconn *c = e->c = connect_db(conninfo);
    assert_int_equal(query_long(c, "SELECT count(*) FROM jobs WHERE state = 'succeeded'"),
                     TINY_JOBS);
}

/* status, results, workers, cancel, requeue, unpin and pin never migrate: on a database without the
 * schema they say so (exit 3), without claiming that a command which writes only reads, and
 * create nothing. Messages carry one command prefix. */
static void test_read_only_commands_never_migrate(void **state) {
    env *e = *state;
    qs_error err = {0};
    assert_int_equal(qc_pgserver_start_temp(&e->pg, &err), QS_OK);
    const char *db = qc_pgserver_conninfo(e->pg);
    PGconn *c = e->c = connect_db(db);
    static char out[1 << 12];
    const char *cmds[][6] = {
        {"status", "--db", db, NULL},          {"results", "tiny", "--db", db, NULL},
        {"workers", "--db", db, NULL},         {"cancel", "tiny", "--db", db, NULL},
        {"requeue", "tiny", "--db", db, NULL}, {"unpin", "tiny", "--db", db, NULL},
        {"pin", "tiny", "cpu-qsweep-fixed2", "--db", db, NULL}};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        int rc = qsweep(out, sizeof out, cmds[i]);
        char want[64];
        snprintf(want, sizeof want, "(%s never creates or migrates it;", cmds[i][0]);
        if (rc != 3 || !strstr(out, "the database has no qsweep schema") || !strstr(out, want))
            fail_msg("qsweep %s: expected exit 3 and 'no qsweep schema', got %d:\n%s", cmds[i][0],
                     rc, out);
    }
    assert_int_equal(query_long(c, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"),
                     0);
    const char *migrate[] = {"db", "migrate", "--db", db, NULL};
    assert_int_equal(qsweep(out, sizeof out, migrate), 0);
    const char *cancel[] = {"cancel", "nosuch", "--db", db, NULL};
    assert_int_not_equal(qsweep(out, sizeof out, cancel), 0);
    if (!strstr(out, "qsweep cancel: no experiment named 'nosuch'")) fail_msg("%s", out);

    /* status lines up its columns by characters, not bytes: a name with accents or CJK puts
       the progress bar in the same column as an ASCII name */
    PGresult *r = PQexec(c, "INSERT INTO experiments (name, grid) VALUES ('plain', ''), "
                            "('r\u00e9seau-\u00fc-\u65e5\u672c', '')");
    r = (PQclear(r), PQexec(c, "SELECT count(*) FROM experiments"));
    assert_int_equal(atoi(PQgetvalue(r, 0, 0)), 2);
    PQclear(r);
    const char *status[] = {"status", "--db", db, NULL};
    assert_int_equal(qsweep(out, sizeof out, status), 0);
    int lines = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        char *bar = strchr(line, '[');
        if (!bar) continue;
        int col = 0;
        for (const char *p = line; p < bar; p++)
            col += (*p & 0xC0) != 0x80;
        if (col != 29) fail_msg("bar at column %d, not 29: %s", col, line);
        lines++;
    }
    assert_int_equal(lines, 2);
}

static long lines_longer_than(const char *text, size_t max) {
    long n = 0;
    size_t len = 0;
    for (const char *p = text;; p++) {
        if (*p == '\n' || *p == '\r' || !*p) {
            n += len > max;
            len = 0;
            if (!*p) return n;
        } else {
            len += (*p & 0xC0) != 0x80;
        }
    }
}

/* Paper cuts on a finished tiny run: without --db or QSWEEP_DB, status, workers,
 * results, report, plan and cancel find the private cluster of qsweep run when it is running, and
 * name `eval "$(qsweep db start)"` when it is not; a mistyped experiment name gets the nearest one
 * ("did you mean"); the run says "1 worker (N threads)", names no
 * "0 failed before", keeps its logs in a folder of its own and prints it at the end; the
 * progress line fits a narrow terminal; an experiment with work left and no worker shows no
 * ETA; cancel on a finished experiment or job says there is nothing to cancel and stores no
 * cancel request. */
static void test_read_commands_find_the_private_cluster(void **state) {
    env *e = *state;
    static char out[1 << 16];
    const char *status[] = {"status", NULL};
    assert_int_equal(qsweep(out, sizeof out, status), 1);
    if (!strstr(out, "qsweep status: no database") ||
        !strstr(out, "eval \"$(" QSWEEP_BIN " db start)\""))
        fail_msg("status without a database: %s", out);

    const char *start[] = {"db", "start", NULL};
    assert_int_equal(qsweep(out, sizeof out, start), 0);
    qs_error err = {0};
    assert_int_equal(qc_pgserver_start(e->pg_dir, &e->pg, &err), QS_OK); /* teardown stops it */
    const char *run[] = {
        "run", TINY, "--workers", "1", "--threads", "2", "--set", "dataset.max_chunks=1", NULL};
    int rc = qsweep(out, sizeof out, run);
    if (rc != 0) fail_msg("qsweep run exited %d:\n%s", rc, out);
    if (!strstr(out, "coordinator and 1 worker (2 threads) running; logs in ")) fail_msg("%s", out);
    if (strstr(out, "failed before")) fail_msg("nothing failed, yet: %s", out);
    char logs[1024];
    const char *at = strstr(out, "logs of this run's coordinator and workers: ");
    if (!at) fail_msg("no log folder at the end:\n%s", out);
    snprintf(logs, sizeof logs, "%s", at + strlen("logs of this run's coordinator and workers: "));
    logs[strcspn(logs, "\n")] = 0;
    char path[1100];
    snprintf(path, sizeof path, "%s/worker-1.log", logs);
    assert_int_equal(access(path, R_OK), 0);
    snprintf(path, sizeof path, "%s/state/qsweep/logs/latest/coordinator.log", e->dir);
    assert_int_equal(access(path, R_OK), 0);
    char latest_tiny[1100], target[1100];
    snprintf(latest_tiny, sizeof latest_tiny, "%s/state/qsweep/logs/latest-tiny", e->dir);
    ssize_t tn = readlink(latest_tiny, target, sizeof target - 1);
    assert_true(tn > 0);
    target[tn] = 0;
    if (!strstr(logs, target)) fail_msg("latest-tiny -> %s, not the run's %s", target, logs);
    assert_non_null(strstr(logs, "-tiny"));
    /* a second run of the same grid keeps the first one's logs */
    const char *again[] = {"run",   TINY,          "--workers",
                           "1",     "--set",       "dataset.max_chunks=2",
                           "--set", "name=tiny-2", NULL};
    rc = qsweep(out, sizeof out, again);
    if (rc != 0) fail_msg("second qsweep run exited %d:\n%s", rc, out);
    snprintf(path, sizeof path, "%s/worker-1.log", logs);
    assert_int_equal(access(path, R_OK), 0);
    at = strstr(out, "logs of this run's coordinator and workers: ");
    assert_non_null(at);
    assert_null(strstr(at, logs));
    /* each experiment keeps its own latest: tiny's still names the first run */
    char again_target[1100];
    tn = readlink(latest_tiny, again_target, sizeof again_target - 1);
    assert_true(tn > 0);
    again_target[tn] = 0;
    assert_string_equal(again_target, target);
    snprintf(path, sizeof path, "%s/state/qsweep/logs/latest-tiny-2/coordinator.log", e->dir);
    assert_int_equal(access(path, R_OK), 0);

    assert_int_equal(qsweep(out, sizeof out, status), 0);
    if (!strstr(out, "tiny                         [##############################] 100%  29/29"))
        fail_msg("status: %s", out);
    setenv("COLUMNS", "60", 1);
    assert_int_equal(qsweep(out, sizeof out, status), 0);
    unsetenv("COLUMNS");
    assert_non_null(strstr(out, "100% 29/29"));
    if (lines_longer_than(out, 59)) fail_msg("status at 60 columns:\n%s", out);

    const char *workers[] = {"workers", NULL};
    assert_int_equal(qsweep(out, sizeof out, workers), 0);
    assert_non_null(strstr(out, "-w1 "));
    const char *results[] = {"results", "tiny", "--csv", NULL};
    assert_int_equal(qsweep(out, sizeof out, results), 0);
    assert_non_null(strstr(out, "model,format,options,quantize"));
    /* a mistyped experiment: the nearest name the database holds */
    const char *typo[] = {"results", "tiyn", NULL};
    assert_int_not_equal(qsweep(out, sizeof out, typo), 0);
    if (!strstr(out, "no experiment named 'tiyn'; did you mean 'tiny'?"))
        fail_msg("results of a mistyped experiment: %s", out);
    const char *far[] = {"status", "zzzzzzzz", NULL};
    assert_int_not_equal(qsweep(out, sizeof out, far), 0);
    if (strstr(out, "did you mean")) fail_msg("status of an unknown experiment: %s", out);
    char page[1100];
    snprintf(page, sizeof page, "%s/tiny-report.html", e->dir);
    const char *report[] = {"report", "tiny", "-o", page, NULL};
    rc = qsweep(out, sizeof out, report);
    if (rc != 0) fail_msg("report without --db exited %d: %s", rc, out);
    assert_int_equal(access(page, R_OK), 0);
    const char *plan[] = {"plan", "tiny", "--budget-bits", "4.5", "--quantize", "weights", NULL};
    rc = qsweep(out, sizeof out, plan);
    if (rc != 0 || !strstr(out, "budget")) fail_msg("plan without --db exited %d: %s", rc, out);
    const char *plan_bare[] = {"plan", "tiny", NULL};
    assert_int_equal(qsweep(out, sizeof out, plan_bare), 1);
    if (!strstr(out, "--budget-bits B is required") || strstr(out, "usage:"))
        fail_msg("plan without --budget-bits: %s", out);

    PGconn *c = e->c = connect_db(qc_pgserver_conninfo(e->pg));
    const char *cancel[] = {"cancel", "tiny", NULL};
    assert_int_equal(qsweep(out, sizeof out, cancel), 0);
    if (!strstr(out, "experiment tiny is finished (29 succeeded, 0 failed, 0 cancelled): nothing "
                     "to cancel"))
        fail_msg("cancel of a finished experiment: %s", out);
    PGresult *r = PQexec(c, "SELECT job_key FROM jobs ORDER BY id LIMIT 1");
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    char key[200];
    snprintf(key, sizeof key, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    const char *cancel_job[] = {"cancel", "--job", key, NULL};
    assert_int_equal(qsweep(out, sizeof out, cancel_job), 0);
    assert_non_null(strstr(out, "is finished (succeeded): nothing to cancel"));
    const char *cancel_none[] = {"cancel", "--job", "no-such-key", NULL};
    assert_int_equal(qsweep(out, sizeof out, cancel_none), 2);
    assert_non_null(strstr(out, "no job with job_key no-such-key"));
    assert_int_equal(query_long(c, "SELECT count(*) FROM cancel_requests"), 0);

    /* queued work and no worker (an interrupted run): no ETA */
    const char *submit[] = {"submit", TINY,
                            "--set",  "name=tiny-later",
                            "--set",  "dataset.max_chunks=3",
                            "--db",   qc_pgserver_conninfo(e->pg),
                            NULL};
    rc = qsweep(out, sizeof out, submit);
    if (rc != 0) fail_msg("submit exited %d: %s", rc, out);
    const char *later[] = {"status", "tiny-later", NULL};
    assert_int_equal(qsweep(out, sizeof out, later), 0);
    if (!strstr(out, "no worker running") || strstr(out, "ETA")) fail_msg("status: %s", out);
    const char *cancel_later[] = {"cancel", "tiny-later", NULL};
    assert_int_equal(qsweep(out, sizeof out, cancel_later), 0);
    assert_non_null(strstr(out, "cancel requested for experiment tiny-later"));
    assert_int_equal(query_long(c, "SELECT count(*) FROM cancel_requests"), 1);
}

/* argv[1], when given, runs only the test of that name (ctest runs each as its own test, so
 * none of them takes long). */
/* Starts `qsweep run` with argv (argv[0] "qsweep"), stdout and stderr into the file log.
 * Returns its pid. */
static pid_t start_logged(char *const argv[], const char *log) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        execv(QSWEEP_BIN, argv);
        _exit(127);
    }
    return pid;
}

/* Waits up to seconds for pid; its exit code, or fails the test (after SIGKILL) naming what
 * it printed into log. */
static int wait_exit_within(pid_t pid, int seconds, const char *log, const char *what) {
    int rc = 0;
    for (int i = 0; i < seconds * 20; i++) {
        if (exited(pid, &rc)) return rc;
        usleep(50000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    fail_msg("%s still running after %d s:\n%s", what, seconds, file_text(log));
    return -1;
}

/* Whether a postmaster runs on the data directory dir (postmaster.pid names a live
 * process). */
static int postmaster_alive(const char *dir) {
    char path[700];
    snprintf(path, sizeof path, "%s/postmaster.pid", dir);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    long pid = 0;
    int ok = fscanf(f, "%ld", &pid) == 1;
    fclose(f);
    return ok && pid > 0 && kill((pid_t)pid, 0) == 0;
}

/* The tester's grid that asks for a GPU on a machine (here: workers) without one big
 * enough: `qsweep run` waited forever while `qsweep status` named the need. Now, once its
 * own workers have registered, it says which jobs no worker of the run can take and what
 * they need, stops its workers and coordinator and exits 5, the jobs left pending and never
 * attempted. Run again, it says the same (the first run's coordinator is gone, so no
 * "another coordinator" refusal). 4 TiB per GPU: no GPU of any machine fits. */
static void test_run_stops_when_no_worker_can_take_the_jobs(void **state) {
    env *e = *state;
    qs_error err = {0};
    assert_int_equal(qc_pgserver_start_temp(&e->pg, &err), QS_OK);
    const char *db = qc_pgserver_conninfo(e->pg);
    char grid[600], log[600];
    snprintf(grid, sizeof grid, "%s/gpu.yaml", e->dir);
    snprintf(log, sizeof log, "%s/run.out", e->dir);
    FILE *f = fopen(grid, "w");
    assert_non_null(f);
    fprintf(f,
            "name: tinygpu\nkind: sensitivity\nmodels:\n  - %s/tests/engine/data/llama3_gqa\n"
            "dataset:\n  tokens: %s/experiments/data/gpl3.bytes.tokens\n  ctx: 64\n"
            "  max_chunks: 1\nsensitivity:\n  formats: [nvfp4]\n  quantize: [weights]\n"
            "  modes: [component]\n  metrics: [ppl, kl]\n"
            "resources: {gpu_count: 1, gpu_memory_mib: 4194304}\n",
            QSWEEP_SOURCE_DIR, QSWEEP_SOURCE_DIR);
    fclose(f);
    char *argv[] = {"qsweep", "run", grid, "--workers", "2", "--db", (char *)db, NULL};
    for (int round = 0; round < 2; round++) {
        pid_t pid = e->run = start_logged(argv, log);
        int rc = wait_exit_within(pid, 600, log, "qsweep run of jobs no worker can take");
        e->run = 0;
        const char *out = file_text(log);
        if (rc != 5 ||
            !strstr(out, "no worker of this run can take: each needs 1 GPU with "
                         "4194304 MiB") ||
            !strstr(out, "this run's 2 workers' largest GPU has") ||
            strstr(out, "another coordinator"))
            fail_msg("round %d: qsweep run exited %d:\n%s", round + 1, rc, out);
        PGconn *c = e->c = connect_db(db);
        long pending = query_long(c, "SELECT count(*) FROM jobs WHERE state = 'pending'");
        assert_true(pending > 0);
        assert_int_equal(query_long(c, "SELECT count(*) FROM jobs"), pending);
        assert_int_equal(query_long(c, "SELECT count(*) FROM attempts"), 0);
        PQfinish(c);
        e->c = NULL;
    }
}

/* The tester's two `qsweep run` started at the same moment with the private cluster
 * stopped: both died ("another postmaster", "database system is shutting down"). Now the
 * start is serialised and the second run shares the cluster the first started: each ends
 * with exit 0, or 4 with "another coordinator is already running" (same database, the other
 * run's coordinator), never a cluster error; after both the cluster is stopped. Three rounds,
 * since the order varies. */
static void test_runs_started_together_share_the_private_cluster(void **state) {
    env *e = *state;
    char log[2][600];
    char *argv[] = {"qsweep", "run", TINY, "--workers", "1", "--set", "dataset.max_chunks=1", NULL};
    for (int round = 0; round < 3; round++) {
        pid_t pid[2];
        for (int i = 0; i < 2; i++) {
            snprintf(log[i], sizeof log[i], "%s/run%d.out", e->dir, i);
            pid[i] = start_logged(argv, log[i]);
        }
        int ok = 0;
        for (int i = 0; i < 2; i++) {
            int rc = wait_exit_within(pid[i], 900, log[i], "a qsweep run started together");
            const char *out = file_text(log[i]);
            if (strstr(out, "postmaster") || strstr(out, "shutting down") ||
                (rc != 0 && (rc != 4 || !strstr(out, "another coordinator is already running"))))
                fail_msg("round %d, run %d exited %d:\n%s", round + 1, i + 1, rc, out);
            ok += rc == 0;
        }
        if (!ok) fail_msg("round %d: neither run finished the sweep", round + 1);
        if (postmaster_alive(e->pg_dir))
            fail_msg("round %d: the private cluster is still running after both runs", round + 1);
    }
}

/* A run that finds the private cluster started by another run still going shares it and
 * does not stop it when it ends: here the second run is refused (the first one's
 * coordinator holds the database), says it shares the cluster, and the first run goes on
 * undisturbed; it stops the cluster when it ends, the last of its users. */
static void test_run_sharing_the_cluster_leaves_it_to_the_last_run(void **state) {
    env *e = *state;
    char log[2][600];
    snprintf(log[0], sizeof log[0], "%s/first.out", e->dir);
    snprintf(log[1], sizeof log[1], "%s/second.out", e->dir);
    char *argv[] = {"qsweep", "run", TINY, "--workers", "1", "--set", "dataset.max_chunks=64",
                    NULL};
    pid_t first = e->run = start_logged(argv, log[0]);
    for (int i = 0; i < 12000 && !strstr(file_text(log[0]), "running; logs in"); i++)
        usleep(50000); /* 600 s: only a hang */
    if (!strstr(file_text(log[0]), "running; logs in"))
        fail_msg("gave up after 600 s waiting for \"running; logs in\":\n%s", file_text(log[0]));
    pid_t second = start_logged(argv, log[1]);
    int rc = wait_exit_within(second, 600, log[1], "the second qsweep run");
    const char *out = file_text(log[1]);
    if (rc != 4 || !strstr(out, "started by another qsweep run: shared") ||
        !strstr(out, "another coordinator is already running"))
        fail_msg("second qsweep run exited %d:\n%s", rc, out);
    usleep(500000);
    if (!postmaster_alive(e->pg_dir)) fail_msg("the second run stopped the first run's cluster");
    int first_rc = 0;
    if (exited(first, &first_rc))
        fail_msg("the first run stopped (exit %d):\n%s", first_rc, file_text(log[0]));
    kill(first, SIGINT);
    assert_int_equal(wait_exit(first), 130);
    e->run = 0;
    if (postmaster_alive(e->pg_dir)) fail_msg("the last run left the cluster running");
}

int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_run_tiny_grid_then_resubmit_adds_nothing, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_kquant_gguf_sweeps_end_to_end, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sentencepiece_model_sweeps_a_text_end_to_end, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_interrupted_run_reruns_only_unfinished_jobs, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_bad_input_is_refused_before_anything_is_queued, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_cancel_ends_the_run_with_exit_5, setup, teardown),
        cmocka_unit_test_setup_teardown(test_requeue_runs_cancelled_jobs_again, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_worker_killed_by_a_signal_is_restarted_and_the_job_fails_after_max_attempts, setup,
            teardown),
        cmocka_unit_test_setup_teardown(test_run_leaves_an_adopted_cluster_running, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_read_only_commands_never_migrate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_commands_find_the_private_cluster, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_interrupt_during_start_up_stops_cleanly, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_second_run_on_the_same_cluster_says_why, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_run_stops_when_no_worker_can_take_the_jobs, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_runs_started_together_share_the_private_cluster, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_run_sharing_the_cluster_leaves_it_to_the_last_run,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_database_outage_during_a_run_loses_nothing, setup,
                                        teardown),
    };
    if (argc > 1) {
        /* a name that matches no test would run nothing and pass: refuse it */
        size_t i = 0, n = sizeof tests / sizeof tests[0];
        while (i < n && strcmp(tests[i].name, argv[1]))
            i++;
        if (i == n) {
            fprintf(stderr, "no test named %s\n", argv[1]);
            return 1;
        }
        cmocka_set_test_filter(argv[1]);
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
