/* coord_supervise: a worker says why its process died under any launcher, not only under
 * `qsweep run` (worker/loop/supervise.h). The worker here is started by the test, as SLURM
 * or systemd would start it, with --supervise: jobs that end its process by SIGSEGV,
 * SIGABRT and SIGKILL are each recorded lost with their signal (attempts.cause 'signal'),
 * count against max_attempts, and the worker, restarted by its own supervisor under the same
 * id, goes on to run the next job; SIGTERM to the supervisor still stops the worker cleanly.
 * Under a memory cgroup (root only) a job the OOM killer ends is recorded as out of memory
 * (cause 'oom') with the cgroup's limit and fails at once. Real coordinator and worker
 * processes, a real private PostgreSQL; counts and the recorded causes read from SQL. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <libpq-fe.h>

#include "harness.h"
#include "migrate.h"

/* The attempts of job id as "N outcome" and their errors, printed; returns the outcomes. */
static void attempts_of(harness *h, long id, char *outcomes, size_t cap) {
    char errors[2000];
    h_sql_text(h, outcomes, cap,
               "SELECT string_agg(attempt || ' ' || outcome, ', ' ORDER BY attempt) FROM attempts "
               "WHERE job = %ld",
               id);
    h_sql_text(h, errors, sizeof errors,
               "SELECT string_agg(attempt || ': ' || error, ' | ' ORDER BY attempt) FROM attempts "
               "WHERE job = %ld",
               id);
    fprintf(stderr, "job %ld: attempts %s; used %ld; errors %s\n", id, outcomes,
            h_sql_long(h, "SELECT attempts_used FROM jobs WHERE id = %ld", id), errors);
}

/* Job id failed after `lost` lost attempts, each naming the signal in words `how`. */
static void expect_lost_by(harness *h, long id, int lost, const char *how) {
    assert_true(h_wait_sql(h, 1, 30000,
                           "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'failed'", id));
    char outcomes[200];
    attempts_of(h, id, outcomes, sizeof outcomes);
    assert_string_equal(outcomes, lost == 1 ? "1 lost" : "1 lost, 2 lost");
    assert_int_equal(h_sql_long(h, "SELECT attempts_used FROM jobs WHERE id = %ld", id), lost);
    assert_int_equal(h_sql_long(h,
                                "SELECT count(*) FROM attempts WHERE job = %ld AND error LIKE "
                                "'%%its process ended: killed by signal %s%%'",
                                id, how),
                     lost);
    assert_int_equal(h_sql_long(h,
                                "SELECT count(*) FROM attempts WHERE job = %ld AND error LIKE "
                                "'%%out of memory%%'",
                                id),
                     0);
    /* attempts.cause records the class of the process end, not how the loss was noticed */
    char causes[200];
    h_sql_text(h, causes, sizeof causes,
               "SELECT string_agg(attempt || ' ' || COALESCE(cause, 'NULL'), ', ' ORDER BY "
               "attempt) FROM attempts WHERE job = %ld",
               id);
    assert_string_equal(causes, lost == 1 ? "1 signal" : "1 signal, 2 signal");
}

