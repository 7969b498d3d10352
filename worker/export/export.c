/* A policy's packed tensors written as a compressed-tensors checkpoint (export.h). */
#include "export.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "export_internal.h"
#include "format.h"
#include "new_file.h"
#include "model.h"
#include "quant.h"
#include "st_writer.h"

/* The layouts by name: one row each. */
static const struct {
    const char *name;
    qw_export_layout layout;
} LAYOUTS[] = {{"compressed-tensors", QW_EXPORT_COMPRESSED_TENSORS},
               {"gguf", QW_EXPORT_GGUF},
               {"modelopt", QW_EXPORT_MODELOPT}};

qs_status qw_export_layout_by_name(const char *name, qw_export_layout *out, qs_error *err) {
    for (size_t i = 0; name && i < sizeof LAYOUTS / sizeof LAYOUTS[0]; i++)
        if (strcmp(name, LAYOUTS[i].name) == 0) {
            *out = LAYOUTS[i].layout;
            return QS_OK;
        }
    return qs_error_set(err, QS_EINVAL,
                        "export: unknown layout \"%s\" (compressed-tensors, gguf, modelopt)",
                        name ? name : "");
}

/* The compressed-tensors name of a numeric-core format's packed layout, NULL when it has none:
 * compressors/nvfp4 (group 16, E4M3 scales, FP32 global scale) and compressors/mxfp4 (group
 * 32, E8M0 scales as biased exponents in uint8). nvfp4_2d's 16x16 scales are stored repeated
 * in each row (quant.h), so they are NVFP4's per-row groups of 16 with equal values. */
static const char *ct_format(const qk_format *f) {
    const char *n = qk_format_name(f);
    if (!strcmp(n, "nvfp4") || !strcmp(n, "nvfp4_2d")) return "nvfp4-pack-quantized";
    if (!strcmp(n, "mxfp4")) return "mxfp4-pack-quantized";
    return NULL;
}

static int is_nvfp4(const qk_format *f) {
    return f->rule == QK_RULE_NVFP4;
}

/* A config group: one (weight format, activation format) pair. */
typedef struct ex_group {
    const qk_format *weight, *act;
} ex_group;

/* Checks what compressed-tensors can hold of linear L; assigns its group. */
static qs_status ct_check(ex_linear *L, ex_group *groups, int *n_groups, int tied, qs_error *err) {
    const qw_quant_spec *s = L->spec;
    int wq = s->weight && strcmp(qk_format_name(s->weight), "bf16") != 0;
    if (!wq && !s->act) {
        L->group = -1;
        return QS_OK;
    }
    if (!wq)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "export: %s: activations in %s without its weights: compressed-tensors "
                            "quantizes a linear's weights whenever it quantizes its input",
                            L->name, qk_format_name(s->act));
    if (!ct_format(s->weight))
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "export: %s: format %s has no compressed-tensors FP4 layout (nvfp4, "
                            "nvfp4_2d, mxfp4)",
                            L->name, qk_format_name(s->weight));
    if (s->act && is_nvfp4(s->act))
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "export: %s: NVFP4 activations: qsweep measures them with each "
                            "input's own per-tensor scale, which compressed-tensors stores as one "
                            "calibrated input_global_scale; export the weights (W4A16) instead",
                            L->name);
    if (s->act && strcmp(qk_format_name(s->act), "mxfp4") != 0)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "export: %s: activations in %s have no compressed-tensors scheme here "
                            "(mxfp4 activations only)",
                            L->name, qk_format_name(s->act));
    if (tied && strcmp(L->name, "lm_head") == 0)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "export: lm_head: the model ties it to the embeddings, so a quantized "
                            "head and unquantized embeddings cannot be one stored tensor");
    for (int g = 0; g < *n_groups; g++)
        if (groups[g].weight == s->weight && groups[g].act == s->act) {
            L->group = g;
            return QS_OK;
        }
    groups[*n_groups].weight = s->weight;
    groups[*n_groups].act = s->act;
    L->group = (*n_groups)++;
    return QS_OK;
}

/* The QuantizationArgs of a compressed-tensors config group (quantization/quant_scheme.py
 * presets NVFP4A16, MXFP4A16, MXFP4). */
static json_t *ct_args(const qk_format *f, int activations) {
    int nv = is_nvfp4(f);
    return json_pack("{s:i, s:s, s:s, s:b, s:o, s:i, s:s}", "num_bits", 4, "type", "float",
                     "strategy", nv ? "tensor_group" : "group", "symmetric", 1, "dynamic",
                     activations ? json_true() : json_false(), "group_size", nv ? 16 : 32,
                     "scale_dtype", nv ? "torch.float8_e4m3fn" : "torch.uint8");
}

