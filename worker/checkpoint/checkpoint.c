/* Opening a checkpoint: Hugging Face directory (config.json, model.safetensors or
 * model.safetensors.index.json + shards) or a GGUF file; validating the config against the
 * tensor shapes; FP32 views of tensors; the model digest. */
#include "checkpoint_internal.h"

#include <jansson.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct qw_checkpoint {
    char *path;
    qw_config cfg;
    qw_mapped_file *files; /* digest order: GGUF file; or config.json, [index], shards by name */
    int n_files;
    qw_tensor_table table;
    int have_digest;
    char digest[65];
};

static qs_status qw_ck_add_file(qw_checkpoint *ck, const char *path, qs_error *err) {
    qw_mapped_file *v = realloc(ck->files, (size_t)(ck->n_files + 1) * sizeof *v);
    if (!v) return qs_error_set(err, QS_ENOMEM, "%s: out of memory", path);
    ck->files = v;
    qs_status st = qw_map_file(path, &ck->files[ck->n_files], err);
    if (st) return st;
    ck->n_files++;
    return QS_OK;
}

static char *qw_join(const char *dir, const char *name) {
    char *p = NULL;
    if (asprintf(&p, "%s/%s", dir, name) < 0) return NULL;
    return p;
}

static int qw_cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* model.safetensors.index.json: {"weight_map": {tensor: shard file name}}. Maps the shards
 * (sorted by name, each once), parses them, and checks each mapped tensor is in its shard. */
