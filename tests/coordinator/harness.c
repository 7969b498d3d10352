#include "harness.h"

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
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <libpq-fe.h>

#include "migrate.h"

static qc_pgserver *group_pg;

void h_sleep_ms(int ms) {
    nanosleep(&(struct timespec){.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L}, NULL);
}

int h_group_setup(void **state) {
    (void)state;
    qs_error err;
    if (qc_pgserver_start_temp(&group_pg, &err) != QS_OK) {
        fprintf(stderr, "pgserver: %s\n", err.msg);
        return -1;
    }
    return 0;
}

int h_group_teardown(void **state) {
    (void)state;
    qc_pgserver_destroy(group_pg);
    return 0;
}

static void quiet(void *arg, const char *message) {
    (void)arg;
    (void)message;
}

static PGconn *connect_db(const char *conninfo) {
    PGconn *c = PQconnectdb(conninfo);
    if (PQstatus(c) != CONNECTION_OK) fprintf(stderr, "connect: %s", PQerrorMessage(c));
    assert_int_equal(PQstatus(c), CONNECTION_OK);
    PQsetNoticeProcessor(c, quiet, NULL);
    return c;
}

void h_begin(harness *h, const char *name) {
    memset(h, 0, sizeof *h);
    h->pg = group_pg;
    PGconn *c = connect_db(qc_pgserver_conninfo(h->pg));
    char sql[256];
    snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s WITH (FORCE)", name);
    PQclear(PQexec(c, sql));
    snprintf(sql, sizeof sql, "CREATE DATABASE %s", name);
    PGresult *r = PQexec(c, sql);
    assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
    PQclear(r);
    PQfinish(c);
    snprintf(h->conninfo, sizeof h->conninfo, "%s dbname=%s", qc_pgserver_conninfo(h->pg), name);
    c = connect_db(h->conninfo);
    qs_error err;
    qs_status st = qc_migrate(c, NULL, &err);
    if (st != QS_OK) fprintf(stderr, "migrate: %s\n", err.msg);
    assert_int_equal(st, QS_OK);
    PQfinish(c);
    strcpy(h->dir, "/tmp/qscoord-XXXXXX");
    assert_non_null(mkdtemp(h->dir));
    snprintf(h->endpoint, sizeof h->endpoint, "ipc://%s/coord.sock", h->dir);
    snprintf(h->coord_log, sizeof h->coord_log, "%s/coordinator.log", h->dir);
}

static void dump_log(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[2048];
    fprintf(stderr, "---- %s\n", path);
    while (fgets(line, sizeof line, f))
        fputs(line, stderr);
    fclose(f);
}

int h_setup(void **state) {
    harness *h = calloc(1, sizeof *h);
    *state = h;
    return h ? 0 : -1;
}

int h_teardown(void **state) {
    harness *h = *state;
    if (h->dir[0]) h_end(h);
    free(h);
    return 0;
}

void h_end(harness *h) {
    if (h->coord > 0) {
        kill(h->coord, SIGKILL);
        waitpid(h->coord, NULL, 0);
    }
    for (int i = 0; i < h->n_workers; i++)
        if (h->workers[i] > 0) {
            kill(h->workers[i], SIGCONT);
            kill(h->workers[i], SIGKILL);
            waitpid(h->workers[i], NULL, 0);
        }
    if (getenv("QS_TEST_VERBOSE")) {
        char cmd[160];
        snprintf(cmd, sizeof cmd, "cat %s/*.log >&2", h->dir);
        if (system(cmd) != 0) fprintf(stderr, "no logs in %s\n", h->dir);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", h->dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", h->dir);
    h->dir[0] = '\0';
}

static const char *spawn_netns; /* h->netns of the harness spawning, "" for none */
static const char *const *spawn_wrap; /* a command line the process runs under, or NULL */

/* fork + exec with stderr to log (NULL: inherited), env strings added (may be NULL); inside
 * the network namespace spawn_netns when it is set. */
static pid_t spawn_env(const char *log, char *const argv[], const char *const *env) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a test that failed */
        for (size_t i = 0; env && env[i]; i++)
            putenv((char *)env[i]);
        if (log) {
            int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
            if (fd >= 0) {
                dup2(fd, 2);
                close(fd);
            }
        }
        if (spawn_wrap && spawn_wrap[0]) { /* e.g. {"/usr/bin/prlimit", "--as=N", "--"} */
            char *nargv[64];
            size_t n = 0;
            for (size_t i = 0; spawn_wrap[i] && n < 32; i++)
                nargv[n++] = (char *)spawn_wrap[i];
            for (size_t i = 0; argv[i] && n < 63; i++)
                nargv[n++] = argv[i];
            nargv[n] = NULL;
            execv(nargv[0], nargv);
        }
        if (spawn_netns && spawn_netns[0]) {
            char *nargv[64] = {"/usr/sbin/ip", "netns", "exec", (char *)spawn_netns};
            size_t n = 4;
            for (size_t i = 0; argv[i] && n < 63; i++)
                nargv[n++] = argv[i];
            nargv[n] = NULL;
            execv(nargv[0], nargv);
        }
        execv(argv[0], argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    return pid;
}

