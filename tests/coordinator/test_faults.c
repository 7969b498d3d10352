/* coord_faults: the faults of issue 15 that need root to stage, against a real private
 * PostgreSQL, the real qsweep-coordinator and qsweep-worker processes and real sockets:
 *   - a full disk under PostgreSQL mid-sweep (the test database's tablespace on a small
 *     tmpfs the test mounts, filled with a file, then freed): the coordinator pauses and
 *     says "disk full (SQLSTATE 53100)", retries with backoff, and the sweep completes with
 *     every job once and every result once (counts from SQL).
 * Without root each test is skipped with a message saying so. Run one test with
 * `coord_faults NAME` (a cmocka filter pattern). */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <libpq-fe.h>

#include "harness.h"

static bool need_root(void) {
    if (geteuid() == 0) return true;
    fprintf(stderr, "skipped: needs root (mounts a tmpfs / creates a network namespace)\n");
    return false;
}

/* Runs sql on the cluster's maintenance database (conninfo of qc_pgserver_conninfo); false
 * on error (printed). */
static bool admin_sql_on(const char *conninfo, const char *sql) {
    PGconn *c = PQconnectdb(conninfo);
    bool ok = PQstatus(c) == CONNECTION_OK;
    if (ok) {
        PGresult *r = PQexec(c, sql);
        ok = PQresultStatus(r) == PGRES_COMMAND_OK;
        if (!ok) fprintf(stderr, "%s: %s", sql, PQerrorMessage(c));
        PQclear(r);
    }
    PQfinish(c);
    return ok;
}

static bool admin_sql(harness *h, const char *sql) {
    return admin_sql_on(qc_pgserver_conninfo(h->pg), sql);
}

/* ---- a full disk (issue 15 item 4) ---- */

static char full_mnt[64]; /* the tmpfs, while mounted */

static int full_teardown(void **state) {
    harness *h = *state;
    bool begun = h->dir[0] != '\0';
    const char *admin = begun ? qc_pgserver_conninfo(h->pg) : NULL; /* the cluster outlives h */
    h_teardown(state); /* kills the processes first: they hold the database open; frees h */
    if (admin) {
        admin_sql_on(admin, "DROP DATABASE IF EXISTS coord_disk_full WITH (FORCE)");
        admin_sql_on(admin, "DROP TABLESPACE IF EXISTS qs_small");
    }
    if (full_mnt[0]) {
        if (umount2(full_mnt, MNT_DETACH) != 0) fprintf(stderr, "umount %s: %s\n", full_mnt,
                                                         strerror(errno));
        rmdir(full_mnt);
        full_mnt[0] = '\0';
    }
    return 0;
}

/* Fills the file system of path with a file until ENOSPC; returns the bytes written. */
static long long fill(const char *path) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    static char block[1 << 16];
    memset(block, 0x5a, sizeof block);
    long long total = 0;
    for (;;) {
        ssize_t n = write(fd, block, sizeof block);
        if (n <= 0) break;
        total += n;
    }
    for (;;) { /* the last partial pages */
        ssize_t n = write(fd, block, 512);
        if (n <= 0) break;
        total += n;
    }
    close(fd);
    return total;
}

/* 24 echo jobs of 400 final metrics and a 6-point curve each (about 1 s per job) on 3
 * workers. When 4 jobs have succeeded the tablespace's tmpfs is filled; once the coordinator
 * has said the disk is full, nothing more may commit; the file is removed 3 s later and the
 * sweep must complete. Before the fix the coordinator exited (status 6, QS_EDB) at the
 * first "could not extend file ...: No space left on device", leaving jobs running. */
