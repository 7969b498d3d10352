/* The protocol handlers (proto/qsweep.proto, server.h): one function per message kind a
 * worker sends (HELLO, READY, HEARTBEAT, RESULT in chunks or whole, FAILED, BYE), and
 * qc_srv_on_message, which decodes a body and hands it to its handler. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "log.h"
#include "handlers.h"
#include "dispatch.h"
#include "grow.h"
#include "lease.h"
#include "outbox.h"
#include "transitions.h"
#include "utf8.h"

/* RFC 3629 UTF-8 validity (PostgreSQL rejects anything else in text columns): the one
 * checker, common/utf8.h. */
static bool utf8_valid(const char *s) {
    return qs_utf8_valid(s, NULL);
}

/* Copies s into out, writing bytes of invalid UTF-8 as \xNN so a worker's error text is
 * stored visibly rather than rejected. */
static void utf8_escape(const char *s, char *out, size_t cap) {
    const unsigned char *p = (const unsigned char *)s;
    size_t o = 0, n = strlen(s);
    for (size_t i = 0; i < n && o + 5 < cap;) {
        size_t len = qs_utf8_decode(p + i, n - i, NULL); /* a whole valid sequence, or 0 */
        if (len && o + len < cap - 1) {
            memcpy(out + o, p + i, len);
            o += len;
            i += len;
        } else {
            o += (size_t)snprintf(out + o, cap - o, "\\x%02x", p[i]);
            i++;
        }
    }
    out[o] = '\0';
}

/* Whether tok is job j's current attempt token (identity.c). */
static bool token_ok(const job *j, const ProtobufCBinaryData *tok) {
    return qc_srv_token_ok(j, tok->data, tok->len);
}

/* A HELLO of worker id h->worker_id from a connection (rid) other than old's, the worker the
 * coordinator knows by that id: a reconnect (the worker opens a new socket after a silence),
 * a restart, or a stranger claiming the id. old's running attempt goes with the id only to a
 * HELLO that names it with its token (the caller re-attaches it); with CURVE the key already
 * matched (the id belongs to it), so the worker restarted without it and it is lost at once;
 * without CURVE nothing proves who this is, and the attempt keeps its lease, which its real
 * worker renews (docs/security.md). old is dropped either way. */
static void hello_moves(server *s, worker *old, const char *key, const Qsweep__Hello *h,
                        const char *peer) {
    job *oj = old->job;
    bool proven = oj && h->running_job_id == oj->id && h->running_attempt == oj->attempt &&
                  token_ok(oj, &h->running_token);
    if (oj && !proven && oj->lease_deadline != NEVER) {
        if (key)
            qc_srv_end_attempt(s, oj, QC_ATTEMPT_LOST, "restart",
                               "worker re-registered without it (restarted)", true);
        else
            qc_log("worker %s: a HELLO from peer %s does not name job %lld attempt %u with its "
                   "token: the attempt keeps its lease",
                   old->name, peer, (long long)oj->id, oj->attempt);
    }
    char from[600];
    qc_srv_peer_name(old->rid, old->rid_len, from, sizeof from);
    qc_log("worker %s moved from connection %s to %s", old->name, from, peer);
    qc_srv_drop_worker(&s->workers, old);
}

/* A supervisor says how the process of worker id prev ended (Hello.previous_exit): every
 * attempt still running under that id keeps the words for its error when its lease expires
 * (the lease still decides: nothing here is proven, docs/security.md). An attempt keeps the
 * first words it got: a later restart's words are about a later process (a worker crashing
 * on job after job leaves an attempt in its lease at each restart), and a restarted process
 * stops sending them once it is assigned a job (worker/loop/outbox.c). */
static void note_previous_exit(server *s, const char *prev, const char *how, const job *named) {
    job *const *of;
    size_t n = qc_srv_running_of(&s->running, prev, &of);
    for (size_t i = 0; i < n; i++) {
        job *j = of[i];
        /* the attempt the HELLO names runs in the process that speaks: not the dead one's */
        if (j->state != J_RUNNING || j == named || j->exit_note) continue;
        if (!(j->exit_note = strndup(how, 400))) abort();
        j->exit_cause = qc_srv_exit_cause(j->exit_note);
        qc_log("job %lld attempt %u: the process of worker %s ended: %s", (long long)j->id,
               j->attempt, prev, j->exit_note);
    }
}

