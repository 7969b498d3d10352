/* Submissions (checked jobs inserted under the submit lock), cancel requests and requeues.
 * Contract: store.h. */
#include "store.h"

#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sqltext.h"
#include "lock.h"
#include "numerics_path.h"
#include "session.h"

/* Checks one job's fields and its spec JSON; QS_EINVAL naming the job and field. */
static qs_status check_job(const qc_job_submit *j, size_t index, qs_error *err) {
    if (!j->job_key || !*j->job_key)
        return qs_error_set(err, QS_EINVAL, "submit: job %zu: job_key is empty", index);
    if (!j->kind || !*j->kind)
        return qs_error_set(err, QS_EINVAL, "submit: job %s: kind is empty", j->job_key);
    if (j->gpus < 0 || j->gpu_mem_mb < 0)
        return qs_error_set(err, QS_EINVAL,
                            "submit: job %s: resources gpus=%d gpu_mem_mb=%lld "
                            "must not be negative",
                            j->job_key, j->gpus, (long long)j->gpu_mem_mb);
    if (j->max_attempts < 1)
        return qs_error_set(err, QS_EINVAL, "submit: job %s: max_attempts %d must be >= 1",
                            j->job_key, j->max_attempts);
    if (!j->spec_json)
        return qs_error_set(err, QS_EINVAL, "submit: job %s: spec_json is missing", j->job_key);
    /* The database is UTF8 (jansson checks spec_json itself). */
    const char *texts[] = {j->job_key, j->kind, j->model_key};
    const char *fields[] = {"job_key", "kind", "model_key"};
    for (int t = 0; t < 3; t++) {
        size_t bad = 0;
        if (texts[t] && !qc_utf8_valid(texts[t], &bad))
            return qs_error_set(err, QS_EINVAL, "submit: job %zu: %s is not valid UTF-8 (byte %zu)",
                                index, fields[t], bad);
    }
    json_error_t je;
    json_t *spec = json_loads(j->spec_json, JSON_REJECT_DUPLICATES, &je);
    if (!spec)
        return qs_error_set(err, QS_EINVAL, "submit: job %s: spec_json line %d column %d: %s",
                            j->job_key, je.line, je.column, je.text);
    bool is_object = json_is_object(spec);
    json_decref(spec);
    if (!is_object)
        return qs_error_set(err, QS_EINVAL, "submit: job %s: spec_json is not a JSON object",
                            j->job_key);
    for (size_t d = 0; d < j->n_depends_on; d++) {
        const char *dep = j->depends_on[d];
        if (!dep || !*dep)
            return qs_error_set(err, QS_EINVAL, "submit: job %s: depends_on[%zu] is empty",
                                j->job_key, d);
        size_t bad = 0;
        if (!qc_utf8_valid(dep, &bad))
            return qs_error_set(err, QS_EINVAL,
                                "submit: job %s: depends_on[%zu] is not valid UTF-8 (byte %zu)",
                                j->job_key, d, bad);
        if (strcmp(dep, j->job_key) == 0)
            return qs_error_set(err, QS_EINVAL, "submit: job %s depends on itself", j->job_key);
    }
    return QS_OK;
}

/* Orders job indices by job_key, then by index, so the first of a run of equal keys is the
 * one submitted first. ctx: the qc_job_submit array (qsort_r, glibc). */
static int by_job_key(const void *a, const void *b, void *ctx) {
    const qc_job_submit *jobs = ctx;
    size_t ia = *(const size_t *)a, ib = *(const size_t *)b;
    int c = strcmp(jobs[ia].job_key, jobs[ib].job_key);
    if (c) return c;
    return ia < ib ? -1 : ia > ib;
}

/* Validates every job and finds repeated job_keys. keep[i] is false for the second and later
 * copies of a key (same spec: counted once); a key repeated with a different spec is
 * QS_EINVAL. */
