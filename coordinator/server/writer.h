/* qc_writer: the coordinator's write connection, in a thread of its own.
 *
 * The message loop hands it one batch of transitions at a time (qc_writer_submit) and goes on
 * decoding messages and filling the next batch while this thread commits the first with
 * qc_store_flush (coordinator/store/store.h) on its own PostgreSQL connection. When the commit
 * (or the failure) is in, the thread makes qc_writer_fd readable; the loop then collects the
 * outcome (qc_writer_collect) and only then sends what waited for that batch. Batches are
 * committed one after the other in submission order, never two at once, so the database sees
 * transitions in the order the loop made them.
 *
 * Thread use: every function is called from the loop's thread only. The store
 * (qc_writer_store) belongs to the writer thread while a batch is submitted and not yet
 * collected, and to the caller otherwise (e.g. to reconnect it). */
#ifndef QC_SERVER_WRITER_H
#define QC_SERVER_WRITER_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"
#include "store.h"

typedef struct qc_writer qc_writer;

/* Opens the write connection (qc_store_open, role "coordinator-writer") and starts the
 * thread. Errors: QS_EDB (connection or migration failed), QS_ENOMEM, QS_EIO (no pipe or
 * thread). */
qs_status qc_writer_start(const char *conninfo, qc_writer **out, qs_error *err);

/* A file descriptor that polls readable (POLLIN) once a submitted batch is finished; for
 * zmq_poll's fd items. */
int qc_writer_fd(const qc_writer *w);

/* Whether a batch is submitted and not yet collected. */
bool qc_writer_busy(const qc_writer *w);

/* Starts committing b (not empty) in the writer thread. b belongs to the writer until it is
 * collected. QS_ESTATE when a batch is still submitted. */
qs_status qc_writer_submit(qc_writer *w, qc_store_batch *b, qs_error *err);

/* Collects the submitted batch once it is finished: returns false (nothing changed) when it
 * is still being written and wait is false; with wait true, blocks until it is finished.
 * Returns false at once when nothing is submitted. On true, *b is the batch given to
 * qc_writer_submit (emptied when *st is QS_OK, unchanged otherwise: qc_store_flush keeps a
 * failed batch), *st and *err the flush's outcome, *items its size when submitted and
 * *seconds the flush's wall time. */
bool qc_writer_collect(qc_writer *w, bool wait, qc_store_batch **b, qs_status *st, qs_error *err,
                       size_t *items, double *seconds);

/* The writer's store: for qc_store_connection_lost, qc_store_reconnect and a last
 * synchronous qc_store_flush, only while qc_writer_busy is false. */
qc_store *qc_writer_store(qc_writer *w);

/* Waits for a submitted batch to finish (its outcome is dropped: collect it first to keep
 * it), stops the thread and closes the connection. w may be NULL. */
void qc_writer_stop(qc_writer *w);

#endif
