/* Leases and silence (coordinator/server only): renewal, expiry, the stall of the coordinator
 * itself, and forgetting workers that left or went silent. */
#ifndef QC_SERVER_LEASE_H
#define QC_SERVER_LEASE_H

#include "state.h"

/* Renews the lease to now + lease_ms in memory, and in attempts.lease_expires_at when the
 * stored one has less than half a lease left: one write per job every lease/2 at most, so
 * observers see live leases without a write per heartbeat. */
void qc_srv_renew_lease(server *s, job *j, int64_t now);

/* Ends every running attempt whose lease is past (lost, counts), and forgets idle workers
 * silent for worker_timeout_ms. */
void qc_srv_check_leases(server *s, int64_t now);

/* The loop itself did not run for stalled_ms (SIGSTOP, a VM pause, swapping): the workers'
 * heartbeats of that time are still on their way in, so a lease checked now would expire
 * for the coordinator's silence, not the worker's. Every running attempt (and every known
 * worker) gets a full lease from now to report before any lease is checked (server.h). */
void qc_srv_on_stall(server *s, int64_t stalled_ms, int64_t now);

/* Removes w from the registry and frees it; its job, if any, keeps its lease (which decides);
 * workers.last_seen is written as gone. */
void qc_srv_forget_worker(server *s, worker *w);

/* Forgets every idle worker silent for more than worker_timeout_ms. */
void qc_srv_forget_silent_workers(server *s, int64_t now);

#endif
