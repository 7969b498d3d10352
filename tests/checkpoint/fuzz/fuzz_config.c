/* libFuzzer target: config.json parsing (qw_config_parse_json) on arbitrary bytes. */
#include "checkpoint_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    qw_config cfg;
    qs_error err;
    qw_config_parse_json("fuzz/config.json", (const char *)data, size, &cfg, &err);
    return 0;
}
