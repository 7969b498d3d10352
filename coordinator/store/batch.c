/* The coordinator's write queue: transitions collected as array columns and flushed in one
 * transaction with one set-based statement per kind (unnest of the arrays; prepared once per
 * session); results by COPY in binary format, straight into results when nothing can
 * conflict, else through a session staging table and INSERT ... ON CONFLICT.
 * Contract: store.h (qc_store_batch_*, qc_store_flush). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sqltext.h"
#include "lock.h"
#include "session.h"

/* One qc_store_batch_results call: its rows are bytes [off, off + len) of the results
 * buffer. */
typedef struct result_set {
    int64_t job;
    int32_t attempt;
    size_t off, len;
    size_t n_final, n_partial;
} result_set;

/* The columns of one kind of transition; `n` columns of `col`. */
#define MAX_COLS 6
typedef struct column_group {
    qc_sqlarray col[MAX_COLS];
    int n;
} column_group;

struct qc_store_batch {
    column_group started; /* job, attempt, worker, lease_s, token_hash (hex) */
    column_group renewed; /* job, attempt, lease_s */
    column_group ended;   /* job, attempt, outcome, error, cause */
    column_group states;  /* job, state, attempts_used, backoff_s, last_error */
    column_group workers; /* id, host, pid, gpus, threads, curve_key */
    column_group alive;   /* id, left */
    qc_sbuf results;      /* COPY binary rows: job, attempt, name, value, step, final */
    size_t n_final, n_partial;
    result_set *sets; /* one per qc_store_batch_results call, in call order */
    size_t n_sets, cap_sets;
    int64_t cancels_upto;     /* 0: none */
};

/* Lengths of a group's columns before an append, to undo a half-done one. */
typedef struct group_mark {
    size_t len[MAX_COLS], n[MAX_COLS];
} group_mark;

static group_mark mark(const column_group *g) {
    group_mark m = {{0}, {0}};
    for (int i = 0; i < g->n; i++) {
        m.len[i] = g->col[i].text.len;
        m.n[i] = g->col[i].n;
    }
    return m;
}

/* Keeps the append when no column ran out of memory, else restores the mark. */
static qs_status commit_or_undo(column_group *g, const group_mark *m, const char *what,
                                qs_error *err) {
    bool oom = false;
    for (int i = 0; i < g->n; i++)
        oom |= g->col[i].text.oom;
    if (!oom) return QS_OK;
    for (int i = 0; i < g->n; i++) {
        g->col[i].text.oom = false;
        qc_sbuf_truncate(&g->col[i].text, m->len[i]);
        g->col[i].n = m->n[i];
    }
    return qs_error_set(err, QS_ENOMEM, "batch: out of memory queueing %s", what);
}

qc_store_batch *qc_store_batch_new(void) {
    qc_store_batch *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->started.n = 5;
    b->renewed.n = 3;
    b->ended.n = 5;
    b->states.n = 5;
    b->workers.n = 6;
    b->alive.n = 2;
    return b;
}

static column_group *groups(qc_store_batch *b, int i) {
    column_group *all[] = {&b->started, &b->renewed, &b->ended,
                           &b->states,  &b->workers, &b->alive};
    return i < 6 ? all[i] : NULL;
}

void qc_store_batch_clear(qc_store_batch *b) {
    column_group *g;
    for (int i = 0; (g = groups(b, i)) != NULL; i++)
        for (int c = 0; c < g->n; c++)
            qc_sqlarray_clear(&g->col[c]);
    qc_sbuf_truncate(&b->results, 0);
    b->results.oom = false;
    b->n_final = b->n_partial = 0;
    b->n_sets = 0;
    b->cancels_upto = 0;
}

void qc_store_batch_free(qc_store_batch *b) {
    if (!b) return;
    column_group *g;
    for (int i = 0; (g = groups(b, i)) != NULL; i++)
        for (int c = 0; c < g->n; c++)
            qc_sqlarray_free(&g->col[c]);
    qc_sbuf_free(&b->results);
    free(b->sets);
    free(b);
}

size_t qc_store_batch_size(const qc_store_batch *b) {
    return b->started.col[0].n + b->renewed.col[0].n + b->ended.col[0].n + b->states.col[0].n +
           b->workers.col[0].n + b->alive.col[0].n + b->n_final + b->n_partial +
           (b->cancels_upto > 0);
}

/* QS_EINVAL naming the field when text (may be NULL) is not valid UTF-8: the database would
 * refuse the whole batch, again at every retry. */
static qs_status check_utf8(const char *text, const char *field, int64_t job, qs_error *err) {
    size_t bad = 0;
    if (!text || qc_utf8_valid(text, &bad)) return QS_OK;
    return qs_error_set(err, QS_EINVAL, "batch: job %lld: %s is not valid UTF-8 (byte %zu)",
                        (long long)job, field, bad);
}

static qs_status check_lease(double lease_s, const char *what, int64_t job, int32_t attempt,
                             qs_error *err) {
    if (!(lease_s > 0) || isinf(lease_s))
        return qs_error_set(err, QS_EINVAL,
                            "batch: %s job %lld attempt %d: lease %g s must be "
                            "a positive finite number",
                            what, (long long)job, attempt, lease_s);
    return QS_OK;
}

qs_status qc_store_batch_attempt_started(qc_store_batch *b, int64_t job, int32_t attempt,
                                         const char *worker, double lease_s, qs_error *err) {
    return qc_store_batch_attempt_started_token(b, job, attempt, worker, lease_s, NULL, err);
}

