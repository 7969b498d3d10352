/* libFuzzer target: GGUF parsing (qw_gguf_parse) on arbitrary bytes. Every tensor the parser
 * accepts is dequantized to FP32, so a missed bounds check is an out-of-bounds read under ASan.
 * Tensors above 2^24 elements are skipped to keep executions fast (their bounds are checked
 * by the same code as small ones). */
#include <stdlib.h>

#include "checkpoint_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    qw_tensor_table t = {0};
    qw_config cfg;
    qs_error err;
    if (qw_gguf_parse("fuzz.gguf", data, size, 0, &cfg, &t, &err) == QS_OK) {
        for (size_t i = 0; i < t.n; i++) {
            if (t.v[i].numel > (1 << 24)) continue;
            float *buf = malloc((size_t)t.v[i].numel * sizeof(float) + 1);
            if (buf) qw_dtype_to_f32(t.v[i].dtype, t.v[i].src, t.v[i].numel, buf);
            free(buf);
        }
    }
    qw_table_free(&t);
    return 0;
}
