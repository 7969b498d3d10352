/* coord_curve: with CURVE on (docs/cluster.md: only authorised workers connect), a worker that
 * knows the coordinator's public key runs a job; a plain-text DEALER's HELLO never reaches
 * the coordinator. With an allow-list of worker keys (zap.h, a ZAP handler, RFC 27) a
 * worker whose valid key pair is not listed is refused at the handshake and logged; the
 * list is re-read on request; a malformed list is refused naming file:line. Coordinator and
 * workers run in threads of this process (qc_server_run, qw_run) over a real private
 * PostgreSQL and real ipc:// sockets; their log lines (stderr) are captured to a file. */
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <zmq.h>

#include "clock.h"
#include "envelope.h"
#include "harness.h"
#include "loop.h"
#include "server.h"
#include "test_kinds.h"
#include "zap.h"

/* ---- stderr capture: the coordinator's and workers' log lines, for assertions ---- */

static char captured[200];    /* the capture file, in the test's temp dir */
static int saved_stderr = -1; /* the real stderr while capturing */
static bool test_done;        /* set by a test that got to its end */

static void capture_begin(const char *dir) {
    snprintf(captured, sizeof captured, "%s/stderr.log", dir);
    fflush(stderr);
    saved_stderr = dup(2);
    int fd = open(captured, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0600);
    assert_true(saved_stderr >= 0 && fd >= 0);
    dup2(fd, 2);
    close(fd);
}

/* Restores stderr; shows what was captured when asked (QS_TEST_VERBOSE) or when the test
 * did not get to its end (an assertion failed). */
static void capture_end(void) {
    if (saved_stderr < 0) return;
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    saved_stderr = -1;
    if (!test_done || getenv("QS_TEST_VERBOSE")) {
        FILE *f = fopen(captured, "r");
        char line[2048];
        fprintf(stderr, "---- %s\n", captured);
        while (f && fgets(line, sizeof line, f))
            fputs(line, stderr);
        if (f) fclose(f);
    }
}