/* True when s is n lowercase hex digits. */
static bool is_hex(const char *s, size_t n) {
    if (strlen(s) != n) return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    return true;
}

qs_status qc_store_batch_attempt_started_token(qc_store_batch *b, int64_t job, int32_t attempt,
                                               const char *worker, double lease_s,
                                               const char *token_hash_hex, qs_error *err) {
    if (token_hash_hex && !is_hex(token_hash_hex, 64))
        return qs_error_set(err, QS_EINVAL,
                            "batch: attempt started job %lld attempt %d: token hash is not 64 "
                            "lowercase hex digits",
                            (long long)job, attempt);
    qs_status st = check_lease(lease_s, "attempt started", job, attempt, err);
    if (st) return st;
    if (!worker || !*worker)
        return qs_error_set(err, QS_EINVAL,
                            "batch: attempt started job %lld attempt %d: worker "
                            "id is empty",
                            (long long)job, attempt);
    if (attempt < 1)
        return qs_error_set(err, QS_EINVAL, "batch: attempt started job %lld: attempt %d < 1",
                            (long long)job, attempt);
    if ((st = check_utf8(worker, "worker id", job, err))) return st;
    group_mark m = mark(&b->started);
    qc_sqlarray_int(&b->started.col[0], job);
    qc_sqlarray_int(&b->started.col[1], attempt);
    qc_sqlarray_text(&b->started.col[2], worker);
    qc_sqlarray_double(&b->started.col[3], lease_s);
    qc_sqlarray_text(&b->started.col[4], token_hash_hex);
    return commit_or_undo(&b->started, &m, "an attempt start", err);
}

qs_status qc_store_batch_lease_renewed(qc_store_batch *b, int64_t job, int32_t attempt,
                                       double lease_s, qs_error *err) {
    qs_status st = check_lease(lease_s, "lease renewed", job, attempt, err);
    if (st) return st;
    group_mark m = mark(&b->renewed);
    qc_sqlarray_int(&b->renewed.col[0], job);
    qc_sqlarray_int(&b->renewed.col[1], attempt);
    qc_sqlarray_double(&b->renewed.col[2], lease_s);
    return commit_or_undo(&b->renewed, &m, "a lease renewal", err);
}

qs_status qc_store_batch_attempt_ended(qc_store_batch *b, int64_t job, int32_t attempt,
                                       qc_attempt_outcome outcome, const char *error,
                                       qs_error *err) {
    return qc_store_batch_attempt_ended_cause(b, job, attempt, outcome, error, NULL, err);
}

qs_status qc_store_batch_attempt_ended_cause(qc_store_batch *b, int64_t job, int32_t attempt,
                                             qc_attempt_outcome outcome, const char *error,
                                             const char *cause, qs_error *err) {
    const char *name = qc_attempt_outcome_name(outcome);
    if (!name || outcome == QC_ATTEMPT_RUNNING)
        return qs_error_set(err, QS_EINVAL,
                            "batch: attempt ended job %lld attempt %d: outcome "
                            "%d is not an end",
                            (long long)job, attempt, (int)outcome);
    if (cause && !qc_attempt_cause_known(cause))
        return qs_error_set(err, QS_EINVAL,
                            "batch: attempt ended job %lld attempt %d: cause '%.40s' is not "
                            "one of attempts.cause's names (schema/170_attempt_cause.sql)",
                            (long long)job, attempt, cause);
    qs_status st = check_utf8(error, "attempt error", job, err);
    if (st) return st;
    group_mark m = mark(&b->ended);
    qc_sqlarray_int(&b->ended.col[0], job);
    qc_sqlarray_int(&b->ended.col[1], attempt);
    qc_sqlarray_text(&b->ended.col[2], name);
    qc_sqlarray_text(&b->ended.col[3], error);
    qc_sqlarray_text(&b->ended.col[4], cause);
    return commit_or_undo(&b->ended, &m, "an attempt end", err);
}

qs_status qc_store_batch_job_state(qc_store_batch *b, int64_t job, qc_job_state state,
                                   int32_t attempts_used, double backoff_s, const char *last_error,
                                   qs_error *err) {
    const char *name = qc_job_state_name(state);
    if (!name)
        return qs_error_set(err, QS_EINVAL, "batch: job %lld: state %d is not a job state",
                            (long long)job, (int)state);
    if (attempts_used < 0 || isnan(backoff_s) || isinf(backoff_s))
        return qs_error_set(err, QS_EINVAL,
                            "batch: job %lld: attempts_used %d or backoff %g s "
                            "out of range",
                            (long long)job, attempts_used, backoff_s);
    qs_status st = check_utf8(last_error, "last_error", job, err);
    if (st) return st;
    group_mark m = mark(&b->states);
    qc_sqlarray_int(&b->states.col[0], job);
    qc_sqlarray_text(&b->states.col[1], name);
    qc_sqlarray_int(&b->states.col[2], attempts_used);
    qc_sqlarray_double(&b->states.col[3], backoff_s);
    qc_sqlarray_text(&b->states.col[4], last_error);
    return commit_or_undo(&b->states, &m, "a job state", err);
}

