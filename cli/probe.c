/* Grid probe over the engine's loaders (probe.h). */
#include "probe.h"

#include <stdio.h>
#include <string.h>

#include "checkpoint.h"
#include "master_gemm.h"
#include "names.h"
#include "quant.h"
#include "synthetic.h"
#include "tmodel.h"
#include "tokenizer.h"
#include "tokens.h"

/* The resource computation's view of a config (kinds/resources.h). */
static qs_model_shape shape_of(const qw_config *c) {
    return (qs_model_shape){.dim = c->dim,
                            .hidden_dim = c->hidden_dim,
                            .n_layers = c->n_layers,
                            .n_heads = c->n_heads,
                            .n_kv_heads = c->n_kv_heads,
                            .head_dim = c->head_dim,
                            .vocab_size = c->vocab_size,
                            .tied_embeddings = c->tied_embeddings != 0};
}

/* Bytes of every tensor the engine reads, in the dtype the checkpoint stores it, and the device
 * bytes per element of the linears' masters on the CUDA auto path (master_gemm.h: the widest
 * of them), from the tensor table only: nothing of the weights is read. */
static qs_status stored_bytes(qw_checkpoint *ck, const qw_config *c, int64_t *out,
                              int *master_bytes, qs_error *err) {
    *out = 0;
    *master_bytes = 2;
    char name[128];
    for (int t = -3; t < c->n_layers * 9; t++) {
        if (t == -3) snprintf(name, sizeof name, "model.embed_tokens.weight");
        if (t == -2) snprintf(name, sizeof name, "model.norm.weight");
        if (t == -1) {
            if (c->tied_embeddings) continue;
            snprintf(name, sizeof name, "lm_head.weight");
        }
        if (t >= 0) {
            int b = t / 9, k = t % 9;
            const char *module = k < QS_LINEAR_KINDS ? qs_linear_module_names[k]
                                 : k == 7            ? "input_layernorm"
                                                     : "post_attention_layernorm";
            snprintf(name, sizeof name, "model.layers.%d.%s.weight", b, module);
        }
        qw_stored_tensor v;
        int64_t shape[2];
        int ndim;
        qs_status st = qw_checkpoint_tensor_stored(ck, name, &v, shape, &ndim, err);
        if (st) return st;
        *out += v.rows * (int64_t)v.row_bytes;
        int linear = t == -1 || (t >= 0 && t % 9 < QS_LINEAR_KINDS);
        if (linear && qw_master_gemm_bytes(v.dtype) > *master_bytes)
            *master_bytes = qw_master_gemm_bytes(v.dtype);
    }
    return QS_OK;
}

/* Parameters of a config, counted by the trainable model's tensor table (worker/train/tmodel.h):
 * the count a training run of it holds. */
static long long config_params(const qw_config *cfg) {
    size_t n = 0, bytes = 0;
    if (cfg->dim <= 0 || cfg->n_layers <= 0 || cfg->n_heads <= 0 || cfg->head_dim <= 0) return 0;
    qw_tmodel_plan(cfg, 1, 1, 1, &n, &bytes);
    return (long long)n;
}

/* Opens the checkpoint (headers and tensor table only: weights stay mapped, unread), reads
 * its config, the stored size of its tensors and its digest. */
static qs_status probe_model(void *user, const char *path, qc_model_facts *out, qs_error *err) {
    (void)user;
    qw_checkpoint *ck = NULL;
    qs_status st = qw_checkpoint_open(path, &ck, err);
    size_t n = strlen(path);
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    /* one file of a Hugging Face folder (config.json, *.safetensors) fails as "not GGUF" */
    if (st && (!strcmp(base, "config.json") || (n > 12 && !strcmp(path + n - 12, ".safetensors")) ||
               !strcmp(base, "model.safetensors.index.json")))
        return qs_error_set(err, QS_EINVAL,
                            "%s: a Hugging Face model is given by its folder (%.*s), not by one "
                            "of its files",
                            path, base > path + 1 ? (int)(base - path - 1) : 1,
                            base > path ? path : ".");
    if (st) return st;
    const qw_config *cfg = qw_checkpoint_config(ck);
    out->n_layers = cfg->n_layers;
    out->vocab_size = cfg->vocab_size;
    out->max_position_embeddings = cfg->max_seq_len;
    out->tied_embeddings = cfg->tied_embeddings;
    out->shape = shape_of(cfg);
    /* best effort: a tensor the loader serves in another way counts as unknown (BF16 masters
       then size the job), never as a refused grid */
    qs_error ignored;
    if (stored_bytes(ck, cfg, &out->stored_bytes, &out->master_bytes, &ignored)) {
        out->stored_bytes = 0;
        out->master_bytes = 0;
    }
    out->n_params = config_params(cfg);
    st = qw_checkpoint_digest(ck, out->digest, err);
    qw_checkpoint_close(ck);
    return st;
}

