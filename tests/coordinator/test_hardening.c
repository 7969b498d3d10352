/* coord_hardening: the coordinator's and workers' hardening against faults, against a
 * real private PostgreSQL, the real qsweep-coordinator and qsweep-worker processes and ipc://
 * sockets (nothing mocked). Each test names the failure it guards against:
 *   - a worker with --exit-when-idle leaves (BYE, exit 0) once it has had no job that long,
 *     and not while a job longer than that runs (SLURM arrays drain this way); one that never
 *     reached a coordinator exits non-zero saying so;
 *   - the coordinator stopped (SIGSTOP) longer than the lease: on resume it reads what the
 *     workers sent meanwhile before any lease check, so the job succeeds on attempt 1;
 *   - the coordinator's clock 5 minutes behind or ahead of PostgreSQL's: a job's retry
 *     backoff (jobs.not_before, written with the database's now()) still lasts what it says;
 *   - a result over the protocol limit is refused by the worker with a job error that gives
 *     its size and the limit, on attempt 1, instead of burning every attempt as lost leases;
 *   - the worker's states (CONNECTING, IDLE, RUNNING, DELIVERING, LEAVING) are named in its
 *     log in the order one job's life goes through them;
 *   - a worker killed with SIGKILL, whose coordinator is gone too, reads "lost" in `qsweep
 *     workers` after QC_WORKER_LOST_S rather than "silent" for ever;
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
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "envelope.h"
#include "harness.h"
#include "queries.h"
#include "store.h"

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

/* The breaker's case: no coordinator at the endpoint at all. Leaving "idle" with exit 0 would
 * tell a SLURM array that the sweep is done while none of its work was ever seen: the worker
 * exits non-zero and says it never reached the coordinator. */
static void worker_that_never_reached_the_coordinator_exits_non_zero(void **state) {
    harness *h = *state;
    h_begin(h, "coord_exit_idle_alone"); /* no coordinator is started */
    const char *const idle[] = {"--exit-when-idle-ms", "800", NULL};
    pid_t w = h_start_worker_args(h, "alone", idle);
    int rc = h_wait_exit(w, 10000);
    h->workers[0] = 0;
    assert_true(rc > 0 && rc < 128); /* an error exit, not a hang nor a signal */
    char log[160];
    snprintf(log, sizeof log, "%s/worker-alone.log", h->dir);
    assert_true(h_file_contains(log, "it was never reached"));
    assert_true(h_file_contains(log, h->endpoint));
    assert_false(h_file_contains(log, "BYE"));
}

/* ---- the worker's state machine ---- */

/* Whether the file at path holds each of the n needles, in that order. */
static bool file_has_in_order(const char *path, const char *const *needles, size_t n) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    static char text[1 << 16];
    size_t len = fread(text, 1, sizeof text - 1, f);
    text[len] = 0;
    fclose(f);
    const char *at = text;
    for (size_t i = 0; i < n; i++) {
        at = strstr(at, needles[i]);
        if (!at) return false;
        at += strlen(needles[i]);
    }
    return true;
}

/* The worker's loop is a state machine whose states its log names (worker/loop/loop.c): one
 * job's life reads CONNECTING -> IDLE (the coordinator answered), IDLE -> RUNNING (ASSIGN),
 * RUNNING -> DELIVERING (the job returned, its result waits for the ACK), DELIVERING ->
 * IDLE (ACKed), then IDLE -> LEAVING on SIGTERM, and the worker exits 0 after BYE. */