qs_status qc_store_batch_worker_seen(qc_store_batch *b, const char *worker, const char *host,
                                     int32_t pid, const char *gpus_json, int32_t threads,
                                     qs_error *err) {
    return qc_store_batch_worker_seen_key(b, worker, host, pid, gpus_json, threads, NULL, err);
}

qs_status qc_store_batch_worker_seen_key(qc_store_batch *b, const char *worker, const char *host,
                                         int32_t pid, const char *gpus_json, int32_t threads,
                                         const char *curve_key, qs_error *err) {
    if (curve_key && (strlen(curve_key) != 40 || !qc_utf8_valid(curve_key, NULL)))
        return qs_error_set(err, QS_EINVAL, "batch: worker %s: CURVE key is not 40 Z85 characters",
                            worker ? worker : "?");
    if (!worker || !*worker) return qs_error_set(err, QS_EINVAL, "batch: worker id is empty");
    size_t bad = 0;
    if (!qc_utf8_valid(worker, &bad) || (host && !qc_utf8_valid(host, &bad)))
        return qs_error_set(err, QS_EINVAL,
                            "batch: worker id or host is not valid UTF-8 (byte %zu)", bad);
    if (gpus_json) {
        /* A bad document would fail the whole batch's transaction: refuse it here. */
        json_error_t je;
        json_t *g = json_loads(gpus_json, 0, &je);
        bool ok = g && json_is_array(g);
        json_decref(g);
        if (!ok)
            return qs_error_set(err, QS_EINVAL, "batch: worker %s: gpus is not a JSON array%s%s",
                                worker, g ? "" : ": ", g ? "" : je.text);
    }
    group_mark m = mark(&b->workers);
    qc_sqlarray_text(&b->workers.col[0], worker);
    qc_sqlarray_text(&b->workers.col[1], host ? host : "");
    qc_sqlarray_int(&b->workers.col[2], pid);
    qc_sqlarray_text(&b->workers.col[3], gpus_json ? gpus_json : "[]");
    qc_sqlarray_int(&b->workers.col[4], threads);
    qc_sqlarray_text(&b->workers.col[5], curve_key);
    return commit_or_undo(&b->workers, &m, "a worker", err);
}

qs_status qc_store_batch_worker_alive(qc_store_batch *b, const char *worker, bool left,
                                      qs_error *err) {
    if (!worker || !*worker) return qs_error_set(err, QS_EINVAL, "batch: worker id is empty");
    size_t bad = 0;
    if (!qc_utf8_valid(worker, &bad))
        return qs_error_set(err, QS_EINVAL, "batch: worker id is not valid UTF-8 (byte %zu)", bad);
    group_mark m = mark(&b->alive);
    qc_sqlarray_text(&b->alive.col[0], worker);
    qc_sqlarray_text(&b->alive.col[1], left ? "t" : "f");
    return commit_or_undo(&b->alive, &m, "a worker's presence", err);
}

qs_status qc_store_batch_results(qc_store_batch *b, int64_t job, int32_t attempt, bool final,
                                 const qc_metric *rows, size_t n, qs_error *err) {
    for (size_t i = 0; i < n; i++) {
        if (!rows[i].name || !*rows[i].name)
            return qs_error_set(err, QS_EINVAL,
                                "batch: results job %lld attempt %d: metric %zu "
                                "has an empty name",
                                (long long)job, attempt, i);
        if (final ? rows[i].step != -1 : rows[i].step < 0)
            return qs_error_set(err, QS_EINVAL,
                                "batch: results job %lld attempt %d: metric %s "
                                "step %lld contradicts final=%s",
                                (long long)job, attempt, rows[i].name, (long long)rows[i].step,
                                final ? "true" : "false");
        size_t bad = 0;
        if (!qc_utf8_valid(rows[i].name, &bad))
            return qs_error_set(err, QS_EINVAL,
                                "batch: results job %lld attempt %d: metric %zu name is not "
                                "valid UTF-8 (byte %zu)",
                                (long long)job, attempt, i, bad);
    }
    size_t before = b->results.len;
    for (size_t i = 0; i < n; i++) {
        qc_copybin_row(&b->results, 6);
        qc_copybin_int8(&b->results, job);
        qc_copybin_int4(&b->results, attempt);
        qc_copybin_text(&b->results, rows[i].name);
        qc_copybin_float8(&b->results, rows[i].value);
        qc_copybin_int8(&b->results, rows[i].step);
        qc_copybin_bool(&b->results, final);
    }
    if (!b->results.oom && b->n_sets == b->cap_sets) {
        size_t cap = b->cap_sets ? 2 * b->cap_sets : 16;
        result_set *p = realloc(b->sets, cap * sizeof *p);
        if (p) {
            b->sets = p;
            b->cap_sets = cap;
        }
    }
    if (b->results.oom || b->n_sets == b->cap_sets) {
        b->results.oom = false;
        qc_sbuf_truncate(&b->results, before);
        return qs_error_set(err, QS_ENOMEM, "batch: out of memory queueing %zu results", n);
    }
    b->sets[b->n_sets++] = (result_set){job,        attempt,           before,
                                        b->results.len - before, final ? n : 0, final ? 0 : n};
    if (final)
        b->n_final += n;
    else
        b->n_partial += n;
    return QS_OK;
}

qs_status qc_store_batch_cancels_handled(qc_store_batch *b, int64_t upto_request, qs_error *err) {
    if (upto_request < 1)
        return qs_error_set(err, QS_EINVAL, "batch: cancel request id %lld < 1",
                            (long long)upto_request);
    if (upto_request > b->cancels_upto) b->cancels_upto = upto_request;
    return QS_OK;
}

