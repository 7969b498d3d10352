/* libFuzzer target: GGUF parsing on arbitrary bytes, in two layers.
 * 1. qw_gguf_parse on the exact-size input buffer; every tensor it accepts is dequantized to
 *    FP32, so a missed bounds check is an out-of-bounds read under ASan. Tensors above 2^24
 *    elements are skipped to keep executions fast (the same code checks their bounds).
 * 2. When that parse succeeds, the bytes go into a memfd and through the public path:
 *    qw_checkpoint_open (shape validation against the config), qw_checkpoint_tensor on every
 *    tensor of the model (conversion and Q/K un-permutation), qw_checkpoint_digest. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "checkpoint_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void open_and_read_all(const uint8_t *data, size_t size) {
    int fd = memfd_create("fuzz.gguf", MFD_CLOEXEC);
    if (fd < 0) return;
    if (write(fd, data, size) == (ssize_t)size) {
        char path[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        qw_checkpoint *ck = NULL;
        qs_error err;
        if (qw_checkpoint_open(path, &ck, &err) == QS_OK) {
            const qw_config *c = qw_checkpoint_config(ck);
            static const char *const roles[] = {"input_layernorm",  "post_attention_layernorm",
                                                "self_attn.q_proj", "self_attn.k_proj",
                                                "self_attn.v_proj", "self_attn.o_proj",
                                                "mlp.gate_proj",    "mlp.up_proj",
                                                "mlp.down_proj"};
            const float *d;
            int64_t s[2];
            int nd;
            qw_checkpoint_tensor(ck, "model.embed_tokens.weight", &d, s, &nd, &err);
            qw_checkpoint_tensor(ck, "model.norm.weight", &d, s, &nd, &err);
            qw_checkpoint_tensor(ck, "lm_head.weight", &d, s, &nd, &err);
            for (int l = 0; l < c->n_layers && l < 4; l++)
                for (size_t r = 0; r < sizeof roles / sizeof roles[0]; r++) {
                    char name[96];
                    snprintf(name, sizeof name, "model.layers.%d.%s.weight", l, roles[r]);
                    qw_checkpoint_tensor(ck, name, &d, s, &nd, &err);
                }
            char hex[65];
            qw_checkpoint_digest(ck, hex, &err);
            qw_checkpoint_close(ck);
        }
    }
    close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    qw_tensor_table t = {0};
    qw_config cfg;
    qs_error err;
    int ok = qw_gguf_parse("fuzz.gguf", data, size, 0, &cfg, &t, &err) == QS_OK;
    if (ok) {
        for (size_t i = 0; i < t.n; i++) {
            if (t.v[i].numel > (1 << 24)) continue;
            float *buf = malloc((size_t)t.v[i].numel * sizeof(float) + 1);
            if (buf) qw_dtype_to_f32(t.v[i].dtype, t.v[i].src, t.v[i].numel, buf);
            free(buf);
        }
    }
    qw_table_free(&t);
    if (ok) open_and_read_all(data, size);
    return 0;
}