static void worker_states_are_named_in_its_log(void **state) {
    harness *h = *state;
    h_begin(h, "coord_worker_states");
    h_start_coordinator(h);
    pid_t w = h_start_worker(h, "states");
    char log[160];
    snprintf(log, sizeof log, "%s/worker-states.log", h->dir);
    for (int i = 0; i < 5000 && !h_file_contains(log, "state CONNECTING -> IDLE"); i++)
        h_sleep_ms(20); /* 100 s: only a hang */
    if (!h_file_contains(log, "state CONNECTING -> IDLE"))
        fail_msg("gave up after 100 s waiting for \"state CONNECTING -> IDLE\" in %s", log);
    long id = h_insert_job(h, "short", "sleep", "{\"seconds\": 0.3}", 1, 0);
    assert_true(h_wait_sql(h, 1, 20000,
                           "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'succeeded'", id));
    for (int i = 0; i < 2500 && !h_file_contains(log, "state DELIVERING -> IDLE"); i++)
        h_sleep_ms(20); /* 50 s: only a hang */
    if (!h_file_contains(log, "state DELIVERING -> IDLE"))
        fail_msg("gave up after 50 s waiting for \"state DELIVERING -> IDLE\" in %s", log);
    h_signal(h, w, SIGTERM);
    assert_int_equal(h_wait_exit(w, 10000), 0);
    h->workers[0] = 0;
    const char *const seq[] = {"state CONNECTING -> IDLE", "state IDLE -> RUNNING",
                               "state RUNNING -> DELIVERING", "state DELIVERING -> IDLE",
                               "state IDLE -> LEAVING", "BYE"};
    if (!file_has_in_order(log, seq, sizeof seq / sizeof seq[0]))
        fail_msg("the worker's log does not name its states in order (see %s)", log);
}

/* ---- workers that vanish (the breaker's kill -9) ---- */

/* The state `qsweep workers` shows for worker id (qc_store_workers). */
static void worker_state(harness *h, const char *id, char *state, size_t cap) {
    qc_store *db = NULL;
    qs_error err = {0};
    if (qc_store_open(h->conninfo, "test", &db, &err) != QS_OK) fail_msg("open: %s", err.msg);
    qc_worker_row *rows = NULL;
    size_t n = 0;
    if (qc_store_workers(db, &rows, &n, &err) != QS_OK) fail_msg("workers: %s", err.msg);
    snprintf(state, cap, "(absent)");
    for (size_t i = 0; i < n; i++)
        if (!strcmp(rows[i].id, id)) snprintf(state, cap, "%s", rows[i].state);
    free(rows);
    qc_store_close(db);
}

/* A worker killed with SIGKILL mid-job, and the coordinator gone before it could time the
 * worker out: nothing will ever write left_at. Its attempt is ended by the lease (lost, the
 * job pending again); the row reads connected, then silent after QC_WORKER_SILENT_S, and
 * lost after QC_WORKER_LOST_S, instead of silent for ever. (last_seen is moved back in the
 * database rather than waiting five minutes; the query compares it with PostgreSQL's now().)
 * A worker that said BYE stays left however old. */
static void killed_worker_becomes_lost_after_the_stated_time(void **state) {
    harness *h = *state;
    h_begin(h, "coord_worker_lost");
    long id = h_insert_job(h, "killed-mid-job", "sleep", "{\"seconds\": 30}", 3, 0);
    h_start_coordinator(h);
    pid_t w = h_start_worker(h, "k9");
    assert_true(h_wait_sql(
        h, 1, 20000, "SELECT count(*) FROM attempts WHERE job = %ld AND outcome = 'running'", id));
    h_signal(h, w, SIGKILL); /* reaps it */
    /* the lease (2 s) ends the attempt; the coordinator's worker timeout (3 leases) would
       mark the worker left, so the coordinator is killed before that */
    assert_true(h_wait_sql(
        h, 1, 10000, "SELECT count(*) FROM attempts WHERE job = %ld AND outcome = 'lost'", id));
    assert_true(h_wait_sql(h, 1, 5000,
                           "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'pending'", id));
    h_signal(h, h->coord, SIGKILL);
    char st[16];
    assert_int_equal(
        h_sql_long(h, "SELECT count(*) FROM workers WHERE id = 'k9' AND left_at IS NULL"), 1);
    worker_state(h, "k9", st, sizeof st);
    assert_string_equal(st, "connected");
    h_sql_exec(h, "UPDATE workers SET last_seen = now() - make_interval(secs => %d)",
               QC_WORKER_SILENT_S + 10);
    worker_state(h, "k9", st, sizeof st);
    assert_string_equal(st, "silent");
    h_sql_exec(h, "UPDATE workers SET last_seen = now() - make_interval(secs => %d)",
               QC_WORKER_LOST_S + 1);
    worker_state(h, "k9", st, sizeof st);
    assert_string_equal(st, "lost");
    h_sql_exec(h, "UPDATE workers SET left_at = now()");
    worker_state(h, "k9", st, sizeof st);
    assert_string_equal(st, "left");
}