/* ---- flush --------------------------------------------------------------------------------- */

/* The statements, in flush order; $k is the group's column k as an array literal. They are
 * prepared with generic plans (prepare_session), which must be one index probe per batch row
 * whatever the table statistics said when they were planned: every join is between the
 * unnest() rows, on the outer side, and a unique index of the table. prepare_session turns
 * off sequential scans, hash and merge joins for the session, and no statement filters the
 * table by "= ANY ($1)" (that made the planner put the table's rows on the outer side of a
 * nested loop over the unnest() rows: a cost quadratic in the batch size). */
static const char *const sql_workers =
    "INSERT INTO workers AS w (id, host, pid, gpus, threads, first_seen, last_seen, curve_key) "
    "SELECT id, host, pid, gpus::jsonb, threads, now(), now(), ck FROM ("
    " SELECT DISTINCT ON (id) id, host, pid, gpus, threads, ck FROM unnest($1::text[], $2::text[],"
    " $3::int[], $4::text[], $5::int[], $6::text[]) WITH ORDINALITY AS u(id, host, pid, gpus,"
    " threads, ck, ord) ORDER BY id, ord DESC) v "
    "ON CONFLICT (id) DO UPDATE SET host = EXCLUDED.host, pid = EXCLUDED.pid, "
    "gpus = EXCLUDED.gpus, threads = EXCLUDED.threads, last_seen = now(), left_at = NULL, "
    "curve_key = COALESCE(w.curve_key, EXCLUDED.curve_key)";
/* The last word on each worker wins; a worker the table does not hold (never said HELLO) is
 * skipped. */
static const char *const sql_alive =
    "UPDATE workers w SET last_seen = now(), left_at = CASE WHEN v.gone THEN now() END FROM ("
    " SELECT DISTINCT ON (id) id, gone FROM unnest($1::text[], $2::bool[]) WITH ORDINALITY"
    " AS u(id, gone, ord) ORDER BY id, ord DESC) v WHERE w.id = v.id";
static const char *const sql_started =
    "INSERT INTO attempts (job, attempt, worker, started_at, lease_expires_at, token_hash) "
    "SELECT job, att, worker, now(), now() + lease * interval '1 second', decode(th, 'hex') "
    "FROM unnest($1::bigint[], $2::int[], $3::text[], $4::float8[], $5::text[]) "
    "AS u(job, att, worker, lease, th) ON CONFLICT (job, attempt) DO NOTHING";
static const char *const sql_renewed =
    "UPDATE attempts a SET lease_expires_at = now() + v.lease * interval '1 second' FROM ("
    " SELECT DISTINCT ON (job, att) job, att, lease FROM unnest($1::bigint[], $2::int[],"
    " $3::float8[]) WITH ORDINALITY AS u(job, att, lease, ord) ORDER BY job, att, ord DESC) v "
    "WHERE a.job = v.job AND a.attempt = v.att AND a.outcome = 'running'";
/* The first end of an attempt wins (ord ascending), also against one already stored. */
static const char *const sql_ended =
    "UPDATE attempts a SET outcome = v.outcome, ended_at = now(), error = v.error, "
    "cause = v.cause FROM ("
    " SELECT DISTINCT ON (job, att) job, att, outcome, error, cause FROM unnest($1::bigint[],"
    " $2::int[], $3::text[], $4::text[], $5::text[]) WITH ORDINALITY AS u(job, att, outcome,"
    " error, cause, ord)"
    " ORDER BY job, att, ord) v "
    "WHERE a.job = v.job AND a.attempt = v.att AND a.outcome = 'running'";
/* The last state of each job wins; its last_error is the last non-NULL one queued (the last
 * element of errs: the job's non-NULL errors in queue order, a window over the whole job),
 * else the stored one. */
static const char *const sql_states =
    "UPDATE jobs j SET state = v.state, attempts_used = v.used, "
    "not_before = CASE WHEN v.backoff > 0 THEN now() + v.backoff * interval '1 second' END, "
    "last_error = COALESCE(v.errs[cardinality(v.errs)], j.last_error), updated_at = now() "
    "FROM (SELECT DISTINCT ON (job) job, state, used, backoff, array_agg(err) FILTER (WHERE err "
    "IS NOT NULL) OVER (PARTITION BY job ORDER BY ord ROWS BETWEEN UNBOUNDED PRECEDING AND "
    "UNBOUNDED FOLLOWING) AS errs FROM unnest($1::bigint[], $2::text[], $3::int[], $4::float8[],"
    " $5::text[]) WITH ORDINALITY AS u(job, state, used, backoff, err, ord) "
    "ORDER BY job, ord DESC) v WHERE j.id = v.job";
static const char *const sql_staging =
    "CREATE TEMPORARY TABLE IF NOT EXISTS qc_results_in (job bigint, attempt integer, name text, "
    "value double precision, step bigint, final boolean) ON COMMIT DELETE ROWS";
/* Final rows: once per job. A final set from an attempt is dropped whole when the job already
 * holds final rows of another attempt; duplicates of stored rows are ignored. The check runs
 * once per (job, attempt) of the batch as an index probe (LATERAL ... LIMIT 1): the staging
 * table has no statistics, and a semi-join plan read all of results per flush. */