static qs_status check_jobs(const qc_job_submit *jobs, size_t n, bool *keep, qs_error *err) {
    for (size_t i = 0; i < n; i++) {
        qs_status st = check_job(&jobs[i], i, err);
        if (st) return st;
        keep[i] = true;
    }
    size_t *order = malloc((n ? n : 1) * sizeof *order);
    if (!order) return qs_error_set(err, QS_ENOMEM, "submit: out of memory");
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    qsort_r(order, n, sizeof *order, by_job_key, (void *)jobs);
    qs_status st = QS_OK;
    for (size_t k = 1; k < n && !st; k++) {
        const qc_job_submit *a = &jobs[order[k - 1]], *b = &jobs[order[k]];
        if (strcmp(a->job_key, b->job_key) != 0) continue;
        if (strcmp(a->spec_json, b->spec_json) != 0)
            st = qs_error_set(err, QS_EINVAL,
                              "submit: job_key %s appears twice with different specs", a->job_key);
        keep[order[k]] = false;
    }
    free(order);
    return st;
}

/* The submission as array columns for unnest(). */
typedef struct submit_cols {
    qc_sqlarray key, kind, spec, prio, res, model, maxatt; /* one per kept job */
    qc_sqlarray dep_job, dep_on;                           /* one per dependency edge */
    qc_sqlarray stage; /* one per kept job: its pipeline stage, "" outside one */
} submit_cols;

static void submit_cols_free(submit_cols *c) {
    qc_sqlarray *all[] = {&c->key,    &c->kind,   &c->spec,    &c->prio,   &c->res,
                          &c->model,  &c->maxatt, &c->dep_job, &c->dep_on, &c->stage};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        qc_sqlarray_free(all[i]);
}

static bool submit_cols_oom(const submit_cols *c) {
    const qc_sqlarray *all[] = {&c->key,    &c->kind,   &c->spec,    &c->prio,   &c->res,
                                &c->model,  &c->maxatt, &c->dep_job, &c->dep_on, &c->stage};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]->text.oom) return true;
    return false;
}

static void fill_submit_cols(submit_cols *c, const qc_job_submit *jobs, size_t n,
                             const bool *keep) {
    for (size_t i = 0; i < n; i++) {
        if (!keep[i]) continue;
        const qc_job_submit *j = &jobs[i];
        qc_sqlarray_text(&c->key, j->job_key);
        qc_sqlarray_text(&c->kind, j->kind);
        qc_sqlarray_text(&c->spec, j->spec_json);
        qc_sqlarray_int(&c->prio, j->priority);
        char res[128];
        /* native_fp4 only when asked, so the resources of every other job read as before */
        snprintf(res, sizeof res, "{\"gpus\": %d, \"gpu_mem_mb\": %lld%s}", j->gpus,
                 (long long)j->gpu_mem_mb, j->native_fp4 ? ", \"native_fp4\": true" : "");
        qc_sqlarray_text(&c->res, res);
        qc_sqlarray_text(&c->model, j->model_key ? j->model_key : "");
        qc_sqlarray_int(&c->maxatt, j->max_attempts);
        qc_sqlarray_text(&c->stage, j->stage ? j->stage : "");
        for (size_t d = 0; d < j->n_depends_on; d++) {
            qc_sqlarray_text(&c->dep_job, j->job_key);
            qc_sqlarray_text(&c->dep_on, j->depends_on[d]);
        }
    }
}

/* Finds or creates the experiment row; QS_ESTATE when the name exists with another grid. */
static qs_status submit_experiment(qc_store *s, const char *name, const char *description,
                                   const char *grid_text, const char *grid_json,
                                   qc_submit_counts *out, qs_error *err) {
    const char *p[] = {name, description ? description : "", grid_text, grid_json};
    PGresult *r = qc_store_params(s,
                                  "INSERT INTO experiments (name, description, grid, grid_json) "
                                  "VALUES ($1, $2, $3, $4::jsonb) ON CONFLICT (name) DO NOTHING "
                                  "RETURNING id",
                                  4, p, PGRES_TUPLES_OK, "submit: inserting experiment", err);
    if (!r) return QS_EDB;
    if (PQntuples(r) == 1) {
        out->experiment_id = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
        out->experiment_new = true;
        PQclear(r);
        return QS_OK;
    }
    PQclear(r);
    const char *q[] = {name, grid_text};
    r = qc_store_params(s, "SELECT id, grid = $2 FROM experiments WHERE name = $1", 2, q,
                        PGRES_TUPLES_OK, "submit: reading experiment", err);
    if (!r) return QS_EDB;
    out->experiment_id = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    bool same = PQgetvalue(r, 0, 1)[0] == 't';
    PQclear(r);
    if (!same)
        return qs_error_set(err, QS_ESTATE,
                            "submit: experiment '%s' already exists with a different grid; "
                            "choose another name",
                            name);
    return QS_OK;
}