/* ---- a stalled coordinator ---- */

/* The minimal case: lease 2 s, one 4 s job, the coordinator stopped 3 s a second into
 * it. Before the fix the first loop turn after SIGCONT expired the lease ("no heartbeat for
 * 2000 ms"), ignored the buffered result as "not the job's current attempt" and ran the job
 * again. */
static void coordinator_stopped_longer_than_the_lease_keeps_attempt_1(void **state) {
    harness *h = *state;
    h_begin(h, "coord_stall");
    long id = h_insert_job(h, "four-seconds", "sleep", "{\"seconds\": 4}", 3, 0);
    h_start_coordinator(h);
    h_start_worker(h, "w1");
    assert_true(h_wait_sql(
        h, 1, 20000, "SELECT count(*) FROM attempts WHERE job = %ld AND outcome = 'running'", id));
    h_sleep_ms(1000);
    h_signal(h, h->coord, SIGSTOP);
    h_sleep_ms(3000);
    h_signal(h, h->coord, SIGCONT);
    assert_true(h_wait_sql(h, 1, 20000,
                           "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'succeeded'", id));
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM attempts WHERE job = %ld", id), 1);
    assert_int_equal(h_sql_long(h,
                                "SELECT count(*) FROM attempts WHERE job = %ld AND attempt = 1 AND "
                                "outcome = 'succeeded'",
                                id),
                     1);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM results WHERE job = %ld", id), 1);
    assert_true(h_log_contains(h, "the coordinator did not run for"));
    assert_false(h_log_contains(h, "lease expired"));
}

/* The same stall as a paused machine that hosts both (a VM pause, a suspended laptop), the
 * worker resuming 700 ms after the coordinator (its messages are then certainly not yet
 * queued when the coordinator runs its first loop turn; with the coordinator alone stopped,
 * whether they are is a race between libzmq's I/O thread and the loop). Before the fix the
 * attempt was lost on the first turn after SIGCONT: "lease expired", and attempt 2 ran. */
static void machine_paused_coordinator_resumes_first_the_attempt_is_kept(void **state) {
    harness *h = *state;
    h_begin(h, "coord_stall_both");
    long id = h_insert_job(h, "four-seconds", "sleep", "{\"seconds\": 4}", 3, 0);
    h_start_coordinator(h);
    pid_t w = h_start_worker(h, "w1");
    assert_true(h_wait_sql(
        h, 1, 20000, "SELECT count(*) FROM attempts WHERE job = %ld AND outcome = 'running'", id));
    h_sleep_ms(1000);
    h_signal(h, w, SIGSTOP);
    h_signal(h, h->coord, SIGSTOP);
    h_sleep_ms(3000);
    h_signal(h, h->coord, SIGCONT);
    h_sleep_ms(700);
    h_signal(h, w, SIGCONT);
    assert_true(h_wait_sql(h, 1, 20000,
                           "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'succeeded'", id));
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM attempts WHERE job = %ld", id), 1);
    assert_int_equal(h_sql_long(h, "SELECT attempt FROM results WHERE job = %ld", id), 1);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM results WHERE job = %ld", id), 1);
    assert_true(h_log_contains(h, "the coordinator did not run for"));
    assert_false(h_log_contains(h, "lease expired"));
}

/* The larger run, shortened: 8 sleep jobs of 3 s on 4 workers, the coordinator
 * stopped 5 s (2.5 leases) mid-sweep. Counts from SQL: every job once, no attempt lost. */
