/* The Hugging Face folder a safetensors layout writes: the linears list and the packed form each
 * is written from, the tensors kept as stored, config.json and the tokenizer files
 * (export_internal.h). */
#include "export.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "export_internal.h"
#include "model.h"
#include "new_file.h"
#include "st_writer.h"

/* config.json of a GGUF source, from its llama.* keys (transformers' LlamaConfig names). */
static json_t *config_from_gguf(const qw_config *c) {
    json_t *j = json_pack(
        "{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:b, s:i, s:i, s:s, s:s}",
        "architectures", "LlamaForCausalLM", "model_type", "llama", "hidden_size", c->dim,
        "intermediate_size", c->hidden_dim, "num_hidden_layers", c->n_layers, "num_attention_heads",
        c->n_heads, "num_key_value_heads", c->n_kv_heads, "head_dim", c->head_dim, "vocab_size",
        c->vocab_size, "max_position_embeddings", c->max_seq_len, "rms_norm_eps",
        (double)c->norm_eps, "rope_theta", (double)c->rope_theta, "tie_word_embeddings",
        c->tied_embeddings, "bos_token_id", c->bos_token_id, "eos_token_id", c->eos_token_id,
        "hidden_act", "silu", "torch_dtype", "float32");
    if (j && c->rope_factor > 0)
        json_object_set_new(
            j, "rope_scaling",
            json_pack("{s:s, s:f, s:f, s:f, s:i}", "rope_type", "llama3", "factor",
                      (double)c->rope_factor, "low_freq_factor", (double)c->rope_low_freq_factor,
                      "high_freq_factor", (double)c->rope_high_freq_factor,
                      "original_max_position_embeddings", c->rope_original_max_pos));
    return j;
}

