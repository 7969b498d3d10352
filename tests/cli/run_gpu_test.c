/* qsweep run on a machine with GPUs: local worker i offers GPU i mod G and runs its
 * models on the CUDA backend (worker/jobs/jobs_backend.h), every result stores its GEMM path
 * from the GEMM path table (kernels/cuda/qk_gemm_path.h: the quantized evaluations
 * "emulated_bf16", or "native_fp4" on compute capability 10.x; the unquantized baselines "fp32"
 * for the test checkpoint's FP32 weights, "bf16" or "fp16" where a 16-bit type holds them all
 * (worker/engine/master_gemm.h); never "cpu"), and jobs with the SQNR probe run
 * on the GPU too, their SQNR rows beside a GPU path. Needs a GPU and a CUDA build: skipped
 * with a message otherwise (ctest label gpu; also without PostgreSQL). The CPU side (every result
 * "cpu") is run_test.c's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <libpq-fe.h>

#include "fixtures.h"
#include "gpu_info.h"
#include "pgserver.h"

#define TINY QSWEEP_SOURCE_DIR "/experiments/tiny.yaml"

static char out[1 << 16];

static int qsweep(const char *const *args) {
    return fx_run(QSWEEP_BIN, args, out, sizeof out);
}

static long query_long(PGconn *c, const char *sql) {
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
        fail_msg("%s: %s", sql, PQerrorMessage(c));
    long v = strtol(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return v;
}

/* The log folder a run printed at its end, into buf. */
static void run_logs(char *buf, size_t cap) {
    const char *tag = "logs of this run's coordinator and workers: ";
    const char *at = strstr(out, tag);
    if (!at) fail_msg("no log folder at the end:\n%s", out);
    snprintf(buf, cap, "%s", at + strlen(tag));
    buf[strcspn(buf, "\n")] = 0;
}

/* Whether file path contains text. */
static int file_has(const char *path, const char *text) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    static char body[1 << 16];
    size_t n = fread(body, 1, sizeof body - 1, f);
    fclose(f);
    body[n] = 0;
    return strstr(body, text) != NULL;
}

/* The visible GPUs (main: none = skip). */
static qw_gpu gpus[QW_GPUS_MAX];
static size_t n_gpus;

static void test_gpu_workers_run_on_cuda_and_record_the_gemm_path(void **state) {
    (void)state;
    char *dir = fx_tempdir("qsweep-gpu-e2e");
    assert_non_null(dir);
    char buf[600], pg_dir[600];
    snprintf(buf, sizeof buf, "%s/data", dir);
    setenv("XDG_DATA_HOME", buf, 1);
    snprintf(buf, sizeof buf, "%s/state", dir);
    setenv("XDG_STATE_HOME", buf, 1);
    snprintf(buf, sizeof buf, "%s/cache", dir);
    setenv("XDG_CACHE_HOME", buf, 1);
    unsetenv("QSWEEP_DB");
    unsetenv("QSWEEP_BASELINE_DIR");
    unsetenv("QSWEEP_BACKEND");
    unsetenv("QSWEEP_CUDA_GEMM");
    snprintf(pg_dir, sizeof pg_dir, "%s/data/qsweep/pg", dir);
    const char *start[] = {"db", "start", NULL};
    assert_int_equal(qsweep(start), 0);
    qc_pgserver *pg = NULL;
    qs_error err = {0};
    assert_int_equal(qc_pgserver_start(pg_dir, &pg, &err), QS_OK);

    /* without the SQNR probe: every job on CUDA */
    const char *run[] = {"run",       TINY,
                         "--workers", "2",
                         "--set",     "dataset.max_chunks=2",
                         "--set",     "sensitivity.metrics=[ppl,kl,top1]",
                         NULL};
    int rc = qsweep(run);
    if (rc != 0) fail_msg("qsweep run exited %d:\n%s", rc, out);
    char logs[1024], path[1200], want[96];
    run_logs(logs, sizeof logs);
    for (int w = 1; w <= 2; w++) {
        snprintf(path, sizeof path, "%s/worker-%d.log", logs, w);
        snprintf(want, sizeof want, "models run on the CUDA backend, GPU %d",
                 gpus[(size_t)(w - 1) % n_gpus].device);
        if (!file_has(path, want)) fail_msg("%s does not say \"%s\"", path, want);
    }
    PGconn *c = PQconnectdb(qc_pgserver_conninfo(pg));
    assert_int_equal(PQstatus(c), CONNECTION_OK);
    long jobs = query_long(c, "SELECT count(*) FROM jobs");
    assert_true(jobs > 1);
    assert_int_equal(query_long(c, "SELECT count(*) FROM v_gemm_path WHERE gemm_path IN ('fp32', "
                                   "'fp16', 'bf16', 'emulated_bf16', 'native_fp4')"),
                     jobs);
    assert_int_equal(
        query_long(c, "SELECT count(*) FROM v_gemm_path g JOIN jobs j ON j.id = g.job_id"
                      " WHERE j.kind = 'eval' AND g.gemm_path IN ('emulated_bf16', 'native_fp4')"),
        query_long(c, "SELECT count(*) FROM jobs WHERE kind = 'eval'"));
    const char *csv[] = {"results", "tiny", "--csv", NULL};
    assert_int_equal(qsweep(csv), 0);
    assert_true(strstr(out, ",emulated_bf16\n") || strstr(out, ",native_fp4\n"));
    assert_null(strstr(out, ",cpu\n"));

    /* with the probe: those jobs on the GPU too, with their SQNR rows */
    const char *probe[] = {"run",       TINY,
                           "--workers", "1",
                           "--set",     "dataset.max_chunks=2",
                           "--set",     "name=tiny-sqnr",
                           "--set",     "sensitivity.metrics=[ppl,sqnr]",
                           NULL};
    rc = qsweep(probe);
    if (rc != 0) fail_msg("qsweep run with sqnr exited %d:\n%s", rc, out);
    assert_int_equal(query_long(c,
                                "SELECT count(*) FROM v_gemm_path g JOIN jobs j ON j.id = g.job_id"
                                " WHERE j.kind = 'eval' AND g.gemm_path = 'cpu'"),
                     0);
    assert_true(query_long(c, "SELECT count(*) FROM results WHERE name LIKE 'sqnr_db.%'") > 0);
    assert_int_equal(query_long(c, "SELECT count(*) FROM results WHERE name = 'probe_on_cpu'"), 0);
    PQfinish(c);
    qc_pgserver_destroy(pg);
    fx_rmtree(dir);
    free(dir);
}

int main(void) {
    char why[256] = "";
    qw_gpu_discover(gpus, QW_GPUS_MAX, &n_gpus, why, sizeof why);
    if (n_gpus == 0) {
        printf("cli_run_gpu: no GPU (%s): skipped\n", why);
        return 77; /* ctest SKIP_RETURN_CODE */
    }
    /* where pgserver.h finds the server binaries: a bare GPU machine may have none */
    if (system("command -v pg_config >/dev/null 2>&1 || "
               "ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1") != 0) {
        printf("cli_run_gpu: no PostgreSQL server binaries (tools/install-deps.sh): skipped\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpu_workers_run_on_cuda_and_record_the_gemm_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
