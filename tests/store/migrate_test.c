/* store_migrate: the numbered migrations of schema/ apply once, are recorded with their
 * checksums, refuse an edited migration, roll back a failing one, and create the roles. */
#include "../lib/pgtest.h"

#include <sodium.h>

#include "migrate.h"

/* The private cluster (pgtest.h), and libsodium for the checksums. */
static int setup(void **state) {
    return pgtest_setup(state) != 0 || sodium_init() < 0 ? -1 : 0;
}

/* Reads schema/<name> from the source tree (QS_SCHEMA_DIR), so the test checks the embedded
 * copy against the file as it is on disk. */
static char *read_schema_file(const char *name, size_t *len) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", QS_SCHEMA_DIR, name);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *buf = malloc((size_t)n + 1);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static void test_migrations_apply_once_and_are_recorded(void **state) {
    (void)state;
    char ci[1024];
    pgtest_fresh_db(srv, "mig_once", ci, sizeof ci);
    PGconn *c = pgtest_connect(ci);
    qs_error err = {0};
    int applied = -1;
    qs_status st = qc_migrate(c, &applied, &err);
    if (st) fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(st, QS_OK);
    assert_int_equal(applied, (int)qc_schema_migrations_count);
    assert_int_equal(qc_migrate(c, &applied, &err), QS_OK);
    assert_int_equal(applied, 0);
    assert_int_equal(pgtest_long(c, "SELECT count(*) FROM schema_migrations"),
                     (long)qc_schema_migrations_count);
    /* Each recorded checksum is BLAKE2b-256 of the file in schema/. */
    for (size_t i = 0; i < qc_schema_migrations_count; i++) {
        size_t len;
        char *text = read_schema_file(qc_schema_migrations[i].name, &len);
        assert_int_equal(len, qc_schema_migrations[i].len);
        unsigned char h[32];
        crypto_generichash(h, sizeof h, (const unsigned char *)text, len, NULL, 0);
        char hex[65];
        sodium_bin2hex(hex, sizeof hex, h, sizeof h);
        char sql[256];
        snprintf(sql, sizeof sql,
                 "SELECT count(*) FROM schema_migrations WHERE version = %d AND checksum = '%s'",
                 qc_schema_migrations[i].version, hex);
        assert_int_equal(pgtest_long(c, sql), 1);
        free(text);
    }
    /* The tables and views the store relies on exist. */
    assert_int_equal(pgtest_long(c, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public' "
                                    "AND tablename IN ('experiments', 'jobs', 'experiment_jobs', "
                                    "'job_deps', 'attempts', 'workers', 'results', "
                                    "'cancel_requests')"),
                     8);
    assert_int_equal(pgtest_long(c, "SELECT count(*) FROM pg_views WHERE schemaname = 'public' "
                                    "AND viewname IN ('v_experiment_progress', 'v_job_results', "
                                    "'v_failed_jobs', 'v_sensitivity', 'v_sqnr')"),
                     5);
    PQfinish(c);
}

static void test_edited_migration_is_refused_by_name(void **state) {
    (void)state;
    char ci[1024];
    pgtest_fresh_db(srv, "mig_edit", ci, sizeof ci);
    PGconn *c = pgtest_connect(ci);
    qs_error err = {0};
    assert_int_equal(qc_migrate(c, NULL, &err), QS_OK);
    size_t n = qc_schema_migrations_count;
    qc_migration *edited = calloc(n, sizeof *edited);
    memcpy(edited, qc_schema_migrations, n * sizeof *edited);
    char *text = malloc(edited[1].len + 32);
    memcpy(text, edited[1].sql, edited[1].len);
    strcpy(text + edited[1].len, "-- edited\n");
    edited[1].sql = text;
    edited[1].len += strlen("-- edited\n");
    assert_int_equal(qc_migrate_list(c, edited, n, NULL, &err), QS_ESTATE);
    assert_non_null(strstr(err.msg, qc_schema_migrations[1].name));
    assert_non_null(strstr(err.msg, "checksum"));
    free(text);
    free(edited);
    PQfinish(c);
}

/* A database that applied an earlier text of a migration whose edit changed comments only
 * (020_train_views.sql before its first comment line lost a tracker reference) is accepted:
 * migrate.c lists that text's checksum as superseded. Any other checksum is still refused. */