static void crashes_are_recorded_by_the_worker_itself(void **state) {
    harness *h = *state;
    h_begin(h, "coord_supervise_crash");
    long segv = h_insert_job(h, "segv", "crash", "{\"signal\": \"SEGV\"}", 2, 30);
    long abrt = h_insert_job(h, "abrt", "crash", "{\"signal\": \"ABRT\"}", 1, 20);
    long kill9 = h_insert_job(h, "kill", "crash", "{\"signal\": \"KILL\"}", 1, 10);
    long echo = h_insert_job(h, "echo", "echo", "{\"metrics\": {\"m\": 7}}", 1, 0);
    h_start_coordinator(h);
    const char *extra[] = {"--supervise", "10", NULL};
    pid_t sup = h_start_worker_args(h, "w1", extra);
    expect_lost_by(h, segv, 2, "11 (SIGSEGV)");
    expect_lost_by(h, abrt, 1, "6 (SIGABRT)");
    expect_lost_by(h, kill9, 1, "9 (SIGKILL)");
    assert_true(h_wait_sql(
        h, 1, 30000, "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'succeeded'", echo));
    assert_int_equal(
        h_sql_long(h, "SELECT count(*) FROM attempts WHERE job = %ld AND cause IS NULL", echo), 1);
    assert_int_equal(h_sql_long(h,
                                "SELECT count(*) FROM results WHERE job = %ld AND name = 'm' AND "
                                "final AND value = 7",
                                echo),
                     1);
    /* one worker id throughout, its process a child of the supervisor, which still runs */
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM workers"), 1);
    long pid = h_sql_long(h, "SELECT pid FROM workers WHERE id = 'w1'");
    fprintf(stderr, "supervisor %d, worker process %ld\n", (int)sup, pid);
    assert_true(pid != sup);
    assert_int_equal(h_wait_exit(sup, 0), -1);
    /* SIGTERM to the process the launcher started stops the worker: BYE, exit 0 */
    assert_int_equal(kill(sup, SIGTERM), 0);
    assert_int_equal(h_wait_exit(sup, 20000), 0);
    h->workers[h->n_workers - 1] = 0; /* reaped */
    assert_true(h_wait_sql(h, 1, 10000,
                           "SELECT count(*) FROM workers WHERE id = 'w1' AND left_at IS NOT NULL"));
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM attempts WHERE outcome = 'running'"), 0);
}

/* Writes text to the cgroup control file dir/name; false when it cannot. */
static bool cg_write(const char *dir, const char *name, const char *text) {
    char path[300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) return false;
    bool ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok;
}

/* A memory cgroup of limit bytes without swap, in dir (v2, else v1); false when this
 * machine gives none (not root, no memory controller). */
static bool make_memory_cgroup(char *dir, size_t cap, const char *limit) {
    bool v2 = access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0;
    snprintf(dir, cap, "%s/qsweep-test-sup-%d", v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory",
             (int)getpid());
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) return false;
    if (v2) {
        cg_write("/sys/fs/cgroup", "cgroup.subtree_control", "+memory");
        (void)cg_write(dir, "memory.swap.max", "0");
        return cg_write(dir, "memory.max", limit);
    }
    (void)cg_write(dir, "memory.swappiness", "0");
    return cg_write(dir, "memory.limit_in_bytes", limit);
}

/* A supervised worker in a 256 MiB memory cgroup runs a job that touches 1 GiB: the OOM
 * killer ends the worker process, its supervisor (in the same cgroup, a few MiB) says so with
 * the cgroup's limit, and the job fails at once, one attempt used of three. */
static void oom_kill_is_recorded_with_the_limit_and_not_retried(void **state) {
    harness *h = *state;
    if (geteuid() != 0) skip();
    char cg[200];
    if (!make_memory_cgroup(cg, sizeof cg, "268435456")) {
        fprintf(stderr, "no memory cgroup to be made here (%s): skipped\n", cg);
        rmdir(cg);
        skip();
    }
    h_begin(h, "coord_supervise_oom");
    long id = h_insert_job(h, "oom", "alloc", "{\"bytes\": 1073741824}", 3, 0);
    h_start_coordinator(h);
    char script[400];
    snprintf(script, sizeof script, "echo $$ > %s/cgroup.procs && exec \"$0\" \"$@\"", cg);
    const char *wrap[] = {"/bin/sh", "-c", script, NULL};
    const char *extra[] = {"--supervise", "10", NULL};
    pid_t sup = h_start_worker_wrapped(h, "w1", wrap, extra);
    assert_true(h_wait_sql(h, 1, 30000,
                           "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'failed'", id));
    char outcomes[200];
    attempts_of(h, id, outcomes, sizeof outcomes);
    assert_string_equal(outcomes, "1 lost");
    assert_int_equal(h_sql_long(h, "SELECT attempts_used FROM jobs WHERE id = %ld", id), 1);
    char err[1400];
    h_sql_text(h, err, sizeof err, "SELECT error FROM attempts WHERE job = %ld", id);
    assert_non_null(strstr(err, "killed by signal 9 (SIGKILL); out of memory"));
    assert_non_null(strstr(err, "allows 268435456 bytes (256 MiB)"));
    assert_non_null(strstr(err, "not retried"));
    h_sql_text(h, err, sizeof err, "SELECT cause FROM attempts WHERE job = %ld", id);
    assert_string_equal(err, "oom");
    h_sql_text(h, err, sizeof err, "SELECT last_error FROM jobs WHERE id = %ld", id);
    assert_non_null(strstr(err, "out of memory"));
    assert_int_equal(h_wait_exit(sup, 0), -1); /* the supervisor lives on, its worker too */
    h_end(h);
    rmdir(cg);
}