int qw_export_path_join(char *out, size_t cap, const char *dir, const char *name) {
    int n = snprintf(out, cap, "%s/%s", dir, name);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

qs_status qw_export_write_json(const char *dir, const char *name, json_t *j, qs_error *err) {
    char path[4096];
    if (qw_export_path_join(path, sizeof path, dir, name))
        return qs_error_set(err, QS_EINVAL, "%s: path too long", dir);
    char *s = j ? json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    if (!s) return qs_error_set(err, QS_ENOMEM, "%s: out of memory", path);
    size_t n = strlen(s);
    s[n] = '\n'; /* json_dumps leaves room: replaced NUL, written with its length */
    qs_status st = qs_write_new_file(path, s, n + 1, 0644, err);
    free(s);
    return st;
}

/* Copies src_dir/name into dir when it exists. */
static qs_status copy_if_present(const char *src_dir, const char *dir, const char *name,
                                 qs_error *err) {
    char src[4096], dst[4096];
    if (qw_export_path_join(src, sizeof src, src_dir, name) ||
        qw_export_path_join(dst, sizeof dst, dir, name))
        return qs_error_set(err, QS_EINVAL, "%s: path too long", dir);
    FILE *f = fopen(src, "rb");
    if (!f)
        return errno == ENOENT ? QS_OK : qs_error_set(err, QS_EIO, "%s: %s", src, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    size_t k;
    while (buf && (k = fread(buf + n, 1, cap - n, f)) > 0) {
        n += k;
        if (n == cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b) {
                free(buf);
                buf = NULL;
            } else {
                buf = b;
            }
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf) return qs_error_set(err, QS_ENOMEM, "%s: out of memory", src);
    qs_status st =
        bad ? qs_error_set(err, QS_EIO, "%s: read error", src) : qs_write_new_file(dst, buf, n, 0644, err);
    free(buf);
    return st;
}

/* Adds tensor `name` as stored: F32/F16/BF16 bytes as they are, other types (GGUF blocks) and
 * GGUF's permuted Q/K as exact FP32 in HF order. */
static qs_status add_stored(qw_st_writer *w, qw_checkpoint *ck, const char *name, qs_error *err) {
    qw_stored_tensor v;
    int64_t shape[2];
    int ndim;
    qs_status st = qw_checkpoint_tensor_stored(ck, name, &v, shape, &ndim, err);
    if (st) return st;
    static const char *const ST[] = {
        [QW_DT_F32] = "F32", [QW_DT_F16] = "F16", [QW_DT_BF16] = "BF16"};
    if ((v.dtype == QW_DT_F32 || v.dtype == QW_DT_F16 || v.dtype == QW_DT_BF16) && !v.permute_heads)
        return qw_st_writer_add(w, name, ST[v.dtype], ndim, shape, v.data,
                                v.row_bytes * (size_t)v.rows, err);
    size_t n = (size_t)v.rows * (size_t)v.cols;
    float *f = malloc((n ? n : 1) * sizeof *f);
    if (!f) return qs_error_set(err, QS_ENOMEM, "export: out of memory converting %s", name);
    qw_stored_rows_f32(&v, 0, v.rows, f);
    st = qw_st_writer_add(w, name, "F32", ndim, shape, f, n * sizeof *f, err);
    free(f);
    return st;
}

qs_status qw_export_list_linears(const qw_model *m, const qw_policy *p, ex_linear **out,
                                int *n, qs_error *err) {
    int nl = qw_model_config(m)->n_layers, count = nl * QW_LINEAR_KINDS + 1;
    ex_linear *v = calloc((size_t)count, sizeof *v);
    if (!v) return qs_error_set(err, QS_ENOMEM, "export: out of memory");
    for (int i = 0; i < count; i++) {
        v[i].index = i;
        v[i].spec = i < nl * QW_LINEAR_KINDS ? &p->linears[i] : &p->lm_head;
        qw_model_linear_name(m, i, v[i].name, sizeof v[i].name);
    }
    *out = v;
    *n = count;
    return QS_OK;
}

const qk_packed *qw_export_packed(const qw_model *m, const qw_method_state *ms, int index) {
    if (qw_method_made(ms, index)) return qw_method_packed(ms, index);
    int64_t axis, start;
    return qw_model_packed(m, -1, index, &axis, &start);
}

static const char *const TOKENIZER_FILES[] = {"tokenizer.json", "tokenizer_config.json",
                                              "special_tokens_map.json", "generation_config.json",
                                              "tokenizer.model"};

qs_status qw_export_finish(const qw_export_request *r, qw_checkpoint *ck, qw_st_writer *w,
                           const ex_linear *lin, int n_lin, const char *tmp, json_t *qconfig,
                           size_t *done, size_t total, qs_error *err) {
    const qw_config *cfg = qw_checkpoint_config(ck);
    qs_status st = QS_OK;
    size_t nt = qw_checkpoint_tensor_count(ck);
    for (size_t t = 0; t < nt && !st; t++) {
        const char *name = qw_checkpoint_tensor_name(ck, t);
        if (strncmp(name, "model.", 6) != 0 && strcmp(name, "lm_head.weight") != 0)
            continue; /* GGUF-only tensors (rope_freqs: config.json's rope_scaling holds it) */
        int packed = 0;
        for (int i = 0; i < n_lin && !packed; i++) {
            size_t l = strlen(lin[i].name);
            packed =
                lin[i].group >= 0 && !strncmp(name, lin[i].name, l) && !strcmp(name + l, ".weight");
        }
        if (!packed) st = add_stored(w, ck, name, err);
    }
    char path[4096];
    if (!st && qw_export_path_join(path, sizeof path, tmp, "model.safetensors"))
        st = qs_error_set(err, QS_EINVAL, "%s: path too long", tmp);
    if (!st) st = qw_st_writer_write(w, path, err);
    if (r->progress) r->progress(r->progress_ctx, ++*done, total);
    /* config.json: the source's, or one from the GGUF keys, with the quantization_config */
    json_t *config = NULL;
    struct stat sb;
    int hf = stat(r->model_path, &sb) == 0 && S_ISDIR(sb.st_mode);
    if (!st) {
        if (hf) {
            json_error_t je;
            if (qw_export_path_join(path, sizeof path, r->model_path, "config.json"))
                st = qs_error_set(err, QS_EINVAL, "%s: path too long", r->model_path);
            else if (!(config = json_load_file(path, JSON_PRESERVE_ORDER, &je)))
                st = qs_error_set(err, QS_EFORMAT, "%s: line %d: %s", path, je.line, je.text);
        } else {
            config = config_from_gguf(cfg);
        }
    }
    if (!st) {
        json_object_set_new(config, "quantization_config", qconfig);
        qconfig = NULL;
        st = qw_export_write_json(tmp, "config.json", config, err);
    }
    json_decref(config);
    json_decref(qconfig);
    if (r->progress) r->progress(r->progress_ctx, ++*done, total);
    for (size_t i = 0; hf && !st && i < sizeof TOKENIZER_FILES / sizeof TOKENIZER_FILES[0]; i++)
        st = copy_if_present(r->model_path, tmp, TOKENIZER_FILES[i], err);
    if (r->progress) r->progress(r->progress_ctx, ++*done, total);
    return st;
}
