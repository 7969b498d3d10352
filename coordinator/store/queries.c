/* Read-only queries of the qsweep command (queries.h). */
#include "queries.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "session.h"

qs_status qc_store_pace(qc_store *s, int64_t experiment_id, qc_pace *out, qs_error *err) {
    char id[32];
    snprintf(id, sizeof id, "%lld", (long long)experiment_id);
    char silent_s[16];
    snprintf(silent_s, sizeof silent_s, "%d", QC_WORKER_SILENT_S);
    const char *params[2] = {id, silent_s};
    PGresult *r = qc_store_params(
        s,
        "SELECT extract(epoch FROM avg(a.ended_at - a.started_at)"
        "                FILTER (WHERE a.outcome = 'succeeded')),"
        "       count(*) FILTER (WHERE a.outcome = 'running' AND (a.lease_expires_at > now()"
        "                OR (w.left_at IS NULL"
        "                    AND now() - w.last_seen < make_interval(secs => $2))))"
        " FROM attempts a JOIN experiment_jobs ej ON ej.job = a.job"
        " LEFT JOIN workers w ON w.id = a.worker"
        " WHERE ej.experiment = $1"
        " UNION ALL SELECT NULL, count(*) FROM workers"
        " WHERE left_at IS NULL AND now() - last_seen < make_interval(secs => $2)",
        2, params, PGRES_TUPLES_OK, "pace of experiment", err);
    if (!r) return err->code;
    out->mean_attempt_s = PQgetisnull(r, 0, 0) ? -1.0 : strtod(PQgetvalue(r, 0, 0), NULL);
    out->running_live = strtoll(PQgetvalue(r, 0, 1), NULL, 10);
    out->workers_live = PQntuples(r) > 1 ? strtoll(PQgetvalue(r, 1, 1), NULL, 10) : 0;
    PQclear(r);
    return QS_OK;
}

static void copy_text(char *dst, size_t cap, const char *src) {
    snprintf(dst, cap, "%s", src);
}

qs_status qc_store_workers(qc_store *s, qc_worker_row **rows, size_t *n, qs_error *err) {
    *rows = NULL;
    *n = 0;
    char silent_s[16], lost_s[16];
    snprintf(silent_s, sizeof silent_s, "%d", QC_WORKER_SILENT_S);
    snprintf(lost_s, sizeof lost_s, "%d", QC_WORKER_LOST_S);
    const char *params[2] = {silent_s, lost_s};
    /* connected: seen within QC_WORKER_SILENT_S (the coordinator refreshes last_seen every
       5 s, QC_SRV_ALIVE_MS); silent: not seen for longer, e.g. the worker hangs or the
       coordinator is down; lost: not seen for QC_WORKER_LOST_S and never said goodbye (killed
       with SIGKILL, its machine gone, or the coordinator restarted without it: nothing else
       would ever mark it; its attempts were ended by their leases); left: it said BYE or the
       coordinator timed it out (workers.left_at). */
    PGresult *r = qc_store_params(
        s,
        "SELECT w.id, w.host, w.pid, w.threads, w.gpus::text,"
        "       round(extract(epoch FROM now() - w.last_seen))::bigint,"
        "       coalesce(string_agg(a.job::text, ',' ORDER BY a.job), '-'),"
        "       CASE WHEN w.left_at IS NOT NULL THEN 'left'"
        "            WHEN now() - w.last_seen < make_interval(secs => $1) THEN 'connected'"
        "            WHEN now() - w.last_seen < make_interval(secs => $2) THEN 'silent'"
        "            ELSE 'lost' END AS state,"
        "       coalesce(w.numerics_path, ''), coalesce(w.backend_note, '')"
        " FROM workers w LEFT JOIN attempts a ON a.worker = w.id AND a.outcome = 'running'"
        " GROUP BY w.id ORDER BY w.left_at IS NOT NULL, w.last_seen DESC, w.id",
        2, params, PGRES_TUPLES_OK, "workers", err);
    if (!r) return err->code;
    int k = PQntuples(r);
    qc_worker_row *w = k ? calloc((size_t)k, sizeof *w) : NULL;
    if (k && !w) {
        PQclear(r);
        return qs_error_set(err, QS_ENOMEM, "workers: %d rows", k);
    }
    for (int i = 0; i < k; i++) {
        copy_text(w[i].id, sizeof w[i].id, PQgetvalue(r, i, 0));
        copy_text(w[i].host, sizeof w[i].host, PQgetvalue(r, i, 1));
        w[i].pid = (int32_t)strtol(PQgetvalue(r, i, 2), NULL, 10);
        w[i].threads = (int32_t)strtol(PQgetvalue(r, i, 3), NULL, 10);
        copy_text(w[i].gpus, sizeof w[i].gpus, PQgetvalue(r, i, 4));
        w[i].seen_s_ago = strtoll(PQgetvalue(r, i, 5), NULL, 10);
        copy_text(w[i].running, sizeof w[i].running, PQgetvalue(r, i, 6));
        copy_text(w[i].state, sizeof w[i].state, PQgetvalue(r, i, 7));
        copy_text(w[i].numerics_path, sizeof w[i].numerics_path, PQgetvalue(r, i, 8));
        copy_text(w[i].backend_note, sizeof w[i].backend_note, PQgetvalue(r, i, 9));
    }
    PQclear(r);
    *rows = w;
    *n = (size_t)k;
    return QS_OK;
}