static const char *const sql_final =
    "WITH blocked AS (SELECT p.job, p.attempt FROM (SELECT DISTINCT job, attempt FROM "
    "qc_results_in WHERE final) p CROSS JOIN LATERAL (SELECT 1 FROM results r WHERE "
    "r.job = p.job AND r.step = -1 AND r.attempt <> p.attempt LIMIT 1) x) "
    "INSERT INTO results (job, attempt, name, value, step, final) "
    "SELECT i.job, i.attempt, i.name, i.value, i.step, i.final FROM qc_results_in i "
    "WHERE i.final AND NOT EXISTS (SELECT 1 FROM blocked b WHERE b.job = i.job AND "
    "b.attempt = i.attempt) ON CONFLICT DO NOTHING";
/* Curve points: a newer attempt's point replaces an older attempt's. */
static const char *const sql_partial =
    "INSERT INTO results (job, attempt, name, value, step, final) "
    "SELECT DISTINCT ON (job, name, step) job, attempt, name, value, step, final "
    "FROM qc_results_in WHERE NOT final ORDER BY job, name, step, attempt DESC "
    "ON CONFLICT (job, name, step) DO UPDATE SET value = EXCLUDED.value, "
    "attempt = EXCLUDED.attempt, created_at = now() "
    "WHERE NOT results.final AND results.attempt < EXCLUDED.attempt";
static const char *const sql_cancels =
    "UPDATE cancel_requests SET handled_at = now() WHERE id <= $1 AND handled_at IS NULL";

/* The result sets one flush writes (qc_flush_share): take[i] for set i, and their totals. */
typedef struct result_pick {
    const qc_store_batch *b;
    bool *take;
    size_t n_sets, n_final, n_partial;
} result_pick;

/* Splits the result sets between QC_FLUSH_MAIN and QC_FLUSH_RESULTS and fills pick with the
 * ones of share (QC_FLUSH_ALL: every set, no split): in call order, a job's first set goes to
 * the share with fewer bytes so far, and every later set of the same job to the same share.
 * Two connections writing rows of one job could wait on each other's uncommitted keys (the
 * same curve point sent twice) while the main share waits for the other's commit: a
 * deadlock PostgreSQL cannot see. The split is the same for the same batch, every time
 * (finding a job's earlier set is a backward scan, quadratic in the sets of a batch: a few
 * hundred at most when a batch is split). QS_ENOMEM. */
static qs_status pick_results(const qc_store_batch *b, qc_flush_share share, result_pick *pick,
                              qs_error *err) {
    size_t n = b->n_sets ? b->n_sets : 1;
    bool split = share != QC_FLUSH_ALL;
    *pick = (result_pick){b, calloc(n, sizeof(bool)), 0, 0, 0};
    unsigned char *to = split ? calloc(n, 1) : NULL; /* 0: MAIN, 1: RESULTS */
    if (!pick->take || (split && !to)) {
        free(pick->take);
        free(to);
        pick->take = NULL;
        return qs_error_set(err, QS_ENOMEM, "flush: out of memory");
    }
    size_t bytes[2] = {0, 0};
    for (size_t i = 0; i < b->n_sets; i++) {
        const result_set *rs = &b->sets[i];
        bool take = !split;
        if (split) {
            size_t k = i;
            while (k > 0 && b->sets[k - 1].job != rs->job)
                k--;
            to[i] = k > 0 ? to[k - 1] : (unsigned char)(bytes[1] < bytes[0]);
            bytes[to[i]] += rs->len;
            take = (share == QC_FLUSH_RESULTS) == (to[i] == 1);
        }
        if (!take) continue;
        pick->take[i] = true;
        pick->n_sets++;
        pick->n_final += rs->n_final;
        pick->n_partial += rs->n_partial;
    }
    free(to);
    return QS_OK;
}

/* Sends the picked rows into an open COPY ... FROM STDIN (FORMAT binary) and collects the
 * outcome. On an error, *sqlstate (when not NULL) receives the server's SQLSTATE ("" when
 * none). */
static qs_status copy_rows(qc_store *s, const result_pick *pick, const char *sql,
                           char sqlstate[6], qs_error *err) {
    if (sqlstate) sqlstate[0] = '\0';
    PGresult *r = PQexec(s->conn, sql);
    if (PQresultStatus(r) != PGRES_COPY_IN) {
        qs_status st = qc_store_fail(s, r, "flush: COPY results", err);
        PQclear(r);
        return st;
    }
    PQclear(r);
    qc_sbuf head = {0}, tail = {0};
    qc_copybin_header(&head);
    qc_copybin_trailer(&tail);
    bool sent = !head.oom && !tail.oom && PQputCopyData(s->conn, head.p, (int)head.len) == 1;
    const qc_store_batch *b = pick->b;
    for (size_t i = 0; sent && i < b->n_sets; i++) {
        if (!pick->take[i]) continue;
        const char *p = b->results.p + b->sets[i].off;
        for (size_t off = 0, piece; sent && off < b->sets[i].len; off += piece) {
            piece = b->sets[i].len - off < (1u << 30) ? b->sets[i].len - off : (1u << 30);
            sent = PQputCopyData(s->conn, p + off, (int)piece) == 1;
        }
    }
    sent = sent && PQputCopyData(s->conn, tail.p, (int)tail.len) == 1;
    qc_sbuf_free(&head);
    qc_sbuf_free(&tail);
    if (!sent || PQputCopyEnd(s->conn, NULL) != 1)
        return qc_store_fail(s, NULL, "flush: sending results", err);
    qs_status st = QS_OK;
    while ((r = PQgetResult(s->conn)) != NULL) {
        if (PQresultStatus(r) != PGRES_COMMAND_OK && !st) {
            const char *code = PQresultErrorField(r, PG_DIAG_SQLSTATE);
            if (sqlstate && code) snprintf(sqlstate, 6, "%s", code);
            st = qc_store_fail(s, r, "flush: COPY results", err);
        }
        PQclear(r);
    }
    return st;
}