static pid_t spawn(const char *log, char *const argv[]) {
    return spawn_env(log, argv, NULL);
}

static pid_t start_coordinator_logging(harness *h, const char *log) {
    spawn_netns = h->netns;
    char lease[16], grace[16], backoff[16];
    snprintf(lease, sizeof lease, "%d", H_LEASE_MS);
    snprintf(grace, sizeof grace, "%d", H_GRACE_MS);
    snprintf(backoff, sizeof backoff, "%d", H_BACKOFF_MS);
    char *const argv[] = {
        QS_COORDINATOR_BIN, "--bind", h->endpoint,    "--db",  h->conninfo, "--lease-ms", lease,
        "--grace-ms",       grace,    "--backoff-ms", backoff, "--poll-ms", "200",        NULL};
    return spawn(log, argv);
}

pid_t h_start_coordinator_env(harness *h, const char *const *extra, const char *const *env) {
    char lease[16], grace[16], backoff[16];
    snprintf(lease, sizeof lease, "%d", H_LEASE_MS);
    snprintf(grace, sizeof grace, "%d", H_GRACE_MS);
    snprintf(backoff, sizeof backoff, "%d", H_BACKOFF_MS);
    char *argv[48] = {
        QS_COORDINATOR_BIN, "--bind", h->endpoint,    "--db",  h->conninfo, "--lease-ms", lease,
        "--grace-ms",       grace,    "--backoff-ms", backoff, "--poll-ms", "200",        NULL};
    size_t n = 13;
    for (size_t i = 0; extra && extra[i] && n < 47; i++)
        argv[n++] = (char *)extra[i];
    argv[n] = NULL;
    spawn_netns = h->netns;
    h->coord = spawn_env(h->coord_log, argv, env);
    return h->coord;
}

pid_t h_start_coordinator(harness *h) {
    h->coord = start_coordinator_logging(h, h->coord_log);
    return h->coord;
}