static void test_superseded_comment_only_checksum_is_accepted(void **state) {
    (void)state;
    char ci[1024];
    pgtest_fresh_db(srv, "mig_superseded", ci, sizeof ci);
    PGconn *c = pgtest_connect(ci);
    qs_error err = {0};
    assert_int_equal(qc_migrate(c, NULL, &err), QS_OK);
    pgtest_exec(c, "UPDATE schema_migrations SET checksum = "
                   "'0da9b194c13d9c93f02f6da4c5bfea77a970fa8b78613d67ef2dcf7bcc34d084' "
                   "WHERE version = 20");
    int applied = -1;
    if (qc_migrate(c, &applied, &err) != QS_OK) fail_msg("%s", err.msg);
    assert_int_equal(applied, 0);
    pgtest_exec(c, "UPDATE schema_migrations SET checksum = 'x' WHERE version = 20");
    assert_int_equal(qc_migrate(c, NULL, &err), QS_ESTATE);
    assert_non_null(strstr(err.msg, "020_train_views.sql"));
    PQfinish(c);
}

static void test_database_newer_than_program_is_refused(void **state) {
    (void)state;
    char ci[1024];
    pgtest_fresh_db(srv, "mig_newer", ci, sizeof ci);
    PGconn *c = pgtest_connect(ci);
    qs_error err = {0};
    assert_int_equal(qc_migrate(c, NULL, &err), QS_OK);
    pgtest_exec(c, "INSERT INTO schema_migrations (version, name, checksum) "
                   "VALUES (999, '999_future.sql', 'x')");
    assert_int_equal(qc_migrate(c, NULL, &err), QS_ESTATE);
    assert_non_null(strstr(err.msg, "999_future.sql"));
    PQfinish(c);
}

static void test_failing_migration_rolls_back_and_names_its_line(void **state) {
    (void)state;
    char ci[1024];
    pgtest_fresh_db(srv, "mig_fail", ci, sizeof ci);
    PGconn *c = pgtest_connect(ci);
    static const char bad[] = "CREATE TABLE half_done (x int);\n"
                              "-- the next statement fails\n"
                              "SELECT nope FROM no_such_table;\n";
    qc_migration list[] = {{1, "001_ok.sql", "CREATE TABLE ok_one (x int);", 28},
                           {2, "002_bad.sql", bad, sizeof bad - 1}};
    qs_error err = {0};
    int applied = -1;
    assert_int_equal(qc_migrate_list(c, list, 2, &applied, &err), QS_EDB);
    assert_int_equal(applied, 1);
    assert_non_null(strstr(err.msg, "002_bad.sql:3:"));
    assert_non_null(strstr(err.msg, "no_such_table"));
    assert_int_equal(pgtest_long(c, "SELECT count(*) FROM pg_tables WHERE tablename = 'ok_one'"),
                     1);
    assert_int_equal(pgtest_long(c, "SELECT count(*) FROM pg_tables WHERE tablename = 'half_done'"),
                     0);
    assert_int_equal(pgtest_long(c, "SELECT count(*) FROM schema_migrations"), 1);
    PQfinish(c);
}

static void test_unsorted_list_is_refused(void **state) {
    (void)state;
    char ci[1024];
    pgtest_fresh_db(srv, "mig_unsorted", ci, sizeof ci);
    PGconn *c = pgtest_connect(ci);
    qc_migration list[] = {{2, "002_b.sql", "SELECT 1;", 9}, {1, "001_a.sql", "SELECT 1;", 9}};
    qs_error err = {0};
    assert_int_equal(qc_migrate_list(c, list, 2, NULL, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "001_a.sql"));
    PQfinish(c);
}

/* Roles: the reader reads tables and views and cannot write; the writer can. */
static void test_reader_role_cannot_write(void **state) {
    (void)state;
    char ci[1024];
    pgtest_fresh_db(srv, "mig_roles", ci, sizeof ci);
    PGconn *c = pgtest_connect(ci);
    qs_error err = {0};
    assert_int_equal(qc_migrate(c, NULL, &err), QS_OK);
    PQfinish(c);

    char reader_ci[1100], writer_ci[1100];
    snprintf(reader_ci, sizeof reader_ci, "%s user=qsweep_reader", ci);
    snprintf(writer_ci, sizeof writer_ci, "%s user=qsweep_writer", ci);

    PGconn *w = pgtest_connect(writer_ci);
    pgtest_exec(w, "INSERT INTO experiments (name, grid) VALUES ('e1', 'grid: {}')");
    PQfinish(w);

    PGconn *r = pgtest_connect(reader_ci);
    assert_int_equal(pgtest_long(r, "SELECT total FROM v_experiment_progress"), 0);
    assert_int_equal(pgtest_long(r, "SELECT count(*) FROM experiments"), 1);
    /* Views made by migrations after 003 are readable too (default privileges). */
    assert_int_equal(pgtest_long(r, "SELECT count(*) FROM v_sqnr"), 0);
    static const char *const writes[] = {
        "INSERT INTO experiments (name, grid) VALUES ('e2', 'grid: {}')",
        "UPDATE jobs SET state = 'failed'",
        "DELETE FROM experiments",
        "INSERT INTO cancel_requests (experiment) VALUES (1)",
        "CREATE TABLE mine (x int)",
    };
    for (size_t i = 0; i < sizeof writes / sizeof writes[0]; i++) {
        PGresult *res = PQexec(r, writes[i]);
        assert_int_equal(PQresultStatus(res), PGRES_FATAL_ERROR);
        /* SQLSTATE 42501 insufficient_privilege (PostgreSQL docs, Appendix A). */
        assert_string_equal(PQresultErrorField(res, PG_DIAG_SQLSTATE), "42501");
        PQclear(res);
    }
    PQfinish(r);
}