static qs_status qw_ck_open_sharded(qw_checkpoint *ck, const char *index_path, qs_error *err) {
    qs_status st = qw_ck_add_file(ck, index_path, err);
    if (st) return st;
    const qw_mapped_file *idx = &ck->files[ck->n_files - 1];
    json_error_t je;
    json_t *root = json_loadb((const char *)idx->data, idx->size, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return qs_error_set(err, QS_EFORMAT, "%s: line %d, column %d: not valid JSON: %s",
                            index_path, je.line, je.column, je.text);
    char **shards = NULL;
    size_t n_shards = 0;
    int first_shard = ck->n_files;
    json_t *wm = json_object_get(root, "weight_map");
    const char *tname;
    json_t *fname;
    if (!json_is_object(wm) || json_object_size(wm) == 0) {
        st =
            qs_error_set(err, QS_EFORMAT,
                         "%s: field \"weight_map\" is missing, empty or not an object", index_path);
        goto done;
    }
    shards = calloc(json_object_size(wm), sizeof *shards);
    if (!shards) {
        st = qs_error_set(err, QS_ENOMEM, "%s: out of memory", index_path);
        goto done;
    }
    json_object_foreach(wm, tname, fname) {
        const char *s = json_is_string(fname) ? json_string_value(fname) : NULL;
        /* A shard is a file beside the index: no directories, no "..", no hidden path tricks. */
        if (!s || !*s || strchr(s, '/') || strcmp(s, ".") == 0 || strcmp(s, "..") == 0) {
            st = qs_error_set(err, QS_EFORMAT,
                              "%s: field \"weight_map.%s\" is not a plain file name", index_path,
                              tname);
            goto done;
        }
        size_t i = 0;
        while (i < n_shards && strcmp(shards[i], s) != 0)
            i++;
        if (i == n_shards) shards[n_shards++] = (char *)s;
    }
    qsort(shards, n_shards, sizeof *shards, qw_cmp_str);
    for (size_t i = 0; i < n_shards; i++) {
        char *p = qw_join(ck->path, shards[i]);
        if (!p) {
            st = qs_error_set(err, QS_ENOMEM, "%s: out of memory", index_path);
            goto done;
        }
        st = qw_ck_add_file(ck, p, err);
        free(p);
        if (st) {
            qs_error_wrap(err, "%s: shard named in \"weight_map\"", index_path);
            goto done;
        }
        const qw_mapped_file *f = &ck->files[ck->n_files - 1];
        if ((st =
                 qw_safetensors_parse(f->path, f->data, f->size, ck->n_files - 1, &ck->table, err)))
            goto done;
    }
    json_object_foreach(wm, tname, fname) {
        const qw_tensor_entry *e = qw_table_find(&ck->table, tname);
        int want = first_shard;
        while (strcmp(ck->files[want].path + strlen(ck->path) + 1, json_string_value(fname)) != 0)
            want++;
        if (!e || e->file_index != want) {
            st = qs_error_set(
                err, QS_EFORMAT,
                "%s: field \"weight_map.%s\" names shard %s, which does not hold that tensor",
                index_path, tname, json_string_value(fname));
            goto done;
        }
    }
done:
    free(shards);
    json_decref(root);
    return st;
}

/* Packed FP4 linears (compressed-tensors) served as FP32 weights (fp4_checkpoint.c). */
static qs_status qw_ck_resolve_fp4(qw_checkpoint *ck, const char *cfg_path, json_t *cfg_root,
                                   qs_error *err) {
    const char **paths = malloc((size_t)ck->n_files * sizeof *paths);
    if (!paths) return qs_error_set(err, QS_ENOMEM, "%s: out of memory", ck->path);
    for (int i = 0; i < ck->n_files; i++)
        paths[i] = ck->files[i].path;
    qs_status st = qw_fp4_resolve(ck->path, cfg_path, cfg_root, paths, &ck->table, err);
    free(paths);
    return st;
}

static qs_status qw_ck_open_hf(qw_checkpoint *ck, qs_error *err) {
    char *cfg_path = qw_join(ck->path, "config.json");
    json_t *cfg_root = NULL; /* config.json, parsed once for the config and the FP4 reader */
    char *index_path = qw_join(ck->path, "model.safetensors.index.json");
    char *single_path = qw_join(ck->path, "model.safetensors");
    qs_status st = QS_OK;
    if (!cfg_path || !index_path || !single_path) {
        st = qs_error_set(err, QS_ENOMEM, "%s: out of memory", ck->path);
        goto done;
    }
    if ((st = qw_ck_add_file(ck, cfg_path, err))) goto done;
    if ((st = qw_config_parse_json_root(cfg_path, (const char *)ck->files[0].data,
                                        ck->files[0].size, &ck->cfg, &cfg_root, err)))
        goto done;
    struct stat sb;
    if (stat(index_path, &sb) == 0) {
        st = qw_ck_open_sharded(ck, index_path, err);
    } else if (stat(single_path, &sb) == 0) {
        if ((st = qw_ck_add_file(ck, single_path, err))) goto done;
        const qw_mapped_file *f = &ck->files[ck->n_files - 1];
        st = qw_safetensors_parse(f->path, f->data, f->size, ck->n_files - 1, &ck->table, err);
    } else {
        st = qs_error_set(
            err, QS_ENOTFOUND,
            "%s: neither model.safetensors nor model.safetensors.index.json is present", ck->path);
    }
    if (!st) st = qw_ck_resolve_fp4(ck, cfg_path, cfg_root, err);
done:
    json_decref(cfg_root);
    free(cfg_path);
    free(index_path);
    free(single_path);
    return st;
}

/* Checks one tensor's presence and HF shape against what the config implies. */
static qs_status qw_ck_expect(qw_checkpoint *ck, const char *name, int ndim, int64_t d0, int64_t d1,
                              const char *fields, qs_error *err) {
    const qw_tensor_entry *e = qw_table_find(&ck->table, name);
    if (!e)
        return qs_error_set(err, QS_ENOTFOUND,
                            "%s: tensor \"%s\" is missing (the config declares %d blocks, "
                            "tie_word_embeddings %s)",
                            ck->path, name, ck->cfg.n_layers,
                            ck->cfg.tied_embeddings ? "true" : "false");
    const char *file = ck->files[e->file_index].path;
    if (e->ndim != ndim || e->shape[0] != d0 || (ndim == 2 && e->shape[1] != d1)) {
        char got[96] = "[";
        for (int i = 0; i < e->ndim; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? ", " : "",
                     (long long)e->shape[i]);
        snprintf(got + strlen(got), sizeof got - strlen(got), "]");
        if (ndim == 2)
            return qs_error_set(
                err, QS_EFORMAT,
                "%s: tensor \"%s\" has shape %s but the config (%s) implies [%lld, %lld]", file,
                name, got, fields, (long long)d0, (long long)d1);
        return qs_error_set(err, QS_EFORMAT,
                            "%s: tensor \"%s\" has shape %s but the config (%s) implies [%lld]",
                            file, name, got, fields, (long long)d0);
    }
    return QS_OK;
}

static qs_status qw_ck_validate(qw_checkpoint *ck, qs_error *err) {
    const qw_config *c = &ck->cfg;
    int64_t q = (int64_t)c->n_heads * c->head_dim, kv = (int64_t)c->n_kv_heads * c->head_dim;
    qs_status st;
    if ((st = qw_ck_expect(ck, "model.embed_tokens.weight", 2, c->vocab_size, c->dim,
                           "vocab_size, hidden_size", err)))
        return st;
    if ((st = qw_ck_expect(ck, "model.norm.weight", 1, c->dim, 0, "hidden_size", err))) return st;
    if (!c->tied_embeddings &&
        (st = qw_ck_expect(ck, "lm_head.weight", 2, c->vocab_size, c->dim,
                           "vocab_size, hidden_size; tie_word_embeddings false", err)))
        return st;
    static const char *const roles[] = {
        "input_layernorm",  "post_attention_layernorm", "self_attn.q_proj", "self_attn.k_proj",
        "self_attn.v_proj", "self_attn.o_proj",         "mlp.gate_proj",    "mlp.up_proj",
        "mlp.down_proj"};
    const int64_t shapes[][3] = {{1, c->dim, 0},
                                 {1, c->dim, 0},
                                 {2, q, c->dim},
                                 {2, kv, c->dim},
                                 {2, kv, c->dim},
                                 {2, c->dim, q},
                                 {2, c->hidden_dim, c->dim},
                                 {2, c->hidden_dim, c->dim},
                                 {2, c->dim, c->hidden_dim}};
    static const char *const fields[] = {"hidden_size",
                                         "hidden_size",
                                         "num_attention_heads x head_dim, hidden_size",
                                         "num_key_value_heads x head_dim, hidden_size",
                                         "num_key_value_heads x head_dim, hidden_size",
                                         "hidden_size, num_attention_heads x head_dim",
                                         "intermediate_size, hidden_size",
                                         "intermediate_size, hidden_size",
                                         "hidden_size, intermediate_size"};
    for (int l = 0; l < c->n_layers; l++)
        for (size_t r = 0; r < sizeof roles / sizeof roles[0]; r++) {
            char name[128];
            snprintf(name, sizeof name, "model.layers.%d.%s.weight", l, roles[r]);
            if ((st = qw_ck_expect(ck, name, (int)shapes[r][0], shapes[r][1], shapes[r][2],
                                   fields[r], err)))
                return st;
        }
    return QS_OK;
}

qs_status qw_checkpoint_open(const char *path, qw_checkpoint **out, qs_error *err) {
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0)
        return qs_error_set(err, QS_ENOTFOUND, "%s: no such file or directory", path);
    qw_checkpoint *ck = calloc(1, sizeof *ck);
    if (!ck || !(ck->path = strdup(path))) {
        free(ck);
        return qs_error_set(err, QS_ENOMEM, "%s: out of memory", path);
    }
    qs_status st;
    if (S_ISDIR(sb.st_mode)) {
        st = qw_ck_open_hf(ck, err);
    } else {
        st = qw_ck_add_file(ck, path, err);
        if (!st)
            st = qw_gguf_parse(path, ck->files[0].data, ck->files[0].size, 0, &ck->cfg, &ck->table,
                               err);
        /* GGUF has no tie flag: llama.cpp omits output.weight when lm_head is the embedding. */
        if (!st) ck->cfg.tied_embeddings = qw_table_find(&ck->table, "lm_head.weight") == NULL;
    }
    if (!st) st = qw_ck_validate(ck, err);
    if (st) {
        qw_checkpoint_close(ck);
        return st;
    }
    *out = ck;
    return QS_OK;
}

