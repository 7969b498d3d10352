/* bench_store: metric rows ingested per second through the store (qc_store_batch_results +
 * qc_store_flush: a binary COPY straight into results when none of the batch's jobs has
 * stored results, else into the session staging table and the idempotent INSERT ... ON
 * CONFLICT; one transaction per flush, one connection) against a raw text COPY of the same
 * rows (its formatting timed too, as the store's is),
 * with the same batch size and one transaction per batch, into a table shaped like results
 * (CREATE TABLE ... (LIKE results INCLUDING ALL) plus the statement trigger that checks
 * results.job exists, schema/004: same columns, primary key, checks and integrity rule), in
 * the same run on the same private PostgreSQL cluster. fsync stays on: both sides are
 * durable when they return.
 *
 * Usage: bench_store [jobs_per_round] [metrics_per_job] [jobs_per_flush] [rounds] [bare]
 * (defaults 2000 50 100 3; "bare" leaves the raw table without the job-existence check, the
 * harshest baseline). The
 * cluster lives on disk ($QSWEEP_PG_TMPDIR, default /tmp). Prints rows/s of each side per round,
 * the best round of each, and their ratio (target >= 0.7). Also the rate of re-ingesting
 * rows already stored (all ignored). */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpq-fe.h>

#include "pgserver.h"
#include "store.h"
#include "clock.h"

static int die(const char *what, const qs_error *err) {
    fprintf(stderr, "bench_store: %s: %s\n", what, err->msg);
    return 1;
}

static bool exec_ok(PGconn *c, const char *sql) {
    PGresult *r = PQexec(c, sql);
    bool ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;
    if (!ok) fprintf(stderr, "bench_store: %s: %s", sql, PQerrorMessage(c));
    PQclear(r);
    return ok;
}

/* The eval metrics a sensitivity job reports, then per-layer SQNR names to fill up. */
static void metric_names(char (*names)[48], int n) {
    static const char *const fixed[] = {"ppl",      "nll",      "kl_mean",  "kl_median",
                                        "kl_p90",   "kl_p99",   "kl_max",   "top1",
                                        "n_tokens", "n_scored", "n_chunks", "ctx"};
    static const char *const kinds[] = {"q", "k", "v", "o", "gate", "up", "down"};
    for (int i = 0; i < n; i++) {
        if (i < 12)
            snprintf(names[i], 48, "%s", fixed[i]);
        else
            snprintf(names[i], 48, "sqnr_db.%d.%s", (i - 12) / 7, kinds[(i - 12) % 7]);
    }
}

/* Deterministic metric value of (job, metric). */
static double value_of(int64_t job, int m) {
    return 1.0 + (double)((job * 131 + m * 17) % 1000) / 997.0;
}

/* Ingests jobs [first, first + n_jobs) through the store, flushing every per_flush jobs.
 * Returns rows/s, or -1 on error. */
static double through_store(qc_store *s, int64_t first, int n_jobs, int n_metrics, int per_flush,
                            char (*names)[48], size_t *ignored) {
    qc_store_batch *b = qc_store_batch_new();
    qc_metric *rows = calloc((size_t)n_metrics, sizeof *rows);
    if (!b || !rows) return -1;
    qs_error err = {0};
    qc_flush_stats fs;
    *ignored = 0;
    double t0 = qs_clock_s();
    for (int j = 0; j < n_jobs; j++) {
        int64_t job = first + j;
        for (int m = 0; m < n_metrics; m++)
            rows[m] = (qc_metric){names[m], value_of(job, m), -1};
        if (qc_store_batch_results(b, job, 1, true, rows, (size_t)n_metrics, &err)) {
            die("queue", &err);
            return -1;
        }
        if ((j + 1) % per_flush == 0 || j + 1 == n_jobs) {
            if (qc_store_flush(s, b, &fs, &err)) {
                die("flush", &err);
                return -1;
            }
            *ignored += fs.results_ignored;
        }
    }
    double dt = qs_clock_s() - t0;
    qc_store_batch_free(b);
    free(rows);
    return (double)n_jobs * n_metrics / dt;
}