static void disk_full_mid_sweep_pauses_and_then_completes_every_job_once(void **state) {
    harness *h = *state;
    if (!need_root()) skip();
    h_begin(h, "coord_disk_full");
    /* the tmpfs, traversable by the server's unprivileged user, and a tablespace on it */
    strcpy(full_mnt, "/tmp/qsfull-XXXXXX");
    assert_non_null(mkdtemp(full_mnt));
    if (mount("qsfull", full_mnt, "tmpfs", 0, "size=48m,mode=0755") != 0) {
        fprintf(stderr, "skipped: mount tmpfs on %s: %s\n", full_mnt, strerror(errno));
        rmdir(full_mnt);
        full_mnt[0] = '\0';
        skip();
    }
    char ts[96], filler[96], sql[256];
    snprintf(ts, sizeof ts, "%s/ts", full_mnt);
    snprintf(filler, sizeof filler, "%s/filler", full_mnt);
    assert_int_equal(mkdir(ts, 0700), 0);
    struct stat owner;
    assert_int_equal(stat(qc_pgserver_data_dir(h->pg), &owner), 0);
    assert_int_equal(chown(ts, owner.st_uid, owner.st_gid), 0);
    snprintf(sql, sizeof sql, "CREATE TABLESPACE qs_small LOCATION '%s'", ts);
    assert_true(admin_sql(h, sql));
    assert_true(admin_sql(h, "ALTER DATABASE coord_disk_full SET TABLESPACE qs_small"));

    enum { JOBS = 24, FINALS = 400, POINTS = 6 };
    char *spec = malloc(FINALS * 32 + 256);
    assert_non_null(spec);
    size_t o = (size_t)sprintf(spec, "{\"step_ms\": 150, \"curve\": {\"loss\": [6,5,4,3,2,1]}, "
                                     "\"metrics\": {");
    for (int m = 0; m < FINALS; m++)
        o += (size_t)sprintf(spec + o, "%s\"sqnr_db.%d\": %d.5", m ? ", " : "", m, m);
    strcpy(spec + o, "}}");
    for (int i = 0; i < JOBS; i++) {
        char key[32];
        snprintf(key, sizeof key, "full-%d", i);
        h_insert_job(h, key, "echo", spec, 3, 0);
    }
    free(spec);
    h_start_coordinator(h);
    h_start_worker(h, "w1");
    h_start_worker(h, "w2");
    h_start_worker(h, "w3");
    assert_true(h_wait_sql(h, 1, 30000,
                           "SELECT (count(*) >= 4)::int FROM jobs WHERE state = 'succeeded'"));
    long long filled = fill(filler);
    fprintf(stderr, "filled the tablespace's tmpfs with %lld bytes\n", filled);
    bool said = false;
    for (int t = 0; t < 200 && !said; t++) {
        said = h_log_contains(h, "disk full (SQLSTATE 53100)");
        if (!said) h_sleep_ms(100);
    }
    assert_true(said);
    long during = h_sql_long(h, "SELECT count(*) FROM jobs WHERE state = 'succeeded'");
    h_sleep_ms(3000);
    /* still serving (heartbeats answered from memory), nothing committed meanwhile */
    assert_int_equal(h_wait_exit(h->coord, 0), -1);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM jobs WHERE state = 'succeeded'"),
                     during);
    assert_int_equal(unlink(filler), 0);
    assert_true(
        h_wait_sql(h, JOBS, 60000, "SELECT count(*) FROM jobs WHERE state = 'succeeded'"));
    /* counts from SQL: every job once, every result once, all from the succeeded attempt */
    long attempts = h_sql_long(h, "SELECT count(*) FROM attempts");
    long succeeded = h_sql_long(h, "SELECT count(*) FROM attempts WHERE outcome = 'succeeded'");
    long lost = h_sql_long(h, "SELECT count(*) FROM attempts WHERE outcome = 'lost'");
    long finals = h_sql_long(h, "SELECT count(*) FROM results WHERE final");
    long points = h_sql_long(h, "SELECT count(*) FROM results WHERE NOT final");
    fprintf(stderr,
            "disk full: jobs succeeded %d, attempts %ld (succeeded %ld, lost %ld), final "
            "results %ld, curve points %ld; %ld jobs had succeeded when the disk filled\n",
            JOBS, attempts, succeeded, lost, finals, points, during);
    assert_int_equal(succeeded, JOBS);
    assert_int_equal(
        h_sql_long(h, "SELECT count(*) FROM (SELECT job FROM attempts WHERE outcome = "
                      "'succeeded' GROUP BY job HAVING count(*) > 1) x"),
        0);
    assert_int_equal(finals, (long)JOBS * FINALS);
    assert_int_equal(points, (long)JOBS * POINTS);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM results r JOIN attempts a ON a.job = "
                                   "r.job AND a.attempt = r.attempt AND a.outcome = 'succeeded'"),
                     (long)JOBS * (FINALS + POINTS));
    assert_true(h_log_contains(h, "pausing dispatch, retrying in"));
}

int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(disk_full_mid_sweep_pauses_and_then_completes_every_job_once,
                                        h_setup, full_teardown),
    };
    return cmocka_run_group_tests(tests, h_group_setup, h_group_teardown);
}