static qs_status probe_dataset(void *user, const char *path, qc_dataset_facts *out, qs_error *err) {
    (void)user;
    qw_tokens t = {0};
    qs_status st = qw_tokens_load(path, &t, err);
    if (st) return st;
    uint32_t mx = 0;
    for (size_t i = 0; i < t.n; i++)
        if (t.ids[i] > mx) mx = t.ids[i];
    out->n_tokens = t.n;
    out->max_token = mx;
    out->vocab_size = t.vocab_size;
    memcpy(out->digest, t.digest, sizeof out->digest);
    qw_tokens_free(&t);
    return QS_OK;
}

/* The token file against the model's own tokenizer (worker/tokenizer qw_tokenizer_check_tokens):
 * a version 2 file must name its digest, a version 1 file must have its vocabulary size. */
static qs_status probe_tokens_match_model(void *user, const char *tokens_path,
                                          const char *model_path, qs_error *err) {
    (void)user;
    qw_tokens t = {0};
    qs_status st = qw_tokens_load(tokens_path, &t, err);
    if (!st) st = qw_tokenizer_check_tokens(tokens_path, &t, model_path, err);
    qw_tokens_free(&t);
    return st;
}

/* A text through the model's own tokenizer (qw_text_dataset: cached per tokenizer and text),
 * with the BOS id each chunk starts with when the tokenizer adds one (llama.cpp's
 * perplexity; worker/engine/eval.h bos_id). */
static qs_status probe_text_dataset(void *user, const char *model_path, const char *text_path,
                                    qc_dataset_facts *out, int *bos_id, qs_error *err) {
    (void)user;
    qw_tokens t = {0};
    char cached[4096];
    qs_status st = qw_text_dataset(model_path, text_path, NULL, &t, cached, sizeof cached, err);
    if (st) return st;
    uint32_t mx = 0;
    for (size_t i = 0; i < t.n; i++)
        if (t.ids[i] > mx) mx = t.ids[i];
    out->n_tokens = t.n;
    out->max_token = mx;
    out->vocab_size = t.vocab_size;
    memcpy(out->digest, t.digest, sizeof out->digest);
    qw_tokens_free(&t);
    qw_tokenizer *tk = NULL;
    if ((st = qw_tokenizer_open(model_path, &tk, err))) return st;
    *bos_id = qw_tokenizer_adds_bos(tk) ? (int)qw_tokenizer_bos(tk) : -1;
    qw_tokenizer_free(tk);
    return QS_OK;
}

static int probe_format(void *user, const char *name) {
    (void)user;
    return qk_format_by_name(name) != NULL;
}

static qs_status probe_format_option(void *user, const char *format, const char *key,
                                     const char *value, qs_error *err) {
    (void)user;
    const qk_format *f = qk_format_by_name(format);
    if (!f) return qs_error_set(err, QS_EINVAL, "unknown format '%s'", format);
    qk_quant_options scratch = {0};
    return qk_quant_option_set(f, &scratch, key, value, err);
}

/* Facts of the named Llama shapes, from the engine's table (worker/engine/synthetic.h: each
 * model's published config.json), so the grid accepts exactly the shapes a worker can build. */
static qs_status probe_synthetic(void *user, const char *shape, qc_model_facts *out,
                                 qs_error *err) {
    (void)user;
    const qw_synthetic_shape *s = qw_synthetic_shape_by_name(shape);
    if (s) {
        out->n_layers = s->cfg.n_layers;
        out->vocab_size = s->cfg.vocab_size;
        out->max_position_embeddings = s->cfg.max_seq_len;
        out->tied_embeddings = s->cfg.tied_embeddings;
        out->shape = shape_of(&s->cfg);
        out->stored_bytes = 0; /* BF16 masters built in memory (synthetic.h) */
        out->master_bytes = 2;
        out->n_params = config_params(&s->cfg);
        return QS_OK;
    }
    size_t ns;
    const qw_synthetic_shape *all = qw_synthetic_shapes(&ns);
    char list[512] = "";
    for (size_t j = 0; j < ns; j++) {
        if (j) strncat(list, ", ", sizeof list - strlen(list) - 1);
        strncat(list, all[j].name, sizeof list - strlen(list) - 1);
    }
    return qs_error_set(err, QS_ENOTFOUND, "unknown synthetic shape '%s' (expected one of: %s)",
                        shape, list);
}

const qc_grid_probe *qsweep_probe(void) {
    static const qc_grid_probe probe = {probe_model,
                                        probe_dataset,
                                        probe_format,
                                        probe_format_option,
                                        NULL,
                                        probe_synthetic,
                                        probe_tokens_match_model,
                                        probe_text_dataset};
    return &probe;
}
