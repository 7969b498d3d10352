/* libFuzzer target: qs_proto_decode must reject or accept any byte string without crashing,
 * leaking or reading out of bounds (a rogue message never brings the coordinator
 * down). Built only with -DQSWEEP_FUZZ=ON and clang. Re-encoding an accepted envelope must
 * succeed. Its decode is exercised too but may fail: protobuf-c keeps unknown fields with
 * field number 0 (a non-canonical tag such as 0x85 0x00) and repacks them as a tag it then
 * rejects, so a round trip is not an invariant of the library. */
#include <stdlib.h>

#include "envelope.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    Qsweep__Envelope *env = NULL;
    qs_error err;
    if (qs_proto_decode(data, size, QS_PROTO_MAX_BYTES, "fuzz", &env, &err) != QS_OK) return 0;
    uint8_t *buf = NULL;
    size_t len = 0;
    if (qs_proto_encode(env, &buf, &len, &err) != QS_OK) abort();
    Qsweep__Envelope *again = NULL;
    if (qs_proto_decode(buf, len, (size_t)-1, "fuzz", &again, &err) == QS_OK &&
        again->body_case != env->body_case)
        abort();
    qs_proto_free(again);
    free(buf);
    qs_proto_free(env);
    return 0;
}
