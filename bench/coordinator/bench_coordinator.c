/* bench_coordinator: jobs through one coordinator (qc_server_run, in a thread of this
 * process) to W simulated workers (one thread driving W DEALER sockets over tcp://127.0.0.1),
 * state durable in a private PostgreSQL cluster (fsync on), for W = 64, 256, 1024.
 *
 * A simulated worker speaks the real protocol (proto/qsweep.proto): HELLO, READY; on ASSIGN
 * it answers at once with a final RESULT of M metrics, carrying the ASSIGN's attempt token; on
 * ACK (sent by the coordinator only once the result is durable) it says READY again. Two
 * phases per W, each on a fresh database:
 *   1. no-op jobs (M = 1): durable job completions per second, from the first ASSIGN to the
 *      last ACK (an ACK is sent only once its result is committed);
 *   2. metric-heavy jobs (M = 500, a per-layer sweep's size): metric rows ingested per second,
 *      as a ratio of a raw COPY of the same number of rows, in one transaction, into a
 *      table shaped like results (LIKE results INCLUDING ALL: same columns, primary key and
 *      checks, no trigger), measured in the same run. The baseline is the faster of a text
 *      and a binary COPY (the coordinator writes binary), so the ratio cannot come from the
 *      format alone.
 *
 * Usage: bench_coordinator [noop_jobs] [heavy_jobs] [repeats] [workers ...] (defaults 20000
 * 400 3 64 256 1024). Prints one line per run of each (W, phase) and, per W, the medians over
 * the repeats (a loaded or virtualised machine moves single runs by 20%).
 * Targets: >= 10,000 jobs/s and >= 0.7 of raw COPY. */
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
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>
#include <zmq.h>

#include "envelope.h"
#include "migrate.h"
#include "pgserver.h"
#include "server.h"
#include "sqltext.h"
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

/* Runs a COPY ... FROM STDIN with data (any format) in one call. */
static bool copy_data(PGconn *c, const char *sql, const char *data, size_t len) {
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
    ok = rows && copy_data(c, "COPY jobs (job_key, kind, spec) FROM STDIN", rows, len);
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
    pthread_setname_np(pthread_self(), "coordinator");
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

/* What the simulated workers share: the RESULT they send, and the counts. */
typedef struct sim_state {
    int metrics;
    Qsweep__Metric **mp;
    double *first_assign, *last_ack;
    long completed;
} sim_state;

/* Reads everything waiting on one simulated worker's socket and answers it: an ASSIGN with a
 * final RESULT at once, the ACK of that result with READY. */
static void serve(sim_state *st, void *sock) {
    for (;;) {
        zmq_msg_t msg;
        zmq_msg_init(&msg);
        if (zmq_msg_recv(&msg, sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&msg);
            return;
        }
        Qsweep__Envelope *in = NULL;
        qs_error err;
        if (qs_proto_decode(zmq_msg_data(&msg), zmq_msg_size(&msg), QS_PROTO_MAX_BYTES,
                            "coordinator", &in, &err) == QS_OK) {
            if (in->body_case == QSWEEP__ENVELOPE__BODY_ASSIGN) {
                if (*st->first_assign == 0) *st->first_assign = qs_clock_s();
                Qsweep__Result r = QSWEEP__RESULT__INIT;
                r.job_id = in->assign->job_id;
                r.attempt = in->assign->attempt;
                r.token = in->assign->attempt_token; /* the attempt's proof of holding it */
                r.final = true;
                r.n_metrics = (size_t)st->metrics;
                r.metrics = st->mp;
                Qsweep__Envelope env = QSWEEP__ENVELOPE__INIT;
                env.body_case = QSWEEP__ENVELOPE__BODY_RESULT;
                env.result = &r;
                send_env(sock, &env);
            } else if (in->body_case == QSWEEP__ENVELOPE__BODY_ACK && in->ack->final) {
                st->completed++;
                *st->last_ack = qs_clock_s();
                send_ready(sock);
            }
            qs_proto_free(in);
        }
        zmq_msg_close(&msg);
    }
}

/* Drives w simulated workers until the coordinator has exited; returns jobs ACKed and the
 * time of the first ASSIGN. */
static long simulate(void *ctx, const char *endpoint, int w, int metrics, run_args *a,
                     double *first_assign, double *last_ack) {
    void **socks = calloc((size_t)w, sizeof *socks);
    Qsweep__Metric *ms = calloc((size_t)metrics, sizeof *ms);
    Qsweep__Metric **mp = calloc((size_t)metrics, sizeof *mp);
    char(*names)[24] = calloc((size_t)metrics, sizeof *names);
    if (!socks || !ms || !mp || !names) abort();
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
    }
    /* One epoll set over the sockets' ZMQ_FDs instead of zmq_poll over all of them: with
       1024 sockets a zmq_poll pass cost more CPU than the coordinator's work per job, CPU
       this 2-core machine takes from the coordinator and PostgreSQL. ZMQ_FD only says that
       a socket may have something (zmq_getsockopt, ZMQ_FD): each ready socket, and every
       socket on a quiet tick, is read until EAGAIN. */
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) abort();
    for (int i = 0; i < w; i++) {
        int fd;
        size_t fdlen = sizeof fd;
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
        if (zmq_getsockopt(socks[i], ZMQ_FD, &fd, &fdlen) != 0 ||
            epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0)
            abort();
    }
    sim_state st = {.metrics = metrics, .mp = mp, .first_assign = first_assign,
                    .last_ack = last_ack};
    for (int i = 0; i < w; i++)
        serve(&st, socks[i]);
    struct epoll_event evs[256];
    while (!atomic_load(&a->done)) {
        int n = epoll_wait(ep, evs, 256, 20);
        if (n <= 0) {
            for (int i = 0; i < w; i++)
                serve(&st, socks[i]);
            continue;
        }
        for (int k = 0; k < n; k++)
            serve(&st, socks[evs[k].data.u32]);
    }
    close(ep);
    long completed = st.completed;
    for (int i = 0; i < w; i++)
        zmq_close(socks[i]);
    free(socks);
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

