/* RESULT envelopes from metrics (pack.h): one envelope of metrics, and the slices of a final
 * RESULT that each fit a frame. */
#include <stdlib.h>
#include <string.h>

#include "pack.h"

/* Packs n metrics v into a RESULT envelope in *buf (malloc'd); chunk/chunks as in
 * qsweep.proto (0, 0: not split). */
qs_status qw_loop_pack_result(const worker *w, int64_t job, uint32_t attempt, const metric_rec *v,
                              size_t n, bool final, uint64_t seq, uint32_t chunk, uint32_t chunks,
                              uint8_t **buf, size_t *len) {
    Qsweep__Metric *ms = calloc(n ? n : 1, sizeof *ms);
    Qsweep__Metric **mp = calloc(n ? n : 1, sizeof *mp);
    if (!ms || !mp) {
        free(ms);
        free(mp);
        return QS_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        qsweep__metric__init(&ms[i]);
        ms[i].name = (char *)v[i].name;
        ms[i].value = v[i].value;
        ms[i].step = v[i].step;
        ms[i].final = v[i].final;
        mp[i] = &ms[i];
    }
    Qsweep__Result r = QSWEEP__RESULT__INIT;
    r.job_id = job;
    r.attempt = attempt;
    r.final = final;
    r.seq = seq;
    r.chunk = chunk;
    r.chunks = chunks;
    r.token = (ProtobufCBinaryData){w->token_len, (uint8_t *)w->token};
    r.n_metrics = n;
    r.metrics = mp;
    Qsweep__Envelope env = QSWEEP__ENVELOPE__INIT;
    env.body_case = QSWEEP__ENVELOPE__BODY_RESULT;
    env.result = &r;
    qs_error err;
    qs_status st = qs_proto_encode(&env, buf, len, &err);
    free(ms);
    free(mp);
    return st;
}

/* Bytes metric m adds to a RESULT: its packed size plus the field's tag and length. */
static size_t metric_wire_bytes(const metric_rec *m) {
    Qsweep__Metric pm = QSWEEP__METRIC__INIT;
    pm.name = (char *)m->name;
    pm.value = m->value;
    pm.step = m->step;
    pm.final = m->final;
    return qsweep__metric__get_packed_size(&pm) + 4;
}

/* Splits v[0..n) into consecutive slices of at most QS_PROTO_CHUNK_BYTES on the wire (less
 * room for the RESULT's own fields): starts[k] is where slice k begins, *n_slices their
 * count (at least 1); *total the metrics' wire bytes. starts is malloc'd. */
qs_status qw_loop_slice_metrics(const metric_rec *v, size_t n, size_t **starts, uint32_t *n_slices,
                                size_t *total) {
    const size_t room = QS_PROTO_CHUNK_BYTES - 64;
    size_t cap = 16, k = 0, bytes = 0;
    size_t *st = malloc(cap * sizeof *st);
    if (!st) return QS_ENOMEM;
    st[k++] = 0;
    *total = 0;
    for (size_t i = 0; i < n; i++) {
        size_t b = metric_wire_bytes(&v[i]);
        *total += b;
        if (bytes + b > room && bytes > 0) {
            if (k == cap) {
                size_t *q = realloc(st, 2 * cap * sizeof *st);
                if (!q) {
                    free(st);
                    return QS_ENOMEM;
                }
                st = q;
                cap *= 2;
            }
            st[k++] = i;
            bytes = 0;
        }
        bytes += b;
    }
    *starts = st;
    *n_slices = (uint32_t)k;
    return QS_OK;
}
