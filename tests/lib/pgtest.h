/* Helpers shared by the PostgreSQL C tests (tests/store, tests/train): the test binary's private
 * cluster as a cmocka group fixture, a fresh database on it, and one-line query assertions.
 * Header-only (static inline functions) so each test binary stays one file. */
#ifndef QS_TESTS_LIB_PGTEST_H
#define QS_TESTS_LIB_PGTEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pgserver.h"

/* The test binary's private cluster (qc_pgserver_start_temp), between pgtest_setup and
 * pgtest_teardown. */
static qc_pgserver *srv __attribute__((unused));

/* cmocka group setup: starts srv. 0, or -1 with the reason on stderr. */
static inline int pgtest_setup(void **state) {
    (void)state;
    qs_error err = {0};
    if (qc_pgserver_start_temp(&srv, &err)) {
        fprintf(stderr, "pgserver: %s\n", err.msg);
        return -1;
    }
    return 0;
}

/* cmocka group teardown: stops srv and removes its cluster. Returns 0. */
static inline int pgtest_teardown(void **state) {
    (void)state;
    qc_pgserver_destroy(srv);
    return 0;
}

static inline void pgtest_quiet(void *arg, const char *message) {
    (void)arg;
    (void)message;
}

/* Creates database `name` (dropping an old one) on srv and writes its conninfo into out. */
static inline void pgtest_fresh_db(qc_pgserver *srv, const char *name, char *out, size_t cap) {
    PGconn *c = PQconnectdb(qc_pgserver_conninfo(srv));
    assert_int_equal(PQstatus(c), CONNECTION_OK);
    PQsetNoticeProcessor(c, pgtest_quiet, NULL); /* "does not exist, skipping" */
    char sql[256];
    snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s WITH (FORCE)", name);
    PGresult *r = PQexec(c, sql);
    assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
    PQclear(r);
    snprintf(sql, sizeof sql, "CREATE DATABASE %s", name);
    r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) fprintf(stderr, "%s: %s", sql, PQerrorMessage(c));
    assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
    PQclear(r);
    PQfinish(c);
    /* libpq keeps the last value of a repeated keyword. */
    snprintf(out, cap, "%s dbname=%s", qc_pgserver_conninfo(srv), name);
}

static inline PGconn *pgtest_connect(const char *conninfo) {
    PGconn *c = PQconnectdb(conninfo);
    if (PQstatus(c) != CONNECTION_OK) fprintf(stderr, "connect: %s", PQerrorMessage(c));
    assert_int_equal(PQstatus(c), CONNECTION_OK);
    return c;
}

/* Runs a query that returns one value and returns it as a long. */
static inline long pgtest_long(PGconn *c, const char *sql) {
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) fprintf(stderr, "%s: %s", sql, PQerrorMessage(c));
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    assert_int_equal(PQntuples(r), 1);
    long v = strtol(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return v;
}

static inline void pgtest_exec(PGconn *c, const char *sql) {
    PGresult *r = PQexec(c, sql);
    ExecStatusType s = PQresultStatus(r);
    if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK)
        fprintf(stderr, "%s: %s", sql, PQerrorMessage(c));
    assert_true(s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK);
    PQclear(r);
}

#endif
