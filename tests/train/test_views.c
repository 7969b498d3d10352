/* The training views of schema/020_train_views.sql on a real PostgreSQL (label pg):
 * v_train_curves lists every curve point of train jobs with recipe, lr and seed from the spec;
 * v_train_final pairs each final metric with the bf16 run whose spec is the same but for the
 * recipe, giving the absolute and relative gap, NULL when there is no such run, and never
 * pairs runs that differ in anything else (here: the seed). `qsweep results` (the real
 * binary) prints a training experiment in the training layout whatever it holds: the table
 * with "no bf16 run" where there is none (never "nan"), the final training loss when there is
 * no validation loss (val_fraction 0), and when every run failed the progress and each failed
 * run's error; --csv and --json give the table's rows. */
#include <jansson.h>
#include <math.h>

#include "../lib/pgtest.h"
#include "migrate.h"

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

static void run_cli(const char *args, char *out, size_t cap) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", QSWEEP_BIN, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int rc = pclose(p);
    if (rc != 0) fail_msg("%s exited %d:\n%s", cmd, rc, out);
}

/* Adds a train job to experiment exp with its spec fields, final metric (value < 0: none) and
 * state. */
static void add_run(PGconn *c, const char *exp, const char *key, const char *recipe, int seed,
                    const char *metric, double value, const char *state, const char *error) {
    char sql[2048];
    snprintf(sql, sizeof sql,
             "WITH j AS (INSERT INTO jobs (job_key, kind, spec, state, last_error) VALUES "
             "('%s', 'train', '{\"shape\": {\"name\": \"tiny\"}, \"recipe\": {\"name\": "
             "\"%s\"}, \"lr\": 0.003, \"seed\": %d, \"steps\": 100, \"exp\": \"%s\"}', '%s', "
             "%s%s%s) RETURNING id) INSERT INTO experiment_jobs SELECT e.id, j.id FROM "
             "experiments e, j WHERE e.name = '%s'",
             key, recipe, seed, exp, state, error ? "'" : "", error ? error : "NULL",
             error ? "'" : "", exp);
    pgtest_exec(c, sql);
    if (value >= 0) {
        snprintf(sql, sizeof sql,
                 "INSERT INTO results (job, attempt, name, value, step, final) SELECT id, 1, "
                 "'%s', %.17g, -1, true FROM jobs WHERE job_key = '%s'",
                 metric, value, key);
        pgtest_exec(c, sql);
        snprintf(sql, sizeof sql,
                 "INSERT INTO results (job, attempt, name, value, step, final) SELECT id, 1, "
                 "'train_loss', 5.0 - s, s, false FROM jobs, generate_series(1, 4) s "
                 "WHERE job_key = '%s'",
                 key);
        pgtest_exec(c, sql);
    }
}