static void on_hello(server *s, const char *rid, size_t rid_len, const char *key,
                     const Qsweep__Hello *h, int64_t now) {
    char peer[600];
    qc_srv_peer_name(rid, rid_len, peer, sizeof peer);
    if (!h->worker_id[0] || strlen(h->worker_id) > NAME_MAX_ || !utf8_valid(h->worker_id) ||
        !utf8_valid(h->host)) {
        qc_log("dropped: peer %s: HELLO with an empty, too long or non-UTF-8 worker_id or host",
               peer);
        return;
    }
    if (key) { /* CURVE: the id belongs to the key that first registered it */
        const char *owner = qc_srv_owner(&s->owners, h->worker_id);
        if (owner && strcmp(owner, key) != 0) {
            qc_log("refused: peer %s: HELLO as worker %s from CURVE key %s, but that worker id "
                   "belongs to key %s",
                   peer, h->worker_id, key, owner);
            return;
        }
        if (!owner) qc_srv_own(&s->owners, h->worker_id, key);
    }
    worker *w = qc_srv_find_worker(&s->workers, rid, rid_len);
    if (w && strcmp(w->name, h->worker_id) != 0) { /* the connection takes another id */
        qc_srv_drop_worker(&s->workers, w);        /* its job, if any, keeps its lease */
        w = NULL;
    }
    worker *old = qc_srv_find_worker_named(&s->workers, h->worker_id, w);
    if (old) hello_moves(s, old, key, h, peer);
    if (!w) w = qc_srv_worker_add(&s->workers, rid, rid_len);
    snprintf(w->name, sizeof w->name, "%s", h->worker_id);
    snprintf(w->key, sizeof w->key, "%s", key ? key : "");
    w->last_seen = now;
    w->next_alive = now + qc_srv_alive_ms(s); /* the HELLO's upsert sets last_seen */
    w->ready = false;
    w->n_gpus = h->n_gpus < QC_SCHED_GPUS_MAX ? (int)h->n_gpus : QC_SCHED_GPUS_MAX;
    json_t *gpus = json_array();
    for (size_t i = 0; i < h->n_gpus; i++) {
        int64_t mb = (int64_t)(h->gpus[i]->memory_bytes >> 20);
        if (i < QC_SCHED_GPUS_MAX)
            w->gpus[i] = (qc_sched_gpu){.mem_mb = mb, .native_fp4 = h->gpus[i]->native_fp4};
        char cc[24];
        snprintf(cc, sizeof cc, "%u.%u", h->gpus[i]->cc_major, h->gpus[i]->cc_minor);
        json_array_append_new(gpus, json_pack("{s:s, s:I, s:s, s:b}", "name",
                                              utf8_valid(h->gpus[i]->name) ? h->gpus[i]->name : "?",
                                              "memory_mb", (json_int_t)mb, "cc", cc, "native_fp4",
                                              h->gpus[i]->native_fp4));
    }
    w->n_models = 0;
    for (size_t i = 0; i < h->n_models_loaded && w->n_models < MODELS_MAX; i++)
        if (strlen(h->models_loaded[i]) <= KEY_MAX)
            snprintf(w->models[w->n_models++], KEY_MAX + 1, "%s", h->models_loaded[i]);
    w->n_kinds = 0; /* a kind name too long for any job kind is left out */
    for (size_t i = 0; i < h->n_kinds && w->n_kinds < KINDS_MAX; i++)
        if (h->kinds[i][0] && strlen(h->kinds[i]) <= KIND_MAX)
            snprintf(w->kinds[w->n_kinds++], KIND_MAX + 1, "%s", h->kinds[i]);
    bool path_ok = strlen(h->numerics_path) <= NUMERICS_PATH_MAX && utf8_valid(h->numerics_path);
    snprintf(w->numerics_path, sizeof w->numerics_path, "%s", path_ok ? h->numerics_path : "");
    const char *note = utf8_valid(h->backend_note) ? h->backend_note : "";
    char *gj = json_dumps(gpus, JSON_COMPACT);
    json_decref(gpus);
    qc_srv_must(s, qc_store_batch_worker_seen_path(s->batch, w->name, h->host, (int32_t)h->pid, gj,
                                                   (int32_t)h->cpu_threads, key, w->numerics_path,
                                                   note, &s->batch_err));
    free(gj);

    job *named = h->running_job_id ? qc_srv_find_job(&s->jobs, h->running_job_id) : NULL;
    if (h->previous_exit[0] && utf8_valid(h->previous_exit) && utf8_valid(h->previous_worker_id))
        note_previous_exit(s, h->previous_worker_id[0] ? h->previous_worker_id : w->name,
                           h->previous_exit, named);
    /* A job this connection ran that its HELLO does not name is lost (the worker restarted:
       a connection is never taken over by another, server.c); one whose ASSIGN is still
       waiting for its commit will be sent. */
    if (w->job && w->job != named && w->job->lease_deadline != NEVER) {
        job *old = w->job;
        qc_srv_end_attempt(s, old, QC_ATTEMPT_LOST, "restart",
                           "worker re-registered without it (restarted)", true);
    }
    /* After a coordinator restart: an attempt the store gives this worker (by name) that it has
       not re-attached to and that its HELLO does not name can come to nothing: the HELLO names
       whatever the worker runs, delivers or receives (worker/loop/outbox.c). It ends now rather
       than at the end of the re-attach grace, during which a worker leaving when idle would
       leave it running. Its ASSIGN died with the previous coordinator (committed, never read):
       the job never ran, so the attempt is preempted and does not count against max_attempts.
       A HELLO with a supervisor's previous_exit says the worker's process ended instead (it
       may have died of the job): that attempt is lost and counts, as after a lease. */
    job *const *of;
    size_t n_of = qc_srv_running_of(&s->running, w->name, &of);
    job **orphans = malloc((n_of ? n_of : 1) * sizeof *orphans); /* ending one leaves the index */
    if (!orphans) abort();
    if (n_of) memcpy(orphans, of, n_of * sizeof *orphans); /* of may be NULL when n_of is 0 */
    for (size_t i = 0; i < n_of; i++) {
        job *j = orphans[i];
        /* only attempts rebuilt from the store: one this process assigned whose worker's id
           moved to this connection keeps its lease (hello_moves), which ends it as lost */
        if (j == named || j->state != J_RUNNING || j->worker || !j->rebuilt) continue;
        if (h->previous_exit[0])
            qc_srv_end_attempt(s, j, QC_ATTEMPT_LOST, "restart",
                               "worker re-registered after the coordinator restart without it "
                               "(its process ended)",
                               true);
        else
            qc_srv_end_attempt(s, j, QC_ATTEMPT_PREEMPTED, "assign_lost",
                               "worker re-registered after the coordinator restart without it "
                               "(its ASSIGN was lost with the previous coordinator)",
                               false);
    }
    free(orphans);
    if (h->running_job_id) {
        bool attempt_on = named && named->state == J_RUNNING &&
                          named->attempt == h->running_attempt &&
                          (!named->worker || named->worker == w);
        if (attempt_on && !token_ok(named, &h->running_token)) {
            /* the token is never logged, nor whether it was close */
            qc_log("refused re-attach: peer %s: HELLO as worker %s names job %lld attempt %u "
                   "without its attempt token",
                   peer, w->name, (long long)named->id, named->attempt);
        } else if (attempt_on) {
            named->worker = w;
            named->rebuilt = false;
            w->job = named;
            /* No lease renewal: a HELLO says the worker lives, not that the attempt moves;
               the heartbeats naming it that follow do (a worker re-registering again and
               again while its result never gets through must not hold the job for ever). */
            qc_log("worker %s re-attached to job %lld attempt %u%s", w->name, (long long)named->id,
                   named->attempt,
                   h->receiving ? " (re-sending its ASSIGN, which arrived only in part)" : "");
            if (h->receiving && named->lease_deadline != NEVER)
                qc_srv_send_assign(s, w, named, false);
            /* a cancel requested while the job had no worker (after a restart) */
            if (named->cancel_requested)
                qc_srv_send_cancel(s, rid, rid_len, named->id, named->attempt,
                                   "cancelled on request");
        } else {
            /* not the current attempt: stop it (its result would be ignored anyway) */
            qc_srv_send_cancel(s, rid, rid_len, h->running_job_id, h->running_attempt,
                               "attempt is no longer current");
        }
    }
    if (!s->quiet)
        qc_log("worker %s joined (%zu GPUs, %u threads)", w->name, h->n_gpus, h->cpu_threads);
}