/* The same rows by raw COPY into raw_results, one transaction per per_flush jobs. */
static double raw_copy(PGconn *c, int64_t first, int n_jobs, int n_metrics, int per_flush,
                       char (*names)[48]) {
    size_t cap = (size_t)per_flush * (size_t)n_metrics * 96 + 1;
    char *buf = malloc(cap);
    if (!buf) return -1;
    double t0 = qs_clock_s();
    for (int j0 = 0; j0 < n_jobs; j0 += per_flush) {
        size_t len = 0;
        for (int j = j0; j < n_jobs && j < j0 + per_flush; j++) {
            int64_t job = first + j;
            for (int m = 0; m < n_metrics; m++)
                len += (size_t)snprintf(buf + len, cap - len, "%lld\t1\t%s\t%.17g\t-1\tt\n",
                                        (long long)job, names[m], value_of(job, m));
        }
        if (!exec_ok(c, "BEGIN")) return -1;
        PGresult *r = PQexec(c, "COPY raw_results (job, attempt, name, value, step, final) "
                                "FROM STDIN");
        if (PQresultStatus(r) != PGRES_COPY_IN) {
            fprintf(stderr, "bench_store: COPY: %s", PQerrorMessage(c));
            return -1;
        }
        PQclear(r);
        if (PQputCopyData(c, buf, (int)len) != 1 || PQputCopyEnd(c, NULL) != 1) return -1;
        while ((r = PQgetResult(c)) != NULL) {
            if (PQresultStatus(r) != PGRES_COMMAND_OK) {
                fprintf(stderr, "bench_store: COPY: %s", PQerrorMessage(c));
                return -1;
            }
            PQclear(r);
        }
        if (!exec_ok(c, "COMMIT")) return -1;
    }
    double dt = qs_clock_s() - t0;
    free(buf);
    return (double)n_jobs * n_metrics / dt;
}

/* Runs the whole life of jobs [first, first + n) through the store as the coordinator
 * writes it: attempt started, job running, attempt succeeded, job succeeded, one final
 * metric row; per_flush jobs per transaction. Returns durable job completions/s. */
static double lifecycle(qc_store *s, int64_t first, int n, int per_flush) {
    qc_store_batch *b = qc_store_batch_new();
    if (!b) return -1;
    qs_error err = {0};
    double t0 = qs_clock_s();
    for (int j = 0; j < n; j++) {
        int64_t job = first + j;
        char worker[32];
        snprintf(worker, sizeof worker, "w%d", j % 64);
        const qc_metric m = {"noop", (double)j, -1};
        if (qc_store_batch_attempt_started(b, job, 1, worker, 30, &err) ||
            qc_store_batch_job_state(b, job, QC_JOB_RUNNING, 0, 0, NULL, &err) ||
            qc_store_batch_attempt_ended(b, job, 1, QC_ATTEMPT_SUCCEEDED, NULL, &err) ||
            qc_store_batch_job_state(b, job, QC_JOB_SUCCEEDED, 1, 0, NULL, &err) ||
            qc_store_batch_results(b, job, 1, true, &m, 1, &err)) {
            die("queue", &err);
            return -1;
        }
        if (((j + 1) % per_flush == 0 || j + 1 == n) && qc_store_flush(s, b, NULL, &err)) {
            die("flush", &err);
            return -1;
        }
    }
    double dt = qs_clock_s() - t0;
    qc_store_batch_free(b);
    return n / dt;
}

