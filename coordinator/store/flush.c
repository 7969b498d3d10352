/* Writing the coordinator's write queue (batch.h) in one transaction with one set-based
 * statement per kind (unnest of the arrays; prepared once per session); results by COPY in
 * binary format, straight into results when nothing can conflict, else through a session
 * staging table and INSERT ... ON CONFLICT. Contract: store.h (qc_store_flush*). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "lock.h"
#include "session.h"

/* The statements, in flush order; $k is the group's column k as an array literal. They are
 * prepared with generic plans (prepare_session), which must be one index probe per batch row
 * whatever the table statistics said when they were planned: every join is between the
 * unnest() rows, on the outer side, and a unique index of the table. prepare_session turns
 * off sequential scans, hash and merge joins for the session, and no statement filters the
 * table by "= ANY ($1)" (that made the planner put the table's rows on the outer side of a
 * nested loop over the unnest() rows: a cost quadratic in the batch size). */
static const char *const sql_workers =
    "INSERT INTO workers AS w (id, host, pid, gpus, threads, first_seen, last_seen, curve_key, "
    "numerics_path, backend_note) "
    "SELECT id, host, pid, gpus::jsonb, threads, now(), now(), ck, np, note FROM ("
    " SELECT DISTINCT ON (id) id, host, pid, gpus, threads, ck, np, note FROM unnest($1::text[],"
    " $2::text[], $3::int[], $4::text[], $5::int[], $6::text[], $7::text[], $8::text[])"
    " WITH ORDINALITY AS u(id, host, pid, gpus, threads, ck, np, note, ord) ORDER BY id, ord DESC)"
    " v "
    "ON CONFLICT (id) DO UPDATE SET host = EXCLUDED.host, pid = EXCLUDED.pid, "
    "gpus = EXCLUDED.gpus, threads = EXCLUDED.threads, last_seen = now(), left_at = NULL, "
    "curve_key = COALESCE(w.curve_key, EXCLUDED.curve_key), "
    "numerics_path = EXCLUDED.numerics_path, backend_note = EXCLUDED.backend_note";
/* The first pin of an experiment queued after its last unpin wins (ord ascending), also against
 * one already stored (which qc_unpins deleted when an unpin was queued); an experiment deleted
 * since is skipped (the join on its primary key). */
static const char *const sql_pins =
    "INSERT INTO experiment_numerics (experiment, path) "
    "SELECT v.e, v.p FROM (SELECT DISTINCT ON (e) e, p FROM (SELECT e, p, ord, max(ord) FILTER "
    "(WHERE p IS NULL) OVER (PARTITION BY e) AS cut FROM unnest($1::bigint[], $2::text[])"
    " WITH ORDINALITY AS u(e, p, ord)) o WHERE p IS NOT NULL AND ord > COALESCE(cut, 0)"
    " ORDER BY e, ord) v JOIN experiments x ON x.id = v.e "
    "ON CONFLICT (experiment) DO NOTHING";
/* The pins of the experiments with an unpin queued, removed before qc_pins runs. */
static const char *const sql_unpins =
    "DELETE FROM experiment_numerics n USING (SELECT DISTINCT e FROM unnest($1::bigint[],"
    " $2::text[]) AS u(e, p) WHERE p IS NULL) v WHERE n.experiment = v.e";
static const char *const sql_answers =
    "UPDATE numerics_unpin_requests r SET handled_at = now(), outcome = v.o, message = v.m "
    "FROM unnest($1::bigint[], $2::text[], $3::text[]) AS v(id, o, m) "
    "WHERE r.id = v.id AND r.handled_at IS NULL";
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
    enum { NQ = 14 };
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
        {b->n_unpins ? &b->pins : NULL, "qc_unpins", "flush: numerics pins removed", NULL},
        {&b->pins, "qc_pins", "flush: experiments pinned to a numerics path", NULL},
        {&b->answers, "qc_answers", "flush: unpin requests answered", NULL},
    };
    for (size_t k = 0; k < sizeof groups_sql / sizeof groups_sql[0] && !st && transitions; k++) {
        const column_group *g = groups_sql[k].g;
        if (!g || g->col[0].n == 0) continue;
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
        {"qc_renewed", sql_renewed}, {"qc_ended", sql_ended},     {"qc_states", sql_states},
        {"qc_cancels", sql_cancels}, {"qc_pins", sql_pins},       {fresh_name, sql_fresh},
        {"qc_unpins", sql_unpins},   {"qc_answers", sql_answers},
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