/* The statements of one submission, inside its transaction. */
static qs_status submit_jobs(qc_store *s, const submit_cols *c, qc_submit_counts *out,
                             qs_error *err) {
    enum { NCOLS = 10 };
    qc_sbuf lit[NCOLS] = {{0}};
    const qc_sqlarray *cols[NCOLS] = {&c->key,    &c->kind,   &c->spec,    &c->prio,
                                      &c->res,    &c->model,  &c->maxatt,  &c->dep_job,
                                      &c->dep_on, &c->stage};
    const char *v[NCOLS];
    for (int i = 0; i < NCOLS; i++)
        v[i] = qc_sqlarray_literal(cols[i], &lit[i]);
    qs_status st = QS_OK;
    for (int i = 0; i < NCOLS; i++)
        if (!v[i]) st = qs_error_set(err, QS_ENOMEM, "submit: out of memory");

    PGresult *r = NULL;
    if (!st && !out->experiment_new) {
        /* One name, one grid, one set of jobs: the same grid text over a changed model or
         * token file gives other job_keys (their digests are part of the key), which must not
         * be added to the experiment that already holds the old ones. */
        char exp_id[32];
        snprintf(exp_id, sizeof exp_id, "%lld", (long long)out->experiment_id);
        const char *ep[] = {exp_id, v[0]};
        r = qc_store_params(
            s,
            "SELECT (SELECT count(*) FROM unnest($2::text[]) AS u(k) WHERE NOT EXISTS "
            "(SELECT 1 FROM experiment_jobs ej JOIN jobs j ON j.id = ej.job "
            "WHERE ej.experiment = $1 AND j.job_key = u.k)), "
            "(SELECT count(*) FROM experiment_jobs ej JOIN jobs j ON j.id = ej.job "
            "WHERE ej.experiment = $1 AND j.job_key <> ALL($2::text[])), "
            "(SELECT name FROM experiments WHERE id = $1)",
            2, ep, PGRES_TUPLES_OK, "submit: comparing with the experiment's jobs", err);
        if (!r)
            st = QS_EDB;
        else {
            long long added = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
            long long dropped = strtoll(PQgetvalue(r, 0, 1), NULL, 10);
            if (added || dropped)
                st = qs_error_set(
                    err, QS_ESTATE,
                    "submit: experiment '%s' already exists with other jobs (%lld of this "
                    "submission's %zu job_keys are not in it, %lld of its jobs are not in this "
                    "submission: a model or token file changed?); choose a new experiment name",
                    PQgetvalue(r, 0, 2), added, c->key.n, dropped);
            PQclear(r);
            r = NULL;
        }
    }
    if (!st) {
        /* Existing jobs, counted by state before inserting. */
        r = qc_store_params(s,
                            "SELECT state, count(*) FROM jobs WHERE job_key = ANY($1::text[]) "
                            "GROUP BY state",
                            1, v, PGRES_TUPLES_OK, "submit: reading existing jobs", err);
        if (!r) st = QS_EDB;
    }
    if (!st) {
        for (int i = 0; i < PQntuples(r); i++) {
            const char *state = PQgetvalue(r, i, 0);
            size_t cnt = strtoull(PQgetvalue(r, i, 1), NULL, 10);
            if (!strcmp(state, "succeeded"))
                out->reused_done += cnt;
            else if (!strcmp(state, "pending") || !strcmp(state, "running"))
                out->reused_pending += cnt;
            else
                out->reused_failed += cnt;
        }
        PQclear(r);
        r = qc_store_params(
            s,
            "INSERT INTO jobs (job_key, kind, spec, priority, resources, model_key, "
            "max_attempts) "
            "SELECT k, kd, sp::jsonb, pr, rs::jsonb, mk, ma FROM unnest($1::text[], $2::text[], "
            "$3::text[], $4::int[], $5::text[], $6::text[], $7::int[]) WITH ORDINALITY "
            "AS u(k, kd, sp, pr, rs, mk, ma, ord) ORDER BY ord ON CONFLICT (job_key) DO NOTHING",
            7, v, PGRES_COMMAND_OK, "submit: inserting jobs", err);
        if (!r) st = QS_EDB;
    }
    if (!st) {
        out->jobs_new = strtoull(PQcmdTuples(r), NULL, 10);
        PQclear(r);
        char exp_id[32];
        snprintf(exp_id, sizeof exp_id, "%lld", (long long)out->experiment_id);
        const char *lp[] = {exp_id, v[0], v[9]};
        /* A link stored before experiment_jobs had a stage (schema/145) gets it now. */
        st = qc_store_command(
            s,
            "INSERT INTO experiment_jobs (experiment, job, stage) SELECT $1, j.id, "
            "NULLIF(u.st, '') FROM unnest($2::text[], $3::text[]) AS u(k, st) "
            "JOIN jobs j ON j.job_key = u.k ON CONFLICT (experiment, job) DO UPDATE "
            "SET stage = EXCLUDED.stage WHERE experiment_jobs.stage IS NULL",
            3, lp, "submit: linking jobs", err);
    }
    if (!st && c->dep_job.n) {
        const char *dp[] = {v[7], v[8]};
        r = qc_store_params(s,
                            "SELECT u.k, u.d FROM unnest($1::text[], $2::text[]) AS u(k, d) "
                            "WHERE NOT EXISTS (SELECT 1 FROM jobs WHERE job_key = u.d) LIMIT 1",
                            2, dp, PGRES_TUPLES_OK, "submit: resolving dependencies", err);
        if (!r)
            st = QS_EDB;
        else if (PQntuples(r) > 0) {
            st = qs_error_set(err, QS_EINVAL,
                              "submit: job %s depends on job_key %s, which is neither in this "
                              "submission nor stored",
                              PQgetvalue(r, 0, 0), PQgetvalue(r, 0, 1));
            PQclear(r);
        } else {
            PQclear(r);
            st = qc_store_command(s,
                                  "INSERT INTO job_deps (job, depends_on) SELECT j.id, d.id "
                                  "FROM unnest($1::text[], $2::text[]) AS u(k, dk) "
                                  "JOIN jobs j ON j.job_key = u.k JOIN jobs d ON d.job_key = u.dk "
                                  "ON CONFLICT DO NOTHING",
                                  2, dp, "submit: inserting dependencies", err);
        }
    }
    for (int i = 0; i < NCOLS; i++)
        qc_sbuf_free(&lit[i]);
    return st;
}