static json_t *ct_quant_config(const ex_linear *lin, int n_lin, const ex_group *groups,
                               int n_groups) {
    json_t *cg = json_object(), *ignore = json_array();
    for (int g = 0; g < n_groups; g++) {
        json_t *targets = json_array();
        for (int i = 0; i < n_lin; i++)
            if (lin[i].group == g) json_array_append_new(targets, json_string(lin[i].name));
        json_t *grp = json_pack(
            "{s:s, s:o, s:o, s:o, s:n}", "format", ct_format(groups[g].weight), "targets", targets,
            "weights", ct_args(groups[g].weight, 0), "input_activations",
            groups[g].act ? ct_args(groups[g].act, 1) : json_null(), "output_activations");
        char key[32];
        snprintf(key, sizeof key, "group_%d", g);
        json_object_set_new(cg, key, grp);
    }
    for (int i = 0; i < n_lin; i++)
        if (lin[i].group < 0) json_array_append_new(ignore, json_string(lin[i].name));
    const char *fmt = n_groups == 1 ? ct_format(groups[0].weight) : "mixed-precision";
    return json_pack("{s:o, s:s, s:o, s:s, s:s, s:n, s:n}", "config_groups", cg, "format", fmt,
                     "ignore", ignore, "quant_method", "compressed-tensors", "quantization_status",
                     "compressed", "kv_cache_scheme", "global_compression_ratio");
}

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

/* Removes the temporary folder: only the plain files this export put there, then the folder. */
static void remove_tmp(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char p[4096];
            if (!qw_export_path_join(p, sizeof p, dir, e->d_name)) unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
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

/* Adds linear L's packed tensors (compressed-tensors names). */
static qs_status add_packed(qw_st_writer *w, const ex_linear *L, const qk_packed *p,
                            qs_error *err) {
    char n[160];
    if (p->k % p->block != 0)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "export: %s: rows of %zu are not whole blocks of %zu, which "
                            "compressed-tensors requires",
                            L->name, p->k, p->block);
    int nv = is_nvfp4(p->fmt);
    if (nv && p->tensor_scale_exp2 != 0)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "export: %s: its amax %g is tiny and was quantized under tiny_amax "
                            "exact, whose decode scale is no FP32 number a global scale can hold",
                            L->name, (double)p->tensor_amax);
    int64_t sh[2] = {(int64_t)p->rows, (int64_t)p->row_bytes};
    snprintf(n, sizeof n, "%s.weight_packed", L->name);
    qs_status st = qw_st_writer_add(w, n, "U8", 2, sh, p->codes, p->rows * p->row_bytes, err);
    int64_t ss[2] = {(int64_t)p->rows, (int64_t)p->blocks_per_row};
    snprintf(n, sizeof n, "%s.weight_scale", L->name);
    if (!st)
        st = qw_st_writer_add(w, n, nv ? "F8_E4M3" : "U8", 2, ss, p->scales,
                              p->rows * p->blocks_per_row, err);
    if (!st && nv) {
        /* the encode scale S_enc = 2688/amax_t; its reciprocal is the engine's decode scale */
        float s_enc, s_dec;
        qk_nvfp4_global_scales(p->tensor_amax, &s_enc, &s_dec);
        if (s_dec != p->tensor_scale)
            return qs_error_set(err, QS_EUNSUPPORTED,
                                "export: %s: decode scale %a is not 1/S_enc of amax %a", L->name,
                                (double)p->tensor_scale, (double)p->tensor_amax);
        int64_t one[2] = {1, 0};
        snprintf(n, sizeof n, "%s.weight_global_scale", L->name);
        st = qw_st_writer_add(w, n, "F32", 1, one, &s_enc, sizeof s_enc, err);
    }
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

static qs_status export_ct(const qw_export_request *r, qw_checkpoint *ck, qw_model *m,
                           const char *tmp, qs_error *err) {
    const qw_config *cfg = qw_checkpoint_config(ck);
    const qw_policy *p = r->policy;
    if (p->embed.weight || p->embed.act)
        return qs_error_set(err, QS_EUNSUPPORTED,
                            "export: model.embed_tokens: compressed-tensors quantizes linears, "
                            "not the embedding lookup");
    ex_linear *lin = NULL;
    int n_lin = 0, n_groups = 0;
    ex_group groups[8];
    qs_status st = qw_export_list_linears(m, p, &lin, &n_lin, err);
    for (int i = 0; i < n_lin && !st; i++) {
        if (n_groups == 8) {
            st = qs_error_set(err, QS_EUNSUPPORTED, "export: more than 8 format combinations");
            break;
        }
        st = ct_check(&lin[i], groups, &n_groups, cfg->tied_embeddings, err);
    }
    if (!st && n_groups == 0)
        st = qs_error_set(err, QS_EINVAL,
                          "export: the policy quantizes no linear: the source checkpoint is the "
                          "export");
    qw_st_writer w = {0};
    size_t total = (size_t)n_lin + 3, done = 0;
    /* the quantized linears first (the slow part), then every other tensor as stored */
    for (int i = 0; i < n_lin && !st; i++) {
        if (lin[i].group >= 0) {
            int64_t axis, start;
            const qk_packed *pk = qw_model_packed(m, -1, lin[i].index, &axis, &start);
            if (!pk)
                st = qs_error_set(err, QS_EINVAL, "export: %s: the engine holds no packed form",
                                  lin[i].name);
            else
                st = add_packed(&w, &lin[i], pk, err);
        }
        if (r->progress) r->progress(r->progress_ctx, ++done, total);
    }
    if (!st) st = qw_export_finish(r, ck, &w, lin, n_lin, tmp,
                                   ct_quant_config(lin, n_lin, groups, n_groups), &done, total,
                                   err);
    qw_st_writer_free(&w);
    free(lin);
    return st;
}

