/* The coordinator's PostgreSQL journal (journal.h). */
#include "journal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "migrate.h"

enum { T_RESULT, T_END, T_JOBSTATE, T_WORKER, T_START, T_CANCEL, N_TABLES };

static const char *const table_name[N_TABLES] = {"qc_b_result", "qc_b_end", "qc_b_jobstate",
                                                 "qc_b_worker", "qc_b_start", "qc_b_cancel"};

/* Temporary tables, one per row kind, emptied by every commit. */
static const char *const create_temp_sql =
    "CREATE TEMP TABLE IF NOT EXISTS qc_b_result (job bigint, attempt int, name text, value float8, step bigint,"
    " final bool) ON COMMIT DELETE ROWS;"
    "CREATE TEMP TABLE IF NOT EXISTS qc_b_end (job bigint, attempt int, outcome text, error text, job_state text,"
    " attempts_used int, backoff_ms bigint) ON COMMIT DELETE ROWS;"
    "CREATE TEMP TABLE IF NOT EXISTS qc_b_jobstate (job bigint, state text, last_error text) ON COMMIT DELETE ROWS;"
    "CREATE TEMP TABLE IF NOT EXISTS qc_b_worker (seq bigint, id text, host text, pid int, gpus jsonb, threads int)"
    " ON COMMIT DELETE ROWS;"
    "CREATE TEMP TABLE IF NOT EXISTS qc_b_start (job bigint, attempt int, worker text, lease_ms bigint)"
    " ON COMMIT DELETE ROWS;"
    "CREATE TEMP TABLE IF NOT EXISTS qc_b_cancel (id bigint) ON COMMIT DELETE ROWS;";

/* The set-based statement applying each table, in batch order (journal.h). */
static const char *const apply_sql[N_TABLES] = {
    [T_RESULT] = "INSERT INTO results (job, attempt, name, value, step, final)"
                 " SELECT job, attempt, name, value, step, final FROM qc_b_result ON CONFLICT DO NOTHING",
    [T_END] = "WITH a AS (UPDATE attempts a SET outcome = e.outcome, ended_at = now(), error = e.error"
              "  FROM qc_b_end e WHERE a.job = e.job AND a.attempt = e.attempt AND a.outcome = 'running')"
              " UPDATE jobs j SET state = e.job_state, attempts_used = e.attempts_used,"
              "  not_before = CASE WHEN e.backoff_ms > 0 THEN now() + e.backoff_ms * interval '1 millisecond' END,"
              "  last_error = coalesce(e.error, j.last_error), updated_at = now()"
              " FROM qc_b_end e WHERE j.id = e.job",
    [T_JOBSTATE] = "UPDATE jobs j SET state = s.state, last_error = coalesce(s.last_error, j.last_error),"
                   " updated_at = now() FROM qc_b_jobstate s WHERE j.id = s.job",
    [T_WORKER] = "INSERT INTO workers (id, host, pid, gpus, threads)"
                 " SELECT DISTINCT ON (id) id, host, pid, gpus, threads FROM qc_b_worker ORDER BY id, seq DESC"
                 " ON CONFLICT (id) DO UPDATE SET host = EXCLUDED.host, pid = EXCLUDED.pid, gpus = EXCLUDED.gpus,"
                 " threads = EXCLUDED.threads, last_seen = now()",
    [T_START] = "WITH a AS (INSERT INTO attempts (job, attempt, worker, lease_expires_at)"
                "  SELECT job, attempt, worker, now() + lease_ms * interval '1 millisecond' FROM qc_b_start"
                "  ON CONFLICT (job, attempt) DO NOTHING)"
                " UPDATE jobs j SET state = 'running', not_before = NULL, updated_at = now()"
                " FROM qc_b_start s WHERE j.id = s.job",
    [T_CANCEL] = "UPDATE cancel_requests SET handled_at = now() WHERE id IN (SELECT id FROM qc_b_cancel)",
};

typedef struct textbuf {
    char *p;
    size_t n, cap;
    size_t rows;
} textbuf;

struct qc_batch {
    textbuf t[N_TABLES];
    uint64_t worker_seq;
};

