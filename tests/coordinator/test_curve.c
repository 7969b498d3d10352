/* coord_curve: with CURVE on (DESIGN.md: only authorised workers connect), a worker that
 * knows the coordinator's public key runs a job; a plain-text DEALER's HELLO never reaches
 * the coordinator. Coordinator and worker run in threads of this process (qc_server_run,
 * qw_run) over a real private PostgreSQL and a real ipc:// socket. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <zmq.h>

#include "codec.h"
#include "harness.h"
#include "loop.h"
#include "server.h"

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

static void curve_worker_runs_a_job_and_plain_text_peer_is_not_heard(void **state) {
    harness *h = *state;
    h_begin(h, "coord_curve");
    long id = h_insert_job(h, "curve-echo", "echo", "{\"metrics\": {\"top1\": 0.5}}", 1, 0);
    char server_pub[41], server_sec[41], worker_pub[41], worker_sec[41];
    assert_int_equal(zmq_curve_keypair(server_pub, server_sec), 0);
    assert_int_equal(zmq_curve_keypair(worker_pub, worker_sec), 0);

    coord_thread c = {.o = {.bind_endpoint = h->endpoint,
                            .conninfo = h->conninfo,
                            .lease_ms = H_LEASE_MS,
                            .poll_ms = 200,
                            .curve_secret_key = server_sec,
                            .no_signal_handlers = true}};
    pthread_t ct;
    assert_int_equal(pthread_create(&ct, NULL, run_coordinator, &c), 0);

    /* a plain-text DEALER says HELLO: the CURVE handshake fails, nothing is heard */
    void *ctx = zmq_ctx_new();
    void *plain = zmq_socket(ctx, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt(plain, ZMQ_LINGER, &linger, sizeof linger);
    assert_int_equal(zmq_connect(plain, h->endpoint), 0);
    Qsweep__Hello hello = QSWEEP__HELLO__INIT;
    hello.worker_id = "intruder";
    Qsweep__Envelope env = QSWEEP__ENVELOPE__INIT;
    env.body_case = QSWEEP__ENVELOPE__BODY_HELLO;
    env.hello = &hello;
    uint8_t *buf;
    size_t len;
    qs_error err;
    assert_int_equal(qs_proto_encode(&env, &buf, &len, &err), QS_OK);
    zmq_send(plain, buf, len, ZMQ_DONTWAIT);
    free(buf);

    worker_thread w = {.o = {.endpoint = h->endpoint,
                             .worker_id = "trusted",
                             .heartbeat_ms = H_HEARTBEAT_MS,
                             .curve_server_key = server_pub,
                             .curve_public_key = worker_pub,
                             .curve_secret_key = worker_sec,
                             .no_signal_handlers = true}};
    pthread_t wt;
    assert_int_equal(pthread_create(&wt, NULL, run_worker, &w), 0);
    bool done = h_wait_sql(h, 1, 20000,
                           "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'succeeded'", id);
    qw_request_stop();
    pthread_join(wt, NULL);
    qc_server_request_stop();
    pthread_join(ct, NULL);
    zmq_close(plain);
    zmq_ctx_term(ctx);
    assert_true(done);
    assert_int_equal(w.st, QS_OK);
    assert_int_equal(c.st, QS_OK);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM workers WHERE id = 'trusted'"), 1);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM workers WHERE id = 'intruder'"), 0);
}

static void keys_of_the_wrong_length_are_refused_naming_the_option(void **state) {
    (void)state;
    qs_error err;
    qc_server_options co = {
        .bind_endpoint = "ipc:///nonexistent", .conninfo = "x", .curve_secret_key = "short"};
    assert_int_equal(qc_server_run(&co, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "curve_secret_key"));
    qw_options wo = {.endpoint = "ipc:///nonexistent",
                     .curve_server_key = "a",
                     .curve_public_key = "b",
                     .curve_secret_key = "c",
                     .no_signal_handlers = true};
    assert_int_equal(qw_run(&wo, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "curve_"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(curve_worker_runs_a_job_and_plain_text_peer_is_not_heard,
                                        h_setup, h_teardown),
        cmocka_unit_test(keys_of_the_wrong_length_are_refused_naming_the_option),
    };
    return cmocka_run_group_tests(tests, h_group_setup, h_group_teardown);
}