static void stall_mid_sweep_loses_no_attempt_and_runs_no_job_twice(void **state) {
    harness *h = *state;
    h_begin(h, "coord_stall_sweep");
    for (int i = 0; i < 8; i++) {
        char key[32];
        snprintf(key, sizeof key, "stall-%d", i);
        h_insert_job(h, key, "sleep", "{\"seconds\": 3}", 3, 0);
    }
    h_start_coordinator(h);
    for (int i = 0; i < 4; i++) {
        char id[8];
        snprintf(id, sizeof id, "w%d", i);
        h_start_worker(h, id);
    }
    assert_true(h_wait_sql(h, 4, 20000, "SELECT count(*) FROM attempts WHERE outcome = 'running'"));
    h_sleep_ms(1000);
    h_signal(h, h->coord, SIGSTOP);
    h_sleep_ms(5000);
    h_signal(h, h->coord, SIGCONT);
    assert_true(h_wait_sql(h, 8, 40000, "SELECT count(*) FROM jobs WHERE state = 'succeeded'"));
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM attempts"), 8);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM attempts WHERE outcome <> 'succeeded'"),
                     0);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM results"), 8);
    assert_int_equal(h_sql_long(h, "SELECT count(DISTINCT job) FROM results"), 8);
}

/* ---- two clocks ---- */

#define FAKETIME_LIB "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"

/* The wall clock of a process started under libfaketime with offset_s, minus ours: checks
 * that the preload works here (else the skew tests would pass without any skew). */
static long faketime_offset_seen(const char *offset_s) {
    char cmd[300];
    snprintf(cmd, sizeof cmd,
             "LD_PRELOAD=%s FAKETIME=%s DONT_FAKE_MONOTONIC=1 date +%%s 2>/dev/null", FAKETIME_LIB,
             offset_s);
    FILE *p = popen(cmd, "r");
    long t = 0;
    if (!p || fscanf(p, "%ld", &t) != 1) t = 0;
    if (p) pclose(p);
    return t ? t - (long)time(NULL) : 0;
}

/* A job whose backoff (jobs.not_before) ends 3 s after the database's now(), served by a
 * coordinator whose wall clock is skew_s off PostgreSQL's (libfaketime; the monotonic clock
 * is left alone). It must start no earlier than not_before and within a few seconds of it.
 * Before the fix the coordinator compared not_before with its own CLOCK_REALTIME: 5 minutes
 * behind, the job waited 303 s; 5 minutes ahead, the backoff was ignored. */
static void backoff_lasts_what_the_database_says_with_a_skewed_clock(harness *h, const char *db,
                                                                     const char *skew_s) {
    if (access(FAKETIME_LIB, R_OK) != 0) {
        fprintf(stderr,
                "skipped: %s is missing (Debian package libfaketime; "
                "tools/install-deps.sh installs it)\n",
                FAKETIME_LIB);
        skip();
    }
    long seen = faketime_offset_seen(skew_s);
    long want = strtol(skew_s, NULL, 10);
    if (labs(seen - want) > 5) {
        fprintf(stderr, "skipped: libfaketime gives an offset of %ld s, not %ld s\n", seen, want);
        skip();
    }
    h_begin(h, db);
    long id = h_insert_job(h, "backed-off", "echo", "{\"metrics\": {\"x\": 1}}", 3, 0);
    h_sql_exec(h, "UPDATE jobs SET not_before = now() + interval '3 seconds' WHERE id = %ld", id);
    char not_before[64]; /* the dispatch clears it: keep it for the check */
    h_sql_text(h, not_before, sizeof not_before, "SELECT not_before FROM jobs WHERE id = %ld", id);
    char preload[200], faketime[64];
    snprintf(preload, sizeof preload, "LD_PRELOAD=%s", FAKETIME_LIB);
    snprintf(faketime, sizeof faketime, "FAKETIME=%s", skew_s);
    const char *const env[] = {preload, faketime, "DONT_FAKE_MONOTONIC=1",
                               "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0", NULL};
    h_start_coordinator_env(h, NULL, env);
    h_start_worker(h, "w1");
    assert_true(h_wait_sql(h, 1, 15000,
                           "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'succeeded'", id));
    /* started no earlier than the backoff's end (PostgreSQL's clock on both sides) */
    assert_int_equal(h_sql_long(h,
                                "SELECT (started_at >= '%s'::timestamptz - interval '50 ms')::int "
                                "FROM attempts WHERE job = %ld",
                                not_before, id),
                     1);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM attempts WHERE job = %ld", id), 1);
}

