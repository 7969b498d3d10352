/* bench_coordinator: jobs through one coordinator (qc_server_run, in a thread of this
 * process) to W simulated workers (one thread driving W DEALER sockets over tcp://127.0.0.1),
 * state durable in a private PostgreSQL cluster (fsync on), for W = 64, 256, 1024.
 *
 * A simulated worker speaks the real protocol (proto/qsweep.proto): HELLO, READY; on ASSIGN
 * it answers at once with a final RESULT of M metrics; on ACK (sent by the coordinator only
 * once the result is durable) it says READY again. Two phases per W, each on a fresh
 * database:
 *   1. no-op jobs (M = 1): durable job completions per second, from the first ASSIGN to the
 *      last ACK (an ACK is sent only once its result is committed);
 *   2. metric-heavy jobs (M = 500, a per-layer sweep's size): metric rows ingested per second,
 *      as a ratio of a raw COPY of the same number of rows, in one transaction, into a
 *      table shaped like results (LIKE results INCLUDING ALL: same columns, primary key and
 *      checks, no trigger), measured in the same run.
 *
 * Usage: bench_coordinator [noop_jobs] [heavy_jobs] (defaults 20000 400). Prints one line per
 * (W, phase). Targets (issue 4): >= 10,000 jobs/s and >= 0.7 of raw COPY. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>
#include <zmq.h>

#include "codec.h"
#include "migrate.h"
#include "pgserver.h"
#include "server.h"
#include "clock.h"

static void quiet(void *arg, const char *message) {
    (void)arg;
    (void)message;
}

static bool exec_ok(PGconn *c, const char *sql) {
    PGresult *r = PQexec(c, sql);
    bool ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;
    if (!ok) fprintf(stderr, "bench_coordinator: %s: %s", sql, PQerrorMessage(c));
    PQclear(r);
    return ok;
}

static bool copy_text(PGconn *c, const char *sql, const char *data, size_t len) {
    PGresult *r = PQexec(c, sql);
    bool ok = PQresultStatus(r) == PGRES_COPY_IN;
    PQclear(r);
    ok = ok && PQputCopyData(c, data, (int)len) == 1 && PQputCopyEnd(c, NULL) == 1;
    while ((r = PQgetResult(c))) {
        ok = ok && PQresultStatus(r) == PGRES_COMMAND_OK;
        PQclear(r);
    }
    if (!ok) fprintf(stderr, "bench_coordinator: %s: %s", sql, PQerrorMessage(c));
    return ok;
}

/* A fresh migrated database with n jobs of kind "noop"; its conninfo in out. */
static bool fresh_db(qc_pgserver *pg, const char *name, int n, char *out, size_t cap) {
    PGconn *c = PQconnectdb(qc_pgserver_conninfo(pg));
    PQsetNoticeProcessor(c, quiet, NULL); /* "does not exist, skipping" */
    char sql[256];
    snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s", name);
    bool ok = PQstatus(c) == CONNECTION_OK && exec_ok(c, sql);
    snprintf(sql, sizeof sql, "CREATE DATABASE %s", name);
    ok = ok && exec_ok(c, sql);
    PQfinish(c);
    if (!ok) return false;
    snprintf(out, cap, "%s dbname=%s", qc_pgserver_conninfo(pg), name);
    c = PQconnectdb(out);
    qs_error err;
    if (PQstatus(c) != CONNECTION_OK || qc_migrate(c, NULL, &err) != QS_OK) {
        fprintf(stderr, "bench_coordinator: migrate %s: %s\n", name, PQerrorMessage(c));
        PQfinish(c);
        return false;
    }
    size_t len = 0, capb = (size_t)n * 32 + 1;
    char *rows = malloc(capb);
    for (int i = 0; rows && i < n; i++)
        len += (size_t)snprintf(rows + len, capb - len, "%s-%d\tnoop\t{}\n", name, i);
    ok = rows && copy_text(c, "COPY jobs (job_key, kind, spec) FROM STDIN", rows, len);
    free(rows);
    PQfinish(c);
    return ok;
}

typedef struct run_args {
    qc_server_options o;
    qs_status st;
    qs_error err;
    atomic_bool done;
} run_args;

static void *coordinator_main(void *arg) {
    run_args *a = arg;
    a->st = qc_server_run(&a->o, &a->err);
    atomic_store(&a->done, true);
    return NULL;
}

static void send_env(void *sock, Qsweep__Envelope *env) {
    uint8_t *buf;
    size_t len;
    qs_error err;
    if (qs_proto_encode(env, &buf, &len, &err) != QS_OK) return;
    zmq_send(sock, buf, len, 0);
    free(buf);
}

static void send_ready(void *sock) {
    Qsweep__Ready r = QSWEEP__READY__INIT;
    Qsweep__Envelope env = QSWEEP__ENVELOPE__INIT;
    env.body_case = QSWEEP__ENVELOPE__BODY_READY;
    env.ready = &r;
    send_env(sock, &env);
}