const qw_config *qw_checkpoint_config(const qw_checkpoint *ck) {
    return &ck->cfg;
}

/* Undoes convert_hf_to_gguf.py's LlamaModel.permute(): within each of `heads` blocks of
 * hd = rows/heads rows, GGUF row 2i+j holds HF row j*(hd/2)+i (i < hd/2, j < 2). */
static void qw_unpermute_rows(const float *src, float *dst, int64_t rows, int64_t cols, int heads) {
    int64_t hd = rows / heads, half = hd / 2;
    for (int64_t r = 0; r < rows; r++) {
        int64_t h = r / hd, rem = r % hd, j = rem / half, i = rem % half;
        memcpy(dst + r * cols, src + (h * hd + 2 * i + j) * cols, (size_t)cols * sizeof(float));
    }
}

qs_status qw_checkpoint_tensor(qw_checkpoint *ck, const char *name, const float **data,
                               int64_t shape[2], int *ndim, qs_error *err) {
    qw_tensor_entry *e = qw_table_find(&ck->table, name);
    if (!e)
        return qs_error_set(err, QS_ENOTFOUND, "%s: tensor \"%s\" is not in the checkpoint",
                            ck->path, name);
    const char *file = ck->files[e->file_index].path;
    if (e->raw)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "%s: tensor \"%s\" is a part of a packed FP4 linear, served as its "
                            "linear's .weight",
                            file, name);
    if (e->ndim < 1 || e->ndim > 2)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "%s: tensor \"%s\" has %d dimensions; only 1 or 2 are served", file,
                            name, e->ndim);
    if (!e->data) {
        int aligned = ((uintptr_t)e->src % sizeof(float)) == 0;
        if (e->dtype == QW_DT_F32 && aligned && !e->permute_heads) {
            e->data = (const float *)(const void *)e->src;
        } else {
            if (e->permute_heads &&
                (e->ndim != 2 || e->shape[0] % (2 * (int64_t)e->permute_heads) != 0))
                return qs_error_set(
                    err, QS_EFORMAT,
                    "%s: tensor \"%s\": %lld rows cannot be %d heads of rotary pairs", file, name,
                    (long long)e->shape[0], e->permute_heads);
            size_t n = (size_t)e->numel;
            float *buf = malloc((n ? n : 1) * sizeof(float));
            float *tmp = e->permute_heads ? malloc((n ? n : 1) * sizeof(float)) : NULL;
            if (!buf || (e->permute_heads && !tmp)) {
                free(buf);
                free(tmp);
                return qs_error_set(err, QS_ENOMEM,
                                    "%s: out of memory converting tensor \"%s\" (%zu floats)", file,
                                    name, n);
            }
            if (e->permute_heads) {
                qw_dtype_to_f32(e->dtype, e->src, e->numel, tmp);
                qw_unpermute_rows(tmp, buf, e->shape[0], e->shape[1], e->permute_heads);
                free(tmp);
            } else {
                qw_dtype_to_f32(e->dtype, e->src, e->numel, buf);
            }
            e->owned = buf;
            e->data = buf;
        }
    }
    *data = e->data;
    *ndim = e->ndim;
    shape[0] = e->shape[0];
    shape[1] = e->ndim == 2 ? e->shape[1] : 1;
    return QS_OK;
}

