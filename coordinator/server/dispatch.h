/* Dispatch (coordinator/server only): pending jobs to ready idle workers. */
#ifndef QC_SERVER_DISPATCH_H
#define QC_SERVER_DISPATCH_H

#include "state.h"

/* Assigns pending jobs to ready idle workers (scheduler.h) when something changed or a
 * backoff ended; nothing while PostgreSQL is down. */
void qc_srv_dispatch(server *s, int64_t now);

/* A worker that reported its attempt's end (other than preempted: it may be stopping) is
 * idle: it may get its next ASSIGN right behind the ACK, in the same commit, without a READY
 * round trip (proto/qsweep.proto, Result). */
void qc_srv_worker_idle(server *s, worker *w);

#endif