/* Drives w simulated workers until the coordinator has exited; returns jobs ACKed and the
 * time of the first ASSIGN. */
static long simulate(void *ctx, const char *endpoint, int w, int metrics, run_args *a,
                     double *first_assign, double *last_ack) {
    void **socks = calloc((size_t)w, sizeof *socks);
    zmq_pollitem_t *items = calloc((size_t)w, sizeof *items);
    Qsweep__Metric *ms = calloc((size_t)metrics, sizeof *ms);
    Qsweep__Metric **mp = calloc((size_t)metrics, sizeof *mp);
    char(*names)[24] = calloc((size_t)metrics, sizeof *names);
    if (!socks || !items || !ms || !mp || !names) abort();
    for (int m = 0; m < metrics; m++) {
        qsweep__metric__init(&ms[m]);
        snprintf(names[m], sizeof names[m], "sqnr_db.%d", m);
        ms[m].name = names[m];
        ms[m].value = 1.0 + m;
        ms[m].final = true;
        mp[m] = &ms[m];
    }
    for (int i = 0; i < w; i++) {
        socks[i] = zmq_socket(ctx, ZMQ_DEALER);
        if (!socks[i]) {
            fprintf(stderr, "bench_coordinator: socket %d: %s\n", i, zmq_strerror(errno));
            abort();
        }
        char id[32];
        snprintf(id, sizeof id, "sim-%d", i);
        int linger = 0;
        zmq_setsockopt(socks[i], ZMQ_ROUTING_ID, id, strlen(id));
        zmq_setsockopt(socks[i], ZMQ_LINGER, &linger, sizeof linger);
        zmq_connect(socks[i], endpoint);
        Qsweep__Hello h = QSWEEP__HELLO__INIT;
        h.worker_id = id;
        h.host = "bench";
        h.cpu_threads = 1;
        Qsweep__Envelope env = QSWEEP__ENVELOPE__INIT;
        env.body_case = QSWEEP__ENVELOPE__BODY_HELLO;
        env.hello = &h;
        send_env(socks[i], &env);
        send_ready(socks[i]);
        items[i] = (zmq_pollitem_t){.socket = socks[i], .events = ZMQ_POLLIN};
    }
    long completed = 0;
    *first_assign = 0;
    while (!atomic_load(&a->done)) {
        if (zmq_poll(items, w, 20) <= 0) continue;
        for (int i = 0; i < w; i++) {
            if (!(items[i].revents & ZMQ_POLLIN)) continue;
            for (;;) {
                zmq_msg_t msg;
                zmq_msg_init(&msg);
                if (zmq_msg_recv(&msg, socks[i], ZMQ_DONTWAIT) < 0) {
                    zmq_msg_close(&msg);
                    break;
                }
                Qsweep__Envelope *in = NULL;
                qs_error err;
                if (qs_proto_decode(zmq_msg_data(&msg), zmq_msg_size(&msg), QS_PROTO_MAX_BYTES,
                                    "coordinator", &in, &err) == QS_OK) {
                    if (in->body_case == QSWEEP__ENVELOPE__BODY_ASSIGN) {
                        if (*first_assign == 0) *first_assign = qs_clock_s();
                        Qsweep__Result r = QSWEEP__RESULT__INIT;
                        r.job_id = in->assign->job_id;
                        r.attempt = in->assign->attempt;
                        r.final = true;
                        r.n_metrics = (size_t)metrics;
                        r.metrics = mp;
                        Qsweep__Envelope env = QSWEEP__ENVELOPE__INIT;
                        env.body_case = QSWEEP__ENVELOPE__BODY_RESULT;
                        env.result = &r;
                        send_env(socks[i], &env);
                    } else if (in->body_case == QSWEEP__ENVELOPE__BODY_ACK && in->ack->final) {
                        completed++;
                        *last_ack = qs_clock_s();
                        send_ready(socks[i]);
                    }
                    qs_proto_free(in);
                }
                zmq_msg_close(&msg);
            }
        }
    }
    for (int i = 0; i < w; i++)
        zmq_close(socks[i]);
    free(socks);
    free(items);
    free(ms);
    free(mp);
    free(names);
    return completed;
}

static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        port = ntohs(sa.sin_port);
    if (fd >= 0) close(fd);
    return port;
}

/* One phase: n jobs of m metrics through the coordinator with w workers. Returns the
 * seconds from the first ASSIGN to the last ACK (every result durable), or -1. */