qs_status qc_store_submit(qc_store *s, const char *name, const char *description,
                          const char *grid_text, const char *grid_json, const qc_job_submit *jobs,
                          size_t n_jobs, qc_submit_counts *out, qs_error *err) {
    return qc_store_submit_pinned(s, name, description, grid_text, grid_json, jobs, n_jobs, NULL,
                                  out, err);
}

/* The experiment's pin, kept where it has one (a pin from its first dispatch, or an earlier
 * submission's). */
static qs_status submit_pin(qc_store *s, const qc_submit_counts *out, const char *pin,
                            qs_error *err) {
    char id[24];
    snprintf(id, sizeof id, "%lld", (long long)out->experiment_id);
    const char *p[] = {id, pin};
    return qc_store_command(s,
                            "INSERT INTO experiment_numerics (experiment, path) VALUES ($1, $2) "
                            "ON CONFLICT (experiment) DO NOTHING",
                            2, p, "submit: pinning the experiment", err);
}

qs_status qc_store_submit_pinned(qc_store *s, const char *name, const char *description,
                                 const char *grid_text, const char *grid_json,
                                 const qc_job_submit *jobs, size_t n_jobs, const char *pin,
                                 qc_submit_counts *out, qs_error *err) {
    *out = (qc_submit_counts){0};
    if (pin && !qs_numerics_path_valid(pin))
        return qs_error_set(err, QS_EINVAL,
                            "submit: experiment %s: numerics pin '%s' is no path a worker "
                            "announces",
                            name ? name : "", pin);
    if (!name || !*name) return qs_error_set(err, QS_EINVAL, "submit: experiment name is empty");
    if (!grid_text)
        return qs_error_set(err, QS_EINVAL, "submit: experiment %s: grid text is missing", name);
    const char *texts[] = {name, description, grid_text};
    const char *fields[] = {"experiment name", "description", "grid text"};
    for (int t = 0; t < 3; t++) {
        size_t bad = 0;
        if (texts[t] && !qc_utf8_valid(texts[t], &bad))
            return qs_error_set(err, QS_EINVAL, "submit: %s is not valid UTF-8 (byte %zu)",
                                fields[t], bad);
    }
    if (grid_json) {
        json_error_t je;
        json_t *g = json_loads(grid_json, 0, &je);
        if (!g)
            return qs_error_set(err, QS_EINVAL,
                                "submit: experiment %s: grid_json line %d column %d: %s", name,
                                je.line, je.column, je.text);
        json_decref(g);
    }
    bool *keep = calloc(n_jobs ? n_jobs : 1, sizeof *keep);
    if (!keep) return qs_error_set(err, QS_ENOMEM, "submit: out of memory");
    qs_status st = check_jobs(jobs, n_jobs, keep, err);
    submit_cols c = {0};
    if (!st) {
        fill_submit_cols(&c, jobs, n_jobs, keep);
        if (submit_cols_oom(&c)) st = qs_error_set(err, QS_ENOMEM, "submit: out of memory");
    }
    free(keep);
    if (!st) st = qc_store_exec(s, "BEGIN", "submit: BEGIN", err);
    if (!st)
        st = qc_store_exec(s, "LOCK TABLE " SUBMIT_LOCK_TABLE " IN EXCLUSIVE MODE",
                           "submit: taking the submit lock", err);
    if (!st) st = submit_experiment(s, name, description, grid_text, grid_json, out, err);
    if (!st) st = submit_jobs(s, &c, out, err);
    if (!st && pin) st = submit_pin(s, out, pin, err);
    if (!st) st = qc_store_exec(s, "NOTIFY qsweep_jobs", "submit: NOTIFY", err);
    if (!st) st = qc_store_exec(s, "COMMIT", "submit: COMMIT", err);
    if (st) {
        qc_store_rollback(s);
        qc_submit_counts zero = {0};
        *out = zero;
    }
    submit_cols_free(&c);
    return st;
}

