/* coord_partition: a cut between the coordinator and PostgreSQL does not stop the coordinator
 * (coordinator/store/store.c: keepalives and tcp_user_timeout on every connection; the lock
 * retaken after a reconnect ends the coordinator's own stale session). The test binary makes
 * a network namespace of its own (unshare, needs root) and runs everything inside it: the
 * private PostgreSQL, restarted to listen on 127.0.0.1 there, the coordinator connecting to it
 * over TCP, and workers talking to the coordinator over ipc://. The partition is a token
 * bucket of 8 bit/s with a 1 ms queue on the namespace's loopback for 15 s (this kernel has
 * no netem): past its first 1600 bytes every packet is dropped. The coordinator notices the
 * cut through its own TCP timeouts and keeps answering its workers; the server, whose
 * keepalives this test sets to 10 minutes, still shows the old session right after the cut.
 * The coordinator then takes the lock again and finishes the sweep: every job once, every
 * result once (counts from SQL), no worker re-registered, and its loop stalled at most once
 * while PostgreSQL was away (the turn that noticed the cut: reconnect attempts never block
 * it, commit.c). Without root it is skipped. (The
 * stale session itself is ended deterministically in store_store.) */
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "pgserver.h"

static bool in_netns; /* this process runs in a network namespace of its own */

static bool sh(const char *cmd) {
    int rc = system(cmd);
    if (rc != 0) fprintf(stderr, "%s: exit %d\n", cmd, rc);
    return rc == 0;
}

/* Counts lines of the file at path holding needle. */
static int count_lines(const char *path, const char *needle) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

/* The loop's stalls while PostgreSQL was away: the coordinator's "did not run for N ms" lines
 * between its "PostgreSQL unreachable" and "PostgreSQL is back" lines; *longest gets the
 * longest N. */
static int stalls_during_outage(const char *path, long *longest) {
    FILE *f = fopen(path, "r");
    *longest = 0;
    if (!f) return 0;
    char line[4096];
    int n = 0;
    bool down = false;
    while (fgets(line, sizeof line, f)) {
        if (strstr(line, "PostgreSQL unreachable")) down = true;
        if (strstr(line, "PostgreSQL is back")) down = false;
        const char *p = strstr(line, "did not run for ");
        if (!down || !p) continue;
        long ms = atol(p + strlen("did not run for "));
        if (ms > *longest) *longest = ms;
        n++;
    }
    fclose(f);
    return n;
}