/* 200_numerics_unpin.sql applied to a database holding attempts and results of the migrations
 * before it: no row is lost, a CPU attempt takes the path its result recorded (not the text
 * its worker announces now), a GPU attempt stays NULL; an attempt inserted afterwards takes its
 * worker's announced path, which v_numerics_path gives as worker_path beside gpu-<gemm path>. */
static void test_unpin_migration_keeps_rows_and_names_the_worker_path(void **state) {
    (void)state;
    char ci[1024];
    pgtest_fresh_db(srv, "mig_unpin", ci, sizeof ci);
    PGconn *c = pgtest_connect(ci);
    qs_error err = {0};
    size_t before = 0;
    while (before < qc_schema_migrations_count && qc_schema_migrations[before].version < 200)
        before++;
    assert_true(before < qc_schema_migrations_count);
    assert_int_equal(qc_schema_migrations[before].version, 200);
    assert_int_equal(qc_migrate_list(c, qc_schema_migrations, before, NULL, &err), QS_OK);
    pgtest_exec(c, "INSERT INTO experiments (name, grid) VALUES ('e', 'g')");
    pgtest_exec(c, "INSERT INTO jobs (job_key, kind, spec) VALUES ('k1', 'eval', '{}'), "
                   "('k2', 'eval', '{}')");
    pgtest_exec(c, "INSERT INTO workers (id, numerics_path) VALUES ('w-cpu', "
                   "'cpu-openblas-0.3.21-haswell'), ('w-gpu', 'cuda-cc90-auto')");
    pgtest_exec(c, "INSERT INTO attempts (job, attempt, worker, outcome) VALUES "
                   "(1, 1, 'w-cpu', 'succeeded'), (2, 1, 'w-gpu', 'succeeded')");
    pgtest_exec(c, "INSERT INTO results (job, attempt, name, value, final) VALUES "
                   "(1, 1, 'cpu_path.cpu-qsweep-fixed2', 1, true), "
                   "(1, 1, 'ppl', 12.5, true), (2, 1, 'gemm_path.bf16', 1, true)");
    int applied = 0;
    assert_int_equal(qc_migrate(c, &applied, &err), QS_OK);
    assert_int_equal(applied, (int)(qc_schema_migrations_count - before));
    assert_int_equal(pgtest_long(c, "SELECT count(*) FROM attempts"), 2);
    assert_int_equal(pgtest_long(c, "SELECT count(*) FROM results"), 3);
    assert_int_equal(pgtest_long(c, "SELECT count(*) FROM attempts WHERE job = 1 AND "
                                    "numerics_path = 'cpu-qsweep-fixed2'"),
                     1);
    assert_int_equal(pgtest_long(c, "SELECT count(*) FROM attempts WHERE job = 2 AND "
                                    "numerics_path IS NULL"),
                     1);
    assert_int_equal(pgtest_long(c, "SELECT count(*) FROM v_numerics_path WHERE job_id = 1 AND "
                                    "path = 'cpu-qsweep-fixed2' AND worker_path = path"),
                     1);
    pgtest_exec(c, "INSERT INTO attempts (job, attempt, worker) VALUES (2, 2, 'w-gpu')");
    pgtest_exec(c, "INSERT INTO results (job, attempt, name, value, final) VALUES "
                   "(2, 2, 'gemm_path.native_fp4', 1, true) ON CONFLICT DO NOTHING");
    assert_int_equal(pgtest_long(c, "SELECT count(*) FROM attempts WHERE job = 2 AND attempt = 2 "
                                    "AND numerics_path = 'cuda-cc90-auto'"),
                     1);
    assert_int_equal(pgtest_long(c, "SELECT count(*) FROM v_numerics_path WHERE job_id = 2 AND "
                                    "path = 'gpu-native_fp4' AND worker_path = 'cuda-cc90-auto' "
                                    "AND attempt = 2"),
                     1);
    PQfinish(c);
}

