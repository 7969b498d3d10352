/* coord_presence: whether a worker is there, as `qsweep workers` and `qsweep status` say it,
 * against a real private PostgreSQL, the real qsweep-coordinator and qsweep-worker over
 * ipc:// and the real `qsweep` command:
 *   - with the default 30 s lease, a worker busy with a 15 s job has workers.last_seen
 *     refreshed from its heartbeats at most 5 s apart (it was every half lease, 15 s, so
 *     `qsweep workers` showed last seen 5s, 10s, 15s and a killed worker still connected);
 *   - `qsweep status` of the experiment whose job runs gives no "no worker running"; that of
 *     an experiment whose GPU job waits while the only (CPU) worker is busy says it waits for
 *     a worker, and that no registered worker has a GPU (not "largest GPU has 0 MiB"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "fixtures.h"
#include "harness.h"

/* Inserts a sleep job of experiment `experiment` with jobs.resources JSON. */
static long insert_job(harness *h, const char *experiment, const char *key, const char *spec,
                       const char *resources) {
    long id = h_insert_job(h, key, "sleep", spec, 3, 0);
    h_sql_exec(h, "UPDATE jobs SET resources = '%s' WHERE id = %ld", resources, id);
    h_sql_exec(h,
               "INSERT INTO experiment_jobs (experiment, job) SELECT id, %ld FROM experiments "
               "WHERE name = '%s'",
               id, experiment);
    return id;
}

static int qsweep(harness *h, const char *cmd, const char *experiment, char *out, size_t cap) {
    const char *args[] = {cmd, experiment, "--db", h->conninfo, NULL};
    if (!experiment) {
        args[1] = "--db";
        args[2] = h->conninfo;
        args[3] = NULL;
    }
    return fx_run(QS_QSWEEP_BIN, args, out, cap);
}

static void a_busy_worker_stays_seen_and_status_says_who_waits(void **state) {
    harness *h = *state;
    h_begin(h, "coord_presence");
    h_sql_exec(h, "INSERT INTO experiments (name, grid) VALUES ('busy', 'test'), "
                  "('queued', 'test')");
    long run = insert_job(h, "busy", "fifteen-seconds", "{\"seconds\": 15}",
                          "{\"gpus\": 0, \"gpu_mem_mb\": 0}");
    insert_job(h, "queued", "wants-a-gpu", "{\"seconds\": 0.1}",
               "{\"gpus\": 1, \"gpu_mem_mb\": 1000}");
    const char *lease[] = {"--lease-ms", "30000", NULL}; /* the default lease: 15 s half */
    h_start_coordinator_env(h, lease, NULL);
    const char *none[] = {"--fake-gpus", "", NULL};
    h_start_worker_args(h, "cpu", none);
    assert_true(h_wait_sql(
        h, 1, 20000, "SELECT count(*) FROM attempts WHERE job = %ld AND outcome = 'running'", run));
    /* 8 s of the 15 s job (time left for the status checks, sanitizers included): last_seen
       never older than the 5 s refresh (plus a commit) */
    long oldest = 0;
    for (int i = 0; i < 16; i++) {
        long age = h_sql_long(h, "SELECT (extract(epoch FROM now() - last_seen) * 1000)::bigint "
                                 "FROM workers WHERE id = 'cpu'");
        if (age > oldest) oldest = age;
        h_sleep_ms(500);
    }
    assert_true(oldest > 0);
    if (oldest > 6500) fail_msg("last_seen was %ld ms old while the worker heartbeats", oldest);
    char out[8192];
    assert_int_equal(qsweep(h, "workers", NULL, out, sizeof out), 0);
    assert_non_null(strstr(out, "connected"));
    assert_int_equal(qsweep(h, "status", "busy", out, sizeof out), 0);
    if (!strstr(out, "running 1") || strstr(out, "no worker")) fail_msg("status busy: %s", out);
    assert_int_equal(qsweep(h, "status", "queued", out, sizeof out), 0);
    assert_null(strstr(out, "no worker running"));
    assert_non_null(strstr(out, "waiting for a worker"));
    assert_non_null(strstr(out, "queued: 1 pending job no registered worker can take: each needs "
                                "1 GPU with 1000 MiB (no registered worker has a GPU)"));
    assert_null(strstr(out, "largest GPU has 0 MiB"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(a_busy_worker_stays_seen_and_status_says_who_waits, h_setup,
                                        h_teardown),
    };
    return cmocka_run_group_tests(tests, h_group_setup, h_group_teardown);
}