/* One raw COPY, in one transaction, of the rows the heavy phase stored (jobs x m metrics)
 * into a fresh table shaped like results (LIKE results INCLUDING ALL: columns, primary key,
 * checks; no trigger), in text or binary format (the binary rows encoded by the store's
 * qc_copybin_*, as the coordinator sends them). The data is built before the clock starts.
 * Returns seconds, or -1. */
static double raw_copy_once(PGconn *c, long jobs, int m, bool binary) {
    const char *table = binary ? "raw_results_binary" : "raw_results_text";
    char sql[160];
    snprintf(sql, sizeof sql, "CREATE TABLE %s (LIKE results INCLUDING ALL)", table);
    if (!exec_ok(c, sql)) return -1;
    qc_sbuf data = {0};
    if (binary) qc_copybin_header(&data);
    for (long j = 0; j < jobs; j++)
        for (int k = 0; k < m; k++) {
            char name[24];
            snprintf(name, sizeof name, "sqnr_db.%d", k);
            if (!binary) {
                qc_sbuf_printf(&data, "%ld\t1\t%s\t%d\t-1\tt\n", j + 1, name, 1 + k);
                continue;
            }
            qc_copybin_row(&data, 6);
            qc_copybin_int8(&data, j + 1);
            qc_copybin_int4(&data, 1);
            qc_copybin_text(&data, name);
            qc_copybin_float8(&data, 1.0 + k);
            qc_copybin_int8(&data, -1);
            qc_copybin_bool(&data, true);
        }
    if (binary) qc_copybin_trailer(&data);
    snprintf(sql, sizeof sql, "COPY %s (job, attempt, name, value, step, final) FROM STDIN%s",
             table, binary ? " (FORMAT binary)" : "");
    double t0 = qs_clock_s();
    bool ok = !data.oom && copy_data(c, sql, data.p, data.len);
    double dt = qs_clock_s() - t0;
    qc_sbuf_free(&data);
    return ok ? dt : -1;
}

/* The raw COPY baseline: the faster of a text and a binary COPY of the same rows (the
 * coordinator sends binary). *text_s and *binary_s receive both times. Returns the faster, or
 * -1. */
