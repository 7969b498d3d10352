/* An attempt's end (loop.h): the final RESULT, cut into chunks of at most
 * QS_PROTO_CHUNK_BYTES sent one at a time as the coordinator ACKs them, or FAILED; kept
 * until ACKed and resent on silence. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "delivery.h"
#include "outbox.h"
#include "pack.h"
#include "wlog.h"

void qw_loop_end_clear(worker *w) {
    for (uint32_t i = 0; i < w->end_n; i++)
        free(w->end_parts[i]);
    free(w->end_parts);
    free(w->end_lens);
    w->end_parts = NULL;
    w->end_lens = NULL;
    w->end_n = w->end_next = 0;
    w->end_buf = NULL;
    w->end_len = 0;
}

/* Takes the n parts (malloc'd buffers, the arrays too) as the attempt's end and sends the
 * first. */
static void set_end_parts(worker *w, uint8_t **parts, size_t *lens, uint32_t n, int64_t job,
                          uint32_t attempt) {
    qw_loop_end_clear(w);
    w->end_parts = parts;
    w->end_lens = lens;
    w->end_n = n;
    w->end_next = 0;
    w->end_buf = parts[0];
    w->end_len = lens[0];
    w->end_job = job;
    w->end_attempt = attempt;
    w->end_sent_ms = qs_clock_ms();
    qw_loop_send_packed(w, w->end_buf, w->end_len, n > 1 ? "final RESULT chunk" : "attempt end");
}

static void set_end(worker *w, uint8_t *buf, size_t len, int64_t job, uint32_t attempt) {
    uint8_t **parts = malloc(sizeof *parts);
    size_t *lens = malloc(sizeof *lens);
    if (!parts || !lens) {
        free(parts);
        free(lens);
        free(buf);
        qw_loop_wlog(w, "out of memory keeping the end of job %lld attempt %u", (long long)job,
                     attempt);
        return;
    }
    parts[0] = buf;
    lens[0] = len;
    set_end_parts(w, parts, lens, 1, job, attempt);
}

void qw_loop_send_failed(worker *w, int64_t job, uint32_t attempt, Qsweep__FailureClass cls,
                         const char *msg) {
    Qsweep__Failed f = QSWEEP__FAILED__INIT;
    f.job_id = job;
    f.attempt = attempt;
    f.class_ = cls;
    f.message = (char *)msg;
    f.token = (ProtobufCBinaryData){w->token_len, w->token};
    Qsweep__Envelope env = QSWEEP__ENVELOPE__INIT;
    env.body_case = QSWEEP__ENVELOPE__BODY_FAILED;
    env.failed = &f;
    uint8_t *buf = NULL;
    size_t len = 0;
    qs_error err;
    if (qs_proto_encode(&env, &buf, &len, &err) != QS_OK) {
        qw_loop_wlog(w, "encode FAILED: %s", err.msg);
        return;
    }
    set_end(w, buf, len, job, attempt);
}

/* Makes the final RESULT of metrics all the attempt's end: one frame when it fits in
 * QS_PROTO_CHUNK_BYTES, else chunks (qsweep.proto: Result) sent one at a time as the
 * coordinator ACKs them; over QS_PROTO_MAX_RESULT_BYTES the worker refuses it with a job
 * error giving its size and the limit (codec.h). */
void qw_loop_deliver_result(worker *w, int64_t job, uint32_t attempt, const metric_vec *all) {
    size_t *starts = NULL, total = 0;
    uint32_t n = 0;
    uint8_t **parts = NULL;
    size_t *lens = NULL;
    size_t limit = w->o->max_result_bytes && w->o->max_result_bytes < QS_PROTO_MAX_RESULT_BYTES
                       ? w->o->max_result_bytes
                       : QS_PROTO_MAX_RESULT_BYTES;
    bool ok = qw_loop_slice_metrics(all->v, all->n, &starts, &n, &total) == QS_OK;
    if (ok && total > limit) {
        char msg[300];
        snprintf(msg, sizeof msg,
                 "the final result of %zu metrics encodes to %zu bytes, over the limit of %zu "
                 "bytes of one result (%s): report fewer metrics per job",
                 all->n, total, limit,
                 limit == QS_PROTO_MAX_RESULT_BYTES ? "QS_PROTO_MAX_RESULT_BYTES, proto/envelope.h"
                                                    : "this worker's max_result_bytes");
        free(starts);
        qw_loop_send_failed(w, job, attempt, QSWEEP__FAILURE_CLASS__JOB_ERROR, msg);
        qw_loop_wlog(w, "job %lld attempt %u failed: %s", (long long)job, attempt, msg);
        return;
    }
    ok = ok && (parts = calloc(n, sizeof *parts)) && (lens = calloc(n, sizeof *lens));
    for (uint32_t k = 0; k < n && ok; k++) {
        size_t from = starts[k], to = k + 1 < n ? starts[k + 1] : all->n;
        ok = qw_loop_pack_result(w, job, attempt, all->v + from, to - from, true, 0, n > 1 ? k : 0,
                                 n > 1 ? n : 0, &parts[k], &lens[k]) == QS_OK;
    }
    free(starts);
    if (!ok) {
        for (uint32_t k = 0; parts && k < n; k++)
            free(parts[k]);
        free(parts);
        free(lens);
        qw_loop_send_failed(w, job, attempt, QSWEEP__FAILURE_CLASS__WORKER_ERROR,
                            "worker out of memory packing the result");
        return;
    }
    set_end_parts(w, parts, lens, n, job, attempt);
    if (n > 1)
        qw_loop_wlog(
            w, "job %lld attempt %u succeeded (%zu metrics, %zu bytes: delivered in %u chunks)",
            (long long)job, attempt, all->n, total, n);
    else
        qw_loop_wlog(w, "job %lld attempt %u succeeded (%zu metrics)", (long long)job, attempt,
                     all->n);
}