/* The folder that will hold out_dir (out_dir with its trailing '/' dropped, in dir) must be a
 * directory this process can create in: checked before the model is loaded, so a mistyped -o
 * fails at once, naming the folder. Errors: QS_EINVAL. */
static qs_status check_out_dir(const char *out_dir, char *dir, size_t cap, qs_error *err) {
    struct stat sb;
    if (!out_dir || !*out_dir) return qs_error_set(err, QS_EINVAL, "export: no output folder");
    size_t n = strlen(out_dir);
    while (n > 1 && out_dir[n - 1] == '/') n--;
    if (n >= cap)
        return qs_error_set(err, QS_EINVAL, "export: output path too long");
    memcpy(dir, out_dir, n);
    dir[n] = 0;
    if (stat(dir, &sb) == 0)
        return qs_error_set(err, QS_EINVAL,
                            "export: %s already exists: an export never writes over a %s", dir,
                            S_ISDIR(sb.st_mode) ? "folder" : "file");
    char parent[4096];
    const char *slash = strrchr(dir, '/');
    snprintf(parent, sizeof parent, "%.*s", slash ? (int)(slash == dir ? 1 : slash - dir) : 1,
             slash ? dir : ".");
    const char *why = stat(parent, &sb) != 0    ? strerror(errno)
                      : !S_ISDIR(sb.st_mode)       ? "is not a folder"
                      : access(parent, W_OK | X_OK) ? "is not writable"
                                                    : NULL;
    if (why) return qs_error_set(err, QS_EINVAL, "export: -o %s: %s: %s", dir, parent, why);
    return QS_OK;
}

qs_status qw_export_write(const qw_export_request *r, qs_error *err) {
    char out_dir[4096], tmp[sizeof out_dir + sizeof ".tmp-XXXXXX"];
    qs_status st = check_out_dir(r->out_dir, out_dir, sizeof out_dir, err);
    if (st) return st;
    snprintf(tmp, sizeof tmp, "%s.tmp-XXXXXX", out_dir);
    qw_checkpoint *ck = NULL;
    qw_model *m = NULL;
    float *amax = NULL; /* modelopt: its inputs' calibration amax per linear */
    int calibrated = r->layout == QW_EXPORT_MODELOPT;
    st = qw_checkpoint_open(r->model_path, &ck, err);
    if (!st)
        st = qw_model_create(ck, calibrated && r->calib_ctx > 1 ? r->calib_ctx : 1, r->threads, &m,
                             err);
    if (!st && r->policy->n_layers != qw_checkpoint_config(ck)->n_layers)
        st = qs_error_set(err, QS_EINVAL,
                          "export: the policy is for a %d-block model, %s has %d blocks",
                          r->policy->n_layers, r->model_path, qw_checkpoint_config(ck)->n_layers);
    if (!st && calibrated) st = qw_export_modelopt_calibrate(r, m, &amax, err);
    if (!st) st = qw_model_apply_policy(m, r->policy, err);
    int made = 0;
    if (!st) {
        if (!mkdtemp(tmp))
            st = qs_error_set(err, QS_EIO, "%s: %s", tmp, strerror(errno));
        else
            made = 1;
    }
    if (!st && r->layout == QW_EXPORT_GGUF)
        st = qw_export_gguf(r, ck, m, tmp, err);
    else if (!st && r->layout == QW_EXPORT_MODELOPT)
        st = qw_export_modelopt(r, ck, m, amax, tmp, err);
    else if (!st)
        st = export_ct(r, ck, m, tmp, err);
    if (!st && chmod(tmp, 0755) != 0) /* mkdtemp's 0700 would hide it from a serving user */
        st = qs_error_set(err, QS_EIO, "%s: %s", tmp, strerror(errno));
    /* the folder appears under its name complete, or not at all */
    if (!st && renameat2(AT_FDCWD, tmp, AT_FDCWD, out_dir, RENAME_NOREPLACE) != 0)
        st = qs_error_set(err, QS_EIO, "renaming %s to %s: %s", tmp, out_dir, strerror(errno));
    if (st && made) remove_tmp(tmp);
    free(amax);
    qw_model_destroy(m);
    qw_checkpoint_close(ck);
    return st;
}