/* schema/170_attempt_cause.sql on a database whose lost attempts ended before it: each gets
 * the class its error text says exactly (the coordinator's own words and a supervisor's note
 * after them), others stay NULL, the worker's own text of a failed attempt included. */
static void the_migration_fills_the_cause_of_earlier_lost_attempts(void **state) {
    harness *h = *state;
    h_begin(h, "coord_supervise_migrate");
    h_sql_exec(h, "DELETE FROM schema_migrations WHERE version = 170");
    h_sql_exec(h, "ALTER TABLE attempts DROP COLUMN cause");
    long id = h_insert_job(h, "old", "echo", "{\"metrics\": {\"m\": 1}}", 20, 0);
    const char *rows[][2] = {
        {"lost", "lease expired: no heartbeat from worker w1 for 2000 ms"},
        {"lost", "lease expired: worker w1 re-registered from a new connection without this "
                 "attempt (its process restarted) and no heartbeat named it for 2000 ms; its "
                 "process ended: killed by signal 11 (SIGSEGV)"},
        {"lost", "worker re-registered without it (restarted); its process ended: killed by "
                 "signal 9 (SIGKILL); out of memory: the kernel's OOM killer ended it (cgroup "
                 "oom_kill +1); not retried: the job needs more memory than that"},
        {"lost", "lease expired: no heartbeat from worker w1 for 2000 ms; its process ended: "
                 "exit status 3"},
        {"lost", "worker re-registered without it (restarted)"},
        {"lost", "worker w1 did not re-attach within 4000 ms of a coordinator restart"},
        {"lost", "a text no coordinator wrote"},
        {"failed", "out of memory"},
        {"preempted", "worker left (BYE) without reporting the attempt"},
        {"succeeded", NULL}};
    size_t n = sizeof rows / sizeof rows[0];
    for (size_t i = 0; i < n; i++) {
        char text[600] = "NULL";
        if (rows[i][1]) {
            char esc[500];
            size_t k = 0;
            for (const char *c = rows[i][1]; *c && k + 2 < sizeof esc; c++) {
                if (*c == '\'') esc[k++] = '\'';
                esc[k++] = *c;
            }
            esc[k] = 0;
            snprintf(text, sizeof text, "'%s'", esc);
        }
        h_sql_exec(h,
                   "INSERT INTO attempts (job, attempt, worker, ended_at, outcome, error) VALUES "
                   "(%ld, %zu, 'w1', now(), '%s', %s)",
                   id, i + 1, rows[i][0], text);
    }
    PGconn *c = PQconnectdb(h->conninfo);
    assert_int_equal(PQstatus(c), CONNECTION_OK);
    qs_error err = {0};
    int applied = -1;
    qs_status st = qc_migrate(c, &applied, &err);
    PQfinish(c);
    if (st != QS_OK) fail_msg("%s", err.msg);
    assert_int_equal(applied, 1);
    char causes[400];
    h_sql_text(h, causes, sizeof causes,
               "SELECT string_agg(attempt || ' ' || COALESCE(cause, 'NULL'), ', ' ORDER BY "
               "attempt) FROM attempts WHERE job = %ld",
               id);
    fprintf(stderr, "causes after the migration: %s\n", causes);
    assert_string_equal(causes, "1 lease, 2 signal, 3 oom, 4 exit, 5 restart, 6 grace, 7 NULL, "
                                "8 NULL, 9 NULL, 10 NULL");
    h_end(h);
}

