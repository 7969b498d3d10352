/* The coordinator's write queue: each transition appended to the array columns of its kind
 * (batch.h), checked first (UTF-8, leases, token hashes), and undone whole when memory runs
 * out; flush.c writes them. Contract: store.h (qc_store_batch_*). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"

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
    b->workers.n = 8;
    b->alive.n = 2;
    b->pins.n = 2;
    b->answers.n = 3;
    return b;
}

static column_group *groups(qc_store_batch *b, int i) {
    column_group *all[] = {&b->started, &b->renewed, &b->ended, &b->states,
                           &b->workers, &b->alive,   &b->pins,  &b->answers};
    return i < 8 ? all[i] : NULL;
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
    b->n_unpins = 0;
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
           b->workers.col[0].n + b->alive.col[0].n + b->pins.col[0].n + b->answers.col[0].n +
           b->n_final + b->n_partial + (b->cancels_upto > 0);
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
    return qc_store_batch_worker_seen_path(b, worker, host, pid, gpus_json, threads, curve_key,
                                           NULL, NULL, err);
}

qs_status qc_store_batch_worker_seen_path(qc_store_batch *b, const char *worker, const char *host,
                                          int32_t pid, const char *gpus_json, int32_t threads,
                                          const char *curve_key, const char *numerics_path,
                                          const char *backend_note, qs_error *err) {
    size_t bad_at = 0;
    if ((numerics_path && !qc_utf8_valid(numerics_path, &bad_at)) ||
        (backend_note && !qc_utf8_valid(backend_note, &bad_at)))
        return qs_error_set(err, QS_EINVAL,
                            "batch: worker %s: numerics path or backend note is not valid UTF-8 "
                            "(byte %zu)",
                            worker ? worker : "?", bad_at);
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
    qc_sqlarray_text(&b->workers.col[6], numerics_path && *numerics_path ? numerics_path : NULL);
    qc_sqlarray_text(&b->workers.col[7], backend_note && *backend_note ? backend_note : NULL);
    return commit_or_undo(&b->workers, &m, "a worker", err);
}

qs_status qc_store_batch_experiment_pin(qc_store_batch *b, int64_t experiment, const char *path,
                                        qs_error *err) {
    size_t bad = 0;
    if (experiment <= 0 || !path || !*path || !qc_utf8_valid(path, &bad))
        return qs_error_set(err, QS_EINVAL,
                            "batch: experiment %lld: pin needs an id and a non-empty UTF-8 path",
                            (long long)experiment);
    group_mark m = mark(&b->pins);
    qc_sqlarray_int(&b->pins.col[0], experiment);
    qc_sqlarray_text(&b->pins.col[1], path);
    return commit_or_undo(&b->pins, &m, "an experiment's numerics pin", err);
}

qs_status qc_store_batch_experiment_unpin(qc_store_batch *b, int64_t experiment, qs_error *err) {
    if (experiment <= 0)
        return qs_error_set(err, QS_EINVAL, "batch: unpin of experiment %lld: needs an id",
                            (long long)experiment);
    group_mark m = mark(&b->pins);
    qc_sqlarray_int(&b->pins.col[0], experiment);
    qc_sqlarray_text(&b->pins.col[1], NULL);
    qs_status st = commit_or_undo(&b->pins, &m, "an experiment's unpin", err);
    if (!st) b->n_unpins++;
    return st;
}

qs_status qc_store_batch_unpin_answer(qc_store_batch *b, int64_t request, const char *outcome,
                                      const char *message, qs_error *err) {
    size_t bad = 0;
    if (request <= 0 || !outcome ||
        (strcmp(outcome, "unpinned") && strcmp(outcome, "refused") &&
         strcmp(outcome, "not_pinned") && strcmp(outcome, "pinned") &&
         strcmp(outcome, "unchanged")) ||
        !message || !qc_utf8_valid(message, &bad))
        return qs_error_set(err, QS_EINVAL,
                            "batch: pin request %lld: needs an id, an outcome of unpinned, "
                            "not_pinned, pinned, unchanged or refused, and a UTF-8 message",
                            (long long)request);
    group_mark m = mark(&b->answers);
    qc_sqlarray_int(&b->answers.col[0], request);
    qc_sqlarray_text(&b->answers.col[1], outcome);
    qc_sqlarray_text(&b->answers.col[2], message);
    return commit_or_undo(&b->answers, &m, "an unpin request's answer", err);
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

size_t qc_store_batch_result_sets(const qc_store_batch *b) {
    return b->n_sets;
}

size_t qc_store_batch_result_bytes(const qc_store_batch *b) {
    return b->results.len;
}
