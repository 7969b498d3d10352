/* Helpers for the coord_* integration tests: one private PostgreSQL cluster per test binary
 * (coordinator/store/pgserver.h), a fresh migrated database per test, the real
 * qsweep-coordinator and qsweep-worker binaries as child processes talking over ipc://, and
 * SQL probes. Nothing is mocked. */
#ifndef QS_TESTS_COORD_HARNESS_H
#define QS_TESTS_COORD_HARNESS_H

#include <stdbool.h>
#include <sys/types.h>

#include "pgserver.h"

/* Timings every scenario uses (short, so the suite runs in a couple of minutes). */
#define H_LEASE_MS 2000
#define H_HEARTBEAT_MS 300
#define H_WORKER_TIMEOUT_MS 1200
#define H_GRACE_MS 4000
#define H_BACKOFF_MS 200

typedef struct harness {
    qc_pgserver *pg;     /* shared by the binary's tests */
    char conninfo[600];  /* the current test's database */
    char dir[64];        /* temp dir: sockets and logs */
    char endpoint[128];  /* ipc://<dir>/coord.sock */
    char coord_log[128]; /* the coordinator's stderr */
    pid_t coord;
    pid_t workers[16];
    int n_workers;
    char netns[32]; /* when set, the coordinator and workers run in this network namespace
                       (ip netns exec); the test sets endpoint to a tcp:// address in it */
} harness;

/* Starts the binary's cluster (cmocka group setup / teardown). */
int h_group_setup(void **state);
int h_group_teardown(void **state);

/* Per-test setup/teardown: *state is a harness; the teardown ends it (kills and reaps what
 * still runs) even when an assertion failed. */
int h_setup(void **state);
int h_teardown(void **state);

/* A fresh database `name` with the schema applied, a fresh temp dir; no processes yet. */
void h_begin(harness *h, const char *name);
/* Kills (SIGKILL) and reaps every process still running. */
void h_end(harness *h);

/* Starts qsweep-coordinator with the H_* timings; its stderr goes to h->coord_log. */
pid_t h_start_coordinator(harness *h);
/* Runs a second coordinator on the same database and returns its exit status, its stderr
 * in log (cap bytes). */
int h_run_second_coordinator(harness *h, char *log, size_t cap);
/* Starts qsweep-worker named id. */
pid_t h_start_worker(harness *h, const char *id);
/* Same, with extra command-line arguments (a NULL-terminated list, e.g. {"--exit-when-idle-ms",
 * "1000", NULL}) after the usual ones; its stderr goes to <dir>/worker-<id>.log. */
pid_t h_start_worker_args(harness *h, const char *id, const char *const *extra);
/* Same, run under the command line wrap (NULL-terminated, absolute path first, e.g.
 * {"/usr/bin/prlimit", "--as=536870912", "--", NULL}): the worker is exec'd by it. Not
 * combined with h->netns. */
pid_t h_start_worker_wrapped(harness *h, const char *id, const char *const *wrap,
                             const char *const *extra);
/* Starts argv (absolute path first, NULL-terminated), e.g. `qsweep worker`, with its stderr
 * in <dir>/<name>.log; killed and reaped by h_end like the workers. */
pid_t h_start_process(harness *h, const char *name, char *const argv[]);
/* Starts qsweep-coordinator with the H_* timings and extra arguments, under environment
 * variables env ("NAME=value" strings, NULL-terminated; may be NULL) added to this process's. */
pid_t h_start_coordinator_env(harness *h, const char *const *extra, const char *const *env);
/* Starts a standby qsweep-coordinator (--standby) bound to endpoint with the H_* timings; its
 * stderr goes to <dir>/<name>.log, whose path is written to log. Killed and reaped by h_end. */
pid_t h_start_standby(harness *h, const char *name, const char *endpoint, char *log, size_t cap);
/* Waits for the file at path to contain needle (bounded as h_wait_sql): the ms it took, or -1
 * saying what it waited for. */
long h_wait_in_file(const char *path, const char *needle, int timeout_ms);
/* True when the file at path (e.g. a worker's log) contains needle. */
bool h_file_contains(const char *path, const char *needle);
/* Sends sig and, for SIGKILL, reaps the process. */
void h_signal(harness *h, pid_t pid, int sig);
/* Waits for pid to exit (bounded as h_wait_sql); returns its exit status, or -1 saying so.
 * timeout_ms 0 only looks: -1 when pid still runs. */
int h_wait_exit(pid_t pid, int timeout_ms);

/* Inserts a job and returns its id. */
long h_insert_job(harness *h, const char *key, const char *kind, const char *spec_json,
                  int max_attempts, int priority);
/* Runs a statement that returns no rows (asserts on error). */
void h_sql_exec(harness *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* One value of a one-row, one-column query, as a long (asserts on error). */
long h_sql_long(harness *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Same as a string into out. */
void h_sql_text(harness *h, char *out, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Polls the query every 100 ms until it returns want; false (saying what it waited for and
 * the last value seen) after ten times timeout_ms, at most ten minutes: timeout_ms is the
 * time on an idle machine, the bound only catches a hang. */
bool h_wait_sql(harness *h, long want, int timeout_ms, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* True when the coordinator's log contains needle. */
bool h_log_contains(harness *h, const char *needle);
void h_sleep_ms(int ms);

#endif
