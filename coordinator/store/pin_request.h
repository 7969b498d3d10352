/* The queue of pin changes a running coordinator applies (internal to qc_store;
 * schema/200_numerics_unpin.sql, schema/220_numerics_pin_requests.sql): `qsweep pin` and
 * `qsweep unpin` ask through it while a coordinator, which holds the pins in memory, runs. */
#ifndef QC_STORE_PIN_REQUEST_H
#define QC_STORE_PIN_REQUEST_H

#include <stdbool.h>
#include <stddef.h>

#include "session.h"

/* Begins the transaction of `qsweep <cmd>` (cmd "pin" or "unpin") on the experiment named
 * name: takes the coordinator lock as a command does (lock.h; *held true: a running coordinator
 * holds it and must be asked) and reads the experiment's id (text) and its pin (path, "" when
 * none) FOR UPDATE, so a second pin or unpin of it waits for this one. On error the transaction
 * is rolled back. QS_ENOTFOUND (no experiment of that name), QS_EDB. */
qs_status qc_store_pin_command_begin(qc_store *s, const char *cmd, const char *name, bool *held,
                                     char id[32], char path[160], qs_error *err);

/* Queues a request for experiment id (experiments.id as text) to be pinned to path (NULL: to
 * be unpinned), NOTIFY qsweep_unpin, and waits up to wait_ms for the coordinator's answer
 * (qc_store_poll_pin_requests), copied to msg (cap bytes). QS_ESTATE with the answer when refused,
 * or when none came in time (the request stays queued); QS_EDB. */
qs_status qc_store_ask_coordinator_pin(qc_store *s, const char *id, const char *path, int wait_ms,
                                       char *msg, size_t cap, qs_error *err);

/* In the caller's transaction, without a coordinator: answers every request still queued for
 * experiment id refused, "superseded by <change> made without a coordinator", since a
 * coordinator started later would apply it over that newer change. QS_EDB. */
qs_status qc_store_supersede_pin_requests(qc_store *s, const char *id, const char *change,
                                          qs_error *err);

#endif
