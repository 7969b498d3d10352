/* coord_faults: the faults that need root to stage, against a real private
 * PostgreSQL, the real qsweep-coordinator and qsweep-worker processes and real sockets:
 *   - a full disk under PostgreSQL mid-sweep (the test database's tablespace on a small
 *     tmpfs the test mounts, filled with a file, then freed): the coordinator pauses and
 *     says "disk full (SQLSTATE 53100)", retries with backoff, and the sweep completes with
 *     every job once and every result once (counts from SQL).
 *   - a link shaped to 1 Mbit/s (a network namespace the test creates, tc tbf on its
 *     loopback, the coordinator and worker inside it over tcp://127.0.0.1): a 1.1 MB final
 *     RESULT and a 1.4 MB ASSIGN arrive exactly once, on attempt 1, no lease lost;
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

/* ---- a full disk ---- */

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
        if (umount2(full_mnt, MNT_DETACH) != 0)
            fprintf(stderr, "umount %s: %s\n", full_mnt, strerror(errno));
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
    assert_true(
        h_wait_sql(h, 1, 30000, "SELECT (count(*) >= 4)::int FROM jobs WHERE state = 'succeeded'"));
    long long filled = fill(filler);
    fprintf(stderr, "filled the tablespace's tmpfs with %lld bytes\n", filled);
    bool said = false;
    for (int t = 0; t < 2000 && !said; t++) { /* 200 s: only a hang */
        said = h_log_contains(h, "disk full (SQLSTATE 53100)");
        if (!said) h_sleep_ms(100);
    }
    if (!said) fail_msg("gave up after 200 s waiting for \"disk full\" in %s", h->coord_log);
    long during = h_sql_long(h, "SELECT count(*) FROM jobs WHERE state = 'succeeded'");
    h_sleep_ms(3000);
    /* still serving (heartbeats answered from memory), nothing committed meanwhile */
    assert_int_equal(h_wait_exit(h->coord, 0), -1);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM jobs WHERE state = 'succeeded'"), during);
    assert_int_equal(unlink(filler), 0);
    assert_true(h_wait_sql(h, JOBS, 60000, "SELECT count(*) FROM jobs WHERE state = 'succeeded'"));
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
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM (SELECT job FROM attempts WHERE outcome = "
                                   "'succeeded' GROUP BY job HAVING count(*) > 1) x"),
                     0);
    assert_int_equal(finals, (long)JOBS * FINALS);
    assert_int_equal(points, (long)JOBS * POINTS);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM results r JOIN attempts a ON a.job = "
                                   "r.job AND a.attempt = r.attempt AND a.outcome = 'succeeded'"),
                     (long)JOBS * (FINALS + POINTS));
    assert_true(h_log_contains(h, "pausing dispatch, retrying in"));
}

/* ---- a slow link ---- */

static char slow_ns[32]; /* the namespace, while it exists */

