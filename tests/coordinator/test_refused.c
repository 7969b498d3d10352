/* coord_refused: a worker the coordinator refuses at the CURVE handshake gives up by itself
 * (worker/loop/loop.h, QW_REFUSALS_MAX refusals over QW_REFUSAL_SPAN_MS; docs/cluster.md) and
 * exits with the runtime code of the exit-code table (docs/failures.md, 4 for QS_ENET).
 * Real processes: `qsweep coordinator` with CURVE and an allow-list over a real private
 * PostgreSQL, and `qsweep worker` processes with the wrong keys: a key pair not on the list,
 * a wrong coordinator public key, and no keys at all. Each exits 4 between 10 s and 25 s
 * after it started, and nothing is stored for it: no worker row, no attempt, the job still
 * pending (counts from SQL). A listed worker then registers, so the coordinator was there
 * all along. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <zmq.h>

#include "clock.h"
#include "harness.h"
#include "loop.h"

/* Starts `qsweep worker` named id with the CURVE keys given (NULL: the variable unset). */
static pid_t start_curve_worker(harness *h, const char *id, const char *server_pub, const char *pub,
                                const char *sec) {
    const char *names[] = {"QSWEEP_CURVE_SERVER", "QSWEEP_CURVE_PUBLIC", "QSWEEP_CURVE_SECRET"};
    const char *vals[] = {server_pub, pub, sec};
    for (int i = 0; i < 3; i++) {
        if (vals[i])
            setenv(names[i], vals[i], 1);
        else
            unsetenv(names[i]);
    }
    char *argv[] = {
        (char *)QS_QSWEEP_BIN, "worker", "--connect", h->endpoint, "--id",    (char *)id,
        "--threads",           "1",      "--gpus",    "none",      "--quiet", NULL};
    pid_t pid = h_start_process(h, id, argv);
    for (int i = 0; i < 3; i++)
        unsetenv(names[i]);
    return pid;
}

static void refused_workers_exit_4_within_the_documented_bound_and_store_nothing(void **state) {
    harness *h = *state;
    h_begin(h, "coord_refused");
    long job = h_insert_job(h, "refused-echo", "echo", "{\"metrics\": {\"top1\": 0.5}}", 3, 0);
    char server_pub[41], server_sec[41], good_pub[41], good_sec[41], bad_pub[41], bad_sec[41],
        other_pub[41], other_sec[41];
    assert_int_equal(zmq_curve_keypair(server_pub, server_sec), 0);
    assert_int_equal(zmq_curve_keypair(good_pub, good_sec), 0);
    assert_int_equal(zmq_curve_keypair(bad_pub, bad_sec), 0);
    assert_int_equal(zmq_curve_keypair(other_pub, other_sec), 0); /* not the coordinator's */
    char keys_path[160];
    snprintf(keys_path, sizeof keys_path, "%s/workers.keys", h->dir);
    FILE *f = fopen(keys_path, "w");
    assert_non_null(f);
    fprintf(f, "%s\n", good_pub);
    assert_int_equal(fclose(f), 0);

    setenv("QSWEEP_CURVE_SECRET", server_sec, 1);
    char *cargv[] = {(char *)QS_QSWEEP_BIN,
                     "coordinator",
                     "--bind",
                     h->endpoint,
                     "--db",
                     h->conninfo,
                     "--lease-ms",
                     "2000",
                     "--authorized-keys",
                     keys_path,
                     NULL};
    pid_t coord = h_start_process(h, "coordinator", cargv);
    unsetenv("QSWEEP_CURVE_SECRET");
    char clog[160];
    snprintf(clog, sizeof clog, "%s/coordinator.log", h->dir);
    for (int t = 0; t < 10000 && !h_file_contains(clog, "listening on"); t += 50)
        h_sleep_ms(50);
    assert_true(h_file_contains(clog, "listening on"));

    const char *ids[] = {"unlisted", "wrong-server", "keyless"};
    int64_t t0 = qs_clock_ms();
    pid_t pids[3] = {start_curve_worker(h, ids[0], server_pub, bad_pub, bad_sec),
                     start_curve_worker(h, ids[1], other_pub, good_pub, good_sec),
                     start_curve_worker(h, ids[2], NULL, NULL, NULL)};
    int codes[3];
    int64_t took[3];
    for (int i = 0; i < 3; i++) {
        codes[i] = h_wait_exit(pids[i], 30000);
        took[i] = qs_clock_ms() - t0;
        fprintf(stderr, "refused worker %s: exit %d after %lld ms\n", ids[i], codes[i],
                (long long)took[i]);
    }
    long workers = h_sql_long(h, "SELECT count(*) FROM workers");
    long attempts = h_sql_long(h, "SELECT count(*) FROM attempts");
    long results = h_sql_long(h, "SELECT count(*) FROM results");
    long pending = h_sql_long(h,
                              "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'pending' "
                              "AND attempts_used = 0",
                              job);
    fprintf(stderr, "while refused: workers %ld, attempts %ld, results %ld, job pending %ld\n",
            workers, attempts, results, pending);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(codes[i], 4); /* QS_ENET: the runtime row of the exit-code table */
        /* not before the span; after it, soon rather than never (the margin only bounds a
           retry loop that does not end, on a machine of any load) */
        assert_true(took[i] >= QW_REFUSAL_SPAN_MS && took[i] < QW_REFUSAL_SPAN_MS + 150000);
        char wlog[160];
        snprintf(wlog, sizeof wlog, "%s/%s.log", h->dir, ids[i]);
        assert_true(h_file_contains(wlog, "giving up"));
    }
    assert_int_equal(workers, 0);
    assert_int_equal(attempts, 0);
    assert_int_equal(results, 0);
    assert_int_equal(pending, 1);
    assert_int_equal(h_wait_exit(coord, 0), -1); /* the coordinator still runs */

    /* the listed key gets in and registers: the refusals were the keys' */
    pid_t good = start_curve_worker(h, "listed", server_pub, good_pub, good_sec);
    assert_true(h_wait_sql(h, 1, 20000, "SELECT count(*) FROM workers WHERE id = 'listed'"));
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM workers"), 1);
    h_signal(h, good, SIGTERM);
    assert_int_equal(h_wait_exit(good, 20000), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            refused_workers_exit_4_within_the_documented_bound_and_store_nothing, h_setup,
            h_teardown),
    };
    return cmocka_run_group_tests(tests, h_group_setup, h_group_teardown);
}
