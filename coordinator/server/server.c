/* The coordinator's loop (server.h): in-memory queue, leases, scheduler, ROUTER socket. */
#include "server.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>
#include <zmq.h>

#include "envelope.h"
#include "utf8.h"
#include "clock.h"
#include "log.h"
#include "scheduler.h"
#include "store.h"
#include "writer.h"
#include "zap.h"

enum { RID_MAX = 255, NAME_MAX_ = 200, MODELS_MAX = 8, KEY_MAX = 127, DRAIN_MAX = 8192 };
#define STALL_LOG_MS 10000
#define NEVER INT64_MAX

/* The store's job states (coordinator/store/store.h). */
typedef qc_job_state jstate;
#define J_PENDING QC_JOB_PENDING
#define J_RUNNING QC_JOB_RUNNING
#define J_SUCCEEDED QC_JOB_SUCCEEDED
#define J_FAILED QC_JOB_FAILED
#define J_CANCELLED QC_JOB_CANCELLED

typedef struct worker worker;

/* One metric of a split final RESULT, kept until its last chunk (proto: Result.chunks). */
typedef struct chunk_metric {
    char *name;
    double value;
    int64_t step;
    bool final;
} chunk_metric;

/* The most chunks one final RESULT may have: QS_PROTO_MAX_RESULT_BYTES in chunks at least
 * half full (codec.h). */
#define CHUNKS_MAX ((uint32_t)(QS_PROTO_MAX_RESULT_BYTES / (QS_PROTO_CHUNK_BYTES / 2)))

typedef struct job {
    qc_sched_job q; /* first: what the scheduler sees (q.model_key points to model_key) */
    int64_t id;     /* = q.id */
    char *kind, *spec, *model_key;
    int max_attempts, attempts_used;
    uint32_t attempt; /* current (running) or last attempt number */
    jstate state;     /* changed only through set_state (keeps q.pending in step) */
    int64_t *deps;      /* ids of jobs this one waits for (unresolved at load) */
    int n_deps;
    worker *worker;         /* the worker running it, NULL when orphaned after a restart */
    char *worker_name;      /* the attempt's worker (attempts.worker) */
    int64_t lease_deadline; /* monotonic ms; NEVER until the ASSIGN is sent */
    int64_t db_lease_until; /* monotonic ms up to which attempts.lease_expires_at is written */
    bool cancel_requested;
    /* a split final RESULT arriving for the current attempt: its chunks 0..chunk_next-1 of
       chunks, as metrics (freed when the attempt ends) */
    chunk_metric *chunk_rows;
    size_t n_chunk_rows, cap_chunk_rows;
    uint32_t chunks, chunk_next;
} job;

struct worker {
    char rid[RID_MAX]; /* ZeroMQ routing id (the DEALER's ZMQ_ROUTING_ID) */
    size_t rid_len;
    char name[NAME_MAX_ + 1]; /* HELLO worker_id */
    int n_gpus;
    qc_sched_gpu gpus[QC_SCHED_GPUS_MAX]; /* HELLO's GPUs, the first n_gpus */
    char models[MODELS_MAX][KEY_MAX + 1];
    int n_models;
    bool ready;
    job *job;
    int64_t last_seen;
    int64_t next_alive; /* monotonic ms: when workers.last_seen is refreshed next */
};

/* Something to send once the current batch is durable. */
typedef struct action {
    char rid[RID_MAX];
    size_t rid_len;
    uint8_t *buf;
    size_t len;
    job *assign; /* an ASSIGN: start the lease when it goes out */
    uint32_t attempt;
} action;

typedef struct server {
    const qc_server_options *o;
    int lease_ms, grace_ms, backoff_ms, poll_ms, worker_timeout_ms;
    qc_store *store;   /* reads, polls and the advisory lock */
    qc_writer *writer; /* the second connection: commits batches in its own thread */
    qc_store_batch *batch;  /* the open batch, filled by the loop */
    qc_store_batch *flying; /* the batch handed to the writer (or failed and kept for a retry) */
    qc_store_batch *spare;  /* an empty batch to open next */
    int64_t flush_since;    /* monotonic ms: when the flying batch was handed to the writer */
    int64_t next_stall_log; /* monotonic ms: when to say again that it has not committed */
    size_t flying_items;    /* its size when handed over (the writer owns it meanwhile) */
    qs_error batch_err;
    bool db_down;
    int64_t next_reconnect;
    int retry_ms; /* the current reconnect delay (db_lost); 0 after a commit */
    const char *down_condition; /* the server condition behind the pause, NULL: lost */
    void *zctx, *sock;
    qc_zap_keys *allowed; /* the CURVE allow-list, until handed to the ZAP handler */
    qc_zap *zap;          /* the ZAP handler (zap.h); NULL without an allow-list */
    job **jobs; /* sorted by id */
    size_t n_jobs, cap_jobs;
    size_t active; /* jobs not terminal */
    int64_t last_job_id;
    qc_sched_job **pending; /* dispatch candidates (each the q of a job); entries may have left
                               PENDING (compacted lazily) */
    size_t n_pending, cap_pending;
    bool pending_sorted, dirty;
    int64_t next_wake; /* earliest backoff end among pending jobs */
    worker **workers;  /* sorted by routing id */
    size_t n_workers, cap_workers;
    action *actions; /* waiting for the open batch */
    size_t n_actions, cap_actions;
    action *flight; /* waiting for the flying batch */
    size_t n_flight, cap_flight;
    bool polled_since_commit;
    /* totals for the exit line: flushes, the items they wrote, and their wall time */
    uint64_t n_flushes, n_flushed_items;
    double flush_s;
} server;

static volatile sig_atomic_t stop_requested;
static volatile sig_atomic_t reload_requested; /* SIGHUP: re-read the CURVE allow-list */

void qc_server_request_reload(void) {
    reload_requested = 1;
}

static void on_reload_signal(int sig) {
    (void)sig;
    reload_requested = 1;
}

void qc_server_request_stop(void) {
    stop_requested = 1;
}

static void on_stop_signal(int sig) {
    (void)sig;
    stop_requested = 1;
}


static void *grow(void *p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return p;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(p, c * elem);
    if (!q) {
        qc_log("out of memory growing a table to %zu entries", need);
        abort(); /* the in-memory queue cannot be kept consistent without memory */
    }
    *cap = c;
    return q;
}

/* Queueing a write fails only without memory or on a bad argument, which the message
 * checks exclude: the in-memory state would no longer match what becomes durable. */
static void must(server *s, qs_status st) {
    if (st != QS_OK) {
        qc_log("cannot queue a database write: %s", s->batch_err.msg);
        abort();
    }
}

/* A printable peer name for logs: the routing id when printable, else its hex. */
static void peer_name(const char *rid, size_t len, char *out, size_t cap) {
    bool printable = len > 0;
    for (size_t i = 0; i < len && printable; i++)
        printable = rid[i] >= 0x20 && rid[i] < 0x7f;
    if (printable) {
        snprintf(out, cap, "%.*s", (int)len, rid);
        return;
    }
    size_t o = 0;
    o += (size_t)snprintf(out, cap, "0x");
    for (size_t i = 0; i < len && o + 3 < cap; i++)
        o += (size_t)snprintf(out + o, cap - o, "%02x", (unsigned char)rid[i]);
}

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

/* ---- lookups ---- */