qs_status qc_store_pending_paths(qc_store *s, const char *experiment, qc_path_need_row **rows,
                                 size_t *n, qs_error *err) {
    *rows = NULL;
    *n = 0;
    const char *params[1] = {experiment};
    PGresult *r = qc_store_params(
        s,
        /* a job follows the pin of its oldest experiment, as the scheduler reads it
           (coordinator/store/snapshot.c) */
        "SELECT e.name, coalesce(en.path, ''), coalesce(j.spec ->> 'numerics', ''), count(*),"
        " CASE WHEN x.e = e.id THEN '' ELSE (SELECT o.name FROM experiments o WHERE o.id = x.e)"
        " END"
        " FROM jobs j JOIN experiment_jobs ej ON ej.job = j.id"
        " JOIN experiments e ON e.id = ej.experiment"
        " JOIN LATERAL (SELECT min(o.experiment) AS e FROM experiment_jobs o WHERE o.job = j.id)"
        " x ON true"
        " LEFT JOIN experiment_numerics en ON en.experiment = x.e"
        " WHERE j.state = 'pending' AND coalesce(j.spec ->> 'numerics', '') <> 'any'"
        " AND (en.path IS NOT NULL OR j.spec ->> 'numerics' IS NOT NULL)"
        " AND ($1::text IS NULL OR e.name = $1)"
        " GROUP BY 1, 2, 3, 5 ORDER BY 1, 2, 3, 5",
        1, params, PGRES_TUPLES_OK, "pending numerics paths", err);
    if (!r) return err->code;
    int k = PQntuples(r);
    qc_path_need_row *w = k ? calloc((size_t)k, sizeof *w) : NULL;
    if (k && !w) {
        PQclear(r);
        return qs_error_set(err, QS_ENOMEM, "pending numerics paths: %d rows", k);
    }
    for (int i = 0; i < k; i++) {
        copy_text(w[i].experiment, sizeof w[i].experiment, PQgetvalue(r, i, 0));
        copy_text(w[i].pinned, sizeof w[i].pinned, PQgetvalue(r, i, 1));
        copy_text(w[i].want, sizeof w[i].want, PQgetvalue(r, i, 2));
        w[i].n_jobs = strtoll(PQgetvalue(r, i, 3), NULL, 10);
        copy_text(w[i].pinned_by, sizeof w[i].pinned_by, PQgetvalue(r, i, 4));
    }
    PQclear(r);
    *rows = w;
    *n = (size_t)k;
    return QS_OK;
}

qs_status qc_store_pending_needs(qc_store *s, const char *experiment, qc_need_row **rows, size_t *n,
                                 qs_error *err) {
    *rows = NULL;
    *n = 0;
    const char *params[1] = {experiment};
    PGresult *r = qc_store_params(
        s,
        "SELECT e.name, g, m, f, count(*) FROM ("
        " SELECT j.id, COALESCE((j.resources ->> 'gpus')::int, 0) AS g,"
        "        COALESCE((j.resources ->> 'gpu_mem_mb')::bigint, 0) AS m,"
        "        COALESCE((j.resources ->> 'native_fp4')::boolean, false) AS f"
        " FROM jobs j WHERE j.state = 'pending') AS p"
        " JOIN experiment_jobs ej ON ej.job = p.id JOIN experiments e ON e.id = ej.experiment"
        " WHERE (g > 0 OR m > 0 OR f) AND ($1::text IS NULL OR e.name = $1)"
        " GROUP BY e.name, g, m, f ORDER BY e.name, g, m, f",
        1, params, PGRES_TUPLES_OK, "pending needs", err);
    if (!r) return err->code;
    int k = PQntuples(r);
    qc_need_row *w = k ? calloc((size_t)k, sizeof *w) : NULL;
    if (k && !w) {
        PQclear(r);
        return qs_error_set(err, QS_ENOMEM, "pending needs: %d rows", k);
    }
    for (int i = 0; i < k; i++) {
        copy_text(w[i].experiment, sizeof w[i].experiment, PQgetvalue(r, i, 0));
        w[i].gpus = (int32_t)strtol(PQgetvalue(r, i, 1), NULL, 10);
        w[i].gpu_mem_mb = strtoll(PQgetvalue(r, i, 2), NULL, 10);
        w[i].native_fp4 = PQgetvalue(r, i, 3)[0] == 't';
        w[i].n_jobs = strtoll(PQgetvalue(r, i, 4), NULL, 10);
    }
    PQclear(r);
    *rows = w;
    *n = (size_t)k;
    return QS_OK;
}

qs_status qc_store_job_state(qc_store *s, const char *job_key, char *state, size_t cap,
                             qs_error *err) {
    const char *params[1] = {job_key};
    PGresult *r = qc_store_params(s, "SELECT state FROM jobs WHERE job_key = $1", 1, params,
                                  PGRES_TUPLES_OK, "job state", err);
    if (!r) return err->code;
    qs_status st = QS_OK;
    if (PQntuples(r) == 0)
        st = qs_error_set(err, QS_ENOTFOUND, "no job with job_key %s", job_key);
    else
        copy_text(state, cap, PQgetvalue(r, 0, 0));
    PQclear(r);
    return st;
}
