/* What the coordinator sends (proto/qsweep.proto), one function per message kind: ASSIGN,
 * ACK, CANCEL, REREGISTER (a HEARTBEAT only says the coordinator lives); qw_loop_handle
 * dispatches. */
#include <stdatomic.h>
#include <stdlib.h>

#include "attempt.h"
#include "clock.h"
#include "delivery.h"
#include "handlers.h"
#include "link.h"
#include "outbox.h"
#include "wlog.h"

/* ASSIGN: a whole one starts the job; a part of a split one is put together first. */
static void on_assign(worker *w, const Qsweep__Assign *a) {
    if (a->chunks > 1)
        qw_loop_receive_assign(w, a);
    else
        qw_loop_start_job(w, a);
}

/* ACK: of the attempt's end (final: delivered), of a chunk of it (send the one wanted next),
 * or of a partial RESULT batch (forget it). */
static void on_ack(worker *w, const Qsweep__Ack *a) {
    if (a->final && w->end_buf && a->job_id == w->end_job && a->attempt == w->end_attempt) {
        qw_loop_end_clear(w);
        w->ready_sent = false;
    } else if (a->chunk && w->end_buf && a->job_id == w->end_job && a->attempt == w->end_attempt &&
               a->next_chunk < w->end_n) {
        /* the coordinator holds the chunks before next_chunk: send the one it wants */
        w->end_next = a->next_chunk;
        w->end_buf = w->end_parts[w->end_next];
        w->end_len = w->end_lens[w->end_next];
        qw_loop_send_packed(w, w->end_buf, w->end_len, "final RESULT chunk");
        w->end_sent_ms = qs_clock_ms();
    } else if (!a->final && w->job && a->job_id == w->job->job_id &&
               a->attempt == w->job->attempt) {
        for (size_t i = 0; i < w->n_batches; i++)
            if (w->batches[i].seq == a->seq) {
                free(w->batches[i].metrics.v);
                w->batches[i] = w->batches[--w->n_batches];
                break;
            }
    }
}

/* CANCEL: of the running attempt (its job polls qw_job_cancelled), of one whose end waits
 * (nothing to deliver any more), or of one whose ASSIGN is still arriving. */
static void on_cancel(worker *w, const Qsweep__Cancel *c) {
    if (w->job && c->job_id == w->job->job_id && c->attempt == w->job->attempt) {
        qw_loop_wlog(w, "job %lld attempt %u cancelled by the coordinator: %s",
                     (long long)w->job->job_id, w->job->attempt, c->reason);
        atomic_store(&w->job->cancel, true);
    } else if (w->end_buf && c->job_id == w->end_job && c->attempt == w->end_attempt) {
        qw_loop_end_clear(w); /* the coordinator has given up on this attempt */
        w->ready_sent = false;
    } else if (w->rx_spec && c->job_id == w->rx_job && c->attempt == w->rx_attempt) {
        qw_loop_rx_clear(w); /* its ASSIGN was still arriving */
        w->ready_sent = false;
    }
}

/* REREGISTER: the coordinator does not know this worker (it restarted): HELLO again. */
static void on_reregister(worker *w, const Qsweep__Reregister *r) {
    qw_loop_wlog(w, "coordinator asks to re-register: %s", r->reason);
    qw_loop_reregister(w);
}

void qw_loop_handle(worker *w, Qsweep__Envelope *env) {
    switch (env->body_case) {
    case QSWEEP__ENVELOPE__BODY_ASSIGN:
        on_assign(w, env->assign);
        break;
    case QSWEEP__ENVELOPE__BODY_ACK:
        on_ack(w, env->ack);
        break;
    case QSWEEP__ENVELOPE__BODY_CANCEL:
        on_cancel(w, env->cancel);
        break;
    case QSWEEP__ENVELOPE__BODY_REREGISTER:
        on_reregister(w, env->reregister);
        break;
    case QSWEEP__ENVELOPE__BODY_HEARTBEAT:
        break; /* liveness only: last_heard_ms is updated by the caller */
    default:
        qw_loop_wlog(w, "unexpected %s from the coordinator, dropped",
                     qs_proto_kind_name(env->body_case));
    }
}