qs_status qc_store_request_cancel(qc_store *s, const char *job_key, const char *experiment,
                                  const char *reason, qs_error *err) {
    if ((job_key == NULL) == (experiment == NULL))
        return qs_error_set(err, QS_EINVAL, "cancel: give exactly one of job_key, experiment");
    const char *p[] = {job_key ? job_key : experiment, reason ? reason : ""};
    /* A request with nothing left to cancel (every job finished) is stored already handled:
     * no coordinator may be running to mark it, and none would find work in it. */
    const char *sql =
        job_key ? "INSERT INTO cancel_requests (job, reason, handled_at) SELECT id, $2, "
                  "CASE WHEN state IN ('pending', 'running') THEN NULL ELSE now() END "
                  "FROM jobs WHERE job_key = $1"
                : "INSERT INTO cancel_requests (experiment, reason, handled_at) SELECT e.id, $2, "
                  "CASE WHEN EXISTS (SELECT 1 FROM experiment_jobs ej JOIN jobs j ON j.id = "
                  "ej.job WHERE ej.experiment = e.id AND j.state IN ('pending', 'running')) "
                  "THEN NULL ELSE now() END FROM experiments e WHERE e.name = $1";
    qs_status st = qc_store_exec(s, "BEGIN", "cancel: BEGIN", err);
    if (st) return st;
    PGresult *r = qc_store_params(s, sql, 2, p, PGRES_COMMAND_OK, "cancel: inserting request", err);
    if (!r)
        st = QS_EDB;
    else {
        if (strcmp(PQcmdTuples(r), "1") != 0)
            st = qs_error_set(err, QS_ENOTFOUND, "cancel: no %s named '%s'",
                              job_key ? "job with job_key" : "experiment", p[0]);
        PQclear(r);
    }
    if (!st) st = qc_store_exec(s, "NOTIFY qsweep_cancel", "cancel: NOTIFY", err);
    if (!st) st = qc_store_exec(s, "COMMIT", "cancel: COMMIT", err);
    if (st) qc_store_rollback(s);
    return st;
}