static double raw_copy(const char *conninfo, long rows, int m, double *text_s, double *binary_s) {
    PGconn *c = PQconnectdb(conninfo);
    *text_s = *binary_s = -1;
    if (PQstatus(c) == CONNECTION_OK) {
        *text_s = raw_copy_once(c, rows / m, m, false);
        *binary_s = raw_copy_once(c, rows / m, m, true);
    }
    PQfinish(c);
    if (*text_s <= 0 || *binary_s <= 0) return -1;
    return *text_s < *binary_s ? *text_s : *binary_s;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of n values (sorts v). */
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, by_value);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#define MAX_REPEATS 15

/* Runs the no-op and the heavy phase `repeats` times each with w workers, prints every run and
 * the medians. Returns 0, or 1 when a run failed. */
static int bench_workers(qc_pgserver *pg, int w, int noop_jobs, int heavy_jobs, int metrics,
                         int repeats) {
    double jobs_s[MAX_REPEATS], ratio[MAX_REPEATS];
    for (int r = 0; r < repeats; r++) {
        char db[32], conninfo[600];
        long done = 0;
        snprintf(db, sizeof db, "bench_noop_%d", w);
        double dt = run_phase(pg, db, w, noop_jobs, 1, &done, conninfo, sizeof conninfo);
        if (dt <= 0 || done != noop_jobs) {
            fprintf(stderr, "bench_coordinator: no-op phase with %d workers: %ld of %d jobs\n", w,
                    done, noop_jobs);
            return 1;
        }
        jobs_s[r] = done / dt;
        printf("workers %5d  run %d  no-op jobs %6d  %8.0f durable jobs/s\n", w, r + 1, noop_jobs,
               jobs_s[r]);
        fflush(stdout);
        snprintf(db, sizeof db, "bench_heavy_%d", w);
        dt = run_phase(pg, db, w, heavy_jobs, metrics, &done, conninfo, sizeof conninfo);
        long rows = done * metrics;
        double raw_text = -1, raw_binary = -1;
        double raw = dt > 0 ? raw_copy(conninfo, rows, metrics, &raw_text, &raw_binary) : -1;
        if (dt <= 0 || raw <= 0 || done != heavy_jobs) {
            fprintf(stderr, "bench_coordinator: heavy phase with %d workers failed\n", w);
            return 1;
        }
        ratio[r] = raw / dt;
        printf("workers %5d  run %d  %d jobs x %d metrics  %9.0f metric rows/s  raw COPY %9.0f "
               "rows/s (text %.0f, binary %.0f)  ratio %.2f\n",
               w, r + 1, heavy_jobs, metrics, rows / dt, rows / raw, rows / raw_text,
               rows / raw_binary, ratio[r]);
        fflush(stdout);
    }
    printf("workers %5d  median of %d: %8.0f durable jobs/s (target >= 10000)  metric rows "
           "%.2f of raw COPY (target >= 0.7)\n",
           w, repeats, median(jobs_s, repeats), median(ratio, repeats));
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv) {
    int noop_jobs = argc > 1 ? atoi(argv[1]) : 20000;
    int heavy_jobs = argc > 2 ? atoi(argv[2]) : 400;
    int repeats = argc > 3 ? atoi(argv[3]) : 3;
    const int heavy_metrics = 500;
    int ws[16] = {64, 256, 1024}, n_ws = 3;
    if (argc > 4) {
        n_ws = 0;
        for (int i = 4; i < argc && n_ws < 16; i++)
            if ((ws[n_ws++] = atoi(argv[i])) <= 0) noop_jobs = 0;
    }
    if (noop_jobs <= 0 || heavy_jobs <= 0 || repeats <= 0 || repeats > MAX_REPEATS) {
        fprintf(stderr, "usage: bench_coordinator [noop_jobs > 0] [heavy_jobs > 0] "
                        "[repeats 1..%d] [workers ...]\n"
                        "defaults: 20000 400 3 64 256 1024\n",
                MAX_REPEATS);
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
    int rc = 0;
    for (int i = 0; i < n_ws && rc == 0; i++)
        rc = bench_workers(pg, ws[i], noop_jobs, heavy_jobs, heavy_metrics, repeats);
    qc_pgserver_destroy(pg);
    return rc;
}
