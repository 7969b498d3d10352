/* The rebuild snapshot a coordinator starts from (jobs, running attempts, worker keys) and
 * the polled cancel requests. Contract: store.h. */
#include "store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "session.h"

static char *dup_or_null(const PGresult *r, int row, int col) {
    if (PQgetisnull(r, row, col)) return NULL;
    return strdup(PQgetvalue(r, row, col));
}

/* Parses a bigint[] in text form ("{1,2,3}"). */
static int64_t *parse_id_array(const char *text, size_t *n) {
    *n = 0;
    size_t cap = 1;
    for (const char *c = text; *c; c++)
        cap += *c == ',';
    int64_t *ids = malloc(cap * sizeof *ids);
    if (!ids) return NULL;
    const char *c = text + (*text == '{');
    while (*c && *c != '}') {
        char *end;
        ids[(*n)++] = strtoll(c, &end, 10);
        c = *end == ',' ? end + 1 : end;
        if (end == c && *c != '}') break;
    }
    return ids;
}

static qs_status load_jobs(qc_store *s, const char *after, qc_store_snapshot *out, qs_error *err) {
    const char *p[] = {after};
    PGresult *r = qc_store_params(
        s,
        "SELECT j.id, j.job_key, j.kind, j.spec::text, j.model_key, j.last_error, j.state, "
        "j.priority, COALESCE((j.resources ->> 'gpus')::int, 0), "
        "COALESCE((j.resources ->> 'gpu_mem_mb')::bigint, 0), j.max_attempts, j.attempts_used, "
        "COALESCE((SELECT max(a.attempt) FROM attempts a WHERE a.job = j.id), 0), "
        "COALESCE(extract(epoch FROM j.not_before), 0), extract(epoch FROM j.created_at), "
        "COALESCE((SELECT array_agg(d.id ORDER BY d.id) FROM job_deps jd JOIN jobs d ON d.id = "
        "jd.depends_on WHERE jd.job = j.id AND d.state IN ('pending', 'running')), '{}'), "
        "(SELECT count(*) FROM job_deps jd JOIN jobs d ON d.id = jd.depends_on "
        "WHERE jd.job = j.id AND d.state IN ('failed', 'cancelled')), "
        "COALESCE(extract(epoch FROM j.not_before - now()), 0), "
        "COALESCE((j.resources ->> 'native_fp4')::boolean, false), "
        "f.id, f.state, f.last_error, j.spec -> 'model' ->> 'trained_by', "
        /* the digest its training job recorded, as v_trained_models reads it */
        "(SELECT substr(r.name, length('model_digest.') + 1) FROM jobs t JOIN results r "
        "ON r.job = t.id WHERE t.job_key = j.spec -> 'model' ->> 'trained_by' "
        "AND t.kind = 'train' AND r.final AND r.name LIKE 'model\\_digest.%' "
        "ORDER BY r.attempt DESC LIMIT 1), "
        /* the numerics pin it follows (schema/180_numerics_pin.sql) */
        "COALESCE(x.e, 0), (SELECT en.path FROM experiment_numerics en WHERE en.experiment = x.e), "
        "j.spec ->> 'numerics' "
        "FROM jobs j LEFT JOIN LATERAL (SELECT min(ej.experiment) AS e FROM experiment_jobs ej "
        "WHERE ej.job = j.id) x ON true LEFT JOIN LATERAL (SELECT d.id, d.state, d.last_error FROM "
        "job_deps jd "
        "JOIN jobs d ON d.id = jd.depends_on WHERE jd.job = j.id AND d.state IN ('failed', "
        "'cancelled') ORDER BY d.id LIMIT 1) f ON true "
        "WHERE j.state IN ('pending', 'running') AND j.id > $1 ORDER BY j.id",
        1, p, PGRES_TUPLES_OK, "load: reading jobs", err);
    if (!r) return QS_EDB;
    int n = PQntuples(r);
    out->jobs = calloc(n ? (size_t)n : 1, sizeof *out->jobs);
    if (!out->jobs) {
        PQclear(r);
        return qs_error_set(err, QS_ENOMEM, "load: out of memory for %d jobs", n);
    }
    qs_status st = QS_OK;
    for (int i = 0; i < n && !st; i++) {
        qc_stored_job *j = &out->jobs[i];
        out->n_jobs++;
        j->id = strtoll(PQgetvalue(r, i, 0), NULL, 10);
        j->job_key = dup_or_null(r, i, 1);
        j->kind = dup_or_null(r, i, 2);
        j->spec_json = dup_or_null(r, i, 3);
        j->model_key = dup_or_null(r, i, 4);
        j->last_error = dup_or_null(r, i, 5);
        st = qc_job_state_parse(PQgetvalue(r, i, 6), &j->state, err);
        j->priority = (int32_t)strtol(PQgetvalue(r, i, 7), NULL, 10);
        j->gpus = (int32_t)strtol(PQgetvalue(r, i, 8), NULL, 10);
        j->gpu_mem_mb = strtoll(PQgetvalue(r, i, 9), NULL, 10);
        j->native_fp4 = PQgetvalue(r, i, 18)[0] == 't';
        j->max_attempts = (int32_t)strtol(PQgetvalue(r, i, 10), NULL, 10);
        j->attempts_used = (int32_t)strtol(PQgetvalue(r, i, 11), NULL, 10);
        j->last_attempt = (int32_t)strtol(PQgetvalue(r, i, 12), NULL, 10);
        j->not_before = strtod(PQgetvalue(r, i, 13), NULL);
        j->created_at = strtod(PQgetvalue(r, i, 14), NULL);
        j->waiting_on = parse_id_array(PQgetvalue(r, i, 15), &j->n_waiting_on);
        j->n_deps_failed = strtoull(PQgetvalue(r, i, 16), NULL, 10);
        j->not_before_in_s = strtod(PQgetvalue(r, i, 17), NULL);
        if (!PQgetisnull(r, i, 19)) {
            j->dep_failed_id = strtoll(PQgetvalue(r, i, 19), NULL, 10);
            if (!st) st = qc_job_state_parse(PQgetvalue(r, i, 20), &j->dep_failed_state, err);
            j->dep_failed_error = dup_or_null(r, i, 21);
            if (!st && !PQgetisnull(r, i, 21) && !j->dep_failed_error)
                st = qs_error_set(err, QS_ENOMEM, "load: out of memory");
        }
        j->trained_by = dup_or_null(r, i, 22);
        j->trained_digest = dup_or_null(r, i, 23);
        j->experiment = strtoll(PQgetvalue(r, i, 24), NULL, 10);
        j->pinned_path = dup_or_null(r, i, 25);
        j->numerics = dup_or_null(r, i, 26);
        if (!st && ((!PQgetisnull(r, i, 25) && !j->pinned_path) ||
                    (!PQgetisnull(r, i, 26) && !j->numerics)))
            st = qs_error_set(err, QS_ENOMEM, "load: out of memory");
        if (!st && ((!PQgetisnull(r, i, 22) && !j->trained_by) ||
                    (!PQgetisnull(r, i, 23) && !j->trained_digest)))
            st = qs_error_set(err, QS_ENOMEM, "load: out of memory");
        if (!st && (!j->job_key || !j->kind || !j->spec_json || !j->model_key || !j->waiting_on))
            st = qs_error_set(err, QS_ENOMEM, "load: out of memory");
        if (j->id > out->max_job_id) out->max_job_id = j->id;
    }
    PQclear(r);
    return st;
}