static void on_heartbeat(server *s, worker *w, const Qsweep__Heartbeat *hb, int64_t now) {
    Qsweep__Heartbeat r = QSWEEP__HEARTBEAT__INIT;
    r.job_id = hb->job_id;
    r.attempt = hb->attempt;
    Qsweep__Envelope env = QSWEEP__ENVELOPE__INIT;
    env.body_case = QSWEEP__ENVELOPE__BODY_HEARTBEAT;
    env.heartbeat = &r;
    qc_srv_send_now(s, w->rid, w->rid_len, &env);
    if (!hb->job_id) return;
    job *j = w->job;
    if (j && j->id == hb->job_id && j->attempt == hb->attempt && j->state == J_RUNNING &&
        token_ok(j, &hb->token)) {
        if (j->lease_deadline != NEVER) qc_srv_renew_lease(s, j, now);
        return;
    }
    job *other = qc_srv_find_job(&s->jobs, hb->job_id);
    bool pending_assign = other && other == w->job && other->lease_deadline == NEVER;
    /* its end is here (its ACK waits for the commit): the worker heartbeats it meanwhile */
    bool ended =
        other && other->attempt == hb->attempt &&
        (other->state == J_SUCCEEDED || other->state == J_FAILED || other->state == J_CANCELLED);
    if (!pending_assign && !ended)
        qc_srv_send_cancel(s, w->rid, w->rid_len, hb->job_id, hb->attempt,
                           "attempt is no longer current (lease lost)");
}

