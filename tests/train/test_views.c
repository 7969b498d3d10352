/* The training views of schema/020_train_views.sql on a real PostgreSQL (label pg):
 * v_train_curves lists every curve point of train jobs with recipe, lr and seed from the spec;
 * v_train_final pairs each final metric with the bf16 run whose spec is the same but for the
 * recipe, giving the absolute and relative gap, NULL when there is no such run, and never
 * pairs runs that differ in anything else (here: the seed). */
#include <math.h>

#include "../store/pgtest.h"
#include "migrate.h"

static qc_pgserver *srv;

static int setup(void **s) {
    (void)s;
    qs_error err = {0};
    if (qc_pgserver_start_temp(&srv, &err)) {
        fprintf(stderr, "pgserver: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static int teardown(void **s) {
    (void)s;
    qc_pgserver_destroy(srv);
    return 0;
}

static double pg_double(PGconn *c, const char *sql) {
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) fprintf(stderr, "%s: %s", sql, PQerrorMessage(c));
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    assert_int_equal(PQntuples(r), 1);
    double v = PQgetisnull(r, 0, 0) ? NAN : strtod(PQgetvalue(r, 0, 0), NULL);
    PQclear(r);
    return v;
}

static void train_views_give_curves_and_gaps_to_bf16(void **s) {
    (void)s;
    char ci[512];
    pgtest_fresh_db(srv, "train_views", ci, sizeof ci);
    PGconn *c = pgtest_connect(ci);
    qs_error err = {0};
    int applied = 0;
    assert_int_equal(qc_migrate(c, &applied, &err), QS_OK);
    pgtest_exec(c, "INSERT INTO experiments (name, grid) VALUES ('tiny-fp4', 'kind: training')");
    const char *specs[3] = {
        "{\"shape\": {\"name\": \"tiny\"}, \"recipe\": {\"name\": \"bf16\", \"canonical\": \"v1 "
        "x\"}, "
        "\"lr\": 0.003, \"seed\": 1, \"steps\": 100}",
        "{\"shape\": {\"name\": \"tiny\"}, \"recipe\": {\"name\": \"nvfp4\", \"canonical\": \"v1 "
        "y\"}, "
        "\"lr\": 0.003, \"seed\": 1, \"steps\": 100}",
        "{\"shape\": {\"name\": \"tiny\"}, \"recipe\": {\"name\": \"nvfp4\", \"canonical\": \"v1 "
        "y\"}, "
        "\"lr\": 0.003, \"seed\": 2, \"steps\": 100}",
    };
    for (int i = 0; i < 3; i++) {
        char sql[1024];
        snprintf(
            sql, sizeof sql,
            "WITH j AS (INSERT INTO jobs (job_key, kind, spec) VALUES ('k%d', 'train', '%s') "
            "RETURNING id) INSERT INTO experiment_jobs SELECT e.id, j.id FROM experiments e, j",
            i, specs[i]);
        pgtest_exec(c, sql);
    }
    /* curves: 3 points of train_loss for each job; finals */
    pgtest_exec(
        c, "INSERT INTO results (job, attempt, name, value, step, final) "
           "SELECT j.id, 1, 'train_loss', 5.0 - s, s, false FROM jobs j, generate_series(0, 2) s");
    pgtest_exec(
        c, "INSERT INTO results (job, attempt, name, value, step, final) "
           "SELECT id, 1, 'final_val_loss', CASE job_key WHEN 'k0' THEN 2.0 WHEN 'k1' THEN 2.05 "
           "ELSE 2.1 END, -1, true FROM jobs");
    assert_int_equal(pgtest_long(c, "SELECT count(*) FROM v_train_curves"), 9);
    assert_int_equal(
        pgtest_long(c, "SELECT count(*) FROM v_train_curves WHERE recipe = 'nvfp4' "
                       "AND seed = 2 AND metric = 'train_loss' AND step = 2 AND value = 3"),
        1);
    assert_int_equal(pgtest_long(c, "SELECT count(*) FROM v_train_final"), 3);
    /* nvfp4 seed 1: gap 0.05 to bf16 seed 1, relative 2.5% */
    double gap = pg_double(c, "SELECT gap FROM v_train_final WHERE recipe = 'nvfp4' AND seed = 1");
    double rel =
        pg_double(c, "SELECT rel_gap FROM v_train_final WHERE recipe = 'nvfp4' AND seed = 1");
    assert_true(fabs(gap - 0.05) < 1e-12);
    assert_true(fabs(rel - 0.025) < 1e-12);
    /* bf16 against itself: 0 */
    assert_true(pg_double(c, "SELECT gap FROM v_train_final WHERE recipe = 'bf16'") == 0.0);
    /* nvfp4 seed 2 has no bf16 run with seed 2: NULL, not seed 1's */
    assert_true(isnan(pg_double(c, "SELECT gap FROM v_train_final WHERE seed = 2")));
    assert_true(isnan(pg_double(c, "SELECT bf16_job_id FROM v_train_final WHERE seed = 2")));
    /* the reader role may read the views */
    pgtest_exec(c, "SET ROLE qsweep_reader");
    assert_int_equal(pgtest_long(c, "SELECT count(*) FROM v_train_final"), 3);
    PQfinish(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(train_views_give_curves_and_gaps_to_bf16),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