struct qc_journal {
    char *conninfo;
    PGconn *conn;
    bool lost;
};

/* ---- connection ---- */

static qs_status db_error(qc_journal *j, qs_error *err, const char *what) {
    j->lost = PQstatus(j->conn) != CONNECTION_OK;
    char msg[600];
    snprintf(msg, sizeof msg, "%s", PQerrorMessage(j->conn));
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == ' ')) msg[--n] = '\0';
    return qs_error_set(err, QS_EDB, "PostgreSQL %s: %s%s", what, msg, j->lost ? " (connection lost)" : "");
}

static qs_status exec_ok(qc_journal *j, const char *sql, const char *what, qs_error *err) {
    PGresult *r = PQexec(j->conn, sql);
    ExecStatusType s = PQresultStatus(r);
    PQclear(r);
    if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK) return db_error(j, err, what);
    return QS_OK;
}

/* Connects, takes the lock, creates the temporary tables; migrate only on the first open. */
static qs_status connect_and_lock(qc_journal *j, bool migrate, qs_error *err) {
    if (j->conn) PQfinish(j->conn);
    j->conn = PQconnectdb(j->conninfo);
    if (PQstatus(j->conn) != CONNECTION_OK) return db_error(j, err, "connect");
    j->lost = false;
    PQsetNoticeProcessor(j->conn, NULL, NULL);
    if (migrate) {
        qs_status st = qc_migrate(j->conn, NULL, err);
        if (st != QS_OK) {
            j->lost = PQstatus(j->conn) != CONNECTION_OK;
            return st;
        }
    }
    char sql[200];
    snprintf(sql, sizeof sql, "SELECT pg_try_advisory_lock(%lld)", (long long)QC_JOURNAL_LOCK_KEY);
    PGresult *r = PQexec(j->conn, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        PQclear(r);
        return db_error(j, err, "advisory lock");
    }
    bool locked = PQgetvalue(r, 0, 0)[0] == 't';
    PQclear(r);
    if (!locked) {
        /* Name the holder: pg_locks keeps the 64-bit key as classid (high) and objid (low). */
        snprintf(sql, sizeof sql,
                 "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND"
                 " ((classid::bigint << 32) | objid::bigint) = %lld LIMIT 1",
                 (long long)QC_JOURNAL_LOCK_KEY);
        r = PQexec(j->conn, sql);
        const char *pid = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 ? PQgetvalue(r, 0, 0) : "?";
        qs_error_set(err, QS_ESTATE,
                     "another qsweep coordinator already runs on database \"%s\" (it holds advisory lock %lld, "
                     "PostgreSQL backend pid %s); refusing to start a second one",
                     PQdb(j->conn), (long long)QC_JOURNAL_LOCK_KEY, pid);
        PQclear(r);
        return QS_ESTATE;
    }
    return exec_ok(j, create_temp_sql, "create batch tables", err);
}

qs_status qc_journal_open(const char *conninfo, qc_journal **out, qs_error *err) {
    qc_journal *j = calloc(1, sizeof *j);
    if (!j || !(j->conninfo = strdup(conninfo))) {
        free(j);
        return qs_error_set(err, QS_ENOMEM, "qc_journal_open");
    }
    qs_status st = connect_and_lock(j, true, err);
    if (st != QS_OK) {
        qc_journal_close(j);
        return st;
    }
    *out = j;
    return QS_OK;
}

qs_status qc_journal_reconnect(qc_journal *j, qs_error *err) { return connect_and_lock(j, false, err); }

bool qc_journal_lost(const qc_journal *j) { return j->lost; }

void qc_journal_close(qc_journal *j) {
    if (!j) return;
    if (j->conn) PQfinish(j->conn);
    free(j->conninfo);
    free(j);
}

/* ---- loading ---- */

static PGresult *query1(qc_journal *j, const char *sql, int64_t arg, const char *what, qs_error *err) {
    char a[32];
    snprintf(a, sizeof a, "%lld", (long long)arg);
    const char *params[1] = {a};
    PGresult *r = PQexecParams(j->conn, sql, 1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        PQclear(r);
        db_error(j, err, what);
        return NULL;
    }
    return r;
}