int h_run_second_coordinator(harness *h, char *log, size_t cap) {
    char path[160];
    snprintf(path, sizeof path, "%s/second.log", h->dir);
    pid_t pid = start_coordinator_logging(h, path);
    int status = h_wait_exit(pid, 20000);
    if (status < 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(log, 1, cap - 1, f) : 0;
    log[n] = '\0';
    if (f) fclose(f);
    return status;
}

pid_t h_start_worker(harness *h, const char *id) {
    return h_start_worker_args(h, id, NULL);
}

pid_t h_start_worker_args(harness *h, const char *id, const char *const *extra) {
    char hb[16], to[16];
    snprintf(hb, sizeof hb, "%d", H_HEARTBEAT_MS);
    snprintf(to, sizeof to, "%d", H_WORKER_TIMEOUT_MS);
    char log[160];
    snprintf(log, sizeof log, "%s/worker-%s.log", h->dir, id);
    char *argv[48] = {
        QS_WORKER_BIN, "--endpoint",     h->endpoint, "--id",         (char *)id, "--threads",
        "1",           "--heartbeat-ms", hb,          "--timeout-ms", to,         NULL};
    size_t n = 11;
    for (size_t i = 0; extra && extra[i] && n < 47; i++)
        argv[n++] = (char *)extra[i];
    argv[n] = NULL;
    assert_true(h->n_workers < 16);
    spawn_netns = h->netns;
    pid_t pid = spawn(log, argv);
    h->workers[h->n_workers++] = pid;
    return pid;
}

pid_t h_start_worker_wrapped(harness *h, const char *id, const char *const *wrap,
                             const char *const *extra) {
    spawn_wrap = wrap;
    pid_t pid = h_start_worker_args(h, id, extra);
    spawn_wrap = NULL;
    return pid;
}

pid_t h_start_process(harness *h, const char *name, char *const argv[]) {
    char log[160];
    snprintf(log, sizeof log, "%s/%s.log", h->dir, name);
    assert_true(h->n_workers < 16);
    spawn_netns = h->netns;
    pid_t pid = spawn(log, argv);
    h->workers[h->n_workers++] = pid;
    return pid;
}

bool h_file_contains(const char *path, const char *needle) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    char line[4096];
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

void h_signal(harness *h, pid_t pid, int sig) {
    assert_int_equal(kill(pid, sig), 0);
    if (sig == SIGKILL) {
        waitpid(pid, NULL, 0);
        if (pid == h->coord) h->coord = 0;
        for (int i = 0; i < h->n_workers; i++)
            if (h->workers[i] == pid) h->workers[i] = 0;
    }
}

/* A wait's limit: timeout_ms is the time the state takes on an idle machine; a loaded one (a
 * load of 10 on 2 cores) takes many times that, so the limit is ten times it, at most ten
 * minutes: it only bounds a hang, within the tests' ctest TIMEOUT. */
static int64_t hang_bound_ms(int timeout_ms) {
    int64_t ms = (int64_t)timeout_ms * 10;
    return ms < 600000 ? ms : (timeout_ms > 600000 ? timeout_ms : 600000);
}

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int h_wait_exit(pid_t pid, int timeout_ms) {
    int64_t end = now_ms() + hang_bound_ms(timeout_ms);
    for (;;) {
        int status;
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (timeout_ms == 0) return -1; /* a look, not a wait: "still running?" */
        if (now_ms() >= end) break;
        h_sleep_ms(20);
    }
    fprintf(stderr, "gave up after %lld ms waiting for process %d to exit; it still runs\n",
            (long long)hang_bound_ms(timeout_ms), (int)pid);
    return -1;
}

static PGresult *query(harness *h, PGconn **c, const char *sql) {
    *c = connect_db(h->conninfo);
    PGresult *r = PQexec(*c, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) fprintf(stderr, "%s: %s", sql, PQerrorMessage(*c));
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    assert_int_equal(PQntuples(r), 1);
    return r;
}

long h_insert_job(harness *h, const char *key, const char *kind, const char *spec_json,
                  int max_attempts, int priority) {
    PGconn *c = connect_db(h->conninfo);
    char ma[16], pr[16];
    snprintf(ma, sizeof ma, "%d", max_attempts);
    snprintf(pr, sizeof pr, "%d", priority);
    const char *params[] = {key, kind, spec_json, ma, pr};
    PGresult *r = PQexecParams(c,
                               "INSERT INTO jobs (job_key, kind, spec, max_attempts, priority)"
                               " VALUES ($1, $2, $3::jsonb, $4::int, $5::int) RETURNING id",
                               5, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) fprintf(stderr, "insert job: %s", PQerrorMessage(c));
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    long id = strtol(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    PQfinish(c);
    return id;
}

void h_sql_exec(harness *h, const char *fmt, ...) {
    char sql[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    PGconn *c = connect_db(h->conninfo);
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) fprintf(stderr, "%s: %s", sql, PQerrorMessage(c));
    assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
    PQclear(r);
    PQfinish(c);
}

long h_sql_long(harness *h, const char *fmt, ...) {
    char sql[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    PGconn *c;
    PGresult *r = query(h, &c, sql);
    long v = strtol(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    PQfinish(c);
    return v;
}

void h_sql_text(harness *h, char *out, size_t cap, const char *fmt, ...) {
    char sql[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    PGconn *c;
    PGresult *r = query(h, &c, sql);
    snprintf(out, cap, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    PQfinish(c);
}

bool h_wait_sql(harness *h, long want, int timeout_ms, const char *fmt, ...) {
    char sql[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    long v = -1;
    int64_t end = now_ms() + hang_bound_ms(timeout_ms);
    for (;;) {
        PGconn *c = PQconnectdb(h->conninfo);
        if (PQstatus(c) == CONNECTION_OK) {
            PGresult *r = PQexec(c, sql);
            if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
                v = strtol(PQgetvalue(r, 0, 0), NULL, 10);
            PQclear(r);
        }
        PQfinish(c);
        if (v == want) return true;
        if (now_ms() >= end) break;
        h_sleep_ms(100);
    }
    fprintf(stderr, "gave up after %lld ms waiting for (%s) = %ld; last value %ld\n",
            (long long)hang_bound_ms(timeout_ms), sql, want, v);
    dump_log(h->coord_log);
    return false;
}

bool h_log_contains(harness *h, const char *needle) {
    FILE *f = fopen(h->coord_log, "r");
    if (!f) return false;
    char line[4096];
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

pid_t h_start_standby(harness *h, const char *name, const char *endpoint, char *log, size_t cap) {
    char lease[16], grace[16], backoff[16];
    snprintf(lease, sizeof lease, "%d", H_LEASE_MS);
    snprintf(grace, sizeof grace, "%d", H_GRACE_MS);
    snprintf(backoff, sizeof backoff, "%d", H_BACKOFF_MS);
    char *const argv[] = {QS_COORDINATOR_BIN,
                          "--bind",
                          (char *)endpoint,
                          "--db",
                          h->conninfo,
                          "--lease-ms",
                          lease,
                          "--grace-ms",
                          grace,
                          "--backoff-ms",
                          backoff,
                          "--poll-ms",
                          "200",
                          "--standby",
                          NULL};
    snprintf(log, cap, "%s/%s.log", h->dir, name);
    return h_start_process(h, name, argv);
}

long h_wait_in_file(const char *path, const char *needle, int timeout_ms) {
    int64_t t0 = now_ms(), limit = hang_bound_ms(timeout_ms);
    while (now_ms() - t0 < limit) {
        if (h_file_contains(path, needle)) return (long)(now_ms() - t0);
        h_sleep_ms(20);
    }
    fprintf(stderr, "gave up after %lld ms waiting for '%s' in %s\n", (long long)limit, needle,
            path);
    return -1;
}
