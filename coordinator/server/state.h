/* The coordinator's state (coordinator/server only): its tables (jobs, workers, running
 * attempts, worker keys), each with its own interface below this header, and the commit
 * pipeline's queues beside the socket. Single-threaded: everything here runs on the loop's
 * thread (the writer thread only sees batches, writer.h). */
#ifndef QC_SERVER_STATE_H
#define QC_SERVER_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "identity.h"
#include "job_table.h"
#include "log.h"
#include "pins.h"
#include "running.h"
#include "store.h"
#include "workers.h"
#include "writer.h"
#include "zap.h"

/* Something to send once the current batch is durable. */
typedef struct action {
    char rid[RID_MAX];
    size_t rid_len;
    uint8_t *buf;
    size_t len;
    job *assign; /* an ASSIGN: start the lease when it goes out */
    uint32_t attempt;
} action;

struct qc_server_options;

typedef struct server {
    const struct qc_server_options *o; /* the options (server.h): server.c alone reads them */
    bool quiet;                        /* options.quiet: no per-job log lines */
    bool curve;                        /* CURVE on the socket: HELLO carries the peer's key */
    int lease_ms, grace_ms, backoff_ms, poll_ms, worker_timeout_ms;
    qc_store *store;        /* reads and polls */
    qc_writer *writer;      /* the second connection: commits batches in its own thread */
    qc_store_batch *batch;  /* the open batch, filled by the loop */
    qc_store_batch *flying; /* the batch handed to the writer (or failed and kept for a retry) */
    qc_store_batch *spare;  /* an empty batch to open next */
    int64_t flush_since;    /* monotonic ms: when the flying batch was handed to the writer */
    int64_t next_stall_log; /* monotonic ms: when to say again that it has not committed */
    size_t flying_items;    /* its size when handed over (the writer owns it meanwhile) */
    qs_error batch_err;
    bool db_down;
    int64_t next_reconnect;
    bool reconnecting;          /* the connections are being re-opened (qc_srv_reconnect) */
    int retry_ms;               /* the current reconnect delay (db_lost); 0 after a commit */
    const char *down_condition; /* the server condition behind the pause, NULL: lost */
    void *zctx, *sock;
    qc_zap_keys *allowed;    /* the CURVE allow-list, until handed to the ZAP handler */
    qc_zap *zap;             /* the ZAP handler (zap.h); NULL without an allow-list */
    qc_job_table jobs;       /* job_table.h */
    qc_worker_table workers; /* workers.h */
    qc_running running;      /* running.h */
    qc_owners owners;        /* identity.h */
    qc_pin_table pins;       /* pins.h */
    int64_t unpins_answered; /* the highest unpin request answered (intake.c), 0: none */
    bool dirty;              /* something changed that dispatch should look at */
    action *actions;         /* waiting for the open batch */
    size_t n_actions, cap_actions;
    action *flight; /* waiting for the flying batch */
    size_t n_flight, cap_flight;
    bool polled_since_commit;
    /* totals for the exit line: flushes, the items they wrote, and their wall time */
    uint64_t n_flushes, n_flushed_items;
    double flush_s;
} server;

/* Queueing a write fails only without memory or on a bad argument, which the message
 * checks exclude: the in-memory state would no longer match what becomes durable. */
static inline void qc_srv_must(server *s, qs_status st) {
    if (st != QS_OK) {
        qc_log("cannot queue a database write: %s", s->batch_err.msg);
        abort();
    }
}

/* How often, at most, a worker's messages refresh workers.last_seen (ms): every
 * QC_SRV_ALIVE_MS (5 s), or every half lease when the lease is shorter. The write is one row
 * of the open batch, committed with the others (no round trip of its own). `qsweep workers`
 * reads last_seen against QC_WORKER_SILENT_S (coordinator/store/queries.h). */
#define QC_SRV_ALIVE_MS 5000
static inline int64_t qc_srv_alive_ms(const server *s) {
    return s->lease_ms / 2 < QC_SRV_ALIVE_MS ? s->lease_ms / 2 : QC_SRV_ALIVE_MS;
}

#endif