/* The job when (job, attempt) is its running attempt on worker w and tok its token, else NULL
 * with *why saying which it is not. */
static job *current(server *s, worker *w, int64_t job_id, uint32_t attempt,
                    const ProtobufCBinaryData *tok, const char **why) {
    job *j = qc_srv_find_job(&s->jobs, job_id);
    *why = "not the job's current attempt";
    if (!j || j->state != J_RUNNING || j->attempt != attempt || j->worker != w ||
        j->lease_deadline == NEVER)
        return NULL;
    *why = "without the attempt's token";
    return token_ok(j, tok) ? j : NULL;
}

/* Queues the n metrics of a RESULT of job j's current attempt for the store, as two sets:
 * curve points (step >= 0) and, in a final RESULT, the final values (stored at step -1,
 * store.h). */
static void store_result(server *s, job *j, const chunk_metric *m, size_t n, bool final_result) {
    qc_metric *rows = malloc((n ? n : 1) * sizeof *rows);
    if (!rows) abort();
    for (int final = 0; final < 2; final++) {
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            if ((final_result && m[i].final) != (final == 1)) continue;
            rows[k++] =
                (qc_metric){.name = m[i].name, .value = m[i].value, .step = final ? -1 : m[i].step};
        }
        if (k)
            qc_srv_must(s, qc_store_batch_results(s->batch, j->id, (int32_t)j->attempt, final == 1,
                                                  rows, k, &s->batch_err));
    }
    free(rows);
}

/* One chunk of a split final RESULT (proto: Result): kept in memory in order; ACKed at once
 * with the chunk wanted next (a chunk out of order, after a coordinator restart say, is
 * answered with the one still missing); the last one stores the whole result, ends the
 * attempt and is ACKed final after the commit, like an unsplit final RESULT. */