qs_status qw_checkpoint_tensor_stored(qw_checkpoint *ck, const char *name, qw_stored_tensor *out,
                                    int64_t shape[2], int *ndim, qs_error *err) {
    qw_tensor_entry *e = qw_table_find(&ck->table, name);
    if (!e)
        return qs_error_set(err, QS_ENOTFOUND, "%s: tensor \"%s\" is not in the checkpoint",
                            ck->path, name);
    const char *file = ck->files[e->file_index].path;
    if (e->raw)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "%s: tensor \"%s\" is a part of a packed FP4 linear, served as its "
                            "linear's .weight",
                            file, name);
    if (e->ndim < 1 || e->ndim > 2)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "%s: tensor \"%s\" has %d dimensions; only 1 or 2 are served", file,
                            name, e->ndim);
    int64_t rows = e->ndim == 2 ? e->shape[0] : 1;
    int64_t cols = e->ndim == 2 ? e->shape[1] : e->shape[0];
    int overflow = 0;
    size_t row_bytes = qw_dtype_bytes(e->dtype, cols, &overflow);
    int block = qw_dtype_block(e->dtype);
    if (cols % block != 0)
        return qs_error_set(err, QS_EFORMAT,
                            "%s: tensor \"%s\": rows of %lld elements are not whole %s blocks of "
                            "%d",
                            file, name, (long long)cols, qw_dtype_name(e->dtype), block);
    if (e->permute_heads && (e->ndim != 2 || e->shape[0] % (2 * (int64_t)e->permute_heads) != 0))
        return qs_error_set(err, QS_EFORMAT,
                            "%s: tensor \"%s\": %lld rows cannot be %d heads of rotary pairs",
                            file, name, (long long)e->shape[0], e->permute_heads);
    if (overflow || (rows > 0 && row_bytes * (size_t)rows > e->nbytes))
        return qs_error_set(err, QS_EFORMAT, "%s: tensor \"%s\": %lld rows of %zu bytes exceed "
                            "its %zu stored bytes", file, name, (long long)rows, row_bytes,
                            e->nbytes);
    out->dtype = e->dtype;
    out->data = e->src;
    out->rows = rows;
    out->cols = cols;
    out->row_bytes = row_bytes;
    out->permute_heads = e->permute_heads;
    *ndim = e->ndim;
    shape[0] = e->shape[0];
    shape[1] = e->ndim == 2 ? e->shape[1] : 1;
    return QS_OK;
}