/* 220_numerics_pin_requests.sql applied to a database holding unpin requests of the migrations
 * before it: no row is lost, each stays an unpin (path NULL) with its answer; a pin request
 * carries its path and takes the pin's outcomes, an unpin keeps its own, and neither takes the
 * other's. */
static void test_pin_request_migration_keeps_unpin_requests(void **state) {
    (void)state;
    char ci[1024];
    pgtest_fresh_db(srv, "mig_pin", ci, sizeof ci);
    PGconn *c = pgtest_connect(ci);
    qs_error err = {0};
    size_t before = 0;
    while (before < qc_schema_migrations_count && qc_schema_migrations[before].version < 220)
        before++;
    assert_true(before < qc_schema_migrations_count);
    assert_int_equal(qc_schema_migrations[before].version, 220);
    assert_int_equal(qc_migrate_list(c, qc_schema_migrations, before, NULL, &err), QS_OK);
    pgtest_exec(c, "INSERT INTO experiments (name, grid) VALUES ('e', 'g')");
    pgtest_exec(c, "INSERT INTO numerics_unpin_requests (experiment, handled_at, outcome, message) "
                   "VALUES (1, now(), 'unpinned', 'unpinned from cpu-qsweep-fixed2')");
    pgtest_exec(c, "INSERT INTO numerics_unpin_requests (experiment) VALUES (1)");
    int applied = 0;
    assert_int_equal(qc_migrate(c, &applied, &err), QS_OK);
    assert_int_equal(applied, (int)(qc_schema_migrations_count - before));
    assert_int_equal(pgtest_long(c, "SELECT count(*) FROM numerics_unpin_requests WHERE path IS "
                                    "NULL"),
                     2);
    assert_int_equal(pgtest_long(c, "SELECT count(*) FROM numerics_unpin_requests WHERE id = 1 "
                                    "AND outcome = 'unpinned' AND message = 'unpinned from "
                                    "cpu-qsweep-fixed2'"),
                     1);
    pgtest_exec(c, "UPDATE numerics_unpin_requests SET handled_at = now(), outcome = "
                   "'not_pinned', message = 'not pinned' WHERE id = 2");
    pgtest_exec(c, "INSERT INTO numerics_unpin_requests (experiment, path) VALUES (1, "
                   "'cuda-cc90-auto'), (1, 'cuda-cc90-auto'), (1, 'cuda-cc90-auto')");
    pgtest_exec(c, "UPDATE numerics_unpin_requests SET handled_at = now(), outcome = 'pinned', "
                   "message = 'pinned to cuda-cc90-auto' WHERE id = 3");
    pgtest_exec(c, "UPDATE numerics_unpin_requests SET handled_at = now(), outcome = "
                   "'unchanged', message = 'already pinned to cuda-cc90-auto' WHERE id = 4");
    const char *bad[] = {
        "UPDATE numerics_unpin_requests SET handled_at = now(), outcome = 'unpinned', message "
        "= '' WHERE id = 5",
        "UPDATE numerics_unpin_requests SET handled_at = now(), outcome = 'pinned', message = "
        "'' WHERE id = 2",
        "INSERT INTO numerics_unpin_requests (experiment, path) VALUES (1, '')",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        PGresult *res = PQexec(c, bad[i]);
        assert_int_equal(PQresultStatus(res), PGRES_FATAL_ERROR);
        /* SQLSTATE 23514 check_violation (PostgreSQL docs, Appendix A). */
        assert_string_equal(PQresultErrorField(res, PG_DIAG_SQLSTATE), "23514");
        PQclear(res);
    }
    PQfinish(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_migrations_apply_once_and_are_recorded),
        cmocka_unit_test(test_edited_migration_is_refused_by_name),
        cmocka_unit_test(test_superseded_comment_only_checksum_is_accepted),
        cmocka_unit_test(test_database_newer_than_program_is_refused),
        cmocka_unit_test(test_failing_migration_rolls_back_and_names_its_line),
        cmocka_unit_test(test_unsorted_list_is_refused),
        cmocka_unit_test(test_reader_role_cannot_write),
        cmocka_unit_test(test_unpin_migration_keeps_rows_and_names_the_worker_path),
        cmocka_unit_test(test_pin_request_migration_keeps_unpin_requests),
    };
    return cmocka_run_group_tests(tests, setup, pgtest_teardown);
}