int main(int argc, char **argv) {
    int jobs_per_round = argc > 1 ? atoi(argv[1]) : 2000;
    int n_metrics = argc > 2 ? atoi(argv[2]) : 50;
    int per_flush = argc > 3 ? atoi(argv[3]) : 100;
    int rounds = argc > 4 ? atoi(argv[4]) : 3;
    /* "bare": raw table without the job-existence check, the cheapest possible COPY target. */
    bool same_check = !(argc > 5 && strcmp(argv[5], "bare") == 0);
    if (jobs_per_round < 1 || n_metrics < 1 || n_metrics > 10000 || per_flush < 1 || rounds < 1) {
        fprintf(stderr, "usage: bench_store [jobs_per_round] [metrics_per_job (<= 10000)] "
                        "[jobs_per_flush] [rounds]\n");
        return 2;
    }
    /* Durable on a real disk, not tmpfs: that is what a sweep runs against. */
    setenv("QSWEEP_PG_TMPDIR", "/tmp", 0);
    qs_error err = {0};
    qc_pgserver *srv = NULL;
    if (qc_pgserver_start_temp(&srv, &err)) return die("start PostgreSQL", &err);
    qc_store *s = NULL;
    int rc = 1;
    PGconn *raw = NULL;
    char(*names)[48] = calloc((size_t)n_metrics, sizeof *names);
    qc_job_submit *jobs = NULL;
    char(*keys)[32] = NULL;
    if (!names) goto out;
    metric_names(names, n_metrics);
    if (qc_store_open(qc_pgserver_conninfo(srv), "bench", &s, &err)) {
        die("open store", &err);
        goto out;
    }
    /* The jobs the results belong to (results.job references jobs.id). */
    int total_jobs = jobs_per_round * rounds;
    jobs = calloc((size_t)total_jobs, sizeof *jobs);
    keys = calloc((size_t)total_jobs, sizeof *keys);
    if (!jobs || !keys) goto out;
    for (int i = 0; i < total_jobs; i++) {
        snprintf(keys[i], sizeof keys[i], "bench-%d", i);
        jobs[i] = (qc_job_submit){keys[i], "echo", "{\"kind\": \"echo\"}", 0, 0, 0, "", 1, NULL,
                                  0,       false,   NULL};
    }
    qc_submit_counts counts;
    if (qc_store_submit(s, "bench", "", "bench", NULL, jobs, (size_t)total_jobs, &counts, &err)) {
        die("submit", &err);
        goto out;
    }
    raw = PQconnectdb(qc_pgserver_conninfo(srv));
    if (PQstatus(raw) != CONNECTION_OK ||
        !exec_ok(raw, "CREATE TABLE raw_results (LIKE results INCLUDING ALL)") ||
        (same_check &&
         !exec_ok(raw, "CREATE TRIGGER raw_results_job_exists AFTER INSERT ON raw_results "
                       "REFERENCING NEW TABLE AS written FOR EACH STATEMENT EXECUTE FUNCTION "
                       "results_job_exists()")))
        goto out;
    PGresult *idr = PQexec(raw, "SELECT min(id) FROM jobs");
    int64_t first_id = strtoll(PQgetvalue(idr, 0, 0), NULL, 10);
    PQclear(idr);

    printf("bench_store: %d jobs x %d metrics per round, %d jobs (%d rows) per transaction, "
           "%d rounds, fsync on, raw table %s\n",
           jobs_per_round, n_metrics, per_flush, per_flush * n_metrics, rounds,
           same_check ? "with the same job-existence check as results"
                      : "BARE (no job-existence check)");
    double best_store = 0, best_raw = 0;
    for (int r = 0; r < rounds; r++) {
        int64_t first = first_id + (int64_t)r * jobs_per_round;
        size_t ignored = 0;
        /* Alternate which side goes first so neither always meets a warmer cache. */
        double vs, vr;
        if (r % 2 == 0) {
            vs = through_store(s, first, jobs_per_round, n_metrics, per_flush, names, &ignored);
            vr = raw_copy(raw, first, jobs_per_round, n_metrics, per_flush, names);
        } else {
            vr = raw_copy(raw, first, jobs_per_round, n_metrics, per_flush, names);
            vs = through_store(s, first, jobs_per_round, n_metrics, per_flush, names, &ignored);
        }
        if (vs < 0 || vr < 0) goto out;
        printf("round %d: store %.0f rows/s, raw COPY %.0f rows/s, ratio %.2f\n", r + 1, vs, vr,
               vs / vr);
        if (vs > best_store) best_store = vs;
        if (vr > best_raw) best_raw = vr;
    }
    size_t ignored = 0;
    double dup = through_store(s, first_id, jobs_per_round, n_metrics, per_flush, names, &ignored);
    if (dup < 0) goto out;
    printf("best: store %.0f rows/s, raw COPY %.0f rows/s, ratio %.2f (target >= 0.70)\n",
           best_store, best_raw, best_store / best_raw);
    printf("re-ingesting %d stored rows (duplicates, all ignored: %zu): %.0f rows/s\n",
           jobs_per_round * n_metrics, ignored, dup);

    /* Job lifecycles: 4 transitions and 1 result row per job, 1000 jobs per transaction;
     * 5 x jobs_per_round jobs (10,000 by default). */
    const int LIFE_JOBS = 5 * jobs_per_round, LIFE_PER_FLUSH = 1000;
    qc_job_submit *life = calloc((size_t)LIFE_JOBS, sizeof *life);
    char(*life_keys)[32] = calloc((size_t)LIFE_JOBS, sizeof *life_keys);
    if (!life || !life_keys) goto out;
    for (int i = 0; i < LIFE_JOBS; i++) {
        snprintf(life_keys[i], sizeof life_keys[i], "life-%d", i);
        life[i] = (qc_job_submit){
            life_keys[i], "echo", "{\"kind\": \"echo\"}", 0, 0, 0, "", 1, NULL, 0, false, NULL};
    }
    qs_status lst = qc_store_submit(s, "bench-life", "", "bench-life", NULL, life,
                                    (size_t)LIFE_JOBS, &counts, &err);
    free(life);
    free(life_keys);
    if (lst) {
        die("submit", &err);
        goto out;
    }
    PGresult *lr = PQexec(raw, "SELECT min(j.id) FROM jobs j JOIN experiment_jobs ej ON "
                               "ej.job = j.id JOIN experiments e ON e.id = ej.experiment "
                               "WHERE e.name = 'bench-life'");
    int64_t life_first = strtoll(PQgetvalue(lr, 0, 0), NULL, 10);
    PQclear(lr);
    double jobs_s = lifecycle(s, life_first, LIFE_JOBS, LIFE_PER_FLUSH);
    if (jobs_s < 0) goto out;
    printf("job lifecycles (4 transitions + 1 result row each, %d jobs per transaction): "
           "%.0f durable job completions/s\n",
           LIFE_PER_FLUSH, jobs_s);
    rc = 0;
out:
    if (raw) PQfinish(raw);
    qc_store_close(s);
    qc_pgserver_destroy(srv);
    free(names);
    free(jobs);
    free(keys);
    return rc;
}