qs_status qc_store_worker_keys(qc_store *s, qc_worker_key **out, size_t *n, qs_error *err) {
    *out = NULL;
    *n = 0;
    PGresult *r =
        qc_store_params(s, "SELECT id, curve_key FROM workers WHERE curve_key IS NOT NULL", 0, NULL,
                        PGRES_TUPLES_OK, "reading the workers' CURVE keys", err);
    if (!r) return QS_EDB;
    int rows = PQntuples(r);
    qc_worker_key *k = calloc(rows ? (size_t)rows : 1, sizeof *k);
    qs_status st = k ? QS_OK : qs_error_set(err, QS_ENOMEM, "worker keys: out of memory");
    for (int i = 0; i < rows && !st; i++) {
        k[i].worker = strdup(PQgetvalue(r, i, 0));
        k[i].key = strdup(PQgetvalue(r, i, 1));
        *n = (size_t)i + 1;
        if (!k[i].worker || !k[i].key)
            st = qs_error_set(err, QS_ENOMEM, "worker keys: out of memory");
    }
    PQclear(r);
    *out = k;
    return st;
}

static qs_status load_attempts(qc_store *s, const char *after, qc_store_snapshot *out,
                               qs_error *err) {
    const char *p[] = {after};
    PGresult *r = qc_store_params(
        s,
        "SELECT a.job, a.attempt, a.worker, extract(epoch FROM a.started_at), "
        "COALESCE(extract(epoch FROM a.lease_expires_at), 0), "
        "COALESCE(encode(a.token_hash, 'hex'), '') FROM attempts a JOIN jobs j ON "
        "j.id = a.job WHERE a.outcome = 'running' AND j.state IN ('pending', 'running') "
        "AND j.id > $1 ORDER BY a.job, a.attempt",
        1, p, PGRES_TUPLES_OK, "load: reading running attempts", err);
    if (!r) return QS_EDB;
    int n = PQntuples(r);
    out->running = calloc(n ? (size_t)n : 1, sizeof *out->running);
    qs_status st = out->running ? QS_OK : qs_error_set(err, QS_ENOMEM, "load: out of memory");
    for (int i = 0; i < n && !st; i++) {
        qc_stored_attempt *a = &out->running[i];
        out->n_running++;
        a->job = strtoll(PQgetvalue(r, i, 0), NULL, 10);
        a->attempt = (int32_t)strtol(PQgetvalue(r, i, 1), NULL, 10);
        a->worker = dup_or_null(r, i, 2);
        a->started_at = strtod(PQgetvalue(r, i, 3), NULL);
        a->lease_expires_at = strtod(PQgetvalue(r, i, 4), NULL);
        snprintf(a->token_hash, sizeof a->token_hash, "%s", PQgetvalue(r, i, 5));
        if (!a->worker) st = qs_error_set(err, QS_ENOMEM, "load: out of memory");
    }
    PQclear(r);
    return st;
}