qs_status qc_journal_load_jobs(qc_journal *j, int64_t after_id, void (*fn)(void *arg, const qc_job_row *row),
                               void *arg, qs_error *err) {
    static const char *sql =
        "SELECT j.id, j.kind, j.spec::text, j.priority, coalesce((j.resources->>'gpus')::int, 0),"
        " coalesce((j.resources->>'gpu_mem_mb')::bigint, 0), j.model_key, j.max_attempts, j.attempts_used,"
        " j.state, coalesce(greatest(0, ceil(extract(epoch from j.not_before - now()) * 1000))::bigint, 0),"
        " coalesce((SELECT max(a.attempt) FROM attempts a WHERE a.job = j.id), 0),"
        " r.worker, coalesce(r.attempt, 0)"
        " FROM jobs j LEFT JOIN LATERAL (SELECT a.worker, a.attempt FROM attempts a"
        "  WHERE a.job = j.id AND a.outcome = 'running' ORDER BY a.attempt DESC LIMIT 1) r ON true"
        " WHERE j.id > $1 AND j.state IN ('pending', 'running') ORDER BY j.id";
    PGresult *r = query1(j, sql, after_id, "load jobs", err);
    if (!r) return QS_EDB;
    for (int i = 0; i < PQntuples(r); i++) {
        qc_job_row row = {
            .id = strtoll(PQgetvalue(r, i, 0), NULL, 10),
            .kind = PQgetvalue(r, i, 1),
            .spec_json = PQgetvalue(r, i, 2),
            .priority = atoi(PQgetvalue(r, i, 3)),
            .gpus = atoi(PQgetvalue(r, i, 4)),
            .gpu_mem_mb = strtoll(PQgetvalue(r, i, 5), NULL, 10),
            .model_key = PQgetvalue(r, i, 6),
            .max_attempts = atoi(PQgetvalue(r, i, 7)),
            .attempts_used = atoi(PQgetvalue(r, i, 8)),
            .state = PQgetvalue(r, i, 9),
            .not_before_in_ms = strtoll(PQgetvalue(r, i, 10), NULL, 10),
            .last_attempt = (uint32_t)strtoul(PQgetvalue(r, i, 11), NULL, 10),
            .running_worker = PQgetisnull(r, i, 12) ? NULL : PQgetvalue(r, i, 12),
            .running_attempt = (uint32_t)strtoul(PQgetvalue(r, i, 13), NULL, 10),
        };
        fn(arg, &row);
    }
    PQclear(r);
    return QS_OK;
}

qs_status qc_journal_load_deps(qc_journal *j, int64_t after_id,
                               void (*fn)(void *arg, int64_t job, int64_t dep, const char *dep_state), void *arg,
                               qs_error *err) {
    static const char *sql = "SELECT d.job, d.depends_on, dj.state FROM job_deps d"
                             " JOIN jobs j ON j.id = d.job JOIN jobs dj ON dj.id = d.depends_on"
                             " WHERE d.job > $1 AND j.state IN ('pending', 'running') ORDER BY d.job";
    PGresult *r = query1(j, sql, after_id, "load dependencies", err);
    if (!r) return QS_EDB;
    for (int i = 0; i < PQntuples(r); i++)
        fn(arg, strtoll(PQgetvalue(r, i, 0), NULL, 10), strtoll(PQgetvalue(r, i, 1), NULL, 10), PQgetvalue(r, i, 2));
    PQclear(r);
    return QS_OK;
}

qs_status qc_journal_poll_cancels(qc_journal *j, void (*fn)(void *arg, int64_t request, int64_t job), void *arg,
                                  qs_error *err) {
    static const char *sql = "SELECT c.id, coalesce(c.job, ej.job, 0) FROM cancel_requests c"
                             " LEFT JOIN experiment_jobs ej ON ej.experiment = c.experiment"
                             " WHERE c.handled_at IS NULL AND c.id > $1 ORDER BY c.id";
    PGresult *r = query1(j, sql, 0, "poll cancel requests", err);
    if (!r) return QS_EDB;
    for (int i = 0; i < PQntuples(r); i++)
        fn(arg, strtoll(PQgetvalue(r, i, 0), NULL, 10), strtoll(PQgetvalue(r, i, 1), NULL, 10));
    PQclear(r);
    return QS_OK;
}

