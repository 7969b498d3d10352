/* qc_writer: the coordinator's write connections, in threads of their own.
 *
 * The message loop hands it one batch of transitions at a time (qc_writer_submit) and goes on
 * decoding messages and filling the next batch while this thread commits the first with
 * qc_store_flush (coordinator/store/store.h) on its own PostgreSQL connection. When the commit
 * (or the failure) is in, the thread makes qc_writer_fd readable; the loop then collects the
 * outcome (qc_writer_collect) and only then sends what waited for that batch. Batches are
 * committed one after the other in submission order, never two at once, so the database sees
 * transitions in the order the loop made them.
 *
 * A batch carrying many result rows (64 KiB or more, in two result sets or more) is written
 * through two connections at once, as two transactions (qc_store_flush_share): a results
 * thread COPYs about half of the result sets, whole sets each, while the writer thread writes
 * every transition and the other sets, and commits only after the results thread has
 * committed. One PostgreSQL backend ingests about one COPY's worth of rows per second; two
 * ingest nearly twice that. ACKs still wait for both commits. A crash between the two
 * commits leaves whole result sets of attempts still marked running: the worker re-attaches
 * and resends (stored rows are ignored), or the job runs again and its new final set is
 * dropped because the job holds one (store.h, results rules).
 *
 * The writer's session holds the coordinator lock (the caller takes it with
 * qc_store_lock_coordinator on qc_writer_store; qc_writer_reconnect takes it again): the
 * results thread commits only after checking that this session still holds it, so a
 * coordinator whose write session died writes nothing more once another one may have
 * started.
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

/* Opens the two write connections (qc_store_open, roles "coordinator-writer" and
 * "coordinator-results") and starts the threads. Errors: QS_EDB (connection or migration
 * failed), QS_ENOMEM, QS_EIO (no pipe or thread). */
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

/* The writer thread's store, for a last synchronous qc_store_flush, only while qc_writer_busy
 * is false. */
qc_store *qc_writer_store(qc_writer *w);

/* Whether either write connection is lost (the failure of a collected batch was a lost
 * connection rather than a refused statement). */
bool qc_writer_connection_lost(const qc_writer *w);

/* The server condition (qc_store_condition: disk full, out of memory, ...) behind the last
 * failure of either write connection, or NULL when it was none. */
const char *qc_writer_condition(const qc_writer *w);

/* Reconnects both write connections (qc_store_reconnect). QS_ESTATE while busy; QS_EDB
 * while the server cannot be reached. */
qs_status qc_writer_reconnect(qc_writer *w, qs_error *err);

/* The same without waiting (qc_store_reconnect_start / qc_store_reconnect_poll on both):
 * start begins reconnecting both (QS_ESTATE while busy, QS_EDB when one cannot start); each
 * poll advances both without blocking, *done once both are up (QS_EDB: an attempt failed,
 * start again later; QS_ESTATE: another coordinator took the lock). */
qs_status qc_writer_reconnect_start(qc_writer *w, qs_error *err);
qs_status qc_writer_reconnect_poll(qc_writer *w, bool *done, qs_error *err);

/* Waits for a submitted batch to finish (its outcome is dropped: collect it first to keep
 * it), stops the thread and closes the connection. w may be NULL. */
void qc_writer_stop(qc_writer *w);

#endif
