/* coord_failures: a failure is retried only where retrying can help (proto/qsweep.proto,
 * FailureClass; coordinator/server/transitions.c). A permanent one (a job error: a bad spec, a
 * diverged run, a result over the worker's limit) fails its job at once, whatever attempts
 * are left; a job of a kind no worker advertises waits, unattempted; an allocation failure
 * (a worker under prlimit --as) says "out of memory" and is retried after its backoff on
 * another worker. Real coordinator and worker processes, a real private PostgreSQL. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "exit_status.h"
#include "harness.h"

/* jobs by state, attempts by outcome and results, printed for the record. */
static void print_counts(harness *h, const char *scenario) {
    char jobs[256], atts[256];
    h_sql_text(h, jobs, sizeof jobs,
               "SELECT COALESCE(string_agg(state || ' ' || n, ', ' ORDER BY state), 'none') FROM "
               "(SELECT state::text, count(*) n FROM jobs GROUP BY state) s");
    h_sql_text(h, atts, sizeof atts,
               "SELECT COALESCE(string_agg(outcome || ' ' || n, ', ' ORDER BY outcome), 'none') "
               "FROM (SELECT outcome::text, count(*) n FROM attempts GROUP BY outcome) s");
    long rows = h_sql_long(h, "SELECT count(*) FROM results WHERE final");
    long twice = h_sql_long(h, "SELECT count(*) - count(DISTINCT (job, name, step)) FROM results");
    fprintf(stderr, "%s: jobs %s; attempts %s; final results %ld, twice %ld\n", scenario, jobs,
            atts, rows, twice);
    assert_int_equal(twice, 0);
}

static void permanent_failures_fail_at_once_and_unknown_kinds_wait(void **state) {
    harness *h = *state;
    h_begin(h, "coord_fail_permanent");
    long diverged = h_insert_job(h, "diverged", "fail",
                                 "{\"message\": \"diverged: loss is NaN at step 3\"}", 3, 0);
    long bad_spec = h_insert_job(h, "bad-spec", "sleep", "{\"seconds\": \"soon\"}", 3, 0);
    /* 40 metrics of a long name: over the worker's 1000-byte result limit */
    char spec[4096] = "{\"metrics\": {";
    for (int i = 0; i < 40; i++)
        snprintf(spec + strlen(spec), sizeof spec - strlen(spec),
                 "%s\"a_rather_long_metric_name_%02d\": %d", i ? ", " : "", i, i);
    strcat(spec, "}}");
    long too_large = h_insert_job(h, "too-large", "echo", spec, 3, 0);
    long unknown = h_insert_job(h, "unknown-kind", "no_such_kind", "{}", 3, 0);
    long fine = h_insert_job(h, "fine", "echo", "{\"metrics\": {\"ppl\": 7.5}}", 3, -1);
    h_start_coordinator(h);
    const char *extra[] = {"--max-result-bytes", "1000", NULL};
    h_start_worker_args(h, "w1", extra);
    assert_true(h_wait_sql(h, 4, 30000,
                           "SELECT count(*) FROM jobs WHERE state IN ('failed', 'succeeded')"));
    h_sleep_ms(2 * H_LEASE_MS); /* time for any retry that should not happen */
    long ids[] = {diverged, bad_spec, too_large};
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(
            h_sql_long(h, "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'failed'", ids[i]),
            1);
        assert_int_equal(h_sql_long(h, "SELECT count(*) FROM attempts WHERE job = %ld", ids[i]), 1);
        assert_int_equal(h_sql_long(h, "SELECT attempts_used FROM jobs WHERE id = %ld", ids[i]), 1);
    }
    char msg[512];
    h_sql_text(h, msg, sizeof msg, "SELECT last_error FROM jobs WHERE id = %ld", too_large);
    assert_non_null(strstr(msg, "1000"));
    h_sql_text(h, msg, sizeof msg, "SELECT last_error FROM jobs WHERE id = %ld", diverged);
    assert_string_equal(msg, "diverged: loss is NaN at step 3");
    /* no worker advertises the kind: never assigned, nothing used up */
    assert_int_equal(
        h_sql_long(h,
                   "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'pending' AND "
                   "attempts_used = 0",
                   unknown),
        1);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM attempts WHERE job = %ld", unknown), 0);
    assert_int_equal(
        h_sql_long(h, "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'succeeded'", fine), 1);
    print_counts(h, "permanent failures");
}

