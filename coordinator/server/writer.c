/* The coordinator's write thread. Contract: writer.h. */
#include "writer.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"

/* Below this many bytes of result rows (about 2,000 rows) a batch is written by one
 * connection: a second transaction costs more than it saves. */
#define SPLIT_MIN_BYTES (64 * 1024)

/* The results lane: a thread with a connection of its own that writes the QC_FLUSH_RESULTS
 * share of a batch while the writer thread writes the QC_FLUSH_MAIN share. */
typedef struct results_lane {
    qc_store *store;
    pthread_t thread;
    bool started;
    /* under the writer's mu: */
    const qc_store_batch *todo;
    int holder_pid; /* server pid of the writer's session, which holds the coordinator lock */
    bool finished;
    qs_status st;
    qs_error err;
} results_lane;

struct qc_writer {
    qc_store *store;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* signals a submitted batch, a finished one, the lane, and quit */
    results_lane lane;
    bool started;        /* the writer thread runs */
    bool lane_collected; /* writer thread only: the lane's outcome of this batch is in */
    int pipe_r, pipe_w;
    bool busy; /* submitted and not collected (loop thread only) */
    /* under mu: */
    qc_store_batch *todo; /* submitted, not yet taken by the thread */
    qc_store_batch *done; /* finished, not yet collected */
    bool finished, quit;
    qs_status st;
    qs_error err;
    size_t items;
    double seconds;
};

/* The lane's before-commit hook: its rows go in only while the writer's session still holds
 * the coordinator lock. Were that session gone, another coordinator may have taken over, and
 * this connection, which holds no lock, must not write for a coordinator that is no longer
 * one (the writer's own next statement fails, and its reconnect finds the lock taken). */
static qs_status lane_lock_hook(void *ctx, qs_error *err) {
    results_lane *lane = ctx;
    return qc_store_check_coordinator_lock(lane->store, lane->holder_pid, err);
}

static void *lane_main(void *arg) {
    qc_writer *w = arg;
    pthread_setname_np(pthread_self(), "qsweep-results");
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->lane.todo && !w->quit)
            pthread_cond_wait(&w->cv, &w->mu);
        if (!w->lane.todo) break;
        const qc_store_batch *b = w->lane.todo;
        pthread_mutex_unlock(&w->mu);
        qs_error err = {0};
        qs_status st = qc_store_flush_share(w->lane.store, b, QC_FLUSH_RESULTS, lane_lock_hook,
                                            &w->lane, NULL, &err);
        pthread_mutex_lock(&w->mu);
        w->lane.todo = NULL;
        w->lane.st = st;
        w->lane.err = err;
        w->lane.finished = true;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* Waits for the lane's share of the current batch; its outcome (once per batch). */
static qs_status lane_wait(qc_writer *w, qs_error *err) {
    pthread_mutex_lock(&w->mu);
    while (!w->lane.finished)
        pthread_cond_wait(&w->cv, &w->mu);
    w->lane.finished = false;
    qs_status st = w->lane.st;
    if (st) *err = w->lane.err;
    pthread_mutex_unlock(&w->mu);
    w->lane_collected = true;
    return st;
}

/* The main share's before-commit hook: commit only once the lane's share is committed. */
static qs_status lane_hook(void *ctx, qs_error *err) {
    qs_status st = lane_wait(ctx, err);
    return st ? qs_error_wrap(err, "writing results on the second connection") : QS_OK;
}

/* Commits b: through both connections when it carries enough results (the lane's share
 * first, then the rest: a crash in between leaves only whole result sets of attempts that
 * are still running, which a retry or a re-run finds stored), else through one. */
static qs_status flush_batch(qc_writer *w, qc_store_batch *b, qs_error *err) {
    if (qc_store_batch_result_sets(b) < 2 || qc_store_batch_result_bytes(b) < SPLIT_MIN_BYTES)
        return qc_store_flush(w->store, b, NULL, err);
    pthread_mutex_lock(&w->mu);
    w->lane.todo = b;
    w->lane.holder_pid = qc_store_backend_pid(w->store);
    w->lane.finished = false;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    w->lane_collected = false;
    qs_status st = qc_store_flush_share(w->store, b, QC_FLUSH_MAIN, lane_hook, w, NULL, err);
    if (!w->lane_collected) { /* the main share failed first: the lane must finish too */
        qs_error ignored;
        lane_wait(w, &ignored);
    }
    if (!st) qc_store_batch_clear(b);
    return st;
}

static void *writer_main(void *arg) {
    qc_writer *w = arg;
    pthread_setname_np(pthread_self(), "qsweep-writer"); /* top -H, perf; 15 chars at most */
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->todo && !w->quit)
            pthread_cond_wait(&w->cv, &w->mu);
        if (!w->todo) break; /* quit with nothing submitted */
        qc_store_batch *b = w->todo;
        w->todo = NULL;
        pthread_mutex_unlock(&w->mu);

        size_t items = qc_store_batch_size(b);
        qs_error err = {0};
        double t0 = qs_clock_s();
        qs_status st = flush_batch(w, b, &err);
        double dt = qs_clock_s() - t0;

        pthread_mutex_lock(&w->mu);
        w->done = b;
        w->st = st;
        w->err = err;
        w->items = items;
        w->seconds = dt;
        w->finished = true;
        pthread_cond_broadcast(&w->cv);
        /* Wake the loop's poll; a full pipe already says so. */
        ssize_t n = write(w->pipe_w, "x", 1);
        (void)n;
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* Stops the threads that were started (each finishes a batch in progress first), closes
 * the pipe and the connections that are open, and frees w. */
