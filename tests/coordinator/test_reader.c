/* coord_reader: the read-only role cannot stop the cluster. qsweep_reader holds the advisory
 * keys the coordinator and submit locks used to be (any login may take an advisory lock) and
 * the migrations' key, and tries the lock tables that replace them
 * (schema/150_lock_tables.sql): each try is refused with permission denied, a coordinator
 * started meanwhile runs the whole sweep, a second coordinator is still refused naming the
 * first, and a submission goes through. Real coordinator and worker processes, a real private
 * PostgreSQL; counts read from SQL. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <libpq-fe.h>

#include "harness.h"
#include "store.h"

/* The keys of the advisory locks qsweep used before migration 150, "qsweep1" and "qsweepsb",
 * and the migrations' ("qsweepmg", taken only when a migration is to be applied). */
#define OLD_COORD_KEY "31933629007753265"
#define OLD_SUBMIT_KEY "8175009025984852834"
#define MIGRATE_KEY "8175009025984851303"

/* Runs sql as the reader and returns its SQLSTATE ("" on success) in code. */
static void reader_try(PGconn *c, const char *sql, char *code, size_t cap) {
    PGresult *r = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(r);
    const char *s = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    snprintf(code, cap, "%s", st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK ? "" : s ? s : "?");
    fprintf(stderr, "reader: %s -> %s %s", sql, code[0] ? code : "ok",
            code[0] ? PQresultErrorMessage(r) : "\n");
    PQclear(r);
}

/* A submission through the store in a child process: 0 when it is committed within 10 s. */
static int submit_in_child(harness *h) {
    pid_t pid = fork();
    if (pid == 0) {
        qc_store *s = NULL;
        qs_error err = {0};
        if (qc_store_open(h->conninfo, "test", &s, &err)) _exit(2);
        qc_job_submit j = {.job_key = "submitted",
                           .kind = "sleep",
                           .spec_json = "{\"seconds\": 0.05}",
                           .max_attempts = 1};
        qc_submit_counts c;
        qs_status st = qc_store_submit(s, "reader-test", "", "g", NULL, &j, 1, &c, &err);
        if (st) fprintf(stderr, "submit: %s\n", err.msg);
        qc_store_close(s);
        _exit(st ? 3 : 0);
    }
    int status = h_wait_exit(pid, 10000);
    if (status < 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    return status;
}

static void reader_cannot_take_the_coordinator_or_submit_lock(void **state) {
    harness *h = *state;
    h_begin(h, "coord_reader_locks");
    for (int i = 0; i < 20; i++) {
        char key[32];
        snprintf(key, sizeof key, "rd-%d", i);
        h_insert_job(h, key, "sleep", "{\"seconds\": 0.05}", 1, 0);
    }
    char ci[800];
    snprintf(ci, sizeof ci, "%s user=qsweep_reader", h->conninfo);
    PGconn *rd = PQconnectdb(ci);
    assert_int_equal(PQstatus(rd), CONNECTION_OK);
    char code[8];
    /* the old advisory keys: still anyone's, and now nobody's concern */
    reader_try(rd, "SELECT pg_advisory_lock(" OLD_COORD_KEY ")", code, sizeof code);
    assert_string_equal(code, "");
    reader_try(rd, "SELECT pg_advisory_lock(" OLD_SUBMIT_KEY ")", code, sizeof code);
    assert_string_equal(code, "");
    reader_try(rd, "SELECT pg_advisory_lock(" MIGRATE_KEY ")", code, sizeof code);
    assert_string_equal(code, "");
    pid_t c = h_start_coordinator(h);
    h_start_worker(h, "w1");
    /* the lock tables: refused in every mode that could matter, and not even readable */
    const char *tries[] = {
        "LOCK TABLE qsweep_coordinator_lock IN EXCLUSIVE MODE NOWAIT",
        "LOCK TABLE qsweep_coordinator_lock IN ACCESS EXCLUSIVE MODE NOWAIT",
        "LOCK TABLE qsweep_coordinator_lock IN ROW SHARE MODE NOWAIT",
        "LOCK TABLE qsweep_coordinator_lock IN ACCESS SHARE MODE NOWAIT",
        "LOCK TABLE qsweep_submit_lock IN EXCLUSIVE MODE NOWAIT",
        "SELECT * FROM qsweep_coordinator_lock FOR UPDATE",
    };
    for (size_t i = 0; i < sizeof tries / sizeof tries[0]; i++) {
        PQclear(PQexec(rd, "BEGIN"));
        reader_try(rd, tries[i], code, sizeof code);
        assert_string_equal(code, "42501"); /* insufficient_privilege */
        PQclear(PQexec(rd, "ROLLBACK"));
    }
    assert_true(h_wait_sql(h, 20, 30000, "SELECT count(*) FROM jobs WHERE state = 'succeeded'"));
    assert_int_equal(kill(c, 0), 0); /* still running */
    assert_int_equal(submit_in_child(h), 0);
    assert_true(h_wait_sql(h, 1, 20000,
                           "SELECT count(*) FROM jobs WHERE job_key = 'submitted' AND state = "
                           "'succeeded'"));
    /* the lock is real: a second coordinator is refused, naming the first */
    char log[4096];
    int status = h_run_second_coordinator(h, log, sizeof log);
    fprintf(stderr, "second coordinator: exit %d: %s", status, log);
    assert_int_equal(status, 4);
    assert_non_null(strstr(log, "another coordinator"));
    assert_int_equal(kill(c, 0), 0);
    fprintf(stderr, "jobs succeeded %ld of %ld, attempts %ld\n",
            h_sql_long(h, "SELECT count(*) FROM jobs WHERE state = 'succeeded'"),
            h_sql_long(h, "SELECT count(*) FROM jobs"),
            h_sql_long(h, "SELECT count(*) FROM attempts"));
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM attempts"), 21);
    PQfinish(rd);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(reader_cannot_take_the_coordinator_or_submit_lock, h_setup,
                                        h_teardown),
    };
    return cmocka_run_group_tests(tests, h_group_setup, h_group_teardown);
}