/* The stored row holding HF row r of a permuted tensor (qw_unpermute_rows, row by row). */
static int64_t qw_stored_row(const qw_stored_tensor *v, int64_t r) {
    if (!v->permute_heads) return r;
    int64_t hd = v->rows / v->permute_heads, half = hd / 2;
    int64_t h = r / hd, rem = r % hd, j = rem / half, i = rem % half;
    return h * hd + 2 * i + j;
}

void qw_stored_rows_f32(const qw_stored_tensor *v, int64_t r0, int64_t n, float *dst) {
    if (!v->permute_heads) {
        /* Contiguous rows: one conversion, as the load-time copy converts the whole tensor. */
        qw_dtype_to_f32(v->dtype, v->data + (size_t)r0 * v->row_bytes, n * v->cols, dst);
        return;
    }
    for (int64_t r = r0; r < r0 + n; r++)
        qw_dtype_to_f32(v->dtype, v->data + (size_t)qw_stored_row(v, r) * v->row_bytes, v->cols,
                        dst + (size_t)(r - r0) * v->cols);
}

const float *qw_stored_f32(const qw_stored_tensor *v) {
    if (v->dtype != QW_DT_F32 || v->permute_heads || ((uintptr_t)v->data % sizeof(float)) != 0)
        return NULL;
    return (const float *)(const void *)v->data;
}

size_t qw_checkpoint_tensor_count(const qw_checkpoint *ck) {
    return ck->table.n;
}

const char *qw_checkpoint_tensor_name(const qw_checkpoint *ck, size_t i) {
    return i < ck->table.n ? ck->table.v[i].name : NULL;
}

qs_status qw_checkpoint_digest(qw_checkpoint *ck, char hex[65], qs_error *err) {
    if (!ck->have_digest) {
        if (sodium_init() < 0)
            return qs_error_set(err, QS_EIO, "%s: libsodium failed to initialise", ck->path);
        crypto_generichash_state s;
        crypto_generichash_init(&s, NULL, 0, crypto_generichash_BYTES);
        for (int i = 0; i < ck->n_files; i++) {
            uint64_t len = ck->files[i].size; /* little-endian host (checkpoint_internal.h) */
            crypto_generichash_update(&s, (const unsigned char *)&len, sizeof len);
            crypto_generichash_update(&s, ck->files[i].data, ck->files[i].size);
        }
        unsigned char h[crypto_generichash_BYTES];
        crypto_generichash_final(&s, h, sizeof h);
        sodium_bin2hex(ck->digest, sizeof ck->digest, h, sizeof h);
        ck->have_digest = 1;
    }
    memcpy(hex, ck->digest, 65);
    return QS_OK;
}

void qw_checkpoint_close(qw_checkpoint *ck) {
    if (!ck) return;
    qw_table_free(&ck->table);
    for (int i = 0; i < ck->n_files; i++)
        qw_unmap_file(&ck->files[i]);
    free(ck->files);
    free(ck->path);
    free(ck);
}
