/* Leases (server.h): renewal by heartbeats naming the current attempt, expiry on the
 * coordinator's monotonic clock (the attempt is lost, its worker told to stop), the
 * re-attach window after a restart, and the full lease given to every running attempt after
 * a stall of the coordinator itself. */
#include <stdio.h>

#include "log.h"
#include "lease.h"
#include "outbox.h"
#include "transitions.h"

/* Renews the lease to now + lease_ms in memory, and in attempts.lease_expires_at when the
 * stored one has less than half a lease left: one write per job every lease/2 at most, so
 * observers see live leases without a write per heartbeat. */
void qc_srv_renew_lease(server *s, job *j, int64_t now) {
    j->lease_deadline = now + s->lease_ms;
    if (now + s->lease_ms / 2 < j->db_lease_until) return;
    j->db_lease_until = now + s->lease_ms;
    qc_srv_must(s, qc_store_batch_lease_renewed(s->batch, j->id, (int32_t)j->attempt,
                                                s->lease_ms / 1000.0, &s->batch_err));
}

void qc_srv_check_leases(server *s, int64_t now) {
    for (size_t i = 0; i < s->jobs.n; i++) {
        job *j = s->jobs.all[i];
        if (j->state != J_RUNNING || now <= j->lease_deadline) continue;
        char why[400];
        const char *cause = "lease";
        if (j->worker) {
            snprintf(why, sizeof why, "lease expired: no heartbeat from worker %s for %d ms",
                     j->worker->name, s->lease_ms);
            qc_srv_send_cancel(s, j->worker->rid, j->worker->rid_len, j->id, j->attempt,
                               "lease expired");
        } else if (j->rebuilt) {
            snprintf(why, sizeof why,
                     "worker %s did not re-attach within %d ms of a coordinator restart",
                     j->worker_name ? j->worker_name : "?", s->grace_ms);
            cause = "grace";
        } else {
            snprintf(why, sizeof why,
                     "lease expired: worker %s re-registered from a new connection without "
                     "this attempt (its process restarted) and no heartbeat named it for %d ms",
                     j->worker_name ? j->worker_name : "?", s->lease_ms);
            cause = "restart";
        }
        qc_srv_end_attempt(s, j, QC_ATTEMPT_LOST, cause, why, true);
    }
    qc_srv_forget_silent_workers(s, now);
}

/* The loop itself did not run for stalled_ms (SIGSTOP, a VM pause, swapping): the workers'
 * heartbeats of that time are still on their way in, so a lease checked now would expire
 * for the coordinator's silence, not the worker's. A stall longer than a worker's
 * coordinator timeout also makes the worker reconnect and re-attach, as after a restart.
 * Every running attempt (and every known worker) gets the longer of a lease and the restart's
 * re-attach grace from now to report before any lease is checked (server.h). */
void qc_srv_on_stall(server *s, int64_t stalled_ms, int64_t now) {
    int give_ms = s->grace_ms > s->lease_ms ? s->grace_ms : s->lease_ms;
    size_t running = 0;
    for (size_t i = 0; i < s->jobs.n; i++) {
        job *j = s->jobs.all[i];
        if (j->state != J_RUNNING || j->lease_deadline == NEVER) continue;
        if (j->lease_deadline < now + give_ms) j->lease_deadline = now + give_ms;
        running++;
    }
    for (size_t i = 0; i < s->workers.n; i++)
        if (s->workers.all[i]->last_seen < now) s->workers.all[i]->last_seen = now;
    qc_log("the coordinator did not run for %lld ms (stopped, a paused VM, swapping?): giving "
           "%zu running attempts %d ms to report before any lease is checked",
           (long long)stalled_ms, running, give_ms);
}

void qc_srv_forget_worker(server *s, worker *w) {
    qc_srv_must(s, qc_store_batch_worker_alive(s->batch, w->name, true, &s->batch_err));
    qc_srv_drop_worker(&s->workers, w);
}

void qc_srv_forget_silent_workers(server *s, int64_t now) {
    for (size_t i = 0; i < s->workers.n;) {
        worker *w = s->workers.all[i];
        if (!w->job && now - w->last_seen > s->worker_timeout_ms) {
            qc_log("worker %s silent for %lld ms: forgotten", w->name,
                   (long long)(now - w->last_seen));
            qc_srv_forget_worker(s, w);
        } else {
            i++;
        }
    }
}