/* ---- batches ---- */

qc_batch *qc_batch_new(void) { return calloc(1, sizeof(qc_batch)); }

void qc_batch_free(qc_batch *b) {
    if (!b) return;
    for (int i = 0; i < N_TABLES; i++) free(b->t[i].p);
    free(b);
}

bool qc_batch_empty(const qc_batch *b) { return qc_batch_rows(b) == 0; }

size_t qc_batch_rows(const qc_batch *b) {
    size_t n = 0;
    for (int i = 0; i < N_TABLES; i++) n += b->t[i].rows;
    return n;
}

static bool tb_reserve(textbuf *t, size_t more) {
    if (t->n + more + 1 <= t->cap) return true;
    size_t cap = t->cap ? t->cap : 4096;
    while (cap < t->n + more + 1) cap *= 2;
    char *p = realloc(t->p, cap);
    if (!p) return false;
    t->p = p;
    t->cap = cap;
    return true;
}

static bool tb_raw(textbuf *t, const char *s, size_t len) {
    if (!tb_reserve(t, len)) return false;
    memcpy(t->p + t->n, s, len);
    t->n += len;
    return true;
}

/* A COPY text field (PostgreSQL docs, COPY, "Text Format"): backslash escapes; NULL is \N. */
static bool tb_str(textbuf *t, const char *s) {
    if (!s) return tb_raw(t, "\\N", 2);
    size_t len = strlen(s);
    if (!tb_reserve(t, 2 * len)) return false;
    for (const char *c = s; *c; c++) {
        char e = 0;
        switch (*c) {
        case '\\': e = '\\'; break;
        case '\t': e = 't'; break;
        case '\n': e = 'n'; break;
        case '\r': e = 'r'; break;
        default: break;
        }
        if (e) {
            t->p[t->n++] = '\\';
            t->p[t->n++] = e;
        } else {
            t->p[t->n++] = *c;
        }
    }
    return true;
}

static bool tb_fmt(textbuf *t, const char *fmt, long long v) {
    char s[32];
    int n = snprintf(s, sizeof s, fmt, v);
    return tb_raw(t, s, (size_t)n);
}

static bool tb_i64(textbuf *t, int64_t v) { return tb_fmt(t, "%lld", (long long)v); }

static bool tb_f64(textbuf *t, double v) {
    char s[40];
    if (isnan(v)) return tb_raw(t, "NaN", 3);
    if (isinf(v)) return v > 0 ? tb_raw(t, "Infinity", 8) : tb_raw(t, "-Infinity", 9);
    int n = snprintf(s, sizeof s, "%.17g", v);
    return tb_raw(t, s, (size_t)n);
}

static bool tb_sep(textbuf *t) { return tb_raw(t, "\t", 1); }
static qs_status tb_end(textbuf *t, bool ok) {
    if (!ok || !tb_raw(t, "\n", 1)) return QS_ENOMEM;
    t->rows++;
    return QS_OK;
}

qs_status qc_batch_attempt_start(qc_batch *b, int64_t job, uint32_t attempt, const char *worker, int64_t lease_ms) {
    textbuf *t = &b->t[T_START];
    return tb_end(t, tb_i64(t, job) && tb_sep(t) && tb_i64(t, attempt) && tb_sep(t) && tb_str(t, worker) &&
                         tb_sep(t) && tb_i64(t, lease_ms));
}

qs_status qc_batch_attempt_end(qc_batch *b, int64_t job, uint32_t attempt, const char *outcome, const char *error,
                               const char *job_state, int attempts_used, int64_t backoff_ms) {
    textbuf *t = &b->t[T_END];
    return tb_end(t, tb_i64(t, job) && tb_sep(t) && tb_i64(t, attempt) && tb_sep(t) && tb_str(t, outcome) &&
                         tb_sep(t) && tb_str(t, error) && tb_sep(t) && tb_str(t, job_state) && tb_sep(t) &&
                         tb_i64(t, attempts_used) && tb_sep(t) && tb_i64(t, backoff_ms));
}