#ifdef QS_QSWEEP_BIN
/* `qsweep worker` supervises by default: a worker process killed from outside by SIGSEGV is
 * started again under the same id (the workers row's pid changes, the supervisor's log says
 * how the last one ended), and SIGTERM to the supervisor stops the worker cleanly. With
 * --no-supervise the launcher's process is the worker. */
static void qsweep_worker_restarts_its_process_under_the_same_id(void **state) {
    harness *h = *state;
    h_begin(h, "coord_supervise_cli");
    h_start_coordinator(h);
    char *argv[] = {(char *)QS_QSWEEP_BIN, "worker", "--connect", h->endpoint, "--id", "qw",
                    "--threads",           "1",      "--gpus",    "none",      NULL};
    /* An ASan build's handler of SIGSEGV would catch the signal sent below and turn it into an
       exit, which the supervisor rightly does not restart: the worker is started without it
       (the same option appended for it alone; no effect without ASan) */
    const char *asan = getenv("ASAN_OPTIONS");
    char *saved = asan ? strdup(asan) : NULL;
    char opts[600];
    snprintf(opts, sizeof opts, "%s%shandle_segv=0", saved ? saved : "",
             saved && saved[0] ? ":" : "");
    assert_int_equal(setenv("ASAN_OPTIONS", opts, 1), 0);
    pid_t sup = h_start_process(h, "qw", argv);
    if (saved)
        setenv("ASAN_OPTIONS", saved, 1);
    else
        unsetenv("ASAN_OPTIONS");
    free(saved);
    assert_true(h_wait_sql(h, 1, 20000, "SELECT count(*) FROM workers WHERE id = 'qw'"));
    long pid1 = h_sql_long(h, "SELECT pid FROM workers WHERE id = 'qw'");
    assert_true(pid1 != sup && pid1 > 0);
    assert_int_equal(kill((pid_t)pid1, SIGSEGV), 0);
    assert_true(h_wait_sql(h, 1, 20000,
                           "SELECT count(*) FROM workers WHERE id = 'qw' AND pid NOT IN (%ld, %d)",
                           pid1, (int)sup));
    char log[200];
    snprintf(log, sizeof log, "%s/qw.log", h->dir);
    assert_true(h_file_contains(log, "killed by signal 11 (SIGSEGV)"));
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM workers"), 1);
    assert_int_equal(kill(sup, SIGTERM), 0);
    assert_int_equal(h_wait_exit(sup, 20000), 0);
    h->workers[h->n_workers - 1] = 0; /* reaped */
    assert_true(h_wait_sql(h, 1, 10000,
                           "SELECT count(*) FROM workers WHERE id = 'qw' AND left_at IS NOT NULL"));
    char *plain[] = {
        (char *)QS_QSWEEP_BIN, "worker", "--connect", h->endpoint, "--id",           "qw2",
        "--threads",           "1",      "--gpus",    "none",      "--no-supervise", NULL};
    pid_t one = h_start_process(h, "qw2", plain);
    assert_true(h_wait_sql(h, 1, 20000,
                           "SELECT count(*) FROM workers WHERE id = 'qw2' AND pid = %d", (int)one));
}
#endif

int main(void) {
    const struct CMUnitTest tests[] = {
#ifdef QS_QSWEEP_BIN
        cmocka_unit_test_setup_teardown(qsweep_worker_restarts_its_process_under_the_same_id,
                                        h_setup, h_teardown),
#endif
        cmocka_unit_test_setup_teardown(crashes_are_recorded_by_the_worker_itself, h_setup,
                                        h_teardown),
        cmocka_unit_test_setup_teardown(oom_kill_is_recorded_with_the_limit_and_not_retried,
                                        h_setup, h_teardown),
        cmocka_unit_test_setup_teardown(the_migration_fills_the_cause_of_earlier_lost_attempts,
                                        h_setup, h_teardown),
    };
    return cmocka_run_group_tests(tests, h_group_setup, h_group_teardown);
}
