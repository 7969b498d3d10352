/* Hugging Face checkpoint writer (hfsave.h). */
#include "hfsave.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "replace_file.h"

static qs_status write_config(const qw_config *c, const char *dir, qs_error *err) {
    char rope[512] = "null";
    if (c->rope_factor > 0)
        snprintf(rope, sizeof rope,
                 "{\"factor\": %.9g, \"high_freq_factor\": %.9g, \"low_freq_factor\": %.9g, "
                 "\"original_max_position_embeddings\": %d, \"rope_type\": \"llama3\"}",
                 c->rope_factor, c->rope_high_freq_factor, c->rope_low_freq_factor,
                 c->rope_original_max_pos);
    char text[2048];
    int n = snprintf(text, sizeof text,
                     "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n"
                     "  \"model_type\": \"llama\",\n  \"hidden_act\": \"silu\",\n"
                     "  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n"
                     "  \"num_hidden_layers\": %d,\n  \"num_attention_heads\": %d,\n"
                     "  \"num_key_value_heads\": %d,\n  \"head_dim\": %d,\n"
                     "  \"vocab_size\": %d,\n  \"max_position_embeddings\": %d,\n"
                     "  \"rms_norm_eps\": %.9g,\n  \"rope_theta\": %.9g,\n"
                     "  \"rope_scaling\": %s,\n  \"tie_word_embeddings\": %s,\n"
                     "  \"bos_token_id\": %d,\n  \"eos_token_id\": %d,\n"
                     "  \"attention_bias\": false,\n  \"mlp_bias\": false,\n"
                     "  \"torch_dtype\": \"float32\"\n}\n",
                     c->dim, c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim,
                     c->vocab_size, c->max_seq_len, c->norm_eps, c->rope_theta, rope,
                     c->tied_embeddings ? "true" : "false", c->bos_token_id, c->eos_token_id);
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    qs_replace_file f;
    qs_status st = qs_replace_file_open(path, NULL, &f, err);
    if (st != QS_OK) return st;
    fwrite(text, 1, (size_t)n, f.f); /* an error is sticky on the stream: the commit reports it */
    return qs_replace_file_commit(&f, err);
}

qs_status qw_tmodel_save_hf(qw_tmodel *m, const char *dir, qs_error *err) {
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return qs_error_set(err, QS_EIO, "%s: mkdir: %s", dir, strerror(errno));
    qs_status st = write_config(qw_tmodel_config(m), dir, err);
    if (st != QS_OK) return st;
    /* header */
    int nt = qw_tmodel_n_tensors(m);
    size_t cap = 256 + (size_t)nt * 192, len = 0;
    char *hdr = malloc(cap);
    if (!hdr) return qs_error_set(err, QS_ENOMEM, "%s: safetensors header", dir);
    len += (size_t)snprintf(hdr + len, cap - len, "{\"__metadata__\":{\"format\":\"pt\"}");
    size_t off = 0;
    for (int i = 0; i < nt; i++) {
        qw_tensor_view v;
        qw_tmodel_tensor(m, i, &v);
        size_t bytes = (size_t)v.rows * v.cols * 4;
        if (v.cols == 1)
            len += (size_t)snprintf(
                hdr + len, cap - len,
                ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%d],\"data_offsets\":[%zu,%zu]}", v.name,
                v.rows, off, off + bytes);
        else
            len += (size_t)snprintf(
                hdr + len, cap - len,
                ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%d,%d],\"data_offsets\":[%zu,%zu]}", v.name,
                v.rows, v.cols, off, off + bytes);
        off += bytes;
    }
    len += (size_t)snprintf(hdr + len, cap - len, "}");
    while (len % 8)
        hdr[len++] = ' ';
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    qs_replace_file f;
    st = qs_replace_file_open(path, NULL, &f, err);
    if (st != QS_OK) {
        free(hdr);
        return st;
    }
    uint8_t le[8];
    for (int b = 0; b < 8; b++)
        le[b] = (uint8_t)((uint64_t)len >> (8 * b));
    fwrite(le, 1, 8, f.f); /* errors are sticky on the stream: the commit reports them */
    fwrite(hdr, 1, len, f.f);
    /* the parameters, in tensor order, as the backend holds them */
    float *p = malloc(qw_tmodel_n_params(m) * sizeof *p);
    if (!p) st = qs_error_set(err, QS_ENOMEM, "%s: %zu parameters", dir, qw_tmodel_n_params(m));
    if (st == QS_OK) st = qw_tmodel_fetch(m, QW_TMODEL_PARAMS, p, err);
    for (int i = 0; st == QS_OK && i < nt; i++) {
        qw_tensor_view v;
        qw_tmodel_tensor(m, i, &v);
        fwrite(p + v.offset, 4, (size_t)v.rows * v.cols, f.f);
    }
    free(p);
    free(hdr);
    if (st != QS_OK) {
        qs_replace_file_abort(&f);
        return st;
    }
    return qs_replace_file_commit(&f, err);
}