static void coordinator_survives_a_partition_from_postgresql(void **state) {
    harness *h = *state;
    if (!in_netns) skip();
    h_begin(h, "coord_partition");
    /* the cluster listens on the namespace's 127.0.0.1 from now on */
    h_sql_exec(h, "ALTER SYSTEM SET listen_addresses = '127.0.0.1'");
    qs_error err;
    assert_int_equal(qc_pgserver_restart(h->pg, &err), QS_OK);
    const char *port = strstr(qc_pgserver_conninfo(h->pg), "port=");
    assert_non_null(port);
    char unix_ci[600], tcp_ci[600];
    snprintf(unix_ci, sizeof unix_ci, "%s", h->conninfo);
    /* client side: the coordinator's own keepalives and tcp_user_timeout (store.c); server
       side: never within the test (10 minutes), so the old session outlives the cut */
    snprintf(tcp_ci, sizeof tcp_ci,
             "host=127.0.0.1 port=%d user=qsweep dbname=coord_partition "
             "options='-c tcp_keepalives_idle=600 -c tcp_user_timeout=0'",
             atoi(port + 5));
    for (int i = 0; i < 6; i++) {
        char key[32];
        snprintf(key, sizeof key, "part-%d", i);
        h_insert_job(h, key, "sleep", "{\"seconds\": 2}", 3, 0);
    }
    snprintf(h->conninfo, sizeof h->conninfo, "%s", tcp_ci);
    h_start_coordinator(h);
    snprintf(h->conninfo, sizeof h->conninfo, "%s", unix_ci); /* the test's own probes */
    /* workers that wait 12 s for an answer: the loop must never be held longer */
    const char *patient[] = {"--timeout-ms", "12000", NULL};
    h_start_worker_args(h, "w1", patient);
    h_start_worker_args(h, "w2", patient);
    assert_true(h_wait_sql(h, 2, 20000, "SELECT count(*) FROM attempts WHERE outcome = 'running'"));
    long writer_pid = h_sql_long(h, "SELECT pid FROM pg_stat_activity WHERE application_name "
                                    "LIKE 'qsweep coordinator-writer %%'");

    assert_true(sh("tc qdisc add dev lo root tbf rate 8bit burst 1600 latency 1ms"));
    h_sleep_ms(15000);
    assert_true(sh("tc qdisc del dev lo root"));
    /* the old session is still there right after the cut */
    long old_still =
        h_sql_long(h, "SELECT count(*) FROM pg_stat_activity WHERE pid = %ld", writer_pid);

    bool done = h_wait_sql(h, 6, 60000, "SELECT count(*) FROM jobs WHERE state = 'succeeded'");
    int alive = h_wait_exit(h->coord, 0);
    long succeeded = h_sql_long(h, "SELECT count(*) FROM jobs WHERE state = 'succeeded'");
    long att_ok = h_sql_long(h, "SELECT count(*) FROM attempts WHERE outcome = 'succeeded'");
    long att_lost = h_sql_long(h, "SELECT count(*) FROM attempts WHERE outcome = 'lost'");
    long att_other =
        h_sql_long(h, "SELECT count(*) FROM attempts WHERE outcome NOT IN ('succeeded', 'lost')");
    long rows = h_sql_long(h, "SELECT count(*) FROM results WHERE final");
    long wrong = h_sql_long(h, "SELECT count(*) FROM results WHERE final AND value <> 2");
    long twice = h_sql_long(h, "SELECT count(*) - count(DISTINCT (job, name, step)) FROM results");
    long writers = h_sql_long(h, "SELECT count(*) FROM pg_stat_activity WHERE application_name "
                                 "LIKE 'qsweep coordinator-writer %%'");
    char log1[160], log2[160];
    snprintf(log1, sizeof log1, "%s/worker-w1.log", h->dir);
    snprintf(log2, sizeof log2, "%s/worker-w2.log", h->dir);
    int rereg = count_lines(log1, "re-regist") + count_lines(log2, "re-regist");
    long longest = 0;
    int stalls = stalls_during_outage(h->coord_log, &longest);
    int moved = count_lines(h->coord_log, "moved from connection") +
                count_lines(h->coord_log, "re-attached to job");
    fprintf(stderr,
            "partition: old session still there after the cut %ld; jobs succeeded %ld of 6; "
            "attempts succeeded %ld, lost %ld, other %ld; final results %ld, wrong %ld, twice "
            "%ld; writer sessions now %ld; worker re-register lines %d, coordinator re-attach "
            "lines %d; loop stalls while PostgreSQL was away %d (longest %ld ms)\n",
            old_still, succeeded, att_ok, att_lost, att_other, rows, wrong, twice, writers, rereg,
            moved, stalls, longest);
    assert_int_equal(alive, -1); /* the coordinator still runs */
    assert_true(done);
    assert_true(h_log_contains(h, "PostgreSQL is back"));
    assert_false(h_log_contains(h, "another coordinator is already running"));
    assert_int_equal(rereg, 0); /* the coordinator kept answering them */
    assert_int_equal(moved, 0);
    /* reconnect attempts never hold the loop (commit.c, qc_srv_reconnect): at most the one turn
       whose statement noticed the cut, bounded by tcp_user_timeout (5 s, store.c) */
    assert_true(stalls <= 1);
    assert_true(longest <= 6000);
    assert_int_equal(succeeded, 6);
    assert_int_equal(att_ok, 6);
    assert_int_equal(att_other, 0);
    assert_int_equal(rows, 6);
    assert_int_equal(wrong, 0);
    assert_int_equal(twice, 0);
    assert_int_equal(writers, 1);
    assert_int_equal(
        h_sql_long(h, "SELECT count(*) FROM pg_stat_activity WHERE pid = %ld", writer_pid), 0);
    h_sql_exec(h, "ALTER SYSTEM RESET listen_addresses");
}

int main(void) {
    /* a closed socket's FIN is retried once, not for minutes: a cut longer than that leaves
       the server with a session whose client is gone and that never says so, as a long
       partition does (tcp_orphan_retries is per network namespace) */
    if (geteuid() == 0 && unshare(CLONE_NEWNET) == 0 && sh("ip link set lo up") &&
        sh("sysctl -q -w net.ipv4.tcp_orphan_retries=1"))
        in_netns = true;
    else
        fprintf(stderr, "skipped: needs root (makes a network namespace)\n");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(coordinator_survives_a_partition_from_postgresql, h_setup,
                                        h_teardown),
    };
    return cmocka_run_group_tests(tests, h_group_setup, h_group_teardown);
}
