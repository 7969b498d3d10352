/* libFuzzer target: token-file validation (qw_tokens_parse) on arbitrary bytes. */
#include "checkpoint_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    qw_tokens t;
    qs_error err;
    if (qw_tokens_parse("fuzz.tok", data, size, &t, &err) == QS_OK) qw_tokens_free(&t);
    return 0;
}