qs_status qc_store_requeue(qc_store *s, const char *experiment, size_t *n_requeued, qs_error *err) {
    *n_requeued = 0;
    if (!experiment || !*experiment)
        return qs_error_set(err, QS_EINVAL, "requeue: experiment name is empty");
    qs_status st = qc_store_exec(s, "BEGIN", "requeue: BEGIN", err);
    if (st) return st;
    /* The coordinator lock, held for this transaction: a running coordinator holds its jobs
     * in memory and reads only new ones, so it would never see the re-queued rows. */
    PGresult *r = NULL;
    bool coordinator = false;
    if ((st = qc_store_lock_for_command(s, "requeue", &coordinator, err))) return st;
    if (coordinator) {
        char holder[400];
        qc_store_describe_lock_holder(s, holder, sizeof holder, NULL);
        return qs_error_set(err, QS_ESTATE,
                            "requeue: experiment '%s': a coordinator is running on database "
                            "'%s' (%s); stop it first, it reads the jobs when it starts",
                            experiment, PQdb(s->conn), holder);
    }
    int64_t exp_id = 0;
    if (!st) {
        const char *p[] = {experiment};
        r = qc_store_params(s, "SELECT id FROM experiments WHERE name = $1", 1, p, PGRES_TUPLES_OK,
                            "requeue: looking up the experiment", err);
        if (!r)
            st = QS_EDB;
        else {
            if (PQntuples(r) == 0)
                st = qs_error_set(err, QS_ENOTFOUND, "requeue: no experiment named '%s'",
                                  experiment);
            else
                exp_id = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
            PQclear(r);
        }
    }
    char id[32];
    snprintf(id, sizeof id, "%lld", (long long)exp_id);
    const char *ip[] = {id};
    if (!st) {
        r = qc_store_params(s,
                            "UPDATE jobs SET state = 'pending', attempts_used = 0, not_before = "
                            "NULL, last_error = NULL, updated_at = now() WHERE state IN "
                            "('failed', 'cancelled') AND id IN (SELECT job FROM experiment_jobs "
                            "WHERE experiment = $1)",
                            1, ip, PGRES_COMMAND_OK, "requeue: resetting jobs", err);
        if (!r)
            st = QS_EDB;
        else {
            *n_requeued = strtoull(PQcmdTuples(r), NULL, 10);
            PQclear(r);
        }
    }
    if (!st) {
        /* Open cancel requests would cancel the re-queued jobs again at the next start. */
        st = qc_store_command(s,
                              "UPDATE cancel_requests SET handled_at = now() WHERE handled_at IS "
                              "NULL AND (experiment = $1 OR job IN (SELECT job FROM "
                              "experiment_jobs WHERE experiment = $1))",
                              1, ip, "requeue: closing cancel requests", err);
    }
    if (!st) st = qc_store_exec(s, "NOTIFY qsweep_jobs", "requeue: NOTIFY", err);
    if (!st) st = qc_store_exec(s, "COMMIT", "requeue: COMMIT", err);
    if (st) {
        qc_store_rollback(s);
        *n_requeued = 0;
    }
    return st;
}