/* Whether the batch's results may go straight into results by COPY: none of its jobs has a
 * stored result yet (so nothing can conflict or be a second final set) and no job appears
 * with two attempts. */
static const char *const sql_fresh =
    "SELECT NOT EXISTS (SELECT 1 FROM unnest($1::bigint[]) AS u(job) CROSS JOIN LATERAL ("
    "SELECT 1 FROM results r WHERE r.job = u.job LIMIT 1) x) AND NOT EXISTS (SELECT 1 FROM "
    "unnest($1::bigint[], $2::int[]) AS p(job, att) GROUP BY job HAVING count(DISTINCT att) > 1)";

static const char fresh_name[] = "qc_fresh";

/* The fast path of flush_results: COPY directly into results under the savepoint
 * qc_fresh_results (set in the pipeline), when sql_fresh said so. *done is false when the
 * COPY meets a duplicate (unique_violation: a concurrent writer or a duplicate inside the
 * batch); the savepoint is then rolled back and nothing was written. */
static qs_status copy_fresh_results(qc_store *s, const result_pick *pick, bool *done,
                                    qs_error *err) {
    *done = false;
    char sqlstate[6];
    qs_status st = copy_rows(s, pick, "COPY results (job, attempt, name, value, step, final) FROM STDIN "
                             "(FORMAT binary)",
                             sqlstate, err);
    if (st == QS_OK) {
        *done = true;
        return QS_OK;
    }
    /* 23505 unique_violation (PostgreSQL docs, Appendix A): a concurrent writer or a
     * duplicate inside the batch; the idempotent path below sorts it out. */
    if (strcmp(sqlstate, "23505") != 0) return st;
    return qc_store_exec(s, "ROLLBACK TO SAVEPOINT qc_fresh_results", "flush: ROLLBACK TO", err);
}

static qs_status flush_results(qc_store *s, const result_pick *pick, bool fresh,
                               qc_flush_stats *stats, qs_error *err) {
    if (pick->n_final + pick->n_partial == 0) return QS_OK;
    bool done = false;
    qs_status st = fresh ? copy_fresh_results(s, pick, &done, err) : QS_OK;
    if (st) return st;
    if (done) {
        stats->results_inserted += pick->n_final + pick->n_partial;
        return QS_OK;
    }
    st = copy_rows(s, pick, "COPY qc_results_in FROM STDIN (FORMAT binary)", NULL, err);
    if (st) return st;
    PGresult *r;
    size_t inserted = 0;
    if (pick->n_final) {
        r = qc_store_params(s, sql_final, 0, NULL, PGRES_COMMAND_OK, "flush: storing final results",
                            err);
        if (!r) return QS_EDB;
        inserted += strtoull(PQcmdTuples(r), NULL, 10);
        PQclear(r);
    }
    if (pick->n_partial) {
        r = qc_store_params(s, sql_partial, 0, NULL, PGRES_COMMAND_OK,
                            "flush: storing partial results", err);
        if (!r) return QS_EDB;
        inserted += strtoull(PQcmdTuples(r), NULL, 10);
        PQclear(r);
    }
    stats->results_inserted += inserted;
    size_t total = pick->n_final + pick->n_partial;
    stats->results_ignored += total > inserted ? total - inserted : 0;
    return QS_OK;
}

/* One statement of the pipelined prelude: its SQL, parameters, the status it must give,
 * and where to add the rows it changed (NULL: nowhere). */
typedef struct piped {
    const char *sql, *what; /* sql: a prepared statement's name when prepared is true */
    bool prepared;
    int n;
    const char *v[MAX_COLS];
    ExecStatusType want;
    size_t *count;
} piped;

/* Sends every statement of the transaction before the results COPY at once (libpq pipeline
 * mode, one round trip instead of one per statement; COPY itself is not allowed in a
 * pipeline) and reads their outcomes in order. *fresh receives the answer of sql_fresh when
 * it was among them. On an error the transaction stays open (aborted) for the caller's
 * ROLLBACK. */
