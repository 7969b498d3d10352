/* coord_codec: the envelope codec's rules (proto/envelope.h). Bad bytes are
 * produced by real protobuf-c packing of neighbouring messages, not hand-written. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "envelope.h"

static void heartbeat_roundtrips_every_field(void **state) {
    (void)state;
    Qsweep__Heartbeat hb = QSWEEP__HEARTBEAT__INIT;
    hb.job_id = 42;
    hb.attempt = 3;
    hb.step = 7;
    hb.total = 10;
    hb.phase = "eval";
    Qsweep__Envelope env = QSWEEP__ENVELOPE__INIT;
    env.body_case = QSWEEP__ENVELOPE__BODY_HEARTBEAT;
    env.heartbeat = &hb;
    uint8_t *buf = NULL;
    size_t len = 0;
    qs_error err;
    assert_int_equal(qs_proto_encode(&env, &buf, &len, &err), QS_OK);
    Qsweep__Envelope *out = NULL;
    assert_int_equal(qs_proto_decode(buf, len, QS_PROTO_MAX_BYTES, "w1", &out, &err), QS_OK);
    assert_int_equal(out->version, QS_PROTO_VERSION);
    assert_int_equal(out->body_case, QSWEEP__ENVELOPE__BODY_HEARTBEAT);
    assert_int_equal(out->heartbeat->job_id, 42);
    assert_int_equal(out->heartbeat->attempt, 3);
    assert_int_equal(out->heartbeat->step, 7);
    assert_int_equal(out->heartbeat->total, 10);
    assert_string_equal(out->heartbeat->phase, "eval");
    qs_proto_free(out);
    free(buf);
}

static void oversized_message_is_rejected_naming_the_peer(void **state) {
    (void)state;
    Qsweep__Bye bye = QSWEEP__BYE__INIT;
    char reason[200];
    memset(reason, 'x', sizeof reason - 1);
    reason[sizeof reason - 1] = '\0';
    bye.reason = reason;
    Qsweep__Envelope env = QSWEEP__ENVELOPE__INIT;
    env.body_case = QSWEEP__ENVELOPE__BODY_BYE;
    env.bye = &bye;
    uint8_t *buf = NULL;
    size_t len = 0;
    qs_error err;
    assert_int_equal(qs_proto_encode(&env, &buf, &len, &err), QS_OK);
    Qsweep__Envelope *out = (Qsweep__Envelope *)1;
    assert_int_equal(qs_proto_decode(buf, len, 100, "rogue-7", &out, &err), QS_EFORMAT);
    assert_null(out);
    assert_non_null(strstr(err.msg, "rogue-7"));
    assert_non_null(strstr(err.msg, "exceeds"));
    free(buf);
}

static void malformed_bytes_are_rejected_naming_the_peer(void **state) {
    (void)state;
    /* 0x52 0x10: field 10 (hello), length-delimited, 16 bytes long, but only 2 bytes follow. */
    const uint8_t bad[] = {0x52, 0x10, 0x01, 0x02};
    Qsweep__Envelope *out = NULL;
    qs_error err;
    assert_int_equal(qs_proto_decode(bad, sizeof bad, QS_PROTO_MAX_BYTES, "rogue", &out, &err),
                     QS_EFORMAT);
    assert_null(out);
    assert_non_null(strstr(err.msg, "rogue"));
    assert_non_null(strstr(err.msg, "malformed"));
}

static void unknown_version_is_rejected(void **state) {
    (void)state;
    Qsweep__Ready ready = QSWEEP__READY__INIT;
    Qsweep__Envelope env = QSWEEP__ENVELOPE__INIT;
    env.body_case = QSWEEP__ENVELOPE__BODY_READY;
    env.ready = &ready;
    env.version = QS_PROTO_VERSION + 1;
    /* Pack directly: qs_proto_encode would stamp the current version. */
    size_t len = qsweep__envelope__get_packed_size(&env);
    uint8_t *buf = malloc(len);
    assert_non_null(buf);
    qsweep__envelope__pack(&env, buf);
    Qsweep__Envelope *out = NULL;
    qs_error err;
    assert_int_equal(qs_proto_decode(buf, len, QS_PROTO_MAX_BYTES, "old-worker", &out, &err),
                     QS_EUNSUPPORTED);
    assert_null(out);
    assert_non_null(strstr(err.msg, "old-worker"));
    assert_non_null(strstr(err.msg, "version 2"));
    free(buf);
}

static void envelope_without_message_is_rejected(void **state) {
    (void)state;
    Qsweep__Envelope env = QSWEEP__ENVELOPE__INIT;
    env.version = QS_PROTO_VERSION;
    uint8_t buf[16];
    size_t len = qsweep__envelope__pack(&env, buf);
    Qsweep__Envelope *out = NULL;
    qs_error err;
    assert_int_equal(qs_proto_decode(buf, len, QS_PROTO_MAX_BYTES, "p", &out, &err), QS_EFORMAT);
    assert_null(out);
    assert_int_equal(qs_proto_encode(&env, &(uint8_t *){NULL}, &(size_t){0}, &err), QS_EINVAL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(heartbeat_roundtrips_every_field),
        cmocka_unit_test(oversized_message_is_rejected_naming_the_peer),
        cmocka_unit_test(malformed_bytes_are_rejected_naming_the_peer),
        cmocka_unit_test(unknown_version_is_rejected),
        cmocka_unit_test(envelope_without_message_is_rejected),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
