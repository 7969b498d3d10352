/* Grid probe over the engine's loaders (probe.h). */
#include "probe.h"

#include <string.h>

#include "checkpoint.h"
#include "quant.h"
#include "synthetic.h"
#include "tokenizer.h"
#include "tokens.h"

/* Opens the checkpoint (headers and tensor table only: weights stay mapped, unread), reads
 * its config and its digest. */
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
    static const qc_grid_probe probe = {
        probe_model,     probe_dataset,           probe_format, probe_format_option, NULL,
        probe_synthetic, probe_tokens_match_model, probe_text_dataset};
    return &probe;
}
