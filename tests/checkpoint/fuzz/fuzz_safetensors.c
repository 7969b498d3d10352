/* libFuzzer target: safetensors header parsing (qw_safetensors_parse) on arbitrary bytes.
 * Every tensor the parser accepts is converted to FP32, so a bounds check it missed is an
 * out-of-bounds read under ASan. */
#include <stdlib.h>

#include "checkpoint_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    qw_tensor_table t = {0};
    qs_error err;
    if (qw_safetensors_parse("fuzz.safetensors", data, size, 0, &t, &err) == QS_OK) {
        for (size_t i = 0; i < t.n; i++) {
            float *buf = malloc((size_t)t.v[i].numel * sizeof(float) + 1);
            if (buf) qw_dtype_to_f32(t.v[i].dtype, t.v[i].src, t.v[i].numel, buf);
            free(buf);
        }
    }
    qw_table_free(&t);
    return 0;
}