qs_status qc_batch_result(qc_batch *b, int64_t job, uint32_t attempt, const char *name, double value, int64_t step,
                          bool final) {
    textbuf *t = &b->t[T_RESULT];
    return tb_end(t, tb_i64(t, job) && tb_sep(t) && tb_i64(t, attempt) && tb_sep(t) && tb_str(t, name) &&
                         tb_sep(t) && tb_f64(t, value) && tb_sep(t) && tb_i64(t, final ? -1 : step) && tb_sep(t) &&
                         tb_raw(t, final ? "t" : "f", 1));
}

qs_status qc_batch_job_state(qc_batch *b, int64_t job, const char *state, const char *last_error) {
    textbuf *t = &b->t[T_JOBSTATE];
    return tb_end(t, tb_i64(t, job) && tb_sep(t) && tb_str(t, state) && tb_sep(t) && tb_str(t, last_error));
}

qs_status qc_batch_worker(qc_batch *b, const char *id, const char *host, uint32_t pid, const char *gpus_json,
                          uint32_t threads) {
    textbuf *t = &b->t[T_WORKER];
    return tb_end(t, tb_i64(t, (int64_t)++b->worker_seq) && tb_sep(t) && tb_str(t, id) && tb_sep(t) &&
                         tb_str(t, host) && tb_sep(t) && tb_i64(t, pid) && tb_sep(t) && tb_str(t, gpus_json) &&
                         tb_sep(t) && tb_i64(t, threads));
}

qs_status qc_batch_cancel_handled(qc_batch *b, int64_t request) {
    textbuf *t = &b->t[T_CANCEL];
    return tb_end(t, tb_i64(t, request));
}

static qs_status copy_in(qc_journal *j, const char *table, const textbuf *t, qs_error *err) {
    char sql[80];
    snprintf(sql, sizeof sql, "COPY %s FROM STDIN", table);
    PGresult *r = PQexec(j->conn, sql);
    ExecStatusType s = PQresultStatus(r);
    PQclear(r);
    if (s != PGRES_COPY_IN) return db_error(j, err, "COPY start");
    if (PQputCopyData(j->conn, t->p, (int)t->n) != 1 || PQputCopyEnd(j->conn, NULL) != 1)
        return db_error(j, err, "COPY data");
    r = PQgetResult(j->conn);
    s = PQresultStatus(r);
    PQclear(r);
    while ((r = PQgetResult(j->conn))) PQclear(r);
    if (s != PGRES_COMMAND_OK) return db_error(j, err, table);
    return QS_OK;
}

qs_status qc_journal_commit(qc_journal *j, qc_batch *b, qs_error *err) {
    if (qc_batch_empty(b)) return QS_OK;
    if (PQstatus(j->conn) != CONNECTION_OK) {
        j->lost = true;
        return qs_error_set(err, QS_EDB, "PostgreSQL connection lost");
    }
    qs_status st = exec_ok(j, "BEGIN", "BEGIN", err);
    for (int i = 0; i < N_TABLES && st == QS_OK; i++)
        if (b->t[i].rows) st = copy_in(j, table_name[i], &b->t[i], err);
    for (int i = 0; i < N_TABLES && st == QS_OK; i++)
        if (b->t[i].rows) st = exec_ok(j, apply_sql[i], table_name[i], err);
    if (st == QS_OK) st = exec_ok(j, "COMMIT", "COMMIT", err);
    if (st != QS_OK) {
        if (PQstatus(j->conn) == CONNECTION_OK) {
            PGresult *r = PQexec(j->conn, "ROLLBACK");
            PQclear(r);
        }
        return st;
    }
    for (int i = 0; i < N_TABLES; i++) {
        b->t[i].n = 0;
        b->t[i].rows = 0;
    }
    return QS_OK;
}