static void on_result_chunk(server *s, worker *w, job *j, const Qsweep__Result *r) {
    if (r->chunks > CHUNKS_MAX || r->chunk >= r->chunks) {
        qc_log("dropped: worker %s: final RESULT of job %lld as chunk %u of %u (at most %u)",
               w->name, (long long)r->job_id, r->chunk, r->chunks, CHUNKS_MAX);
        return;
    }
    if (r->chunk == 0) {
        qc_srv_chunks_drop(j);
        j->chunks = r->chunks;
    }
    if (r->chunks == j->chunks && r->chunk == j->chunk_next) {
        j->chunk_rows = qc_srv_grow(j->chunk_rows, &j->cap_chunk_rows,
                                    j->n_chunk_rows + r->n_metrics, sizeof *j->chunk_rows);
        for (size_t i = 0; i < r->n_metrics; i++) {
            const Qsweep__Metric *m = r->metrics[i];
            char *name = strdup(m->name);
            if (!name) abort();
            j->chunk_rows[j->n_chunk_rows++] = (chunk_metric){name, m->value, m->step, m->final};
        }
        j->chunk_next++;
    }
    if (j->chunks && j->chunk_next == j->chunks) {
        store_result(s, j, j->chunk_rows, j->n_chunk_rows, true);
        qc_srv_keep_model_digest(j, j->chunk_rows, j->n_chunk_rows);
        if (!s->quiet)
            qc_log("job %lld attempt %u: final result of %zu metrics complete in %u chunks",
                   (long long)j->id, j->attempt, j->n_chunk_rows, j->chunks);
        qc_srv_end_attempt(s, j, QC_ATTEMPT_SUCCEEDED, NULL, NULL, false); /* frees the chunks */
        qc_srv_send_ack(s, w->rid, w->rid_len, r->job_id, r->attempt, 0, true);
        qc_srv_worker_idle(s, w);
        return;
    }
    Qsweep__Ack a = QSWEEP__ACK__INIT;
    a.job_id = r->job_id;
    a.attempt = r->attempt;
    a.chunk = true;
    a.next_chunk = j->chunks ? j->chunk_next : 0;
    Qsweep__Envelope env = QSWEEP__ENVELOPE__INIT;
    env.body_case = QSWEEP__ENVELOPE__BODY_ACK;
    env.ack = &a;
    qc_srv_send_now(s, w->rid, w->rid_len, &env);
}

static void on_result(server *s, worker *w, const Qsweep__Result *r) {
    const char *why;
    job *j = current(s, w, r->job_id, r->attempt, &r->token, &why);
    if (!j) {
        qc_log("ignored %s RESULT of job %lld attempt %u from worker %s: %s",
               r->final ? "final" : "partial", (long long)r->job_id, r->attempt, w->name, why);
        qc_srv_send_ack(s, w->rid, w->rid_len, r->job_id, r->attempt, r->seq, r->final);
        return;
    }
    for (size_t i = 0; i < r->n_metrics; i++) {
        const Qsweep__Metric *m = r->metrics[i];
        bool final = r->final && m->final;
        if (!m->name[0] || strlen(m->name) > KEY_MAX || !utf8_valid(m->name) ||
            (!final && m->step < 0)) {
            qc_log("dropped: worker %s: RESULT of job %lld has a metric with an empty, long or "
                   "non-UTF-8 name or a "
                   "negative step",
                   w->name, (long long)r->job_id);
            return; /* not ACKed: a well-behaved worker never sends this */
        }
    }
    if (r->final && r->chunks > 1) {
        on_result_chunk(s, w, j, r);
        return;
    }
    chunk_metric *rows = malloc((r->n_metrics ? r->n_metrics : 1) * sizeof *rows);
    if (!rows) abort();
    for (size_t i = 0; i < r->n_metrics; i++)
        rows[i] = (chunk_metric){r->metrics[i]->name, r->metrics[i]->value, r->metrics[i]->step,
                                 r->metrics[i]->final};
    store_result(s, j, rows, r->n_metrics, r->final);
    if (r->final) qc_srv_keep_model_digest(j, rows, r->n_metrics);
    free(rows);
    if (r->final) qc_srv_end_attempt(s, j, QC_ATTEMPT_SUCCEEDED, NULL, NULL, false);
    qc_srv_send_ack(s, w->rid, w->rid_len, r->job_id, r->attempt, r->seq, r->final);
    if (r->final) qc_srv_worker_idle(s, w);
}

static void on_failed(server *s, worker *w, const Qsweep__Failed *f) {
    const char *why;
    job *j = current(s, w, f->job_id, f->attempt, &f->token, &why);
    if (!j) {
        qc_log("ignored FAILED of job %lld attempt %u from worker %s: %s", (long long)f->job_id,
               f->attempt, w->name, why);
        qc_srv_send_ack(s, w->rid, w->rid_len, f->job_id, f->attempt, 0, true);
        return;
    }
    char msg[1024];
    utf8_escape(f->message, msg, sizeof msg);
    switch (f->class_) {
    case QSWEEP__FAILURE_CLASS__JOB_ERROR: /* permanent: another attempt would fail the same */
        j->fail_now = true;
        qc_srv_end_attempt(s, j, QC_ATTEMPT_FAILED, "job_error", msg, true);
        break;
    case QSWEEP__FAILURE_CLASS__PREEMPTED:
        qc_srv_end_attempt(s, j, QC_ATTEMPT_PREEMPTED, "preempted", msg, false);
        break;
    case QSWEEP__FAILURE_CLASS__CANCELLED:
        qc_srv_end_attempt(s, j, QC_ATTEMPT_CANCELLED, "cancelled", msg, false);
        break;
    default:
        qc_srv_end_attempt(s, j, QC_ATTEMPT_FAILED, "worker_error", msg, true);
        break;
    }
    qc_srv_send_ack(s, w->rid, w->rid_len, f->job_id, f->attempt, 0, true);
    if (f->class_ != QSWEEP__FAILURE_CLASS__PREEMPTED) qc_srv_worker_idle(s, w);
}