static void qsweep_results_prints_training_experiments(void **s) {
    (void)s;
    char ci[512];
    pgtest_fresh_db(srv, "train_results", ci, sizeof ci);
    PGconn *c = pgtest_connect(ci);
    qs_error err = {0};
    int applied = 0;
    assert_int_equal(qc_migrate(c, &applied, &err), QS_OK);
    pgtest_exec(c, "INSERT INTO experiments (name, grid) VALUES ('tr', 'kind: training'), "
                   "('tr-noval', 'kind: training'), ('tr-failed', 'kind: training')");
    add_run(c, "tr", "a1", "bf16", 1, "final_val_loss", 2.0, "succeeded", NULL);
    add_run(c, "tr", "a2", "nvfp4", 1, "final_val_loss", 2.05, "succeeded", NULL);
    add_run(c, "tr", "a3", "nvfp4", 2, "final_val_loss", 2.15, "succeeded", NULL);
    add_run(c, "tr", "a4", "mxfp4", 2, "final_val_loss", 2.25, "succeeded", NULL);
    add_run(c, "tr-noval", "b1", "bf16", 1, "final_train_loss", 1.5, "succeeded", NULL);
    add_run(c, "tr-noval", "b2", "nvfp4", 1, "final_train_loss", 1.53, "succeeded", NULL);
    add_run(c, "tr-failed", "c1", "bf16", 1, "", -1, "failed", "diverged at step 3: loss nan");
    add_run(c, "tr-failed", "c2", "nvfp4", 1, "", -1, "failed", "training data: token 300");
    /* A spec whose lr reads back with 17 digits (as the tester's did) prints as %g. */
    pgtest_exec(c, "WITH j AS (INSERT INTO jobs (job_key, kind, spec, state, last_error) VALUES "
                   "('c3', 'train', '{\"shape\": {\"name\": \"tiny\"}, \"recipe\": {\"name\": "
                   "\"mxfp4\"}, \"lr\": 0.0030000000000000001, \"seed\": 2}', 'failed', "
                   "'lost') RETURNING id) INSERT INTO experiment_jobs SELECT e.id, j.id FROM "
                   "experiments e, j WHERE e.name = 'tr-failed'");
    static char out[1 << 16];
    char args[800];
    snprintf(args, sizeof args, "results tr --db '%s'", ci);
    run_cli(args, out, sizeof out);
    printf("%s\n", out);
    assert_non_null(strstr(out, "training, 4 runs: 4 done"));
    assert_non_null(strstr(out, "final validation loss per recipe"));
    assert_non_null(strstr(out, "no bf16 run"));                    /* mxfp4: seed 2 only */
    assert_non_null(strstr(out, "(1 of 2 seeds have a bf16 run)")); /* nvfp4 */
    assert_non_null(strstr(out, "+2.50%"));                         /* nvfp4 seed 1 */
    assert_null(strstr(out, "nan"));
    assert_null(strstr(out, "isolated parts"));
    /* mxfp4 and bf16 have one seed each: no "+- 0.0000" spread, "(1 seed)" instead. */
    assert_non_null(strstr(out, "2.2500  (1 seed)"));
    assert_null(strstr(out, "+- 0.0000"));
    snprintf(args, sizeof args, "results tr --csv --db '%s'", ci);
    run_cli(args, out, sizeof out);
    assert_non_null(strstr(out, "shape,lr,recipe,metric,seeds,value,value_sd,seeds_with_bf16,gap,"
                                "gap_sd,rel_gap,rel_gap_sd,state,seed,error\n"));
    assert_non_null(strstr(out, "tiny,0.003,mxfp4,final_val_loss,1,2.25,0,0,,,,,succeeded,,\n"));
    snprintf(args, sizeof args, "results tr --json --db '%s'", ci);
    run_cli(args, out, sizeof out);
    json_error_t je;
    json_t *rows = json_loads(out, 0, &je);
    if (!rows) fail_msg("not JSON (%s):\n%s", je.text, out);
    assert_int_equal(json_array_size(rows), 3);
    size_t i;
    json_t *row;
    int seen = 0;
    json_array_foreach(rows, i, row) {
        const char *r = json_string_value(json_object_get(row, "recipe"));
        if (!strcmp(r, "mxfp4")) {
            assert_true(json_is_null(json_object_get(row, "gap")));
            seen++;
        }
        if (!strcmp(r, "nvfp4")) {
            assert_int_equal(json_integer_value(json_object_get(row, "seeds")), 2);
            assert_int_equal(json_integer_value(json_object_get(row, "seeds_with_bf16")), 1);
            assert_true(fabs(json_real_value(json_object_get(row, "value")) - 2.1) < 1e-12);
            assert_true(fabs(json_real_value(json_object_get(row, "gap")) - 0.05) < 1e-12);
            seen++;
        }
    }
    assert_int_equal(seen, 2);
    json_decref(rows);
    snprintf(args, sizeof args, "results tr-noval --db '%s'", ci);
    run_cli(args, out, sizeof out);
    assert_non_null(strstr(out, "no validation loss"));
    assert_non_null(strstr(out, "final training loss per recipe"));
    assert_non_null(strstr(out, "+2.00%"));
    snprintf(args, sizeof args, "results tr-failed --db '%s'", ci);
    run_cli(args, out, sizeof out);
    printf("%s\n", out);
    assert_non_null(strstr(out, "training, 3 runs: 0 done, 0 running, 0 queued, 3 failed"));
    assert_non_null(strstr(out, "tiny mxfp4 lr=0.003 seed=2: lost"));
    assert_null(strstr(out, "0.00300000"));
    assert_non_null(strstr(out, "no finished training run yet"));
    assert_non_null(strstr(out, "tiny bf16 lr=0.003 seed=1: diverged at step 3: loss nan"));
    assert_non_null(strstr(out, "training data: token 300"));
    assert_null(strstr(out, "isolated parts"));
    /* --csv and --json include the failed runs with their state and error. */
    snprintf(args, sizeof args, "results tr-failed --csv --db '%s'", ci);
    run_cli(args, out, sizeof out);
    assert_non_null(
        strstr(out, "tiny,0.003,bf16,,1,,,0,,,,,failed,1,diverged at step 3: loss nan\n"));
    assert_non_null(strstr(out, "tiny,0.003,mxfp4,,1,,,0,,,,,failed,2,lost\n"));
    snprintf(args, sizeof args, "results tr-failed --json --db '%s'", ci);
    run_cli(args, out, sizeof out);
    rows = json_loads(out, 0, &je);
    if (!rows) fail_msg("not JSON (%s):\n%s", je.text, out);
    assert_int_equal(json_array_size(rows), 3);
    row = json_array_get(rows, 1);
    assert_string_equal(json_string_value(json_object_get(row, "state")), "failed");
    assert_string_equal(json_string_value(json_object_get(row, "error")),
                        "training data: token 300");
    assert_true(json_is_null(json_object_get(row, "value")));
    assert_true(fabs(json_real_value(json_object_get(json_array_get(rows, 2), "lr")) - 0.003) <
                1e-15);
    json_decref(rows);
    PQfinish(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(train_views_give_curves_and_gaps_to_bf16),
        cmocka_unit_test(qsweep_results_prints_training_experiments),
    };
    return cmocka_run_group_tests(tests, pgtest_setup, pgtest_teardown);
}