/* Runs a command line; true when it exits 0 (its output goes to stderr). */
static bool run_cmd(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static bool run_cmd(const char *fmt, ...) {
    char cmd[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    if (rc != 0) fprintf(stderr, "`%s` exited with %d\n", cmd, rc);
    return rc == 0;
}

static int slow_teardown(void **state) {
    h_teardown(state);
    if (slow_ns[0]) {
        run_cmd("ip netns del %s", slow_ns);
        slow_ns[0] = '\0';
    }
    return 0;
}

/* A namespace whose loopback carries 1 Mbit/s (tbf; MTU 1500 so every packet fits the
 * bucket), both directions sharing it. false (printed) when this machine cannot. */
static bool slow_namespace(void) {
    snprintf(slow_ns, sizeof slow_ns, "qsslow%d", (int)getpid());
    if (access("/usr/sbin/ip", X_OK) != 0 || access("/usr/sbin/tc", X_OK) != 0) {
        fprintf(stderr, "skipped: ip/tc missing (Debian package iproute2)\n");
        slow_ns[0] = '\0';
        return false;
    }
    if (!run_cmd("ip netns add %s", slow_ns)) {
        fprintf(stderr, "skipped: cannot create a network namespace here\n");
        slow_ns[0] = '\0';
        return false;
    }
    return run_cmd("ip netns exec %s ip link set lo mtu 1500 up", slow_ns) &&
           run_cmd("ip netns exec %s tc qdisc add dev lo root tbf rate 1mbit burst 16kb "
                   "latency 500ms",
                   slow_ns);
}

/* Two jobs on one worker over the 1 Mbit/s link, lease 6 s, heartbeat 1 s, worker silence
 * timeout 4 s: "big-result" reports 20,000 metrics (a final RESULT of about 1.1 MB: 9 s on
 * the link, longer than the silence timeout), "big-spec" comes with a 1.4 MB spec. Before:
 * the heartbeats queued behind the one big frame, the worker reconnected with LINGER 0,
 * discarding it, and re-sent it for ever (24 re-registrations, 0 rows after 197 s); the
 * ASSIGN was lost three times and the job failed. Now both travel in 64 KiB chunks with the
 * heartbeats between them. Counts from SQL. */
static void slow_link_big_result_and_big_assign_arrive_exactly_once(void **state) {
    harness *h = *state;
    if (!need_root()) skip();
    if (!slow_namespace()) {
        if (slow_ns[0]) fprintf(stderr, "skipped: cannot shape the namespace's loopback\n");
        skip();
    }
    h_begin(h, "coord_slow_link");
    snprintf(h->netns, sizeof h->netns, "%s", slow_ns);
    snprintf(h->endpoint, sizeof h->endpoint, "tcp://127.0.0.1:%d", 20000 + (int)getpid() % 20000);
    enum { N = 20000 };
    char *spec = malloc((size_t)N * 80 + 64);
    assert_non_null(spec);
    size_t o = (size_t)sprintf(spec, "{\"metrics\": {");
    for (int i = 0; i < N; i++)
        o += (size_t)sprintf(spec + o, "%s\"sqnr_db.model.layers.%05d.self_attn.o_proj\": %d.5",
                             i ? ", " : "", i, i);
    strcpy(spec + o, "}}");
    long big_result = h_insert_job(h, "big-result", "echo", spec, 3, 10);
    free(spec);
    enum { PAD = 1400 * 1000 };
    char *pad = malloc(PAD + 128);
    assert_non_null(pad);
    o = (size_t)sprintf(pad, "{\"metrics\": {\"x\": 1}, \"padding\": \"");
    memset(pad + o, 'p', PAD);
    strcpy(pad + o + PAD, "\"}");
    long big_spec = h_insert_job(h, "big-spec", "echo", pad, 3, 0);
    free(pad);

    const char *const coord[] = {"--lease-ms", "6000", NULL};
    h_start_coordinator_env(h, coord, NULL);
    h_sleep_ms(300);
    const char *const worker[] = {"--heartbeat-ms", "1000", "--timeout-ms", "4000", NULL};
    h_start_worker_args(h, "w1", worker);
    bool done = h_wait_sql(h, 2, 150000, "SELECT count(*) FROM jobs WHERE state = 'succeeded'");
    long attempts = h_sql_long(h, "SELECT count(*) FROM attempts");
    long not_ok = h_sql_long(h, "SELECT count(*) FROM attempts WHERE outcome <> 'succeeded'");
    long rows = h_sql_long(h, "SELECT count(*) FROM results WHERE job = %ld AND final", big_result);
    long spec_rows = h_sql_long(h, "SELECT count(*) FROM results WHERE job = %ld", big_spec);
    long stored =
        h_sql_long(h, "SELECT octet_length(spec::text) FROM jobs WHERE id = %ld", big_spec);
    fprintf(stderr,
            "slow link: jobs succeeded %s, attempts %ld (not succeeded %ld), big-result rows "
            "%ld of %d, big-spec rows %ld (spec %ld bytes)\n",
            done ? "2 of 2" : "not all", attempts, not_ok, rows, N, spec_rows, stored);
    /* the result's size on the wire, as the worker reported it */
    char wlog[200], line[600] = "";
    snprintf(wlog, sizeof wlog, "%s/worker-w1.log", h->dir);
    FILE *f = fopen(wlog, "r");
    long result_bytes = 0;
    while (f && fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "succeeded (20000 metrics, ");
        if (p) result_bytes = strtol(p + strlen("succeeded (20000 metrics, "), NULL, 10);
    }
    if (f) fclose(f);
    fprintf(stderr, "slow link: the final RESULT was %ld bytes\n", result_bytes);
    assert_true(result_bytes > 1000000);
    assert_true(done);
    assert_int_equal(attempts, 2);
    assert_int_equal(not_ok, 0);
    assert_int_equal(rows, N);
    assert_int_equal(spec_rows, 1);
    assert_false(h_log_contains(h, "lease expired"));
    assert_false(h_log_contains(h, "re-registered without it"));
    assert_false(h_log_contains(h, "re-attached"));
}

int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            disk_full_mid_sweep_pauses_and_then_completes_every_job_once, h_setup, full_teardown),
        cmocka_unit_test_setup_teardown(slow_link_big_result_and_big_assign_arrive_exactly_once,
                                        h_setup, slow_teardown),
    };
    return cmocka_run_group_tests(tests, h_group_setup, h_group_teardown);
}
