/* coord_identity: a peer cannot speak for another worker (coordinator/server/identity.c,
 * docs/security.md). A real worker runs a job; a second peer connects while it runs, claims
 * the worker's id, names the worker's job and attempt in its HELLO (re-attach) and sends a
 * made-up final RESULT. Without CURVE the forger lacks the attempt token the job's ASSIGN
 * carried; with CURVE (an allow-list holding both keys) the worker id belongs to the key that
 * first registered it. Either way the forged result is never stored and the real worker's
 * result is, once. Real PostgreSQL, real sockets; without CURVE the coordinator and the
 * worker are processes, with CURVE they run in threads of this process (as coord_curve). */
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <zmq.h>

#include "envelope.h"
#include "harness.h"
#include "loop.h"
#include "server.h"
#include "test_kinds.h"

/* The forger's made-up value: no job of these tests can produce it. */
#define FORGED 12345.0

static int identity_setup(void **state) {
    qs_error err;
    if (qw_register_test_kinds(&err) != QS_OK) return -1; /* the in-process worker's kinds */
    return h_group_setup(state);
}

/* A DEALER with routing id rid (NULL: the ROUTER's own), CURVE keys when server_pub is set. */
static void *forger_socket(void *ctx, const char *endpoint, const char *rid, const char *server_pub,
                           const char *pub, const char *sec) {
    void *d = zmq_socket(ctx, ZMQ_DEALER);
    assert_non_null(d);
    int linger = 0, rcvto = 200;
    zmq_setsockopt(d, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(d, ZMQ_RCVTIMEO, &rcvto, sizeof rcvto);
    if (rid) zmq_setsockopt(d, ZMQ_ROUTING_ID, rid, strlen(rid));
    if (server_pub) {
        zmq_setsockopt(d, ZMQ_CURVE_SERVERKEY, server_pub, 40);
        zmq_setsockopt(d, ZMQ_CURVE_PUBLICKEY, pub, 40);
        zmq_setsockopt(d, ZMQ_CURVE_SECRETKEY, sec, 40);
    }
    assert_int_equal(zmq_connect(d, endpoint), 0);
    return d;
}

static void send_env(void *sock, Qsweep__Envelope *env) {
    uint8_t *buf = NULL;
    size_t len = 0;
    qs_error err;
    assert_int_equal(qs_proto_encode(env, &buf, &len, &err), QS_OK);
    assert_true(zmq_send(sock, buf, len, 0) == (int)len);
    free(buf);
}

/* Claims worker id `as`, naming (job, attempt) with token tok (tok_len 0: none), then sends a
 * final RESULT of FORGED for it with the same token, and a HEARTBEAT, right behind; drains
 * what comes back for a second. */
static void forge(void *sock, const char *as, long job, uint32_t attempt, const uint8_t *tok,
                  size_t tok_len) {
    Qsweep__Hello hello = QSWEEP__HELLO__INIT;
    hello.worker_id = (char *)as;
    hello.host = "forger";
    hello.pid = 1;
    hello.running_job_id = job;
    hello.running_attempt = attempt;
    hello.running_token = (ProtobufCBinaryData){tok_len, (uint8_t *)tok};
    Qsweep__Envelope env = QSWEEP__ENVELOPE__INIT;
    env.body_case = QSWEEP__ENVELOPE__BODY_HELLO;
    env.hello = &hello;
    send_env(sock, &env);
    Qsweep__Metric m1 = QSWEEP__METRIC__INIT, m2 = QSWEEP__METRIC__INIT;
    m1.name = "seconds";
    m1.value = FORGED;
    m1.step = -1;
    m1.final = true;
    m2.name = "ppl";
    m2.value = FORGED;
    m2.step = -1;
    m2.final = true;
    Qsweep__Metric *ms[] = {&m1, &m2};
    Qsweep__Result r = QSWEEP__RESULT__INIT;
    r.job_id = job;
    r.attempt = attempt;
    r.final = true;
    r.n_metrics = 2;
    r.metrics = ms;
    r.token = (ProtobufCBinaryData){tok_len, (uint8_t *)tok};
    Qsweep__Envelope renv = QSWEEP__ENVELOPE__INIT;
    renv.body_case = QSWEEP__ENVELOPE__BODY_RESULT;
    renv.result = &r;
    send_env(sock, &renv);
    Qsweep__Heartbeat hb = QSWEEP__HEARTBEAT__INIT;
    hb.job_id = job;
    hb.attempt = attempt;
    hb.phase = "forged";
    hb.token = (ProtobufCBinaryData){tok_len, (uint8_t *)tok};
    Qsweep__Envelope henv = QSWEEP__ENVELOPE__INIT;
    henv.body_case = QSWEEP__ENVELOPE__BODY_HEARTBEAT;
    henv.heartbeat = &hb;
    send_env(sock, &henv);
    for (int i = 0; i < 5; i++) {
        char buf[4096];
        (void)zmq_recv(sock, buf, sizeof buf, 0); /* times out after 200 ms */
    }
}

/* The counts the report gives for each scenario, printed, and the ones that must hold. */
static void check_counts(harness *h, long job, const char *real_worker, const char *scenario) {
    long succeeded = h_sql_long(h, "SELECT count(*) FROM jobs WHERE state = 'succeeded'");
    long other = h_sql_long(h, "SELECT count(*) FROM jobs WHERE state <> 'succeeded'");
    long att_ok = h_sql_long(
        h, "SELECT count(*) FROM attempts WHERE job = %ld AND outcome = 'succeeded'", job);
    long att_other = h_sql_long(
        h, "SELECT count(*) FROM attempts WHERE job = %ld AND outcome <> 'succeeded'", job);
    long rows = h_sql_long(h, "SELECT count(*) FROM results WHERE job = %ld AND final", job);
    long wrong = h_sql_long(h, "SELECT count(*) FROM results WHERE value = %g", FORGED);
    long twice = h_sql_long(h, "SELECT count(*) - count(DISTINCT (job, name, step)) FROM results");
    fprintf(stderr,
            "%s: jobs succeeded %ld, other %ld; attempts succeeded %ld, other %ld; final "
            "results %ld, wrong %ld, twice %ld\n",
            scenario, succeeded, other, att_ok, att_other, rows, wrong, twice);
    assert_int_equal(succeeded, 1);
    assert_int_equal(other, 0);
    assert_int_equal(att_ok, 1);
    assert_int_equal(att_other, 0);
    assert_int_equal(rows, 1); /* sleep's one final metric, "seconds" */
    assert_int_equal(wrong, 0);
    assert_int_equal(twice, 0);
    char v[64];
    h_sql_text(h, v, sizeof v,
               "SELECT value FROM results WHERE job = %ld AND name = 'seconds' AND final", job);
    assert_string_equal(v, "3");
    assert_int_equal(h_sql_long(h,
                                "SELECT count(*) FROM attempts WHERE job = %ld AND worker = '%s' "
                                "AND outcome = 'succeeded'",
                                job, real_worker),
                     1);
}

/* Without CURVE: the forger connects with the worker's bare id as its routing id and claims
 * the id and the attempt, once with no token and once with a made-up one. */
static void forged_reattach_and_result_without_curve_are_refused(void **state) {
    harness *h = *state;
    h_begin(h, "coord_identity_plain");
    long id = h_insert_job(h, "forge-plain", "sleep", "{\"seconds\": 3}", 1, 0);
    h_start_coordinator(h);
    h_start_worker(h, "w1");
    assert_true(h_wait_sql(
        h, 1, 20000, "SELECT count(*) FROM attempts WHERE job = %ld AND outcome = 'running'", id));
    h_sleep_ms(500); /* the ASSIGN is out, the job runs */
    void *ctx = zmq_ctx_new();
    void *f = forger_socket(ctx, h->endpoint, "w1", NULL, NULL, NULL);
    forge(f, "w1", id, 1, NULL, 0);
    uint8_t guess[16];
    for (size_t i = 0; i < sizeof guess; i++)
        guess[i] = (uint8_t)(i * 37 + 11);
    forge(f, "w1", id, 1, guess, sizeof guess);
    assert_true(h_wait_sql(h, 1, 20000,
                           "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'succeeded'", id));
    zmq_close(f);
    zmq_ctx_term(ctx);
    assert_true(h_log_contains(h, "refused re-attach: peer w1: HELLO as worker w1 names job"));
    check_counts(h, id, "w1", "without CURVE");
}

typedef struct coord_thread {
    qc_server_options o;
    qs_status st;
    qs_error err;
} coord_thread;

static void *run_coordinator(void *arg) {
    coord_thread *c = arg;
    c->st = qc_server_run(&c->o, &c->err);
    return NULL;
}

typedef struct worker_thread {
    qw_options o;
    qs_status st;
    qs_error err;
} worker_thread;

static void *run_worker(void *arg) {
    worker_thread *w = arg;
    w->st = qw_run(&w->o, &w->err);
    return NULL;
}

/* With CURVE and an allow-list of both keys: the forger (the second key) claims the worker's
 * id, by the worker's bare id as routing id, and then as a worker of its own ("w2") reports
 * the job. */
static void forged_reattach_and_result_with_curve_are_refused(void **state) {
    harness *h = *state;
    h_begin(h, "coord_identity_curve");
    long id = h_insert_job(h, "forge-curve", "sleep", "{\"seconds\": 3}", 1, 0);
    char server_pub[41], server_sec[41], w_pub[41], w_sec[41], f_pub[41], f_sec[41];
    assert_int_equal(zmq_curve_keypair(server_pub, server_sec), 0);
    assert_int_equal(zmq_curve_keypair(w_pub, w_sec), 0);
    assert_int_equal(zmq_curve_keypair(f_pub, f_sec), 0);
    char keys_path[200];
    snprintf(keys_path, sizeof keys_path, "%s/workers.keys", h->dir);
    FILE *kf = fopen(keys_path, "w");
    assert_non_null(kf);
    fprintf(kf, "%s\n%s\n", w_pub, f_pub);
    assert_int_equal(fclose(kf), 0);
    /* the coordinator's log lines (stderr of this process) to the harness's log file */
    fflush(stderr);
    int saved = dup(2);
    int fd = open(h->coord_log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    assert_true(fd >= 0);
    dup2(fd, 2);
    close(fd);

    coord_thread c = {.o = {.bind_endpoint = h->endpoint,
                            .conninfo = h->conninfo,
                            .lease_ms = H_LEASE_MS,
                            .poll_ms = 200,
                            .curve_secret_key = server_sec,
                            .curve_allowed_keys = keys_path,
                            .no_signal_handlers = true}};
    worker_thread w = {.o = {.endpoint = h->endpoint,
                             .worker_id = "w1",
                             .heartbeat_ms = H_HEARTBEAT_MS,
                             .curve_server_key = server_pub,
                             .curve_public_key = w_pub,
                             .curve_secret_key = w_sec,
                             .no_signal_handlers = true}};
    pthread_t ct, wt;
    assert_int_equal(pthread_create(&ct, NULL, run_coordinator, &c), 0);
    assert_int_equal(pthread_create(&wt, NULL, run_worker, &w), 0);
    bool running = h_wait_sql(
        h, 1, 20000, "SELECT count(*) FROM attempts WHERE job = %ld AND outcome = 'running'", id);
    h_sleep_ms(500);
    void *ctx = zmq_ctx_new();
    void *f = forger_socket(ctx, h->endpoint, "w1", server_pub, f_pub, f_sec);
    forge(f, "w1", id, 1, NULL, 0);
    void *f2 = forger_socket(ctx, h->endpoint, NULL, server_pub, f_pub, f_sec);
    forge(f2, "w2", id, 1, NULL, 0);
    bool done = h_wait_sql(h, 1, 20000,
                           "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'succeeded'", id);
    zmq_close(f);
    zmq_close(f2);
    zmq_ctx_term(ctx);
    qw_request_stop();
    pthread_join(wt, NULL);
    qc_server_request_stop();
    pthread_join(ct, NULL);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    assert_true(running);
    assert_true(done);
    assert_int_equal(c.st, QS_OK);
    char refused[200];
    snprintf(refused, sizeof refused,
             "HELLO as worker w1 from CURVE key %s, but that worker id belongs to key %s", f_pub,
             w_pub);
    assert_true(h_log_contains(h, refused));
    assert_true(h_log_contains(h, "ignored final RESULT of job"));
    char key[64];
    h_sql_text(h, key, sizeof key, "SELECT curve_key FROM workers WHERE id = 'w1'");
    assert_string_equal(key, w_pub);
    h_sql_text(h, key, sizeof key, "SELECT curve_key FROM workers WHERE id = 'w2'");
    assert_string_equal(key, f_pub);
    check_counts(h, id, "w1", "with CURVE");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(forged_reattach_and_result_without_curve_are_refused,
                                        h_setup, h_teardown),
        cmocka_unit_test_setup_teardown(forged_reattach_and_result_with_curve_are_refused, h_setup,
                                        h_teardown),
    };
    return cmocka_run_group_tests(tests, identity_setup, h_group_teardown);
}
