/* End to end: experiments/tiny-methods.yaml (method: [rtn, gptq, mr-gptq]) through the real
 * `qsweep run` with a private PostgreSQL cluster and two workers: every job succeeds, the rtn
 * jobs name no method, the calibrated ones record what they calibrated on and what it cost,
 * and `qsweep results` and `qsweep report` show each method's jobs apart. */
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
#include "pgserver.h"

#define GRID QSWEEP_SOURCE_DIR "/experiments/tiny-methods.yaml"
#define JOBS 13 /* 1 baseline + 2 formats x 3 methods x 2 parts */

static long query_long(PGconn *c, const char *sql) {
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) fail_msg("%s: %s", sql, PQerrorMessage(c));
    long v = strtol(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return v;
}

static void run_methods_grid_end_to_end(void **state) {
    (void)state;
    char *dir = fx_tempdir("qsweep-methods");
    assert_non_null(dir);
    char buf[600];
    snprintf(buf, sizeof buf, "%s/data", dir);
    setenv("XDG_DATA_HOME", buf, 1);
    snprintf(buf, sizeof buf, "%s/state", dir);
    setenv("XDG_STATE_HOME", buf, 1);
    snprintf(buf, sizeof buf, "%s/cache", dir);
    setenv("XDG_CACHE_HOME", buf, 1);
    unsetenv("QSWEEP_DB");
    unsetenv("QSWEEP_BASELINE_DIR");
    unsetenv("COLUMNS");
    static char out[1 << 16];
    const char *run[] = {"run", GRID, "--workers", "2", NULL};
    int rc = fx_run(QSWEEP_BIN, run, out, sizeof out);
    if (rc != 0) fail_msg("qsweep run exited %d:\n%s", rc, out);
    char want[64];
    snprintf(want, sizeof want, "%d jobs: %d new", JOBS, JOBS);
    if (!strstr(out, want)) fail_msg("expected '%s' in:\n%s", want, out);

    char pg_dir[700];
    snprintf(pg_dir, sizeof pg_dir, "%s/data/qsweep/pg", dir);
    qs_error err = {0};
    qc_pgserver *pg = NULL;
    assert_int_equal(qc_pgserver_start(pg_dir, &pg, &err), QS_OK);
    PGconn *c = PQconnectdb(qc_pgserver_conninfo(pg));
    assert_int_equal(PQstatus(c), CONNECTION_OK);
    assert_int_equal(query_long(c, "SELECT count(*) FROM jobs WHERE state = 'succeeded'"), JOBS);
    /* rtn is never named; each other method on 2 formats x 2 parts */
    assert_int_equal(query_long(c, "SELECT count(*) FROM jobs WHERE kind = 'eval' AND NOT spec ? "
                                   "'method'"),
                     4);
    assert_int_equal(query_long(c, "SELECT count(*) FROM jobs WHERE spec ->> 'method' = 'gptq'"),
                     4);
    assert_int_equal(query_long(c,
                                "SELECT count(*) FROM jobs WHERE spec ->> 'method' = 'mr-gptq' AND "
                                "(spec -> 'calibration' ->> 'chunks')::int = 4"),
                     4);
    /* what a method's result calibrated on and what it cost: 4 chunks of 64 tokens per
     * calibrated block (3 blocks), the calibration's time and the method's whole time */
    assert_int_equal(query_long(c, "SELECT count(*) FROM results r JOIN jobs j ON j.id = r.job "
                                   "WHERE j.spec ? 'method' AND r.final AND r.name = "
                                   "'calibration_tokens' AND r.value = 768"),
                     8);
    assert_int_equal(query_long(c, "SELECT count(*) FROM results r JOIN jobs j ON j.id = r.job "
                                   "WHERE j.spec ? 'method' AND r.final AND r.name IN "
                                   "('time_method_s', 'time_calibration_s') AND r.value > 0"),
                     16);
    assert_int_equal(query_long(c, "SELECT count(*) FROM results r JOIN jobs j ON j.id = r.job "
                                   "WHERE NOT j.spec ? 'method' AND r.name LIKE '%calibration%'"),
                     0);
    PQfinish(c);
    const char *results[] = {"results", "tiny-methods", "--db", qc_pgserver_conninfo(pg), NULL};
    rc = fx_run(QSWEEP_BIN, results, out, sizeof out);
    if (rc != 0) fail_msg("qsweep results exited %d:\n%s", rc, out);
    printf("%s", out);
    assert_non_null(strstr(out, "\"method\": \"gptq\""));
    assert_non_null(strstr(out, "\"method\": \"mr-gptq\""));
    /* the HTML report keeps each method's jobs apart too: their options name it */
    char html[800];
    snprintf(html, sizeof html, "%s/report.html", dir);
    const char *report[] = {"report", "tiny-methods",           "-o", html,
                            "--db",   qc_pgserver_conninfo(pg), NULL};
    rc = fx_run(QSWEEP_BIN, report, out, sizeof out);
    if (rc != 0) fail_msg("qsweep report exited %d:\n%s", rc, out);
    FILE *f = fopen(html, "r");
    assert_non_null(f);
    static char page[1 << 22];
    size_t n = fread(page, 1, sizeof page - 1, f);
    fclose(f);
    page[n] = 0;
    assert_non_null(strstr(page, "mr-gptq"));
    qc_pgserver_destroy(pg);
    fx_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(run_methods_grid_end_to_end)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
