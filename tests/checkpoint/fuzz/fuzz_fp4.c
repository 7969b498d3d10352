/* libFuzzer target: the FP4 checkpoint reader (qw_fp4_resolve: compressed-tensors' and ModelOpt's
 * quantization_config, packed E2M1 codes and their scales) on arbitrary bytes.
 * Input: 2 bytes (little-endian) n, then n bytes of config.json, then a safetensors file. */
#include "checkpoint_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    size_t n = (size_t)data[0] | (size_t)data[1] << 8;
    if (n > size - 2) return 0;
    const char *cfg = (const char *)data + 2;
    qw_tensor_table t = {0};
    qs_error err;
    if (qw_safetensors_parse("fuzz.safetensors", data + 2 + n, size - 2 - n, 0, &t, &err) ==
        QS_OK) {
        const char *const paths[] = {"fuzz.safetensors"};
        json_t *root = json_loadb(cfg, n, 0, NULL);
        /* a folder that does not exist: no hf_quant_config.json beside the config */
        if (root)
            qw_fp4_resolve("/nonexistent-qsweep-fuzz", "fuzz/config.json", root, paths, &t, &err);
        json_decref(root);
    }
    qw_table_free(&t);
    return 0;
}