static double run_phase(qc_pgserver *pg, const char *db, int w, int n, int m, long *completed,
                        char *conninfo, size_t cap) {
    char endpoint[64];
    if (!fresh_db(pg, db, n, conninfo, cap)) return -1;
    snprintf(endpoint, sizeof endpoint, "tcp://127.0.0.1:%d", free_port());
    run_args a = {.o = {.bind_endpoint = endpoint,
                        .conninfo = conninfo,
                        .lease_ms = 600000,
                        .poll_ms = 200,
                        .exit_when_done = true,
                        .no_signal_handlers = true,
                        .quiet = true}};
    atomic_init(&a.done, false);
    void *ctx = zmq_ctx_new();
    zmq_ctx_set(ctx, ZMQ_MAX_SOCKETS, 4096);
    pthread_t t;
    pthread_create(&t, NULL, coordinator_main, &a);
    double first = 0, end = 0;
    *completed = simulate(ctx, endpoint, w, m, &a, &first, &end);
    pthread_join(t, NULL);
    zmq_ctx_term(ctx);
    if (a.st != QS_OK) {
        fprintf(stderr, "bench_coordinator: coordinator: %s\n", a.err.msg);
        return -1;
    }
    return first > 0 ? end - first : -1;
}

/* Raw COPY of rows metric rows (as the heavy phase stored) into a results-shaped table, in
 * one transaction. Returns seconds. */
static double raw_copy(const char *conninfo, long rows, int m) {
    PGconn *c = PQconnectdb(conninfo);
    if (PQstatus(c) != CONNECTION_OK) return -1;
    bool ok = exec_ok(c, "CREATE TABLE raw_results (LIKE results INCLUDING ALL)");
    size_t cap = (size_t)rows * 48 + 1, len = 0;
    char *buf = malloc(cap);
    long jobs = rows / m;
    for (long j = 0; buf && j < jobs; j++)
        for (int k = 0; k < m; k++)
            len += (size_t)snprintf(buf + len, cap - len, "%ld\t1\tsqnr_db.%d\t%d\t-1\tt\n", j + 1,
                                    k, 1 + k);
    double t0 = qs_clock_s();
    ok = ok && buf &&
         copy_text(c, "COPY raw_results (job, attempt, name, value, step, final) FROM STDIN", buf,
                   len);
    double dt = qs_clock_s() - t0;
    free(buf);
    PQfinish(c);
    return ok ? dt : -1;
}

int main(int argc, char **argv) {
    int noop_jobs = argc > 1 ? atoi(argv[1]) : 20000;
    int heavy_jobs = argc > 2 ? atoi(argv[2]) : 400;
    const int heavy_metrics = 500;
    if (noop_jobs <= 0 || heavy_jobs <= 0) {
        fprintf(stderr, "usage: bench_coordinator [noop_jobs > 0] [heavy_jobs > 0]\n");
        return 2;
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    qc_pgserver *pg;
    qs_error err;
    if (qc_pgserver_start_temp(&pg, &err) != QS_OK) {
        fprintf(stderr, "bench_coordinator: %s\n", err.msg);
        return 1;
    }
    printf("bench_coordinator: one coordinator, simulated workers on tcp://127.0.0.1, PostgreSQL "
           "with fsync on\n");
    const int ws[] = {64, 256, 1024};
    int rc = 0;
    for (size_t i = 0; i < sizeof ws / sizeof ws[0] && rc == 0; i++) {
        char db[32], conninfo[600];
        long done = 0;
        snprintf(db, sizeof db, "bench_noop_%d", ws[i]);
        double dt = run_phase(pg, db, ws[i], noop_jobs, 1, &done, conninfo, sizeof conninfo);
        if (dt <= 0 || done != noop_jobs) {
            fprintf(stderr, "bench_coordinator: no-op phase with %d workers: %ld of %d jobs\n",
                    ws[i], done, noop_jobs);
            rc = 1;
            break;
        }
        printf("workers %5d  no-op jobs %6d  %8.0f durable jobs/s  (target >= 10000)\n", ws[i],
               noop_jobs, done / dt);
        fflush(stdout);
        snprintf(db, sizeof db, "bench_heavy_%d", ws[i]);
        dt = run_phase(pg, db, ws[i], heavy_jobs, heavy_metrics, &done, conninfo, sizeof conninfo);
        long rows = done * heavy_metrics;
        double raw = dt > 0 ? raw_copy(conninfo, rows, heavy_metrics) : -1;
        if (dt <= 0 || raw <= 0 || done != heavy_jobs) {
            fprintf(stderr, "bench_coordinator: heavy phase with %d workers failed\n", ws[i]);
            rc = 1;
            break;
        }
        printf("workers %5d  %d jobs x %d metrics  %9.0f metric rows/s  raw COPY %9.0f rows/s  "
               "ratio %.2f  "
               "(target >= 0.7)\n",
               ws[i], heavy_jobs, heavy_metrics, rows / dt, rows / raw, raw / dt);
        fflush(stdout);
    }
    qc_pgserver_destroy(pg);
    return rc;
}