/* Lines of the captured log containing needle. */
static int log_count(const char *needle) {
    FILE *f = fopen(captured, "r");
    if (!f) return 0;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

/* Polls the captured log every 10 ms until a line contains needle; gives up after ten times
 * timeout_ms (the time on an idle machine: the bound only catches a hang). */
static bool wait_log(const char *needle, int timeout_ms) {
    for (int t = 0; t <= 10 * timeout_ms; t += 10) {
        if (log_count(needle) > 0) return true;
        h_sleep_ms(10);
    }
    fprintf(stderr, "gave up after %d ms waiting for a log line with \"%s\"\n", 10 * timeout_ms,
            needle);
    return false;
}

static int curve_setup(void **state) {
    test_done = false;
    qs_error err;
    if (qw_register_test_kinds(&err) != QS_OK) return -1; /* the workers here run echo jobs */
    return h_setup(state);
}

static int curve_teardown(void **state) {
    capture_end();
    return h_teardown(state);
}

/* Writes text to path through a temporary file and rename, as an operator's editor might. */
static void write_file(const char *path, const char *text) {
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(rename(tmp, path), 0);
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

static void curve_worker_runs_a_job_and_plain_text_peer_is_not_heard(void **state) {
    harness *h = *state;
    h_begin(h, "coord_curve");
    capture_begin(h->dir);
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
    /* CURVE without an allow-list: said once, at start */
    assert_int_equal(log_count("warning: CURVE without an allow-list of worker keys"), 1);
    test_done = true;
}

/* Starts a worker thread with its own key pair; NULL keys: a plain-text worker. */
static void start_worker(worker_thread *w, pthread_t *t, harness *h, const char *id,
                         const char *server_pub, const char *pub, const char *sec) {
    *w = (worker_thread){.o = {.endpoint = h->endpoint,
                               .worker_id = id,
                               .heartbeat_ms = H_HEARTBEAT_MS,
                               .curve_server_key = server_pub,
                               .curve_public_key = pub,
                               .curve_secret_key = sec,
                               .no_signal_handlers = true}};
    assert_int_equal(pthread_create(t, NULL, run_worker, w), 0);
}

/* signal_handlers: let qc_server_run install its SIGTERM/SIGINT/SIGHUP handlers in this
 * process (the test then signals itself). */
static void start_coordinator(coord_thread *c, pthread_t *t, harness *h, const char *server_sec,
                              const char *keys_path, bool signal_handlers) {
    *c = (coord_thread){.o = {.bind_endpoint = h->endpoint,
                              .conninfo = h->conninfo,
                              .lease_ms = H_LEASE_MS,
                              .poll_ms = 200,
                              .curve_secret_key = server_sec,
                              .curve_allowed_keys = keys_path,
                              .no_signal_handlers = !signal_handlers}};
    assert_int_equal(pthread_create(t, NULL, run_coordinator, c), 0);
}

/* With an allow-list, a worker whose (valid) key pair is not listed completes no handshake:
 * its HELLO never reaches the coordinator, the job waits, and the refusal is logged with the
 * key; a listed worker then runs the job. */
static void allow_list_listed_worker_runs_the_job_and_unlisted_key_is_refused(void **state) {
    harness *h = *state;
    h_begin(h, "coord_curve_allow");
    capture_begin(h->dir);
    long id = h_insert_job(h, "allow-echo", "echo", "{\"metrics\": {\"top1\": 0.5}}", 1, 0);
    char server_pub[41], server_sec[41], good_pub[41], good_sec[41], bad_pub[41], bad_sec[41];
    assert_int_equal(zmq_curve_keypair(server_pub, server_sec), 0);
    assert_int_equal(zmq_curve_keypair(good_pub, good_sec), 0);
    assert_int_equal(zmq_curve_keypair(bad_pub, bad_sec), 0);
    char keys_path[200], keys[400];
    snprintf(keys_path, sizeof keys_path, "%s/workers.keys", h->dir);
    snprintf(keys, sizeof keys, "# qsweep workers allowed to connect\n\n%s   # trusted\n",
             good_pub);
    write_file(keys_path, keys);

    coord_thread c;
    pthread_t ct, bt, gt;
    start_coordinator(&c, &ct, h, server_sec, keys_path, false);
    worker_thread bad, good;
    start_worker(&bad, &bt, h, "intruder", server_pub, bad_pub, bad_sec);
    char refused[120];
    snprintf(refused, sizeof refused, "CURVE: refused worker key %s from ", bad_pub);
    bool was_refused = wait_log(refused, 10000);
    /* the refusal is in: the intruder's handshake ended without a HELLO, the job waits */
    long pending = h_sql_long(
        h, "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'pending' AND attempts_used = 0",
        id);
    start_worker(&good, &gt, h, "trusted", server_pub, good_pub, good_sec);
    bool done = h_wait_sql(h, 1, 20000,
                           "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'succeeded'", id);
    qw_request_stop();
    pthread_join(gt, NULL);
    pthread_join(bt, NULL);
    qc_server_request_stop();
    pthread_join(ct, NULL);
    assert_true(was_refused);
    assert_int_equal(pending, 1);
    assert_true(done);
    assert_int_equal(c.st, QS_OK);
    assert_int_equal(good.st, QS_OK);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM attempts WHERE job = %ld", id), 1);
    assert_int_equal(
        h_sql_long(h, "SELECT count(*) FROM attempts WHERE job = %ld AND worker = 'trusted'", id),
        1);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM workers WHERE id = 'intruder'"), 0);
    assert_int_equal(log_count("qsweep-coordinator: worker trusted joined"), 1);
    /* the coordinator never heard of the intruder: it neither joined nor said BYE */
    assert_int_equal(log_count("qsweep-coordinator: worker intruder"), 0);
    assert_int_equal(log_count("CURVE: 1 authorised worker keys from"), 1);
    /* the intruder kept retrying, but its key is logged once a minute at most */
    assert_int_equal(log_count(refused), 1);
    /* and the intruder itself was told why (its handshake monitor), once */
    char told[200];
    snprintf(told, sizeof told,
             "qsweep-worker intruder: the coordinator refused this worker's CURVE key (ZAP "
             "status 400): is its public key %s in",
             bad_pub);
    assert_int_equal(log_count(told), 1);
    assert_int_equal(log_count("warning: CURVE without an allow-list"), 0);
    test_done = true;
}

/* qc_server_request_reload and SIGHUP re-read the allow-list: a file that does not load
 * leaves the list in use; a key added to the file is admitted at its next handshake. */
static void allow_list_reload_admits_an_added_key_and_keeps_the_list_on_a_bad_file(void **state) {
    harness *h = *state;
    h_begin(h, "coord_curve_reload");
    capture_begin(h->dir);
    long id = h_insert_job(h, "reload-echo", "echo", "{\"metrics\": {\"top1\": 0.5}}", 1, 0);
    char server_pub[41], server_sec[41], a_pub[41], a_sec[41], b_pub[41], b_sec[41];
    assert_int_equal(zmq_curve_keypair(server_pub, server_sec), 0);
    assert_int_equal(zmq_curve_keypair(a_pub, a_sec), 0);
    assert_int_equal(zmq_curve_keypair(b_pub, b_sec), 0);
    char keys_path[200], keys[400];
    snprintf(keys_path, sizeof keys_path, "%s/workers.keys", h->dir);
    snprintf(keys, sizeof keys, "%s\n", a_pub);
    write_file(keys_path, keys);

    coord_thread c;
    pthread_t ct, wt;
    start_coordinator(&c, &ct, h, server_sec, keys_path, true);
    worker_thread w;
    start_worker(&w, &wt, h, "late", server_pub, b_pub, b_sec);
    char refused[120], bad_reload[400], reloaded[400];
    snprintf(refused, sizeof refused, "CURVE: refused worker key %s from ", b_pub);
    snprintf(bad_reload, sizeof bad_reload,
             "CURVE: allow-list not reloaded, the 1 keys in use stay: %s:2: not a CURVE public "
             "key: 3 characters",
             keys_path);
    snprintf(reloaded, sizeof reloaded,
             "CURVE: allow-list reloaded from %s: 2 authorised worker keys (was 1)", keys_path);
    bool was_refused = wait_log(refused, 10000);

    snprintf(keys, sizeof keys, "%s\nabc\n", a_pub); /* a half-edited file */
    write_file(keys_path, keys);
    qc_server_request_reload();
    bool kept = wait_log(bad_reload, 5000);
    long pending =
        h_sql_long(h, "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'pending'", id);

    snprintf(keys, sizeof keys, "%s\n%s # late\n", a_pub, b_pub);
    write_file(keys_path, keys);
    /* the coordinator runs (it refused b), so its SIGHUP handler is in place */
    assert_int_equal(kill(getpid(), SIGHUP), 0);
    bool admitted = wait_log(reloaded, 5000);
    bool done = h_wait_sql(h, 1, 20000,
                           "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'succeeded'", id);
    qw_request_stop();
    pthread_join(wt, NULL);
    qc_server_request_stop();
    pthread_join(ct, NULL);
    assert_true(was_refused);
    assert_true(kept);
    assert_int_equal(pending, 1);
    assert_true(admitted);
    assert_true(done);
    assert_int_equal(c.st, QS_OK);
    assert_int_equal(w.st, QS_OK);
    assert_int_equal(
        h_sql_long(h, "SELECT count(*) FROM attempts WHERE job = %ld AND worker = 'late'", id), 1);
    test_done = true;
}

/* One ROUTER event from a monitor socket: returns the event (ZMQ_EVENT_*), its value in
 * *value; 0 after timeout_ms. */
static int next_event(void *mon, uint32_t *value, int timeout_ms) {
    zmq_setsockopt(mon, ZMQ_RCVTIMEO, &timeout_ms, sizeof timeout_ms);
    uint8_t head[6];
    char addr[256];
    if (zmq_recv(mon, head, sizeof head, 0) != 6 || zmq_recv(mon, addr, sizeof addr, 0) < 0)
        return 0;
    uint16_t ev;
    memcpy(&ev, head, 2);
    memcpy(value, head + 2, 4);
    return ev;
}

/* Connects a DEALER with the key pair (pub, sec) that does not reconnect, and returns the
 * ROUTER's handshake event for it: ZMQ_EVENT_HANDSHAKE_SUCCEEDED, or
 * ZMQ_EVENT_HANDSHAKE_FAILED_AUTH with the ZAP status code in *status. */
static int handshake(void *ctx, void *mon, const char *endpoint, const char *server_pub,
                     const char *pub, const char *sec, void **dealer, uint32_t *status) {
    void *d = zmq_socket(ctx, ZMQ_DEALER);
    int no = -1, linger = 0;
    zmq_setsockopt(d, ZMQ_RECONNECT_IVL, &no, sizeof no);
    zmq_setsockopt(d, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(d, ZMQ_CURVE_SERVERKEY, server_pub, 40);
    zmq_setsockopt(d, ZMQ_CURVE_PUBLICKEY, pub, 40);
    zmq_setsockopt(d, ZMQ_CURVE_SECRETKEY, sec, 40);
    assert_int_equal(zmq_connect(d, endpoint), 0);
    int ev = next_event(mon, status, 5000);
    if (dealer)
        *dealer = d;
    else
        zmq_close(d);
    return ev;
}

/* The handler itself (zap.h), on a CURVE ROUTER of its own: a listed key is admitted with
 * its Z85 form as the messages' User-Id; a flood of refusals of one key is logged once and
 * counted, and distinct keys are logged at most 10 a minute. */
static void zap_handler_admits_listed_key_and_rate_limits_refusal_lines(void **state) {
    harness *h = *state;
    strcpy(h->dir, "/tmp/qszap-XXXXXX");
    assert_non_null(mkdtemp(h->dir));
    capture_begin(h->dir);
    char server_pub[41], server_sec[41], good_pub[41], good_sec[41], bad_pub[41], bad_sec[41];
    assert_int_equal(zmq_curve_keypair(server_pub, server_sec), 0);
    assert_int_equal(zmq_curve_keypair(good_pub, good_sec), 0);
    assert_int_equal(zmq_curve_keypair(bad_pub, bad_sec), 0);
    char keys_path[200], keys[200], endpoint[200];
    snprintf(keys_path, sizeof keys_path, "%s/workers.keys", h->dir);
    snprintf(keys, sizeof keys, "%s\n", good_pub);
    write_file(keys_path, keys);
    snprintf(endpoint, sizeof endpoint, "ipc://%s/zap.sock", h->dir);

    qs_error err;
    qc_zap_keys *list;
    assert_int_equal(qc_zap_keys_load(keys_path, &list, &err), QS_OK);
    void *ctx = zmq_ctx_new();
    qc_zap *zap;
    assert_int_equal(qc_zap_start(ctx, keys_path, list, &zap, &err), QS_OK);
    void *router = zmq_socket(ctx, ZMQ_ROUTER);
    int one = 1, linger = 0, timeout = 5000;
    zmq_setsockopt(router, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(router, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    zmq_setsockopt(router, ZMQ_CURVE_SERVER, &one, sizeof one);
    zmq_setsockopt(router, ZMQ_CURVE_SECRETKEY, server_sec, 40);
    assert_int_equal(qc_zap_configure_socket(router, &err), QS_OK);
    assert_int_equal(
        zmq_socket_monitor(router, "inproc://zap-test-monitor",
                           ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH),
        0);
    void *mon = zmq_socket(ctx, ZMQ_PAIR);
    assert_int_equal(zmq_connect(mon, "inproc://zap-test-monitor"), 0);
    assert_int_equal(zmq_bind(router, endpoint), 0);

    /* the listed key: admitted, and its messages carry the key as User-Id */
    void *good;
    uint32_t status = 0;
    int ev = handshake(ctx, mon, endpoint, server_pub, good_pub, good_sec, &good, &status);
    assert_int_equal(ev, ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
    assert_int_equal(zmq_send(good, "hi", 2, 0), 2);
    zmq_msg_t rid, body;
    zmq_msg_init(&rid);
    zmq_msg_init(&body);
    assert_true(zmq_msg_recv(&rid, router, 0) >= 0 && zmq_msg_recv(&body, router, 0) == 2);
    const char *user = zmq_msg_gets(&body, "User-Id");
    assert_non_null(user);
    assert_string_equal(user, good_pub);
    zmq_msg_close(&rid);
    zmq_msg_close(&body);
    zmq_close(good);

    /* 20 handshakes with one unlisted key: each refused with 400, one line logged */
    for (int i = 0; i < 20; i++) {
        ev = handshake(ctx, mon, endpoint, server_pub, bad_pub, bad_sec, NULL, &status);
        assert_int_equal(ev, ZMQ_EVENT_HANDSHAKE_FAILED_AUTH);
        assert_int_equal(status, 400);
    }
    /* then 11 other unlisted keys: 9 more lines make 10 this minute, 2 are held back */
    for (int i = 0; i < 11; i++) {
        char pub[41], sec[41];
        assert_int_equal(zmq_curve_keypair(pub, sec), 0);
        ev = handshake(ctx, mon, endpoint, server_pub, pub, sec, NULL, &status);
        assert_int_equal(ev, ZMQ_EVENT_HANDSHAKE_FAILED_AUTH);
    }
    zmq_close(mon);
    zmq_close(router);
    qc_zap_stop(zap);
    assert_int_equal(zmq_ctx_term(ctx), 0);
    char line[200];
    snprintf(line, sizeof line, "CURVE: refused worker key %s from ", bad_pub);
    assert_int_equal(log_count(line), 1);
    assert_int_equal(log_count("CURVE: refused worker key "), 10);
    assert_int_equal(log_count("(19 earlier refusals not logged: rate limit)"), 1);
    assert_int_equal(
        log_count("CURVE: 2 refusals since the last refusal line were not logged (rate limit)"), 1);
    snprintf(line, sizeof line, "CURVE: refused worker key %s from ", good_pub);
    assert_int_equal(log_count(line), 0);
    test_done = true;
}

/* Each malformed allow-list is refused before any connection, naming file:line and what is
 * wrong (qc_server_run with a conninfo that could not connect: it is never used). */
static void malformed_keys_file_is_refused_naming_file_and_line(void **state) {
    (void)state;
    char dir[] = "/tmp/qszapkeys-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char pub[41], sec[41], other[41], osec[41];
    assert_int_equal(zmq_curve_keypair(pub, sec), 0);
    assert_int_equal(zmq_curve_keypair(other, osec), 0);
    char bad_char[41], overflow[41];
    memcpy(bad_char, pub, sizeof bad_char);
    bad_char[11] = '~'; /* not in the Z85 alphabet */
    memcpy(overflow, pub, sizeof overflow);
    memcpy(overflow + 5, "#####", 5); /* 85^5 - 1 > 2^32 - 1 */
    struct {
        char text[400];
        qs_status code;
        char msg[200];
    } cases[9];
    int n = 0;
    snprintf(cases[n].text, sizeof cases[n].text, "# workers\n%s\n%.39s\n", pub, other);
    cases[n].code = QS_EFORMAT;
    snprintf(cases[n++].msg, sizeof cases[0].msg,
             ":3: not a CURVE public key: 39 characters, a Z85 key has 40");
    snprintf(cases[n].text, sizeof cases[n].text, "\n\n%s\n", bad_char);
    cases[n].code = QS_EFORMAT;
    snprintf(cases[n++].msg, sizeof cases[0].msg,
             ":3: not valid Z85: character '~' at column 12 is not in the Z85 alphabet");
    snprintf(cases[n].text, sizeof cases[n].text, "  %s\n", overflow);
    cases[n].code = QS_EFORMAT;
    snprintf(cases[n++].msg, sizeof cases[0].msg,
             ":1: not valid Z85: the group of 5 characters at column 8 encodes more than 32 bits");
    snprintf(cases[n].text, sizeof cases[n].text, "%s\n%s # w2\n# w3:\n%s\n", pub, other, pub);
    cases[n].code = QS_EFORMAT;
    snprintf(cases[n++].msg, sizeof cases[0].msg, ":4: duplicate key (first on line 1)");
    snprintf(cases[n].text, sizeof cases[n].text, "%s w1\n", pub);
    cases[n].code = QS_EFORMAT;
    snprintf(cases[n++].msg, sizeof cases[0].msg,
             ":1: text after the key at column 42 (one key per line; a comment after it starts "
             "with '#')");
    snprintf(cases[n].text, sizeof cases[n].text, "public='%s'\n", pub);
    cases[n].code = QS_EFORMAT;
    snprintf(cases[n++].msg, sizeof cases[0].msg, ":1: write the bare key");
    snprintf(cases[n].text, sizeof cases[n].text, "%s\nsecret='%s'\n", pub, sec);
    cases[n].code = QS_EFORMAT;
    snprintf(cases[n++].msg, sizeof cases[0].msg, ":2: a secret key");
    snprintf(cases[n].text, sizeof cases[n].text, "# nobody yet\n\n");
    cases[n].code = QS_EFORMAT;
    snprintf(cases[n++].msg, sizeof cases[0].msg,
             ": no key in the CURVE allow-list (2 lines, all blank or comments)");
    char path[300];
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/case%d.keys", dir, i);
        write_file(path, cases[i].text);
        qc_server_options o = {.bind_endpoint = "ipc:///nonexistent/sock",
                               .conninfo = "host=/nonexistent",
                               .curve_secret_key = sec,
                               .curve_allowed_keys = path,
                               .no_signal_handlers = true};
        qs_error err = {0};
        qs_status st = qc_server_run(&o, &err);
        char want[600];
        snprintf(want, sizeof want, "%s%s", path, cases[i].msg);
        if (st != cases[i].code || !strstr(err.msg, want))
            fail_msg("case %d: expected %s and \"%s\", got %s: %s", i,
                     qs_status_name(cases[i].code), want, qs_status_name(st), err.msg);
        unlink(path);
    }
    /* not a file at all */
    qc_server_options o = {.bind_endpoint = "ipc:///nonexistent/sock",
                           .conninfo = "host=/nonexistent",
                           .curve_secret_key = sec,
                           .curve_allowed_keys = dir,
                           .no_signal_handlers = true};
    qs_error err = {0};
    assert_int_equal(qc_server_run(&o, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "not a regular file (a directory)"));
    snprintf(path, sizeof path, "%s/missing.keys", dir);
    o.curve_allowed_keys = path;
    assert_int_equal(qc_server_run(&o, &err), QS_ENOTFOUND);
    assert_non_null(strstr(err.msg, "missing.keys: cannot open the CURVE allow-list"));
    rmdir(dir);
}

/* Comments, blank lines, surrounding blanks, a CR (a file from Windows) and a trailing
 * comment are all fine; the keys are looked up by their 32 bytes. */
static void keys_file_with_comments_blank_lines_and_crlf_loads(void **state) {
    (void)state;
    char dir[] = "/tmp/qszapkeys-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char a[41], as[41], b[41], bs[41], c[41], cs[41];
    assert_int_equal(zmq_curve_keypair(a, as), 0);
    assert_int_equal(zmq_curve_keypair(b, bs), 0);
    assert_int_equal(zmq_curve_keypair(c, cs), 0);
    char path[300], text[400];
    snprintf(path, sizeof path, "%s/ok.keys", dir);
    snprintf(text, sizeof text, "# gpu nodes\r\n\r\n   %s\t# node-1\r\n\t%s  \n   # end", a, b);
    write_file(path, text);
    qc_zap_keys *keys;
    qs_error err;
    assert_int_equal(qc_zap_keys_load(path, &keys, &err), QS_OK);
    assert_int_equal(qc_zap_keys_count(keys), 2);
    uint8_t raw[32];
    assert_non_null(zmq_z85_decode(raw, a));
    assert_true(qc_zap_keys_contains(keys, raw));
    assert_non_null(zmq_z85_decode(raw, b));
    assert_true(qc_zap_keys_contains(keys, raw));
    assert_non_null(zmq_z85_decode(raw, c));
    assert_false(qc_zap_keys_contains(keys, raw));
    qc_zap_keys_free(keys);
    unlink(path);
    rmdir(dir);
}

/* A worker refused by the allow-list, and one without any keys against
 * this CURVE coordinator, each say once what is wrong and give up (qw_run returns QS_ENET,
 * the command exits non-zero) after QW_REFUSALS_MAX refusals over QW_REFUSAL_SPAN_MS, instead
 * of logging "send HEARTBEAT: Resource temporarily unavailable" every heartbeat for ever;
 * an admitted worker says it connected, once. */
static void refused_workers_say_why_once_and_give_up_admitted_one_says_connected(void **state) {
    harness *h = *state;
    h_begin(h, "coord_curve_give_up");
    capture_begin(h->dir);
    long id = h_insert_job(h, "give-up-echo", "echo", "{\"metrics\": {\"top1\": 0.5}}", 1, 0);
    char server_pub[41], server_sec[41], good_pub[41], good_sec[41], bad_pub[41], bad_sec[41];
    assert_int_equal(zmq_curve_keypair(server_pub, server_sec), 0);
    assert_int_equal(zmq_curve_keypair(good_pub, good_sec), 0);
    assert_int_equal(zmq_curve_keypair(bad_pub, bad_sec), 0);
    char keys_path[200], keys[400];
    snprintf(keys_path, sizeof keys_path, "%s/workers.keys", h->dir);
    snprintf(keys, sizeof keys, "%s\n", good_pub);
    write_file(keys_path, keys);

    coord_thread c;
    pthread_t ct, bt, pt, gt;
    start_coordinator(&c, &ct, h, server_sec, keys_path, false);
    worker_thread bad, plain, good;
    int64_t t0 = qs_clock_ms();
    start_worker(&bad, &bt, h, "unlisted", server_pub, bad_pub, bad_sec);
    start_worker(&plain, &pt, h, "keyless", NULL, NULL, NULL);
    start_worker(&good, &gt, h, "listed", server_pub, good_pub, good_sec);
    bool done = h_wait_sql(h, 1, 20000,
                           "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'succeeded'", id);
    pthread_join(bt, NULL); /* both give up by themselves */
    pthread_join(pt, NULL);
    int64_t gave_up_ms = qs_clock_ms() - t0;
    qw_request_stop();
    pthread_join(gt, NULL);
    qc_server_request_stop();
    pthread_join(ct, NULL);
    assert_true(done);
    assert_int_equal(bad.st, QS_ENET);
    assert_non_null(strstr(bad.err.msg, "refused this worker"));
    assert_non_null(strstr(bad.err.msg, "allow-list"));
    assert_int_equal(plain.st, QS_ENET);
    /* a mechanism mismatch, or (when the coordinator closes before its greeting is read) a
     * closed handshake: both name the missing keys */
    assert_non_null(strstr(plain.err.msg, "CURVE and this worker has no keys"));
    /* the margin only bounds a retry loop that does not end, on a machine of any load */
    assert_true(gave_up_ms >= QW_REFUSAL_SPAN_MS && gave_up_ms < QW_REFUSAL_SPAN_MS + 100000);
    /* each said it once */
    assert_int_equal(log_count("qsweep-worker unlisted: the coordinator refused this worker's "
                               "CURVE key"),
                     1);
    /* connecting, then its cause once (a closed handshake may come first and give way to the
     * mismatch once), and at most one failed send */
    int keyless_said = log_count("qsweep-worker keyless: ");
    assert_true(log_count("CURVE and this worker has no keys") >= 1);
    assert_true(keyless_said >= 2 && keyless_said <= 4);
    /* and no heartbeat line per period: at most one failed send logged each */
    assert_true(log_count("qsweep-worker unlisted: send ") <= 1);
    assert_true(log_count("qsweep-worker keyless: send ") <= 1);
    assert_int_equal(log_count("qsweep-worker listed: connected to the coordinator at"), 1);
    assert_int_equal(log_count("qsweep-worker unlisted: connected"), 0);
    assert_int_equal(log_count("qsweep-worker keyless: connected"), 0);
    assert_int_equal(good.st, QS_OK);
    assert_int_equal(c.st, QS_OK);
    test_done = true;
}

/* An allow-list needs CURVE: refused naming both options. */
static void allow_list_without_curve_secret_is_refused(void **state) {
    (void)state;
    qc_server_options o = {.bind_endpoint = "ipc:///nonexistent/sock",
                           .conninfo = "host=/nonexistent",
                           .curve_allowed_keys = "/nonexistent/workers.keys",
                           .no_signal_handlers = true};
    qs_error err;
    assert_int_equal(qc_server_run(&o, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "options.curve_allowed_keys (/nonexistent/workers.keys) "
                                    "needs options.curve_secret_key"));
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
                                        curve_setup, curve_teardown),
        cmocka_unit_test_setup_teardown(
            allow_list_listed_worker_runs_the_job_and_unlisted_key_is_refused, curve_setup,
            curve_teardown),
        cmocka_unit_test_setup_teardown(
            allow_list_reload_admits_an_added_key_and_keeps_the_list_on_a_bad_file, curve_setup,
            curve_teardown),
        cmocka_unit_test_setup_teardown(zap_handler_admits_listed_key_and_rate_limits_refusal_lines,
                                        curve_setup, curve_teardown),
        cmocka_unit_test_setup_teardown(
            refused_workers_say_why_once_and_give_up_admitted_one_says_connected, curve_setup,
            curve_teardown),
        cmocka_unit_test(malformed_keys_file_is_refused_naming_file_and_line),
        cmocka_unit_test(keys_file_with_comments_blank_lines_and_crlf_loads),
        cmocka_unit_test(allow_list_without_curve_secret_is_refused),
        cmocka_unit_test(keys_of_the_wrong_length_are_refused_naming_the_option),
    };
    return cmocka_run_group_tests(tests, h_group_setup, h_group_teardown);
}