static void destroy(qc_writer *w) {
    pthread_mutex_lock(&w->mu);
    w->quit = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    if (w->started) pthread_join(w->thread, NULL);
    if (w->lane.started) pthread_join(w->lane.thread, NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    if (w->pipe_r >= 0) close(w->pipe_r);
    if (w->pipe_w >= 0) close(w->pipe_w);
    qc_store_close(w->store);
    qc_store_close(w->lane.store);
    free(w);
}

qs_status qc_writer_start(const char *conninfo, qc_writer **out, qs_error *err) {
    *out = NULL;
    qc_writer *w = calloc(1, sizeof *w);
    if (!w) return qs_error_set(err, QS_ENOMEM, "writer: out of memory");
    w->pipe_r = w->pipe_w = -1;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    qs_status st = qc_store_open(conninfo, "coordinator-writer", &w->store, err);
    if (st) qs_error_wrap(err, "opening the coordinator's write connection");
    if (!st && (st = qc_store_open(conninfo, "coordinator-results", &w->lane.store, err)))
        qs_error_wrap(err, "opening the coordinator's results connection");
    int fds[2];
    if (!st && pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0)
        st = qs_error_set(err, QS_EIO, "writer: pipe: %s", strerror(errno));
    if (!st) {
        w->pipe_r = fds[0];
        w->pipe_w = fds[1];
    }
    int rc = st ? 0 : pthread_create(&w->lane.thread, NULL, lane_main, w);
    w->lane.started = !st && rc == 0;
    if (w->lane.started) rc = pthread_create(&w->thread, NULL, writer_main, w);
    w->started = w->lane.started && rc == 0;
    if (!st && rc != 0) st = qs_error_set(err, QS_EIO, "writer: pthread_create: %s", strerror(rc));
    if (st) {
        destroy(w);
        return st;
    }
    *out = w;
    return QS_OK;
}

int qc_writer_fd(const qc_writer *w) {
    return w->pipe_r;
}

bool qc_writer_busy(const qc_writer *w) {
    return w->busy;
}

qs_status qc_writer_submit(qc_writer *w, qc_store_batch *b, qs_error *err) {
    if (w->busy) return qs_error_set(err, QS_ESTATE, "writer: a batch is still being written");
    pthread_mutex_lock(&w->mu);
    w->todo = b;
    w->finished = false;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    w->busy = true;
    return QS_OK;
}

bool qc_writer_collect(qc_writer *w, bool wait, qc_store_batch **b, qs_status *st, qs_error *err,
                       size_t *items, double *seconds) {
    if (!w->busy) return false;
    pthread_mutex_lock(&w->mu);
    while (wait && !w->finished)
        pthread_cond_wait(&w->cv, &w->mu);
    bool finished = w->finished;
    if (finished) {
        char drain[64];
        while (read(w->pipe_r, drain, sizeof drain) > 0) {
        }
        *b = w->done;
        *st = w->st;
        *err = w->err;
        *items = w->items;
        *seconds = w->seconds;
        w->done = NULL;
        w->finished = false;
    }
    pthread_mutex_unlock(&w->mu);
    if (finished) w->busy = false;
    return finished;
}

qc_store *qc_writer_store(qc_writer *w) {
    return w->store;
}

bool qc_writer_connection_lost(const qc_writer *w) {
    return qc_store_connection_lost(w->store) || qc_store_connection_lost(w->lane.store);
}

const char *qc_writer_condition(const qc_writer *w) {
    const char *c = qc_store_condition(w->store);
    return c ? c : qc_store_condition(w->lane.store);
}

qs_status qc_writer_reconnect(qc_writer *w, qs_error *err) {
    if (w->busy) return qs_error_set(err, QS_ESTATE, "writer: a batch is still being written");
    qs_status st = qc_store_reconnect(w->store, err);
    if (!st) st = qc_store_reconnect(w->lane.store, err);
    return st;
}

qs_status qc_writer_reconnect_start(qc_writer *w, qs_error *err) {
    if (w->busy) return qs_error_set(err, QS_ESTATE, "writer: a batch is still being written");
    qs_status st = qc_store_reconnect_start(w->store, err);
    if (!st) st = qc_store_reconnect_start(w->lane.store, err);
    return st;
}

qs_status qc_writer_reconnect_poll(qc_writer *w, bool *done, qs_error *err) {
    bool a = false, b = false;
    qs_status st = qc_store_reconnect_poll(w->store, &a, err);
    if (!st) st = qc_store_reconnect_poll(w->lane.store, &b, err);
    *done = !st && a && b;
    return st;
}

void qc_writer_stop(qc_writer *w) {
    if (w) destroy(w);
}