/* READY: an idle worker asks for a job, naming the models it holds. */
static void on_ready(server *s, worker *w, const Qsweep__Ready *r) {
    if (!w->job) {
        w->ready = true;
        s->dirty = true;
    }
    w->n_models = 0;
    for (size_t i = 0; i < r->n_models_loaded && w->n_models < MODELS_MAX; i++)
        if (strlen(r->models_loaded[i]) <= KEY_MAX)
            snprintf(w->models[w->n_models++], KEY_MAX + 1, "%s", r->models_loaded[i]);
}

/* BYE: the worker leaves; an attempt it did not report is preempted (does not count). */
static void on_bye(server *s, worker *w, const Qsweep__Bye *b) {
    qc_log("worker %s said BYE: %s", w->name, b->reason);
    if (w->job && w->job->lease_deadline != NEVER)
        qc_srv_end_attempt(s, w->job, QC_ATTEMPT_PREEMPTED, "bye",
                           "worker left (BYE) without reporting the attempt", false);
    qc_srv_forget_worker(s, w);
}

void qc_srv_on_message(server *s, const char *rid, size_t rid_len, const char *user_id,
                       const uint8_t *body, size_t len, int64_t now) {
    char peer[600];
    Qsweep__Envelope *env = NULL;
    qs_error err;
    qc_srv_peer_name(rid, rid_len, peer, sizeof peer);
    if (qs_proto_decode(body, len, QS_PROTO_MAX_BYTES, peer, &env, &err) != QS_OK) {
        qc_log("dropped: %s", err.msg);
        return;
    }
    if (env->body_case == QSWEEP__ENVELOPE__BODY_HELLO) {
        if (s->curve && (!user_id || strlen(user_id) != CURVE_Z85))
            qc_log("dropped: peer %s: HELLO without a CURVE key (User-Id) on a CURVE socket", peer);
        else
            on_hello(s, rid, rid_len, s->curve ? user_id : NULL, env->hello, now);
        qs_proto_free(env);
        return;
    }
    worker *w = qc_srv_find_worker(&s->workers, rid, rid_len);
    if (!w) {
        if (env->body_case != QSWEEP__ENVELOPE__BODY_BYE)
            qc_srv_send_reregister(s, rid, rid_len,
                                   "unknown worker (coordinator restarted?): send HELLO");
        qs_proto_free(env);
        return;
    }
    if (w->key[0] && (!user_id || strcmp(user_id, w->key) != 0)) {
        qc_log("dropped: peer %s: %s from a CURVE key other than worker %s's", peer,
               qs_proto_kind_name(env->body_case), w->name);
        qs_proto_free(env);
        return;
    }
    w->last_seen = now;
    if (now >= w->next_alive) { /* workers.last_seen follows heartbeats (qc_srv_alive_ms) */
        qc_srv_must(s, qc_store_batch_worker_alive(s->batch, w->name, false, &s->batch_err));
        w->next_alive = now + qc_srv_alive_ms(s);
    }
    switch (env->body_case) {
    case QSWEEP__ENVELOPE__BODY_READY:
        on_ready(s, w, env->ready);
        break;
    case QSWEEP__ENVELOPE__BODY_HEARTBEAT:
        on_heartbeat(s, w, env->heartbeat, now);
        break;
    case QSWEEP__ENVELOPE__BODY_RESULT:
        on_result(s, w, env->result);
        break;
    case QSWEEP__ENVELOPE__BODY_FAILED:
        on_failed(s, w, env->failed);
        break;
    case QSWEEP__ENVELOPE__BODY_BYE:
        on_bye(s, w, env->bye);
        break;
    default:
        qc_log("dropped: peer %s: %s is not a worker's message", peer,
               qs_proto_kind_name(env->body_case));
    }
    qs_proto_free(env);
}