qs_status qc_store_load(qc_store *s, int64_t after_id, qc_store_snapshot *out, qs_error *err) {
    *out = (qc_store_snapshot){0};
    out->max_job_id = after_id;
    char after[32];
    snprintf(after, sizeof after, "%lld", (long long)after_id);
    qs_status st =
        qc_store_exec(s, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", "load: BEGIN", err);
    if (!st) st = load_jobs(s, after, out, err);
    if (!st) st = load_attempts(s, after, out, err);
    if (!st) {
        /* The next poll starts above every job that exists now, terminal ones included:
         * starting above the last active one made every poll read the terminal jobs above
         * it again. Submissions are serialised (SUBMIT_LOCK_TABLE), so no smaller id can
         * still commit. */
        PGresult *r = qc_store_params(s, "SELECT COALESCE(max(id), 0) FROM jobs", 0, NULL,
                                      PGRES_TUPLES_OK, "load: reading the last job id", err);
        if (!r)
            st = QS_EDB;
        else {
            int64_t max_id = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
            if (max_id > out->max_job_id) out->max_job_id = max_id;
            PQclear(r);
        }
    }
    if (!st) st = qc_store_exec(s, "COMMIT", "load: COMMIT", err);
    if (st) {
        qc_store_rollback(s);
        qc_store_snapshot_free(out);
        out->max_job_id = after_id;
    }
    return st;
}

void qc_store_snapshot_free(qc_store_snapshot *snap) {
    for (size_t i = 0; i < snap->n_jobs; i++) {
        qc_stored_job *j = &snap->jobs[i];
        free(j->job_key);
        free(j->kind);
        free(j->spec_json);
        free(j->model_key);
        free(j->last_error);
        free(j->waiting_on);
        free(j->dep_failed_error);
        free(j->trained_by);
        free(j->trained_digest);
        free(j->pinned_path);
        free(j->numerics);
    }
    for (size_t i = 0; i < snap->n_running; i++)
        free(snap->running[i].worker);
    free(snap->jobs);
    free(snap->running);
    int64_t keep = snap->max_job_id;
    *snap = (qc_store_snapshot){0};
    snap->max_job_id = keep;
}

qs_status qc_store_poll_cancels(qc_store *s, int64_t **job_ids, size_t *n_jobs,
                                int64_t *upto_request, qs_error *err) {
    *job_ids = NULL;
    *n_jobs = 0;
    *upto_request = 0;
    /* One statement: the requests seen and the jobs they expand to come from one snapshot. */
    PGresult *r = qc_store_params(
        s,
        "WITH open AS (SELECT id, job, experiment FROM cancel_requests WHERE handled_at IS NULL), "
        "hit AS (SELECT o.id AS req, j.id AS job FROM open o JOIN jobs j ON j.id = o.job "
        "UNION ALL SELECT o.id, ej.job FROM open o JOIN experiment_jobs ej "
        "ON ej.experiment = o.experiment) "
        "SELECT h.job, min(h.req), (SELECT max(id) FROM open) FROM hit h JOIN jobs j ON j.id = "
        "h.job WHERE j.state IN ('pending', 'running') GROUP BY h.job "
        "UNION ALL SELECT NULL, NULL, (SELECT max(id) FROM open) ORDER BY 2 NULLS LAST, 1",
        0, NULL, PGRES_TUPLES_OK, "cancel: polling requests", err);
    if (!r) return QS_EDB;
    int n = PQntuples(r);
    *job_ids = malloc((size_t)(n ? n : 1) * sizeof **job_ids);
    if (!*job_ids) {
        PQclear(r);
        return qs_error_set(err, QS_ENOMEM, "cancel: out of memory");
    }
    for (int i = 0; i < n; i++) {
        if (!PQgetisnull(r, i, 2)) *upto_request = strtoll(PQgetvalue(r, i, 2), NULL, 10);
        if (PQgetisnull(r, i, 0)) continue;
        (*job_ids)[(*n_jobs)++] = strtoll(PQgetvalue(r, i, 0), NULL, 10);
    }
    PQclear(r);
    return QS_OK;
}
