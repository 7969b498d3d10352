/* coord_gpu_fit: GPU-fit scheduling end to end, against a real private PostgreSQL, the real
 * qsweep-coordinator, qsweep-worker processes that advertise faked GPUs in HELLO
 * (--fake-gpus), ipc:// sockets and the real `qsweep status` and `qsweep workers`:
 *   - a job needing 100 GiB per GPU waits while only a CPU worker and a 24 GB card are there,
 *     `qsweep status` names it, and it runs on the H200 worker once that one joins;
 *   - a native-FP4 job is not given to Hopper and runs once a Blackwell worker joins;
 *   - a job with default resources runs on the CPU worker meanwhile. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "fixtures.h"
#include "harness.h"

/* Inserts a sleep job with resources (jobs.resources JSON). */
static void insert_job(harness *h, const char *key, const char *resources) {
    long id = h_insert_job(h, key, "sleep", "{\"seconds\": 0.2}", 3, 0);
    h_sql_exec(h, "UPDATE jobs SET resources = '%s' WHERE id = %ld", resources, id);
    h_sql_exec(h,
               "INSERT INTO experiment_jobs (experiment, job) SELECT id, %ld FROM experiments "
               "WHERE name = 'gpus'",
               id);
}

static int status(harness *h, char *out, size_t cap) {
    const char *args[] = {"status", "--db", h->conninfo, NULL};
    return fx_run(QS_QSWEEP_BIN, args, out, cap);
}

static void jobs_wait_for_workers_whose_gpus_fit_and_status_names_them(void **state) {
    harness *h = *state;
    h_begin(h, "coord_gpu_fit");
    h_sql_exec(h, "INSERT INTO experiments (name, grid) VALUES ('gpus', 'test')");
    insert_job(h, "big", "{\"gpus\": 1, \"gpu_mem_mb\": 102400}");
    insert_job(h, "fp4", "{\"gpus\": 1, \"gpu_mem_mb\": 1000, \"native_fp4\": true}");
    insert_job(h, "plain", "{\"gpus\": 0, \"gpu_mem_mb\": 0}");
    h_start_coordinator(h);
    /* no worker registered yet: nothing to say beyond the progress line's "no worker" */
    char out[8192];
    assert_int_equal(status(h, out, sizeof out), 0);
    assert_non_null(strstr(out, "gpus"));
    assert_null(strstr(out, "no registered worker can take"));
    const char *none[] = {"--fake-gpus", "", NULL}, *l4[] = {"--fake-gpus", "L4:24:8.9", NULL};
    h_start_worker_args(h, "cpu", none);
    h_start_worker_args(h, "small", l4);
    /* the plain job runs on one of them; nothing else can */
    assert_true(h_wait_sql(h, 1, 20000,
                           "SELECT count(*) FROM jobs WHERE job_key = 'plain' AND "
                           "state = 'succeeded'"));
    assert_true(h_wait_sql(h, 2, 10000, "SELECT count(*) FROM workers WHERE left_at IS NULL"));
    h_sleep_ms(1500); /* several heartbeats and ready messages of both */
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM jobs WHERE job_key IN ('big', 'fp4') "
                                   "AND state = 'pending'"),
                     2);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM attempts a JOIN jobs j ON j.id = a.job "
                                   "WHERE j.job_key IN ('big', 'fp4')"),
                     0);
    assert_int_equal(status(h, out, sizeof out), 0);
    assert_non_null(strstr(out, "gpus: 1 pending job no registered worker can take: each needs "
                                "1 GPU with 102400 MiB (the 2 registered workers' largest GPU "
                                "has 24576 MiB; 0 GPUs with native FP4)"));
    assert_non_null(strstr(out, "gpus: 1 pending job no registered worker can take: each needs "
                                "1 GPU with 1000 MiB and native FP4"));

    /* an H200 takes the 100 GiB job, not the FP4 one */
    const char *h200[] = {"--fake-gpus", "H200:141:9.0", NULL};
    h_start_worker_args(h, "hopper", h200);
    assert_true(h_wait_sql(h, 1, 20000,
                           "SELECT count(*) FROM jobs WHERE job_key = 'big' AND "
                           "state = 'succeeded'"));
    char worker[64];
    h_sql_text(h, worker, sizeof worker,
               "SELECT a.worker FROM attempts a JOIN jobs j ON j.id = a.job WHERE j.job_key = "
               "'big'");
    assert_string_equal(worker, "hopper");
    h_sleep_ms(1000);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM jobs WHERE job_key = 'fp4' AND "
                                   "state = 'pending'"),
                     1);
    assert_int_equal(status(h, out, sizeof out), 0);
    assert_null(strstr(out, "102400 MiB"));
    assert_non_null(strstr(out, "1000 MiB and native FP4"));

    /* the workers list shows what each has */
    const char *wargs[] = {"workers", "--db", h->conninfo, NULL};
    assert_int_equal(fx_run(QS_QSWEEP_BIN, wargs, out, sizeof out), 0);
    assert_non_null(strstr(out, "H200 141.0 GiB cc 9.0 FP4 emulated"));
    assert_non_null(strstr(out, "L4 24.0 GiB cc 8.9 FP4 emulated"));
    assert_non_null(strstr(out, "none (CPU)"));

    /* and so do the views of schema 070 */
    assert_int_equal(h_sql_long(h, "SELECT memory_mib FROM v_worker_gpus WHERE worker = 'hopper' "
                                   "AND gpu = 0 AND NOT native_fp4 AND compute_capability = '9.0'"),
                     141 * 1024);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM v_worker_gpus WHERE worker = 'cpu'"), 0);
    assert_int_equal(h_sql_long(h, "SELECT gpu_mem_mib FROM v_job_resources WHERE job_key = 'big' "
                                   "AND gpus = 1 AND NOT native_fp4"),
                     102400);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM v_job_resources WHERE job_key = 'fp4' "
                                   "AND native_fp4 AND state = 'pending'"),
                     1);

    /* a Blackwell worker takes the FP4 job */
    const char *b200[] = {"--fake-gpus", "B200:180:10.0", NULL};
    h_start_worker_args(h, "blackwell", b200);
    assert_true(h_wait_sql(h, 1, 20000,
                           "SELECT count(*) FROM jobs WHERE job_key = 'fp4' AND "
                           "state = 'succeeded'"));
    h_sql_text(h, worker, sizeof worker,
               "SELECT a.worker FROM attempts a JOIN jobs j ON j.id = a.job WHERE j.job_key = "
               "'fp4'");
    assert_string_equal(worker, "blackwell");
    assert_int_equal(fx_run(QS_QSWEEP_BIN, wargs, out, sizeof out), 0);
    assert_non_null(strstr(out, "B200 180.0 GiB cc 10.0 FP4 native"));
    assert_int_equal(status(h, out, sizeof out), 0);
    assert_null(strstr(out, "no registered worker can take"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(jobs_wait_for_workers_whose_gpus_fit_and_status_names_them,
                                        h_setup, h_teardown),
    };
    return cmocka_run_group_tests(tests, h_group_setup, h_group_teardown);
}