static job *find_job(server *s, int64_t id) {
    size_t lo = 0, hi = s->n_jobs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (s->jobs[mid]->id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < s->n_jobs && s->jobs[lo]->id == id ? s->jobs[lo] : NULL;
}

static int rid_cmp(const char *a, size_t alen, const char *b, size_t blen) {
    int c = memcmp(a, b, alen < blen ? alen : blen);
    return c ? c : (alen > blen) - (alen < blen);
}

static size_t worker_pos(server *s, const char *rid, size_t len) {
    size_t lo = 0, hi = s->n_workers;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (rid_cmp(s->workers[mid]->rid, s->workers[mid]->rid_len, rid, len) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static worker *find_worker(server *s, const char *rid, size_t len) {
    size_t i = worker_pos(s, rid, len);
    return i < s->n_workers && rid_cmp(s->workers[i]->rid, s->workers[i]->rid_len, rid, len) == 0
               ? s->workers[i]
               : NULL;
}

static void forget_worker(server *s, worker *w) {
    must(s, qc_store_batch_worker_alive(s->batch, w->name, true, &s->batch_err));
    size_t i = worker_pos(s, w->rid, w->rid_len);
    memmove(&s->workers[i], &s->workers[i + 1], (s->n_workers - i - 1) * sizeof *s->workers);
    s->n_workers--;
    if (w->job && w->job->worker == w) w->job->worker = NULL; /* its lease decides */
    free(w);
}

/* ---- sending ---- */

static bool encode(Qsweep__Envelope *env, uint8_t **buf, size_t *len) {
    qs_error err;
    if (qs_proto_encode(env, buf, len, &err) != QS_OK) {
        qc_log("encode %s: %s", qs_proto_kind_name(env->body_case), err.msg);
        return false;
    }
    return true;
}

/* Sends [rid][body]; false when the peer is gone (ROUTER_MANDATORY) or its queue is full. */
static bool send_raw(server *s, const char *rid, size_t rid_len, const uint8_t *buf, size_t len) {
    if (zmq_send(s->sock, rid, rid_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
        zmq_send(s->sock, buf, len, ZMQ_DONTWAIT) < 0) {
        char peer[600];
        peer_name(rid, rid_len, peer, sizeof peer);
        qc_log("send to %s: %s (dropped)", peer, zmq_strerror(errno));
        return false;
    }
    return true;
}

static void send_now(server *s, const char *rid, size_t rid_len, Qsweep__Envelope *env) {
    uint8_t *buf;
    size_t len;
    if (!encode(env, &buf, &len)) return;
    send_raw(s, rid, rid_len, buf, len);
    free(buf);
}

static void send_after_commit(server *s, const char *rid, size_t rid_len, Qsweep__Envelope *env,
                              job *assign) {
    uint8_t *buf;
    size_t len;
    if (!encode(env, &buf, &len)) return;
    s->actions = grow(s->actions, &s->cap_actions, s->n_actions + 1, sizeof *s->actions);
    action *a = &s->actions[s->n_actions++];
    memcpy(a->rid, rid, rid_len);
    a->rid_len = rid_len;
    a->buf = buf;
    a->len = len;
    a->assign = assign;
    a->attempt = assign ? assign->attempt : 0;
}

static void send_ack(server *s, const char *rid, size_t rid_len, int64_t job_id, uint32_t attempt,
                     uint64_t seq, bool final) {
    Qsweep__Ack a = QSWEEP__ACK__INIT;
    a.job_id = job_id;
    a.attempt = attempt;
    a.seq = seq;
    a.final = final;
    Qsweep__Envelope env = QSWEEP__ENVELOPE__INIT;
    env.body_case = QSWEEP__ENVELOPE__BODY_ACK;
    env.ack = &a;
    send_after_commit(s, rid, rid_len, &env, NULL);
}

static void send_cancel(server *s, const char *rid, size_t rid_len, int64_t job_id,
                        uint32_t attempt, const char *reason) {
    Qsweep__Cancel c = QSWEEP__CANCEL__INIT;
    c.job_id = job_id;
    c.attempt = attempt;
    c.reason = (char *)reason;
    Qsweep__Envelope env = QSWEEP__ENVELOPE__INIT;
    env.body_case = QSWEEP__ENVELOPE__BODY_CANCEL;
    env.cancel = &c;
    send_now(s, rid, rid_len, &env);
}

static void send_reregister(server *s, const char *rid, size_t rid_len, const char *reason) {
    Qsweep__Reregister r = QSWEEP__REREGISTER__INIT;
    r.reason = (char *)reason;
    Qsweep__Envelope env = QSWEEP__ENVELOPE__INIT;
    env.body_case = QSWEEP__ENVELOPE__BODY_REREGISTER;
    env.reregister = &r;
    send_now(s, rid, rid_len, &env);
}

/* ---- job state ---- */

static void set_state(job *j, jstate st) {
    j->state = st;
    j->q.pending = st == J_PENDING;
}

static void push_pending(server *s, job *j) {
    s->pending = grow(s->pending, &s->cap_pending, s->n_pending + 1, sizeof *s->pending);
    s->pending[s->n_pending++] = &j->q;
    s->pending_sorted = false;
    s->dirty = true;
    if (j->q.not_before_ms < s->next_wake) s->next_wake = j->q.not_before_ms;
}

static void set_terminal(server *s, job *j, jstate st) {
    if (j->state != J_SUCCEEDED && j->state != J_FAILED && j->state != J_CANCELLED) s->active--;
    set_state(j, st);
}

static void fail_dependents(server *s, job *dep);

/* A pending job that can never run: failed (or cancelled) without an attempt. */
static void end_pending(server *s, job *j, jstate st, const char *why) {
    set_terminal(s, j, st);
    must(s, qc_store_batch_job_state(s->batch, j->id, st, j->attempts_used, 0, why, &s->batch_err));
    if (!s->o->quiet) qc_log("job %lld %s: %s", (long long)j->id, qc_job_state_name(st), why);
    fail_dependents(s, j);
}

static void fail_dependents(server *s, job *dep) {
    char why[96];
    snprintf(why, sizeof why, "dependency %lld %s", (long long)dep->id,
             qc_job_state_name(dep->state));
    for (size_t i = 0; i < s->n_pending; i++) {
        job *j = (job *)s->pending[i];
        if (j->state != J_PENDING) continue;
        for (int d = 0; d < j->n_deps; d++)
            if (j->deps[d] == dep->id) {
                end_pending(s, j, J_FAILED, why);
                break;
            }
    }
}

static void chunks_drop(job *j) {
    for (size_t i = 0; i < j->n_chunk_rows; i++)
        free(j->chunk_rows[i].name);
    free(j->chunk_rows);
    j->chunk_rows = NULL;
    j->n_chunk_rows = j->cap_chunk_rows = 0;
    j->chunks = j->chunk_next = 0;
}

/* Ends the job's current attempt with outcome (attempts.outcome); counts: whether it counts
 * against max_attempts. Decides the job's next state and queues the write. */
static void end_attempt(server *s, job *j, qc_attempt_outcome outcome, const char *error,
                        bool counts) {
    if (j->worker && j->worker->job == j) j->worker->job = NULL;
    j->worker = NULL;
    free(j->worker_name);
    j->worker_name = NULL;
    j->lease_deadline = NEVER;
    chunks_drop(j);
    int64_t backoff = 0;
    if (outcome == QC_ATTEMPT_SUCCEEDED) {
        set_terminal(s, j, J_SUCCEEDED);
        s->dirty = true; /* dependents may be ready */
    } else if (j->cancel_requested || outcome == QC_ATTEMPT_CANCELLED) {
        set_terminal(s, j, J_CANCELLED);
    } else {
        if (counts) j->attempts_used++;
        if (j->attempts_used >= j->max_attempts) {
            set_terminal(s, j, J_FAILED);
        } else {
            set_state(j, J_PENDING);
            if (counts) {
                int shift = j->attempts_used - 1 < 16 ? j->attempts_used - 1 : 16;
                backoff = (int64_t)s->backoff_ms << shift;
                if (backoff > 60000) backoff = 60000;
            }
            j->q.not_before_ms = qs_clock_ms() + backoff;
            push_pending(s, j);
        }
    }
    must(s, qc_store_batch_attempt_ended(s->batch, j->id, (int32_t)j->attempt, outcome, error,
                                         &s->batch_err));
    must(s, qc_store_batch_job_state(s->batch, j->id, j->state, j->attempts_used, backoff / 1000.0,
                                     error, &s->batch_err));
    if (!s->o->quiet || j->state == J_FAILED)
        qc_log("job %lld attempt %u %s -> %s%s%s", (long long)j->id, j->attempt,
             qc_attempt_outcome_name(outcome), qc_job_state_name(j->state), error ? ": " : "",
             error ? error : "");
    if (j->state == J_FAILED || j->state == J_CANCELLED) fail_dependents(s, j);
}

/* Renews the lease to now + lease_ms in memory, and in attempts.lease_expires_at when the
 * stored one has less than half a lease left: one write per job every lease/2 at most, so
 * observers see live leases without a write per heartbeat. */
static void renew_lease(server *s, job *j, int64_t now) {
    j->lease_deadline = now + s->lease_ms;
    if (now + s->lease_ms / 2 < j->db_lease_until) return;
    j->db_lease_until = now + s->lease_ms;
    must(s, qc_store_batch_lease_renewed(s->batch, j->id, (int32_t)j->attempt, s->lease_ms / 1000.0,
                                         &s->batch_err));
}

/* ---- scheduling ---- */

static void compact_pending(server *s) {
    size_t o = 0;
    for (size_t i = 0; i < s->n_pending; i++) {
        qc_sched_job *q = s->pending[i];
        if (!q->pending) continue;
        /* a job requeued twice appears twice; keep one (neighbours after the sort) */
        if (o > 0 && s->pending[o - 1] == q) continue;
        s->pending[o++] = q;
    }
    s->n_pending = o;
}

/* qc_sched_deps_fn over the server's jobs. */
static bool deps_met(const qc_sched_job *q, void *ctx) {
    server *s = ctx;
    const job *j = (const job *)q;
    for (int d = 0; d < j->n_deps; d++) {
        const job *dep = find_job(s, j->deps[d]);
        if (dep && dep->state != J_SUCCEEDED) return false;
    }
    return true;
}

/* The job for worker w (scheduler.h), from index head of the sorted pending list. */
static job *pick(server *s, const worker *w, int64_t now, size_t head) {
    const char *models[MODELS_MAX];
    for (int i = 0; i < w->n_models; i++)
        models[i] = w->models[i];
    qc_sched_worker sw = {.n_gpus = w->n_gpus,
                          .gpus = w->gpus,
                          .models = models,
                          .n_models = w->n_models};
    ptrdiff_t k = qc_sched_pick(&sw, s->pending + head, s->n_pending - head, now, deps_met, s,
                                &s->next_wake);
    return k < 0 ? NULL : (job *)s->pending[head + (size_t)k];
}

/* Sends job j's ASSIGN to w: after the batch's commit (the attempt row must be durable
 * first; the lease starts when the first part goes out), or at once (a re-send to a worker
 * that got only part of it). A spec over QS_PROTO_CHUNK_BYTES goes in parts cut at UTF-8
 * character boundaries (proto: Assign.chunks), so no frame holds the link for long. */
static void send_assign(server *s, worker *w, job *j, bool after_commit) {
    const size_t room = QS_PROTO_CHUNK_BYTES - 1024, len = strlen(j->spec);
    uint32_t chunks = 0;
    for (size_t off = 0; len > room && off < len; chunks++) {
        size_t cut = len - off > room ? room : len - off;
        while (off + cut < len && cut > 1 && ((unsigned char)j->spec[off + cut] & 0xc0) == 0x80)
            cut--; /* never inside a character */
        off += cut;
    }
    char *part = chunks ? malloc(room + 1) : NULL;
    if (chunks && !part) abort();
    size_t off = 0;
    for (uint32_t k = 0; k < (chunks ? chunks : 1); k++) {
        Qsweep__Assign a = QSWEEP__ASSIGN__INIT;
        a.job_id = j->id;
        a.attempt = j->attempt;
        a.lease_ms = (uint32_t)s->lease_ms;
        a.kind = j->kind;
        a.spec_json = j->spec;
        if (chunks) {
            size_t cut = len - off > room ? room : len - off;
            while (off + cut < len && cut > 1 &&
                   ((unsigned char)j->spec[off + cut] & 0xc0) == 0x80)
                cut--;
            memcpy(part, j->spec + off, cut);
            part[cut] = '\0';
            off += cut;
            a.spec_json = part;
            a.chunk = k;
            a.chunks = chunks;
        }
        Qsweep__Envelope env = QSWEEP__ENVELOPE__INIT;
        env.body_case = QSWEEP__ENVELOPE__BODY_ASSIGN;
        env.assign = &a;
        if (after_commit)
            send_after_commit(s, w->rid, w->rid_len, &env, k == 0 ? j : NULL);
        else
            send_now(s, w->rid, w->rid_len, &env);
    }
    free(part);
}

static void assign(server *s, worker *w, job *j) {
    set_state(j, J_RUNNING);
    j->attempt++;
    j->worker = w;
    free(j->worker_name);
    j->worker_name = strdup(w->name);
    j->lease_deadline = NEVER;
    w->job = j;
    w->ready = false;
    must(s, qc_store_batch_attempt_started(s->batch, j->id, (int32_t)j->attempt, w->name,
                                           s->lease_ms / 1000.0, &s->batch_err));
    must(s, qc_store_batch_job_state(s->batch, j->id, J_RUNNING, j->attempts_used, 0, NULL,
                                     &s->batch_err));
    send_assign(s, w, j, true);
    if (!s->o->quiet)
        qc_log("job %lld attempt %u -> worker %s", (long long)j->id, j->attempt, w->name);
}

static void dispatch(server *s, int64_t now) {
    if (s->db_down) return;
    if (!s->dirty && now < s->next_wake) return;
    s->dirty = false;
    s->next_wake = NEVER;
    if (!s->pending_sorted) {
        compact_pending(s);
        if (s->n_pending) qsort(s->pending, s->n_pending, sizeof *s->pending, qc_sched_compare);
        compact_pending(s);
        s->pending_sorted = true;
    }
    size_t head = 0;
    for (size_t i = 0; i < s->n_workers; i++) {
        worker *w = s->workers[i];
        if (!w->ready || w->job) continue;
        while (head < s->n_pending && !s->pending[head]->pending)
            head++;
        if (head == s->n_pending) break;
        job *j = pick(s, w, now, head);
        if (j) assign(s, w, j);
    }
}

/* ---- leases ---- */

static void check_leases(server *s, int64_t now) {
    for (size_t i = 0; i < s->n_jobs; i++) {
        job *j = s->jobs[i];
        if (j->state != J_RUNNING || now <= j->lease_deadline) continue;
        char why[400];
        if (j->worker) {
            snprintf(why, sizeof why, "lease expired: no heartbeat from worker %s for %d ms",
                     j->worker->name, s->lease_ms);
            send_cancel(s, j->worker->rid, j->worker->rid_len, j->id, j->attempt, "lease expired");
        } else {
            snprintf(why, sizeof why,
                     "worker %s did not re-attach within %d ms of a coordinator restart",
                     j->worker_name ? j->worker_name : "?", s->grace_ms);
        }
        end_attempt(s, j, QC_ATTEMPT_LOST, why, true);
    }
    for (size_t i = 0; i < s->n_workers;) {
        worker *w = s->workers[i];
        if (!w->job && now - w->last_seen > s->worker_timeout_ms) {
            qc_log("worker %s silent for %lld ms: forgotten", w->name,
                 (long long)(now - w->last_seen));
            forget_worker(s, w);
        } else {
            i++;
        }
    }
}

/* The loop itself did not run for stalled_ms (SIGSTOP, a VM pause, swapping): the workers'
 * heartbeats of that time are still on their way in, so a lease checked now would expire
 * for the coordinator's silence, not the worker's. Every running attempt (and every known
 * worker) gets a full lease from now to report before any lease is checked (server.h). */
static void on_stall(server *s, int64_t stalled_ms, int64_t now) {
    size_t running = 0;
    for (size_t i = 0; i < s->n_jobs; i++) {
        job *j = s->jobs[i];
        if (j->state != J_RUNNING || j->lease_deadline == NEVER) continue;
        if (j->lease_deadline < now + s->lease_ms) j->lease_deadline = now + s->lease_ms;
        running++;
    }
    for (size_t i = 0; i < s->n_workers; i++)
        if (s->workers[i]->last_seen < now) s->workers[i]->last_seen = now;
    qc_log("the coordinator did not run for %lld ms (stopped, a paused VM, swapping?): giving "
           "%zu running attempts %d ms to report before any lease is checked",
           (long long)stalled_ms, running, s->lease_ms);
}

/* ---- messages ---- */

static void on_hello(server *s, const char *rid, size_t rid_len, const Qsweep__Hello *h,
                     int64_t now) {
    if (!h->worker_id[0] || strlen(h->worker_id) > NAME_MAX_ || !utf8_valid(h->worker_id) ||
        !utf8_valid(h->host)) {
        char peer[600];
        peer_name(rid, rid_len, peer, sizeof peer);
        qc_log("dropped: peer %s: HELLO with an empty, too long or non-UTF-8 worker_id or host",
             peer);
        return;
    }
    worker *w = find_worker(s, rid, rid_len);
    if (!w) {
        w = calloc(1, sizeof *w);
        if (!w) abort();
        memcpy(w->rid, rid, rid_len);
        w->rid_len = rid_len;
        size_t pos = worker_pos(s, rid, rid_len);
        s->workers = grow(s->workers, &s->cap_workers, s->n_workers + 1, sizeof *s->workers);
        memmove(&s->workers[pos + 1], &s->workers[pos], (s->n_workers - pos) * sizeof *s->workers);
        s->workers[pos] = w;
        s->n_workers++;
    }
    snprintf(w->name, sizeof w->name, "%s", h->worker_id);
    w->last_seen = now;
    w->next_alive = now + s->lease_ms / 2; /* the HELLO's upsert sets last_seen */
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
    char *gj = json_dumps(gpus, JSON_COMPACT);
    json_decref(gpus);
    must(s, qc_store_batch_worker_seen(s->batch, w->name, h->host, (int32_t)h->pid, gj,
                                       (int32_t)h->cpu_threads, &s->batch_err));
    free(gj);

    job *named = h->running_job_id ? find_job(s, h->running_job_id) : NULL;
    /* A job this worker ran that its HELLO does not name is lost (the worker restarted);
       one whose ASSIGN is still waiting for its commit will be sent. */
    if (w->job && w->job != named && w->job->lease_deadline != NEVER) {
        job *old = w->job;
        end_attempt(s, old, QC_ATTEMPT_LOST, "worker re-registered without it (restarted)", true);
    }
    if (h->running_job_id) {
        if (named && named->state == J_RUNNING && named->attempt == h->running_attempt &&
            (!named->worker || named->worker == w)) {
            named->worker = w;
            w->job = named;
            /* No lease renewal: a HELLO says the worker lives, not that the attempt moves;
               the heartbeats naming it that follow do (a worker re-registering again and
               again while its result never gets through must not hold the job for ever). */
            qc_log("worker %s re-attached to job %lld attempt %u%s", w->name,
                   (long long)named->id, named->attempt,
                   h->receiving ? " (re-sending its ASSIGN, which arrived only in part)" : "");
            if (h->receiving && named->lease_deadline != NEVER) send_assign(s, w, named, false);
            /* a cancel requested while the job had no worker (after a restart) */
            if (named->cancel_requested)
                send_cancel(s, rid, rid_len, named->id, named->attempt, "cancelled on request");
        } else {
            /* not the current attempt: stop it (its result would be ignored anyway) */
            send_cancel(s, rid, rid_len, h->running_job_id, h->running_attempt,
                        "attempt is no longer current");
        }
    }
    if (!s->o->quiet)
        qc_log("worker %s joined (%zu GPUs, %u threads)", w->name, h->n_gpus, h->cpu_threads);
}

static void on_heartbeat(server *s, worker *w, const Qsweep__Heartbeat *hb, int64_t now) {
    Qsweep__Heartbeat r = QSWEEP__HEARTBEAT__INIT;
    r.job_id = hb->job_id;
    r.attempt = hb->attempt;
    Qsweep__Envelope env = QSWEEP__ENVELOPE__INIT;
    env.body_case = QSWEEP__ENVELOPE__BODY_HEARTBEAT;
    env.heartbeat = &r;
    send_now(s, w->rid, w->rid_len, &env);
    if (!hb->job_id) return;
    job *j = w->job;
    if (j && j->id == hb->job_id && j->attempt == hb->attempt && j->state == J_RUNNING) {
        if (j->lease_deadline != NEVER) renew_lease(s, j, now);
        return;
    }
    job *other = find_job(s, hb->job_id);
    bool pending_assign = other && other == w->job && other->lease_deadline == NEVER;
    /* its end is here (its ACK waits for the commit): the worker heartbeats it meanwhile */
    bool ended = other && other->attempt == hb->attempt &&
                 (other->state == J_SUCCEEDED || other->state == J_FAILED ||
                  other->state == J_CANCELLED);
    if (!pending_assign && !ended)
        send_cancel(s, w->rid, w->rid_len, hb->job_id, hb->attempt,
                    "attempt is no longer current (lease lost)");
}

/* True when (job, attempt) is the job's running attempt on worker w. */
static job *current(server *s, worker *w, int64_t job_id, uint32_t attempt) {
    job *j = find_job(s, job_id);
    if (j && j->state == J_RUNNING && j->attempt == attempt && j->worker == w &&
        j->lease_deadline != NEVER)
        return j;
    return NULL;
}

/* A worker that reported its attempt's end (other than preempted: it may be stopping) is
 * idle: it may get its next ASSIGN right behind the ACK, in the same commit, without a READY
 * round trip (proto/qsweep.proto, Result). */
static void worker_idle(server *s, worker *w) {
    if (w->job) return;
    w->ready = true;
    s->dirty = true;
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
            rows[k++] = (qc_metric){.name = m[i].name,
                                    .value = m[i].value,
                                    .step = final ? -1 : m[i].step};
        }
        if (k)
            must(s, qc_store_batch_results(s->batch, j->id, (int32_t)j->attempt, final == 1, rows,
                                           k, &s->batch_err));
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
        chunks_drop(j);
        j->chunks = r->chunks;
    }
    if (r->chunks == j->chunks && r->chunk == j->chunk_next) {
        j->chunk_rows = grow(j->chunk_rows, &j->cap_chunk_rows, j->n_chunk_rows + r->n_metrics,
                             sizeof *j->chunk_rows);
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
        if (!s->o->quiet)
            qc_log("job %lld attempt %u: final result of %zu metrics complete in %u chunks",
                   (long long)j->id, j->attempt, j->n_chunk_rows, j->chunks);
        end_attempt(s, j, QC_ATTEMPT_SUCCEEDED, NULL, false); /* frees the chunks */
        send_ack(s, w->rid, w->rid_len, r->job_id, r->attempt, 0, true);
        worker_idle(s, w);
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
    send_now(s, w->rid, w->rid_len, &env);
}

static void on_result(server *s, worker *w, const Qsweep__Result *r) {
    job *j = current(s, w, r->job_id, r->attempt);
    if (!j) {
        qc_log("ignored %s RESULT of job %lld attempt %u from worker %s: not the job's current "
             "attempt",
             r->final ? "final" : "partial", (long long)r->job_id, r->attempt, w->name);
        send_ack(s, w->rid, w->rid_len, r->job_id, r->attempt, r->seq, r->final);
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
    free(rows);
    if (r->final) end_attempt(s, j, QC_ATTEMPT_SUCCEEDED, NULL, false);
    send_ack(s, w->rid, w->rid_len, r->job_id, r->attempt, r->seq, r->final);
    if (r->final) worker_idle(s, w);
}

static void on_failed(server *s, worker *w, const Qsweep__Failed *f) {
    job *j = current(s, w, f->job_id, f->attempt);
    if (!j) {
        qc_log("ignored FAILED of job %lld attempt %u from worker %s: not the job's current attempt",
             (long long)f->job_id, f->attempt, w->name);
        send_ack(s, w->rid, w->rid_len, f->job_id, f->attempt, 0, true);
        return;
    }
    char msg[1024];
    utf8_escape(f->message, msg, sizeof msg);
    switch (f->class_) {
    case QSWEEP__FAILURE_CLASS__PREEMPTED:
        end_attempt(s, j, QC_ATTEMPT_PREEMPTED, msg, false);
        break;
    case QSWEEP__FAILURE_CLASS__CANCELLED:
        end_attempt(s, j, QC_ATTEMPT_CANCELLED, msg, false);
        break;
    default:
        end_attempt(s, j, QC_ATTEMPT_FAILED, msg, true);
        break;
    }
    send_ack(s, w->rid, w->rid_len, f->job_id, f->attempt, 0, true);
    if (f->class_ != QSWEEP__FAILURE_CLASS__PREEMPTED) worker_idle(s, w);
}

static void on_message(server *s, const char *rid, size_t rid_len, const uint8_t *body, size_t len,
                       int64_t now) {
    char peer[600];
    Qsweep__Envelope *env = NULL;
    qs_error err;
    peer_name(rid, rid_len, peer, sizeof peer);
    if (qs_proto_decode(body, len, QS_PROTO_MAX_BYTES, peer, &env, &err) != QS_OK) {
        qc_log("dropped: %s", err.msg);
        return;
    }
    if (env->body_case == QSWEEP__ENVELOPE__BODY_HELLO) {
        on_hello(s, rid, rid_len, env->hello, now);
        qs_proto_free(env);
        return;
    }
    worker *w = find_worker(s, rid, rid_len);
    if (!w) {
        if (env->body_case != QSWEEP__ENVELOPE__BODY_BYE)
            send_reregister(s, rid, rid_len, "unknown worker (coordinator restarted?): send HELLO");
        qs_proto_free(env);
        return;
    }
    w->last_seen = now;
    if (now >= w->next_alive) { /* workers.last_seen follows heartbeats, every half lease */
        must(s, qc_store_batch_worker_alive(s->batch, w->name, false, &s->batch_err));
        w->next_alive = now + s->lease_ms / 2;
    }
    switch (env->body_case) {
    case QSWEEP__ENVELOPE__BODY_READY:
        if (!w->job) {
            w->ready = true;
            s->dirty = true;
        }
        w->n_models = 0;
        for (size_t i = 0; i < env->ready->n_models_loaded && w->n_models < MODELS_MAX; i++)
            if (strlen(env->ready->models_loaded[i]) <= KEY_MAX)
                snprintf(w->models[w->n_models++], KEY_MAX + 1, "%s", env->ready->models_loaded[i]);
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
        qc_log("worker %s said BYE: %s", w->name, env->bye->reason);
        if (w->job && w->job->lease_deadline != NEVER)
            end_attempt(s, w->job, QC_ATTEMPT_PREEMPTED,
                        "worker left (BYE) without reporting the attempt", false);
        forget_worker(s, w);
        break;
    default:
        qc_log("dropped: peer %s: %s is not a worker's message", peer,
             qs_proto_kind_name(env->body_case));
    }
    qs_proto_free(env);
}

/* ---- loading ---- */

/* Adds a job from the store's snapshot; running attempts wait grace_ms for their worker. */
static void add_stored_job(server *s, const qc_stored_job *r, const qc_stored_attempt *running) {
    job *j = calloc(1, sizeof *j);
    if (!j || !(j->kind = strdup(r->kind)) || !(j->spec = strdup(r->spec_json)) ||
        !(j->model_key = strdup(r->model_key ? r->model_key : "")))
        abort();
    j->id = j->q.id = r->id;
    j->q.priority = r->priority;
    j->q.gpus = r->gpus;
    j->q.gpu_mem_mb = r->gpu_mem_mb;
    j->q.native_fp4 = r->native_fp4;
    j->q.model_key = j->model_key;
    j->max_attempts = r->max_attempts;
    j->attempts_used = r->attempts_used;
    j->attempt = (uint32_t)r->last_attempt;
    j->lease_deadline = NEVER;
    int64_t now = qs_clock_ms();
    if (r->n_waiting_on) {
        j->deps = malloc(r->n_waiting_on * sizeof *j->deps);
        if (!j->deps) abort();
        memcpy(j->deps, r->waiting_on, r->n_waiting_on * sizeof *j->deps);
        j->n_deps = (int)r->n_waiting_on;
    }
    if (running && r->state == QC_JOB_RUNNING) {
        set_state(j, J_RUNNING);
        j->attempt = (uint32_t)running->attempt;
        j->worker_name = strdup(running->worker);
        j->lease_deadline = now + s->grace_ms; /* its worker may re-attach (server.h) */
    } else {
        set_state(j, J_PENDING);
        /* the remaining backoff on the database's clock, which wrote not_before (store.h):
           never the coordinator's wall clock, which may be off */
        j->q.not_before_ms =
            r->not_before_in_s > 0 ? now + (int64_t)(r->not_before_in_s * 1000.0) : now;
    }
    s->jobs = grow(s->jobs, &s->cap_jobs, s->n_jobs + 1, sizeof *s->jobs);
    s->jobs[s->n_jobs++] = j; /* snapshots come by increasing id, above every id held */
    s->active++;
    if (j->state == J_PENDING) push_pending(s, j);
    if (r->n_deps_failed && j->state == J_PENDING)
        end_pending(s, j, J_FAILED, "a dependency failed or was cancelled");
}

/* Loads jobs submitted since the last load (all of them at start). */
static qs_status load_new_jobs(server *s, qs_error *err) {
    qc_store_snapshot snap;
    qs_status st = qc_store_load(s->store, s->last_job_id, &snap, err);
    if (st != QS_OK) return st;
    size_t r = 0;
    for (size_t i = 0; i < snap.n_jobs; i++) {
        const qc_stored_job *sj = &snap.jobs[i];
        if (find_job(s, sj->id)) continue;
        while (r < snap.n_running && snap.running[r].job < sj->id)
            r++;
        const qc_stored_attempt *run = NULL;
        for (size_t k = r; k < snap.n_running && snap.running[k].job == sj->id; k++)
            run = &snap.running[k];
        add_stored_job(s, sj, run);
    }
    if (snap.max_job_id > s->last_job_id) s->last_job_id = snap.max_job_id;
    qc_store_snapshot_free(&snap);
    return QS_OK;
}

/* Applies the store's unhandled cancel requests (server.h). */
static qs_status poll_cancels(server *s, qs_error *err) {
    int64_t *ids = NULL, upto = 0;
    size_t n = 0;
    qs_status st = qc_store_poll_cancels(s->store, &ids, &n, &upto, err);
    if (st != QS_OK) return st;
    for (size_t i = 0; i < n; i++) {
        job *j = find_job(s, ids[i]);
        if (!j) continue;
        if (j->state == J_PENDING) {
            end_pending(s, j, J_CANCELLED, "cancelled on request");
        } else if (j->state == J_RUNNING && !j->cancel_requested) {
            j->cancel_requested = true;
            /* A worker drops a CANCEL for a job it has not been sent yet: while the ASSIGN
               waits for its commit, run_actions sends the CANCEL right after it. */
            if (j->worker && j->lease_deadline != NEVER)
                send_cancel(s, j->worker->rid, j->worker->rid_len, j->id, j->attempt,
                            "cancelled on request");
        }
    }
    free(ids);
    if (upto > 0) must(s, qc_store_batch_cancels_handled(s->batch, upto, &s->batch_err));
    return QS_OK;
}

/* ---- the loop ---- */

/* Sends the actions of the flight list (whose batch is durable). */
static void run_actions(server *s) {
    int64_t now = qs_clock_ms();
    for (size_t i = 0; i < s->n_flight; i++) {
        action *a = &s->flight[i];
        bool sent = send_raw(s, a->rid, a->rid_len, a->buf, a->len);
        job *j = a->assign;
        if (j && j->state == J_RUNNING && j->attempt == a->attempt) {
            if (sent) {
                j->lease_deadline = now + s->lease_ms;
                j->db_lease_until = now + s->lease_ms; /* written with the attempt row */
                if (j->cancel_requested) /* requested while the ASSIGN waited (poll_cancels) */
                    send_cancel(s, a->rid, a->rid_len, j->id, j->attempt, "cancelled on request");
            } else {
                j->lease_deadline = now; /* makes end_attempt's bookkeeping uniform */
                end_attempt(s, j, QC_ATTEMPT_PREEMPTED, "ASSIGN undeliverable: the worker is gone",
                            false);
            }
        }
        free(a->buf);
    }
    s->n_flight = 0;
}

/* Moves the open batch's actions to the (empty) flight list. */
static void actions_to_flight(server *s) {
    action *t = s->flight;
    size_t cap = s->cap_flight;
    s->flight = s->actions;
    s->cap_flight = s->cap_actions;
    s->n_flight = s->n_actions;
    s->actions = t;
    s->cap_actions = cap;
    s->n_actions = 0;
}

/* PostgreSQL went away, or reported a condition of its own (condition: disk full, out of
 * memory, ... from qc_store_condition; NULL for a lost connection): pause dispatch, keep
 * every write and its ACKs in memory, and reconnect and retry, every 500 ms after a lost
 * connection, with a backoff doubling from 500 ms to 8 s under a condition (each retry of
 * a full disk would otherwise fail twice a second). */
static void db_lost(server *s, const char *why, const char *condition) {
    size_t waiting = qc_store_batch_size(s->batch) +
                     (s->flying && !qc_writer_busy(s->writer) ? qc_store_batch_size(s->flying) : 0);
    if (condition) {
        s->retry_ms = s->retry_ms ? 2 * s->retry_ms : 500;
        if (s->retry_ms > 8000) s->retry_ms = 8000;
        qc_log("PostgreSQL cannot go on: %s: %s; pausing dispatch, retrying in %d ms; %zu "
               "transitions wait in memory",
               condition, why, s->retry_ms, waiting);
    } else {
        s->retry_ms = 500;
        qc_log("PostgreSQL unreachable (%s): pausing dispatch; %zu transitions wait in memory",
               why, waiting);
    }
    s->db_down = true;
    s->down_condition = condition;
    s->next_reconnect = qs_clock_ms() + s->retry_ms;
}

/* Group commit, overlapped with the loop: when the writer is idle, hands it the batch that
 * failed last time (it goes first), else the open batch with its actions, and opens a new
 * one. An open batch with no writes but with actions (ACKs of ignored messages) needs no
 * commit: everything before it is durable once the writer is idle, so they go at once. */
static qs_status start_flush(server *s, qs_error *err) {
    if (s->db_down || qc_writer_busy(s->writer)) return QS_OK;
    if (!s->flying) {
        if (qc_store_batch_size(s->batch) == 0) {
            if (s->n_actions) {
                actions_to_flight(s);
                run_actions(s);
            }
            return QS_OK;
        }
        s->flying = s->batch;
        s->batch = s->spare;
        s->spare = NULL;
        actions_to_flight(s);
    }
    s->flush_since = qs_clock_ms();
    s->next_stall_log = s->flush_since + STALL_LOG_MS;
    s->flying_items = qc_store_batch_size(s->flying);
    return qc_writer_submit(s->writer, s->flying, err);
}

/* Says so, every STALL_LOG_MS, while a batch waits for its commit: a lock held by another
 * session or a stopped server otherwise stalls the sweep without a word (heartbeats are still
 * answered). */
static void log_stall(server *s, int64_t now) {
    if (!qc_writer_busy(s->writer) || now < s->next_stall_log) return;
    qc_log("PostgreSQL has not committed a batch of %zu transitions for %lld s (a lock held by "
         "another session? a stopped server?); dispatch waits",
         s->flying_items, (long long)((now - s->flush_since) / 1000));
    s->next_stall_log = now + STALL_LOG_MS;
}

/* Collects the writer's outcome (waiting for it when wait is true): on success sends what
 * waited for the batch; on a lost connection keeps the batch and its actions for a retry
 * and pauses dispatch; any other failure is returned. */
static qs_status finish_flush(server *s, bool wait, qs_error *err) {
    qc_store_batch *b;
    qs_status st;
    qs_error e;
    size_t items;
    double seconds;
    if (!qc_writer_collect(s->writer, wait, &b, &st, &e, &items, &seconds)) return QS_OK;
    if (st != QS_OK) {
        if (!qc_writer_connection_lost(s->writer)) {
            *err = e;
            return qs_error_wrap(err, "writing a batch of %zu transitions", items);
        }
        db_lost(s, e.msg, qc_writer_condition(s->writer));
        return QS_OK;
    }
    s->retry_ms = 0;
    s->n_flushes++;
    s->n_flushed_items += items;
    s->flush_s += seconds;
    s->spare = b; /* emptied by the flush */
    s->flying = NULL;
    s->polled_since_commit = false;
    run_actions(s);
    return QS_OK;
}

/* Whether nothing waits to be written or sent. */
static bool all_durable(server *s) {
    return qc_store_batch_size(s->batch) == 0 && s->n_actions == 0 && !s->flying &&
           s->n_flight == 0;
}

static qs_status open_socket(server *s, qs_error *err) {
    s->zctx = zmq_ctx_new();
    if (!s->zctx) return qs_error_set(err, QS_ENET, "zmq_ctx_new: %s", zmq_strerror(errno));
    s->sock = zmq_socket(s->zctx, ZMQ_ROUTER);
    if (!s->sock) return qs_error_set(err, QS_ENET, "zmq_socket(ROUTER): %s", zmq_strerror(errno));
    int one = 1, linger = 1000, hwm = 100000;
    /* Twice the protocol limit: a body just over it reaches the codec and is logged with its
       peer; libzmq drops the connection of a peer sending more (server.h). */
    int64_t maxmsg = 2 * (int64_t)QS_PROTO_MAX_BYTES;
    if (zmq_setsockopt(s->sock, ZMQ_ROUTER_MANDATORY, &one, sizeof one) != 0 ||
        zmq_setsockopt(s->sock, ZMQ_ROUTER_HANDOVER, &one, sizeof one) != 0 ||
        zmq_setsockopt(s->sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg) != 0 ||
        zmq_setsockopt(s->sock, ZMQ_LINGER, &linger, sizeof linger) != 0 ||
        zmq_setsockopt(s->sock, ZMQ_SNDHWM, &hwm, sizeof hwm) != 0 ||
        zmq_setsockopt(s->sock, ZMQ_RCVHWM, &hwm, sizeof hwm) != 0)
        return qs_error_set(err, QS_ENET, "ROUTER socket options: %s", zmq_strerror(errno));
    if (s->o->curve_secret_key) {
        if (zmq_setsockopt(s->sock, ZMQ_CURVE_SERVER, &one, sizeof one) != 0 ||
            zmq_setsockopt(s->sock, ZMQ_CURVE_SECRETKEY, s->o->curve_secret_key, 41) != 0)
            return qs_error_set(err, QS_EINVAL,
                                "options.curve_secret_key: need a 40-character Z85 key: %s",
                                zmq_strerror(errno));
    }
    if (s->allowed) {
        /* The ZAP handler is bound before the ROUTER so that no handshake can miss it. */
        qc_zap_keys *keys = s->allowed;
        s->allowed = NULL; /* the handler's now, also on failure */
        qs_status st = qc_zap_start(s->zctx, s->o->curve_allowed_keys, keys, &s->zap, err);
        if (st == QS_OK) st = qc_zap_configure_socket(s->sock, err);
        if (st != QS_OK) return st;
    }
    if (zmq_bind(s->sock, s->o->bind_endpoint) != 0)
        return qs_error_set(err, QS_ENET, "bind %s: %s", s->o->bind_endpoint, zmq_strerror(errno));
    return QS_OK;
}

/* Receives every waiting message (up to DRAIN_MAX). */
static void drain(server *s, int64_t now) {
    for (int n = 0; n < DRAIN_MAX; n++) {
        zmq_msg_t id, body;
        zmq_msg_init(&id);
        if (zmq_msg_recv(&id, s->sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&id);
            return;
        }
        zmq_msg_init(&body);
        int more = zmq_msg_more(&id);
        bool ok = more && zmq_msg_recv(&body, s->sock, 0) >= 0;
        int frames = 2;
        if (ok) {
            while (zmq_msg_more(&body)) { /* a rogue multi-frame message: drop it whole */
                zmq_msg_close(&body);
                zmq_msg_init(&body);
                if (zmq_msg_recv(&body, s->sock, 0) < 0) break;
                frames++;
            }
        }
        if (ok && frames == 2) {
            on_message(s, zmq_msg_data(&id), zmq_msg_size(&id), zmq_msg_data(&body),
                       zmq_msg_size(&body), now);
        } else {
            char peer[600];
            peer_name(zmq_msg_data(&id), zmq_msg_size(&id), peer, sizeof peer);
            qc_log("dropped: peer %s: message of %d frames (expected one body frame)", peer,
                 frames - 1);
        }
        zmq_msg_close(&body);
        zmq_msg_close(&id);
    }
}

static void free_server(server *s) {
    for (size_t i = 0; i < s->n_jobs; i++) {
        job *j = s->jobs[i];
        free(j->kind);
        free(j->spec);
        free(j->model_key);
        free(j->deps);
        free(j->worker_name);
        chunks_drop(j);
        free(j);
    }
    for (size_t i = 0; i < s->n_workers; i++)
        free(s->workers[i]);
    qc_writer_stop(s->writer); /* first: it may still hold a batch */
    for (size_t i = 0; i < s->n_actions; i++)
        free(s->actions[i].buf);
    for (size_t i = 0; i < s->n_flight; i++)
        free(s->flight[i].buf);
    free(s->flight);
    qc_store_batch_free(s->flying);
    qc_store_batch_free(s->spare);
    free(s->jobs);
    free(s->pending);
    free(s->workers);
    free(s->actions);
    if (s->sock) zmq_close(s->sock);
    qc_zap_stop(s->zap); /* after the ROUTER, before zmq_ctx_term (zap.h) */
    qc_zap_keys_free(s->allowed);
    if (s->zctx) zmq_ctx_term(s->zctx);
    qc_store_batch_free(s->batch);
    qc_store_close(s->store);
}

qs_status qc_server_run(const qc_server_options *opts, qs_error *err) {
    if (!opts || !opts->bind_endpoint || !opts->conninfo)
        return qs_error_set(
            err, QS_EINVAL,
            "qc_server_run: options.bind_endpoint and options.conninfo are required");
    if (opts->lease_ms < 0 || opts->grace_ms < 0 || opts->backoff_ms < 0 || opts->poll_ms < 0 ||
        opts->worker_timeout_ms < 0)
        return qs_error_set(err, QS_EINVAL, "qc_server_run: options.*_ms must not be negative");
    if (opts->curve_secret_key && strlen(opts->curve_secret_key) != 40)
        return qs_error_set(err, QS_EINVAL,
                            "qc_server_run: options.curve_secret_key must be 40 Z85 characters");
    if (opts->curve_allowed_keys && !opts->curve_secret_key)
        return qs_error_set(err, QS_EINVAL,
                            "qc_server_run: options.curve_allowed_keys (%s) needs "
                            "options.curve_secret_key: an allow-list of worker keys only works "
                            "with CURVE on",
                            opts->curve_allowed_keys);
    server s = {.o = opts, .next_wake = NEVER};
    s.lease_ms = opts->lease_ms ? opts->lease_ms : 30000;
    s.grace_ms = opts->grace_ms ? opts->grace_ms : s.lease_ms;
    s.backoff_ms = opts->backoff_ms ? opts->backoff_ms : 1000;
    s.poll_ms = opts->poll_ms ? opts->poll_ms : 500;
    s.worker_timeout_ms = opts->worker_timeout_ms ? opts->worker_timeout_ms : 3 * s.lease_ms;

    struct sigaction old_term, old_int, old_hup;
    if (!opts->no_signal_handlers) {
        struct sigaction sa = {.sa_handler = on_stop_signal};
        sigemptyset(&sa.sa_mask);
        sigaction(SIGTERM, &sa, &old_term);
        sigaction(SIGINT, &sa, &old_int);
        if (opts->curve_allowed_keys) { /* else SIGHUP keeps its default action */
            struct sigaction hup = {.sa_handler = on_reload_signal};
            sigemptyset(&hup.sa_mask);
            sigaction(SIGHUP, &hup, &old_hup);
        }
    }
    stop_requested = 0;
    reload_requested = 0;

    s.batch = qc_store_batch_new();
    s.spare = qc_store_batch_new();
    qs_status st = s.batch && s.spare ? QS_OK : qs_error_set(err, QS_ENOMEM, "batch");
    if (st == QS_OK && opts->curve_allowed_keys) /* bad input: refused before connecting */
        st = qc_zap_keys_load(opts->curve_allowed_keys, &s.allowed, err);
    if (st == QS_OK) st = qc_store_open(opts->conninfo, "coordinator", &s.store, err);
    if (st == QS_OK) st = qc_writer_start(opts->conninfo, &s.writer, err);
    /* The lock lives on the connection that writes job state: when that session dies, the
       lock goes with it and no later write can succeed without taking it again
       (qc_writer_reconnect), so two coordinators never both write. */
    if (st == QS_OK) st = qc_store_lock_coordinator(qc_writer_store(s.writer), err);
    if (st == QS_OK) st = load_new_jobs(&s, err);
    if (st == QS_OK) st = open_socket(&s, err);
    if (st == QS_OK) {
        size_t running = 0;
        for (size_t i = 0; i < s.n_jobs; i++)
            running += s.jobs[i]->state == J_RUNNING;
        qc_log("listening on %s; %zu active jobs rebuilt from PostgreSQL (%zu running, waiting %d ms "
             "for their "
             "workers to re-attach); lease %d ms",
             opts->bind_endpoint, s.active, running, s.grace_ms, s.lease_ms);
        if (opts->curve_secret_key && !opts->curve_allowed_keys)
            qc_log("warning: CURVE without an allow-list of worker keys: any client that knows "
                 "this coordinator's public key can connect and take jobs (give the workers' "
                 "public keys in options.curve_allowed_keys / qsweep coordinator "
                 "--authorized-keys)");
    }
    int64_t next_poll = qs_clock_ms() + s.poll_ms, next_cancel_poll = qs_clock_ms() + 1000,
            next_lease_check = 0, last_turn = qs_clock_ms();
    /* A gap between loop turns longer than this is a stall of the coordinator (on_stall): a
       quarter lease, at most 1 s, well within any worker's heartbeat period. */
    const int64_t stall_ms = s.lease_ms / 4 < 1000 ? s.lease_ms / 4 : 1000;
    while (st == QS_OK && !stop_requested) {
        zmq_pollitem_t items[2] = {{.socket = s.sock, .events = ZMQ_POLLIN},
                                   {.fd = qc_writer_fd(s.writer), .events = ZMQ_POLLIN}};
        if (zmq_poll(items, 2, 10) < 0 && errno != EINTR) {
            st = qs_error_set(err, QS_ENET, "zmq_poll: %s", zmq_strerror(errno));
            break;
        }
        if ((st = finish_flush(&s, false, err)) != QS_OK) break;
        int64_t now = qs_clock_ms();
        if (now - last_turn > stall_ms) on_stall(&s, now - last_turn, now);
        last_turn = now;
        drain(&s, now);
        if (now >= next_lease_check) {
            check_leases(&s, now);
            log_stall(&s, now);
            next_lease_check = now + 50;
        }
        if (s.db_down && now >= s.next_reconnect && !qc_writer_busy(s.writer)) {
            /* All connections; the writer's takes the advisory lock again (QS_ESTATE when
               another coordinator has it now) before anything is written. */
            qs_error e;
            qs_status rs = qc_store_reconnect(s.store, &e);
            if (rs == QS_OK) rs = qc_writer_reconnect(s.writer, &e);
            if (rs == QS_ESTATE) {
                *err = e;
                st = rs;
                break;
            }
            if (rs == QS_OK) {
                size_t queued = qc_store_batch_size(s.batch) +
                                (s.flying ? qc_store_batch_size(s.flying) : 0);
                qc_log("PostgreSQL is back%s%s%s: resuming with %zu queued transitions",
                       s.down_condition ? " (connections re-opened after " : "",
                       s.down_condition ? s.down_condition : "", s.down_condition ? ")" : "",
                       queued);
                s.db_down = false;
                s.dirty = true;
            } else {
                s.next_reconnect = now + (s.retry_ms ? s.retry_ms : 500);
            }
        }
        if (!s.db_down && now >= next_poll) {
            qs_error e;
            if (load_new_jobs(&s, &e) != QS_OK) {
                if (!qc_store_connection_lost(s.store)) {
                    *err = e;
                    st = QS_EDB;
                    break;
                }
                db_lost(&s, e.msg, qc_store_condition(s.store));
            } else {
                s.polled_since_commit = true;
            }
            next_poll = now + s.poll_ms;
        }
        if (!s.db_down && now >= next_cancel_poll) {
            qs_error e;
            if (poll_cancels(&s, &e) != QS_OK) {
                if (!qc_store_connection_lost(s.store)) {
                    *err = e;
                    st = QS_EDB;
                    break;
                }
                db_lost(&s, e.msg, qc_store_condition(s.store));
            }
            next_cancel_poll = now + 1000;
        }
        if (reload_requested) {
            reload_requested = 0;
            if (s.zap) qc_zap_reload(s.zap, NULL); /* logs; a bad file keeps the list in use */
        }
        dispatch(&s, now);
        st = start_flush(&s, err);
        if (st == QS_OK && opts->exit_when_done && s.active == 0 && !s.db_down &&
            all_durable(&s) && s.polled_since_commit) {
            qc_log("every job is terminal: exiting");
            break;
        }
    }
    if (st == QS_OK && !s.db_down) {
        /* The last batches, in order: the flying one, one that failed and waits for a retry,
           then the open one. Each one's ACKs and ASSIGNs go out after its commit, as in the
           loop: an attempt committed without its ASSIGN would wait out the next start's
           grace period and count as lost. (Sent before the socket closes; its linger lets
           them leave.) */
        qs_error e = {0};
        qs_status fs = finish_flush(&s, true, &e);
        qc_store *ws = qc_writer_store(s.writer);
        if (fs == QS_OK && s.flying && !s.db_down &&
            (fs = qc_store_flush(ws, s.flying, NULL, &e)) == QS_OK) {
            qc_store_batch_free(s.spare);
            s.spare = s.flying;
            s.flying = NULL;
            run_actions(&s);
        }
        if (fs == QS_OK && !s.db_down && (qc_store_batch_size(s.batch) > 0 || s.n_actions > 0) &&
            (fs = qc_store_flush(ws, s.batch, NULL, &e)) == QS_OK) {
            actions_to_flight(&s);
            run_actions(&s);
        }
        if (fs != QS_OK || s.db_down) qc_log("final commit: %s", fs ? e.msg : "PostgreSQL is down");
    }
    if (!opts->no_signal_handlers) {
        sigaction(SIGTERM, &old_term, NULL);
        sigaction(SIGINT, &old_int, NULL);
        if (opts->curve_allowed_keys) sigaction(SIGHUP, &old_hup, NULL);
    }
    if (s.n_flushes)
        qc_log("%llu transactions wrote %llu items (%.1f per transaction, %.2f ms each)",
             (unsigned long long)s.n_flushes, (unsigned long long)s.n_flushed_items,
             (double)s.n_flushed_items / (double)s.n_flushes,
             1000.0 * s.flush_s / (double)s.n_flushes);
    free_server(&s);
    return st;
}