static qs_status run_pipeline(qc_store *s, piped *q, size_t n, bool *fresh, qs_error *err) {
    if (PQenterPipelineMode(s->conn) != 1)
        return qc_store_fail(s, NULL, "flush: entering pipeline mode", err);
    qs_status st = QS_OK;
    size_t sent = 0;
    for (; sent < n; sent++)
        if ((q[sent].prepared
                 ? PQsendQueryPrepared(s->conn, q[sent].sql, q[sent].n, q[sent].v, NULL, NULL, 0)
                 : PQsendQueryParams(s->conn, q[sent].sql, q[sent].n, NULL, q[sent].v, NULL, NULL,
                                     0)) != 1) {
            st = qc_store_fail(s, NULL, q[sent].what, err);
            break;
        }
    if (PQpipelineSync(s->conn) != 1 && !st) st = qc_store_fail(s, NULL, "flush: sync", err);
    if (PQstatus(s->conn) == CONNECTION_BAD) {
        /* nothing more will come; leave pipeline mode as far as libpq lets us */
        PQexitPipelineMode(s->conn);
        if (!st) st = qc_store_fail(s, NULL, "flush: pipeline", err);
        return st;
    }
    /* Every sent statement yields its result(s) (PIPELINE_ABORTED after an error) and a
     * NULL; the sync yields PIPELINE_SYNC. A NULL anywhere else means libpq has nothing
     * more: the connection broke (libpq 15 then returns NULL for ever while PQstatus may
     * still say CONNECTION_OK), so stop reading and report the session lost. */
    bool broken = false;
    for (size_t i = 0; i < sent && !broken; i++) {
        PGresult *r;
        bool got = false;
        while ((r = PQgetResult(s->conn)) != NULL) {
            got = true;
            ExecStatusType rs = PQresultStatus(r);
            if (rs != q[i].want && !st) {
                st = qc_store_fail(s, r, q[i].what, err);
            } else if (rs == q[i].want) {
                if (q[i].count) *q[i].count += strtoull(PQcmdTuples(r), NULL, 10);
                if (fresh && q[i].sql == fresh_name && PQntuples(r) == 1)
                    *fresh = PQgetvalue(r, 0, 0)[0] == 't';
            }
            PQclear(r);
        }
        broken = !got;
    }
    while (!broken) { /* up to and including the sync's result */
        PGresult *r = PQgetResult(s->conn);
        if (!r) {
            broken = true;
            break;
        }
        ExecStatusType rs = PQresultStatus(r);
        PQclear(r);
        if (rs == PGRES_PIPELINE_SYNC) break;
    }
    if (broken) {
        if (!st) st = qc_store_fail(s, NULL, "flush: reading the pipeline's results", err);
        qc_store_mark_lost(s); /* also when a statement's error came first */
        return st;
    }
    if (PQexitPipelineMode(s->conn) != 1 && !st)
        st = qc_store_fail(s, NULL, "flush: leaving pipeline mode", err);
    return st;
}

static qs_status flush_in_transaction(qc_store *s, const qc_store_batch *b, qc_flush_share share,
                                      const result_pick *pick, qc_flush_hook before_commit,
                                      void *ctx, qc_flush_stats *stats, qs_error *err) {
    /* Everything up to the results COPY goes in one pipeline of prepared statements; the
     * order of the statements inside the one transaction is as documented in store.h,
     * except that the cancel requests are marked handled before the results are written
     * (same transaction, so the same outcome). QC_FLUSH_RESULTS writes no transitions. */
    bool transitions = share != QC_FLUSH_RESULTS;
    enum { NQ = 12 };
    piped q[NQ];
    size_t nq = 0;
    qc_sbuf lit[6 * MAX_COLS] = {{0}};
    size_t nlit = 0;
    qs_status st = QS_OK;
    q[nq++] = (piped){"BEGIN", "flush: BEGIN", false, 0, {0}, PGRES_COMMAND_OK, NULL};
    struct {
        const column_group *g;
        const char *name, *what;
        size_t *count;
    } groups_sql[] = {
        {&b->workers, "qc_workers", "flush: workers seen", &stats->workers_seen},
        {&b->alive, "qc_alive", "flush: workers alive or gone", &stats->workers_seen},
        {&b->started, "qc_started", "flush: attempts started", &stats->attempts_started},
        {&b->renewed, "qc_renewed", "flush: leases renewed", &stats->leases_renewed},
        {&b->ended, "qc_ended", "flush: attempts ended", &stats->attempts_ended},
        {&b->states, "qc_states", "flush: job states", &stats->jobs_changed},
    };
    for (size_t k = 0; k < sizeof groups_sql / sizeof groups_sql[0] && !st && transitions; k++) {
        const column_group *g = groups_sql[k].g;
        if (g->col[0].n == 0) continue;
        piped *p = &q[nq++];
        *p = (piped){groups_sql[k].name, groups_sql[k].what, true, g->n, {0}, PGRES_COMMAND_OK,
                     groups_sql[k].count};
        for (int i = 0; i < g->n && !st; i++)
            if (!(p->v[i] = qc_sqlarray_literal(&g->col[i], &lit[nlit++])))
                st = qs_error_set(err, QS_ENOMEM, "flush: out of memory building %s",
                                  groups_sql[k].what);
    }
    char upto[32];
    if (!st && transitions && b->cancels_upto > 0) {
        snprintf(upto, sizeof upto, "%lld", (long long)b->cancels_upto);
        q[nq++] = (piped){"qc_cancels", "flush: cancel requests handled", true, 1, {upto},
                          PGRES_COMMAND_OK, NULL};
    }
    bool results = pick->n_sets > 0, fresh = false;
    qc_sqlarray sets[2] = {{{0}, 0}, {{0}, 0}}; /* job, attempt of the picked sets */
    if (!st && results) {
        for (size_t i = 0; i < b->n_sets; i++)
            if (pick->take[i]) {
                qc_sqlarray_int(&sets[0], b->sets[i].job);
                qc_sqlarray_int(&sets[1], b->sets[i].attempt);
            }
        piped *p = &q[nq++];
        *p = (piped){fresh_name, "flush: checking for stored results", true, 2, {0},
                     PGRES_TUPLES_OK, NULL};
        for (int i = 0; i < 2 && !st; i++)
            if (sets[i].text.oom || !(p->v[i] = qc_sqlarray_literal(&sets[i], &lit[nlit++])))
                st = qs_error_set(err, QS_ENOMEM, "flush: out of memory");
        q[nq++] = (piped){"SAVEPOINT qc_fresh_results", "flush: SAVEPOINT", false, 0, {0},
                          PGRES_COMMAND_OK, NULL};
    }
    if (!st) st = run_pipeline(s, q, nq, &fresh, err);
    for (size_t i = 0; i < nlit; i++)
        qc_sbuf_free(&lit[i]);
    qc_sqlarray_free(&sets[0]);
    qc_sqlarray_free(&sets[1]);
    if (!st && results) st = flush_results(s, pick, fresh, stats, err);
    if (!st && before_commit) st = before_commit(ctx, err);
    if (!st) st = qc_store_lock_alive(s, err); /* a coordinator writes only under its lock */
    /* COMMIT also commits the savepoint's subtransaction: no RELEASE needed. */
    if (!st) st = qc_store_exec(s, "COMMIT", "flush: COMMIT", err);
    return st;
}