static void coordinator_clock_5_minutes_behind_still_dispatches_after_the_backoff(void **state) {
    backoff_lasts_what_the_database_says_with_a_skewed_clock(*state, "coord_skew_behind", "-300");
}

static void coordinator_clock_5_minutes_ahead_still_waits_out_the_backoff(void **state) {
    backoff_lasts_what_the_database_says_with_a_skewed_clock(*state, "coord_skew_ahead", "+300");
}

/* ---- results and specs over the protocol limit ---- */

/* An echo spec of n final metrics "m.<i>" = i + 0.25, in a malloc'd string. */
static char *big_echo_spec(int n) {
    char *spec = malloc((size_t)n * 32 + 64);
    assert_non_null(spec);
    size_t o = (size_t)sprintf(spec, "{\"metrics\": {");
    for (int i = 0; i < n; i++)
        o += (size_t)sprintf(spec + o, "%s\"m.%d\": %d.25", i ? ", " : "", i, i);
    strcpy(spec + o, "}}");
    return spec;
}

/* 200,000 metrics: a final RESULT of about 5 MB and an ASSIGN of about 4.4 MB, both over the
 * 4 MiB protocol limit (QS_PROTO_MAX_BYTES), on plain ipc. Before: the coordinator dropped
 * every copy of the result as too big and both attempts were lost to "lease expired: no
 * heartbeat" (the worker heartbeats job 0 once the job has ended). Now both go in chunks:
 * the job succeeds on attempt 1, every metric stored once, no lease lost. */
static void result_and_spec_over_the_protocol_limit_arrive_once_in_chunks(void **state) {
    harness *h = *state;
    h_begin(h, "coord_big_result");
    enum { N = 200000 };
    char *spec = big_echo_spec(N);
    assert_true(strlen(spec) > QS_PROTO_MAX_BYTES);
    long id = h_insert_job(h, "big-result", "echo", spec, 2, 0);
    free(spec);
    h_start_coordinator(h);
    h_start_worker(h, "w1");
    assert_true(h_wait_sql(h, 1, 60000,
                           "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'succeeded'", id));
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM attempts WHERE job = %ld", id), 1);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM results WHERE job = %ld AND final", id),
                     N);
    assert_int_equal(h_sql_long(h,
                                "SELECT count(*) FROM results WHERE job = %ld AND attempt = 1 AND "
                                "value = substr(name, 3)::int + 0.25",
                                id),
                     N);
    assert_false(h_log_contains(h, "lease expired"));
    assert_false(h_log_contains(h, "exceeds the limit"));
    assert_true(h_log_contains(h, "final result of 200000 metrics complete in"));
    char wlog[200];
    snprintf(wlog, sizeof wlog, "%s/worker-w1.log", h->dir);
    assert_true(h_file_contains(wlog, "receiving its spec in"));
}

/* A curve of 30,000 points recorded in a burst (about 700 kB of partial metrics) goes out in
 * frames of at most QS_PROTO_CHUNK_BYTES: partial batches each ACKed by its own seq, or, for
 * points still unacked when the job ends, the chunks of the final RESULT; every point is
 * stored once, with the job's two final metrics. */
static void big_burst_of_curve_points_goes_in_bounded_batches_stored_once(void **state) {
    harness *h = *state;
    h_begin(h, "coord_big_curve");
    enum { POINTS = 30000 };
    char *spec = malloc((size_t)POINTS * 8 + 128);
    assert_non_null(spec);
    size_t o = (size_t)sprintf(spec, "{\"metrics\": {\"a\": 1, \"b\": 2}, \"curve\": "
                                     "{\"train_loss_per_token\": [");
    for (int i = 0; i < POINTS; i++)
        o += (size_t)sprintf(spec + o, "%s%d", i ? "," : "", i % 997);
    strcpy(spec + o, "]}}");
    long id = h_insert_job(h, "big-curve", "echo", spec, 1, 0);
    free(spec);
    h_start_coordinator(h);
    h_start_worker(h, "w1");
    assert_true(h_wait_sql(h, 1, 30000,
                           "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'succeeded'", id));
    assert_int_equal(
        h_sql_long(h, "SELECT count(*) FROM results WHERE job = %ld AND NOT final", id), POINTS);
    assert_int_equal(h_sql_long(h,
                                "SELECT count(DISTINCT step) FROM results WHERE job = %ld AND "
                                "name = 'train_loss_per_token' AND value = step %% 997",
                                id),
                     POINTS);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM results WHERE job = %ld AND final", id),
                     2);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM attempts WHERE job = %ld", id), 1);
    assert_false(h_log_contains(h, "exceeds the limit"));
}