static void out_of_memory_says_so_and_is_retried_on_another_worker(void **state) {
    harness *h = *state;
#if defined(__SANITIZE_ADDRESS__)
    /* ASan reserves terabytes of shadow address space at start-up, so a worker under a 640 MiB
     * address-space limit cannot start at all: the release build runs this case */
    (void)h;
    printf("SKIP: an address-space limit (prlimit --as) cannot hold an ASan build's worker\n");
    skip();
#endif
    h_begin(h, "coord_fail_oom");
    long id = h_insert_job(h, "big-alloc", "alloc", "{\"bytes\": 1073741824}", 3, 0);
    h_start_coordinator(h);
    /* 640 MiB of address space: the worker starts, the 1 GiB allocation fails */
    const char *wrap[] = {"/usr/bin/prlimit", "--as=671088640", "--", NULL};
    h_start_worker_wrapped(h, "small", wrap, NULL);
    assert_true(h_wait_sql(
        h, 1, 30000, "SELECT count(*) FROM attempts WHERE job = %ld AND outcome = 'failed'", id));
    h_start_worker(h, "big");
    assert_true(h_wait_sql(h, 1, 30000,
                           "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'succeeded'", id));
    char msg[512];
    h_sql_text(h, msg, sizeof msg, "SELECT error FROM attempts WHERE job = %ld AND attempt = 1",
               id);
    assert_non_null(strstr(msg, "out of memory"));
    assert_int_equal(h_sql_long(h,
                                "SELECT count(*) FROM attempts WHERE job = %ld AND attempt = 1 AND "
                                "worker = 'small' AND outcome = 'failed'",
                                id),
                     1);
    /* the retry went to the other worker, though the first was idle and ready again */
    assert_int_equal(h_sql_long(h,
                                "SELECT count(*) FROM attempts WHERE job = %ld AND attempt = 2 AND "
                                "worker = 'big' AND outcome = 'succeeded'",
                                id),
                     1);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM attempts WHERE job = %ld", id), 2);
    assert_int_equal(h_sql_long(h,
                                "SELECT count(*) FROM results WHERE job = %ld AND name = 'bytes' "
                                "AND final AND value = 1073741824",
                                id),
                     1);
    print_counts(h, "out of memory");
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
    snprintf(dir, cap, "%s/qsweep-test-oom-%d", v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory",
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

/* A worker in a memory cgroup of 256 MiB touches 1 GiB: the kernel's OOM killer ends it.
 * The test is its supervisor, as qsweep run is: it reads the cgroup's OOM-kill count
 * (exit_status.h), describes the end and starts a replacement with --previous-id and
 * --previous-exit; the lost attempt then says "killed by signal 9" and "out of memory", and
 * the job fails at once, one attempt used of two: another try would need more memory than
 * the worker had (coordinator/server/transitions.c). */
static void oom_killed_worker_is_recorded_as_signal_and_out_of_memory(void **state) {
    harness *h = *state;
    if (geteuid() != 0) skip();
    char cg[200];
    if (!make_memory_cgroup(cg, sizeof cg, "268435456")) {
        fprintf(stderr, "no memory cgroup to be made here (%s): skipped\n", cg);
        rmdir(cg);
        skip();
    }
    h_begin(h, "coord_fail_oom_kill");
    long id = h_insert_job(h, "oom-kill", "alloc", "{\"bytes\": 1073741824}", 2, 0);
    h_start_coordinator(h);
    char script[400];
    snprintf(script, sizeof script, "echo $$ > %s/cgroup.procs && exec \"$0\" \"$@\"", cg);
    const char *wrap[] = {"/bin/sh", "-c", script, NULL};
    long before = qs_cgroup_dir_oom_kills(cg);
    pid_t pid = h_start_worker_wrapped(h, "w1", wrap, NULL);
    int status = 0;
    pid_t r = 0;
    for (int t = 0; t < 6000 && r != pid; t++) { /* 600 s: only a hang */
        r = waitpid(pid, &status, WNOHANG);
        if (r != pid) h_sleep_ms(100);
    }
    h->workers[h->n_workers - 1] = 0; /* reaped here */
    long after = qs_cgroup_dir_oom_kills(cg);
    rmdir(cg);
    if (r != pid) fail_msg("gave up after 600 s waiting for worker %d to be OOM-killed", (int)pid);
    char how[300];
    qs_exit_describe(status, before >= 0 && after >= 0 ? after - before : 0, how, sizeof how);
    fprintf(stderr, "the worker in the cgroup ended: %s (oom_kill %ld -> %ld)\n", how, before,
            after);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    assert_true(after > before);
    const char *extra[] = {"--previous-id", "w1", "--previous-exit", how, NULL};
    h_start_worker_args(h, "w1-r1", extra);
    assert_true(h_wait_sql(h, 1, 30000,
                           "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'failed'", id));
    char msg[1400];
    h_sql_text(h, msg, sizeof msg,
               "SELECT outcome || ': ' || error FROM attempts WHERE job = %ld AND attempt = 1", id);
    fprintf(stderr, "attempt 1: %s\n", msg);
    assert_non_null(strstr(msg, "lost: "));
    assert_non_null(strstr(msg, "killed by signal 9 (SIGKILL)"));
    assert_non_null(strstr(msg, "out of memory"));
    assert_non_null(strstr(msg, "not retried"));
    assert_int_equal(h_sql_long(h, "SELECT attempts_used FROM jobs WHERE id = %ld", id), 1);
    h_sleep_ms(H_LEASE_MS); /* time for an attempt that must not come */
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM attempts WHERE job = %ld", id), 1);
    print_counts(h, "OOM killer");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(permanent_failures_fail_at_once_and_unknown_kinds_wait,
                                        h_setup, h_teardown),
        cmocka_unit_test_setup_teardown(out_of_memory_says_so_and_is_retried_on_another_worker,
                                        h_setup, h_teardown),
        cmocka_unit_test_setup_teardown(oom_killed_worker_is_recorded_as_signal_and_out_of_memory,
                                        h_setup, h_teardown),
    };
    return cmocka_run_group_tests(tests, h_group_setup, h_group_teardown);
}