/* Readies a session for flushes, once (again after a reconnect):
 * - random_page_cost 1.1: a flush reads and writes a few rows by key, random access to
 *   cached pages. With the default (4, for spinning disks) the planner preferred a
 *   sequential scan of all jobs once a batch held ~200 of them (3.3 ms against 0.07 ms for
 *   the index).
 * - the flush's statements prepared, with generic plans (plan_cache_mode, PostgreSQL 12+):
 *   planning them on every flush cost 0.3-0.7 ms each, about half of a small flush's time.
 *   A generic plan is made once, from the statistics of that moment (an empty table, for a
 *   new database), and serves batches of 1 to thousands of rows against tables of any size:
 *   sequential scans, hash and merge joins are turned off for the session so that every
 *   plan is nested loops of index probes, linear in the batch and independent of the table
 *   size (the statements above are written for that).
 * - the results staging table (a temporary table, outside any transaction so a rolled-back
 *   flush does not take it along). */
static qs_status prepare_session(qc_store *s, qs_error *err) {
    static const struct {
        const char *name, *sql;
    } stmts[] = {
        {"qc_workers", sql_workers}, {"qc_alive", sql_alive},     {"qc_started", sql_started},
        {"qc_renewed", sql_renewed},
        {"qc_ended", sql_ended},     {"qc_states", sql_states},   {"qc_cancels", sql_cancels},
        {fresh_name, sql_fresh},
    };
    const char *setup[] = {"DEALLOCATE ALL",
                           "SET random_page_cost = 1.1",
                           "SET plan_cache_mode = force_generic_plan",
                           "SET enable_seqscan = off",
                           "SET enable_hashjoin = off",
                           "SET enable_mergejoin = off",
                           sql_staging};
    qs_status st = QS_OK;
    for (size_t i = 0; i < sizeof setup / sizeof setup[0] && !st; i++)
        st = qc_store_exec(s, setup[i], "flush: preparing the session", err);
    for (size_t i = 0; i < sizeof stmts / sizeof stmts[0] && !st; i++) {
        PGresult *r = PQprepare(s->conn, stmts[i].name, stmts[i].sql, 0, NULL);
        if (PQresultStatus(r) != PGRES_COMMAND_OK)
            st = qc_store_fail(s, r, "flush: preparing statements", err);
        PQclear(r);
    }
    if (!st) s->flush_ready = true;
    return st;
}

size_t qc_store_batch_result_sets(const qc_store_batch *b) {
    return b->n_sets;
}

size_t qc_store_batch_result_bytes(const qc_store_batch *b) {
    return b->results.len;
}

qs_status qc_store_flush_share(qc_store *s, const qc_store_batch *b, qc_flush_share share,
                               qc_flush_hook before_commit, void *ctx, qc_flush_stats *stats,
                               qs_error *err) {
    qc_flush_stats local = {0};
    if (!stats) stats = &local;
    *stats = (qc_flush_stats){0};
    if (share != QC_FLUSH_ALL && share != QC_FLUSH_MAIN && share != QC_FLUSH_RESULTS)
        return qs_error_set(err, QS_EINVAL, "flush: share %d is not a qc_flush_share", share);
    result_pick pick;
    qs_status st = pick_results(b, share, &pick, err);
    if (st) return st;
    size_t transitions = qc_store_batch_size(b) - b->n_final - b->n_partial;
    bool empty = pick.n_sets == 0 && (share == QC_FLUSH_RESULTS || transitions == 0);
    if (empty) {
        free(pick.take);
        return before_commit ? before_commit(ctx, err) : QS_OK;
    }
    st = s->flush_ready ? QS_OK : prepare_session(s, err);
    if (!st) st = flush_in_transaction(s, b, share, &pick, before_commit, ctx, stats, err);
    free(pick.take);
    if (st) {
        qc_store_rollback(s);
        *stats = (qc_flush_stats){0};
    }
    return st;
}

qs_status qc_store_flush(qc_store *s, qc_store_batch *b, qc_flush_stats *stats, qs_error *err) {
    qs_status st = qc_store_flush_share(s, b, QC_FLUSH_ALL, NULL, NULL, stats, err);
    if (!st) qc_store_batch_clear(b);
    return st;
}