/* A result over what the worker may deliver is refused by the worker itself, on attempt 1,
 * with a job error giving its size and the limit (the limit is lowered for the test:
 * --max-result-bytes; the real one, QS_PROTO_MAX_RESULT_BYTES, is 64 MiB). */
static void result_over_the_worker_limit_fails_with_size_and_limit(void **state) {
    harness *h = *state;
    h_begin(h, "coord_refused_result");
    char *spec = big_echo_spec(20000);
    long id = h_insert_job(h, "too-big", "echo", spec, 1, 0);
    free(spec);
    h_start_coordinator(h);
    const char *const limit[] = {"--max-result-bytes", "100000", NULL};
    h_start_worker_args(h, "w1", limit);
    assert_true(h_wait_sql(h, 1, 30000,
                           "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'failed'", id));
    char err[600];
    h_sql_text(h, err, sizeof err, "SELECT last_error FROM jobs WHERE id = %ld", id);
    assert_non_null(strstr(err, "the final result of 20000 metrics encodes to "));
    assert_non_null(strstr(err, "over the limit of 100000 bytes"));
    assert_int_equal(
        h_sql_long(h, "SELECT count(*) FROM attempts WHERE job = %ld AND outcome = 'failed'", id),
        1);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM results WHERE job = %ld", id), 0);
    assert_false(h_log_contains(h, "lease expired"));
}

int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(worker_exits_zero_with_bye_after_being_idle_that_long,
                                        h_setup, h_teardown),
        cmocka_unit_test_setup_teardown(worker_without_any_job_exits_after_the_idle_time, h_setup,
                                        h_teardown),
        cmocka_unit_test_setup_teardown(worker_that_never_reached_the_coordinator_exits_non_zero,
                                        h_setup, h_teardown),
        cmocka_unit_test_setup_teardown(killed_worker_becomes_lost_after_the_stated_time, h_setup,
                                        h_teardown),
        cmocka_unit_test_setup_teardown(worker_states_are_named_in_its_log, h_setup, h_teardown),
        cmocka_unit_test_setup_teardown(coordinator_stopped_longer_than_the_lease_keeps_attempt_1,
                                        h_setup, h_teardown),
        cmocka_unit_test_setup_teardown(
            machine_paused_coordinator_resumes_first_the_attempt_is_kept, h_setup, h_teardown),
        cmocka_unit_test_setup_teardown(stall_mid_sweep_loses_no_attempt_and_runs_no_job_twice,
                                        h_setup, h_teardown),
        cmocka_unit_test_setup_teardown(
            coordinator_clock_5_minutes_behind_still_dispatches_after_the_backoff, h_setup,
            h_teardown),
        cmocka_unit_test_setup_teardown(
            coordinator_clock_5_minutes_ahead_still_waits_out_the_backoff, h_setup, h_teardown),
        cmocka_unit_test_setup_teardown(
            result_and_spec_over_the_protocol_limit_arrive_once_in_chunks, h_setup, h_teardown),
        cmocka_unit_test_setup_teardown(
            big_burst_of_curve_points_goes_in_bounded_batches_stored_once, h_setup, h_teardown),
        cmocka_unit_test_setup_teardown(result_over_the_worker_limit_fails_with_size_and_limit,
                                        h_setup, h_teardown),
    };
    return cmocka_run_group_tests(tests, h_group_setup, h_group_teardown);
}
