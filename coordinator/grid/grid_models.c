/* The sections grid kinds share: `models` and `dataset` (grid_kind.h). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grid_kind.h"
#include "spec.h"

static qs_status parse_synthetic(qc_config *c, struct fy_node *syn_n, struct fy_node *seed_n,
                                 const char *name, const qc_grid_probe *probe, qc_grid_model *m) {
    const char *shape = NULL;
    int seed = 0;
    qs_status st = qc_config_string(c, syn_n, "the synthetic shape", &shape);
    if (!st && seed_n) st = qc_config_int(c, seed_n, "the seed", 0, INT_MAX, &seed);
    if (st) return st;
    qs_error e = {0};
    st = probe->synthetic
             ? probe->synthetic(probe->user, shape, &m->facts, &e)
             : qs_error_set(&e, QS_EUNSUPPORTED, "this reader knows no synthetic shapes");
    if (st) return qc_config_fail(c, syn_n, st == QS_ENOTFOUND ? QS_EINVAL : st, "%s", e.msg);
    char path[160];
    if ((st = qs_synthetic_model(shape, (unsigned long)seed, path, sizeof path, m->facts.digest,
                                 &e)))
        return qc_config_fail(c, syn_n, QS_EINVAL, "%s", e.msg);
    char label[160];
    snprintf(label, sizeof label, "synthetic:%s", shape);
    m->path = strdup(path);
    m->name = strdup(name ? name : label);
    return (m->path && m->name) ? QS_OK : qc_config_error(c, QS_ENOMEM, "out of memory");
}

/* `compare_to: PATH`: the reference model a compare job scores model m against (its parent
 * checkpoint): read, and refused when it is m itself or of another vocabulary or depth. */
static qs_status parse_compare_to(qc_config *c, struct fy_node *n, const qc_grid_probe *probe,
                                  qc_grid_model *m) {
    if (!m->path || qs_is_synthetic(m->path))
        return qc_config_fail(c, n, QS_EINVAL,
                              "compare_to: the compared model must be a checkpoint (a path), "
                              "not a synthetic model");
    qs_status st = qc_config_path(c, n, "reference model", &m->ref_path);
    if (st) return st;
    const char *base = strrchr(m->ref_path, '/');
    m->ref_name = strdup(base ? base + 1 : m->ref_path);
    if (!m->ref_name) return qc_config_error(c, QS_ENOMEM, "out of memory");
    qs_error e = {0};
    st = probe->model(probe->user, m->ref_path, &m->ref_facts, &e);
    if (st) return qc_config_fail(c, n, st, "compare_to: cannot read model: %s", e.msg);
    const qc_model_facts *a = &m->facts, *b = &m->ref_facts;
    if (!strcmp(a->digest, b->digest))
        return qc_config_fail(c, n, QS_EINVAL,
                              "compare_to: %s is the model %s itself (equal digests)", m->ref_path,
                              m->name);
    if (a->vocab_size != b->vocab_size || a->n_layers != b->n_layers)
        return qc_config_fail(c, n, QS_EINVAL,
                              "compare_to: model %s has %d blocks and a vocabulary of %d, its "
                              "reference %s %d and %d: not the same network",
                              m->name, a->n_layers, a->vocab_size, m->ref_path, b->n_layers,
                              b->vocab_size);
    return QS_OK;
}

qs_status qc_grid_parse_model(qc_config *c, struct fy_node *n, const qc_grid_probe *probe,
                              qc_grid_model *m) {
    struct fy_node *path_n = n, *name_n = NULL, *syn_n = NULL, *seed_n = NULL, *cmp_n = NULL,
                   *digest_n = NULL;
    qs_status st;
    if (fy_node_is_mapping(n)) {
        static const char *const keys[] = {"path",       "name",   "synthetic", "seed",
                                           "compare_to", "digest", NULL};
        if ((st = qc_config_check_keys(c, n, "a model", keys))) return st;
        path_n = qc_config_lookup(n, "path");
        name_n = qc_config_lookup(n, "name");
        syn_n = qc_config_lookup(n, "synthetic");
        seed_n = qc_config_lookup(n, "seed");
        cmp_n = qc_config_lookup(n, "compare_to");
        digest_n = qc_config_lookup(n, "digest");
        if (digest_n && syn_n)
            return qc_config_fail(c, digest_n, QS_EINVAL,
                                  "'digest' applies to model files only (a synthetic model's is "
                                  "its name and seed)");
        if (!!path_n == !!syn_n)
            return qc_config_fail(c, n, QS_EFORMAT,
                                  "expected a model with exactly one of 'path' or 'synthetic'");
        if (seed_n && !syn_n)
            return qc_config_fail(c, seed_n, QS_EINVAL, "'seed' applies to synthetic models only");
    } else if (!fy_node_is_scalar(n)) {
        return qc_config_fail(c, n, QS_EFORMAT,
                              "expected a model path or a mapping with 'path' or 'synthetic'");
    }
    const char *name = NULL;
    if (name_n && (st = qc_config_string(c, name_n, "the model name", &name))) return st;
    if (syn_n && cmp_n) return parse_compare_to(c, cmp_n, probe, m); /* refused */
    if (syn_n) return parse_synthetic(c, syn_n, seed_n, name, probe, m);
    if ((st = qc_config_path(c, path_n, "model file", &m->path))) return st;
    const char *base = strrchr(m->path, '/');
    m->name = strdup(name ? name : (base ? base + 1 : m->path));
    if (!m->name) return qc_config_error(c, QS_ENOMEM, "out of memory");
    qs_error e = {0};
    st = probe->model(probe->user, m->path, &m->facts, &e);
    if (st) return qc_config_fail(c, path_n, st, "cannot read model: %s", e.msg);
    if (m->facts.n_layers <= 0 || m->facts.vocab_size <= 0)
        return qc_config_fail(c, path_n, QS_EFORMAT,
                              "model %s reports %d blocks and a vocabulary of %d", m->path,
                              m->facts.n_layers, m->facts.vocab_size);
    if (digest_n) { /* the model the grid was made for (a plan's): the file must still be it */
        const char *want;
        if ((st = qc_config_string(c, digest_n, "the model digest", &want))) return st;
        if (!qs_is_digest(want))
            return qc_config_fail(c, digest_n, QS_EINVAL,
                                  "expected the 64 hex digits of a model digest");
        if (strcmp(want, m->facts.digest))
            return qc_config_fail(c, digest_n, QS_EINVAL,
                                  "model %s has digest %.16s..., not the %.16s... this grid was "
                                  "made for (the file changed, or the grid is for another model)",
                                  m->path, m->facts.digest, want);
    }
    return cmp_n ? parse_compare_to(c, cmp_n, probe, m) : QS_OK;
}

qs_status qc_grid_parse_models(qc_config *c, struct fy_node *models, const qc_grid_probe *probe,
                               qc_grid *g) {
    int count = models && fy_node_is_sequence(models) ? fy_node_sequence_item_count(models) : 0;
    if (count <= 0)
        return qc_config_fail(c, models ? models : qc_config_root(c), QS_EFORMAT,
                              "expected 'models' as a non-empty list");
    g->models = calloc((size_t)count, sizeof *g->models);
    if (!g->models) return qc_config_error(c, QS_ENOMEM, "out of memory");
    void *it = NULL;
    struct fy_node *item;
    while ((item = fy_node_sequence_iterate(models, &it))) {
        qc_grid_model *m = &g->models[g->n_models++];
        qs_status st = qc_grid_parse_model(c, item, probe, m);
        if (st) return st;
        for (size_t i = 0; i + 1 < g->n_models; i++)
            if (!strcmp(g->models[i].facts.digest, m->facts.digest))
                return qc_config_fail(c, item, QS_EINVAL,
                                      "model %s is the same model as %s (equal digests)", m->name,
                                      g->models[i].name);
    }
    return QS_OK;
}

/* The dataset against every model: the worker's rules (worker/engine/eval.c). */
static qs_status check_against_models(qc_config *c, const qc_grid *g, const qc_grid_probe *probe,
                                      struct fy_node *tokens_n, struct fy_node *ctx_n) {
    for (size_t i = 0; i < g->n_models; i++) {
        const qc_model_facts *f = &g->models[i].facts;
        /* a token file naming another tokenizer is refused whatever its ids (a model a
           pipeline trains has no file yet: its vocabulary is its shape's) */
        if (probe->tokens_match_model && strncmp(g->models[i].path, "synthetic:", 10) != 0 &&
            !g->models[i].trained_by[0]) {
            qs_error e = {0};
            qs_status st =
                probe->tokens_match_model(probe->user, g->dataset_path, g->models[i].path, &e);
            if (st) return qc_config_fail(c, tokens_n, st, "%s", e.msg);
        }
        if (g->dataset.max_token >= (uint32_t)f->vocab_size)
            return qc_config_fail(
                c, tokens_n, QS_EINVAL,
                "token id %u in %s is beyond the vocabulary of model %s (vocab_size %d)",
                g->dataset.max_token, g->dataset_path, g->models[i].name, f->vocab_size);
        /* the header's vocabulary must fit the model's, whatever ids the file holds */
        if (g->dataset.vocab_size > (uint32_t)f->vocab_size)
            return qc_config_fail(c, tokens_n, QS_EINVAL,
                                  "the token file %s declares vocab_size %u in its header, larger "
                                  "than the vocabulary of model %s (vocab_size %d)",
                                  g->dataset_path, g->dataset.vocab_size, g->models[i].name,
                                  f->vocab_size);
        if (f->max_position_embeddings > 0 && g->ctx > f->max_position_embeddings)
            return qc_config_fail(c, ctx_n, QS_EINVAL,
                                  "dataset.ctx %d is longer than the context model %s was trained "
                                  "for (max_position_embeddings %d)",
                                  g->ctx, g->models[i].name, f->max_position_embeddings);
    }
    return QS_OK;
}

/* A text dataset: tokenized by each model's own tokenizer (the probe's text_dataset), so each
 * model has its own ids, digest and BOS. Every model needs a tokenizer: a synthetic one has
 * none. */
static qs_status text_against_models(qc_config *c, qc_grid *g, const qc_grid_probe *probe,
                                     struct fy_node *text_n, struct fy_node *ctx_n) {
    if (!probe->text_dataset)
        return qc_config_fail(c, text_n, QS_EUNSUPPORTED,
                              "text datasets are not supported by this reader");
    for (size_t i = 0; i < g->n_models; i++) {
        qc_grid_model *m = &g->models[i];
        if (m->trained_by[0])
            return qc_config_fail(c, text_n, QS_EINVAL,
                                  "model %s is trained by the pipeline and has no tokenizer of "
                                  "its own to read the text %s with (give a token file of its "
                                  "vocabulary: dataset.tokens)",
                                  m->name, g->dataset_path);
        if (!strncmp(m->path, "synthetic:", 10))
            return qc_config_fail(c, text_n, QS_EINVAL,
                                  "model %s is synthetic and has no tokenizer to read the text "
                                  "%s with (give a token file: dataset.tokens)",
                                  m->name, g->dataset_path);
        qs_error e = {0};
        qs_status st =
            probe->text_dataset(probe->user, m->path, g->dataset_path, &m->dataset, &m->bos_id, &e);
        if (st) return qc_config_fail(c, text_n, st, "%s", e.msg);
        if (m->dataset.n_tokens < (size_t)g->ctx)
            return qc_config_fail(c, ctx_n, QS_EINVAL,
                                  "the text %s is %zu tokens for model %s, fewer than one chunk "
                                  "of ctx %d",
                                  g->dataset_path, m->dataset.n_tokens, m->name, g->ctx);
        if (m->dataset.max_token >= (uint32_t)m->facts.vocab_size)
            return qc_config_fail(c, text_n, QS_EINVAL,
                                  "model %s: its tokenizer gives id %u, beyond its vocab_size %d",
                                  m->name, m->dataset.max_token, m->facts.vocab_size);
        if (m->facts.max_position_embeddings > 0 && g->ctx > m->facts.max_position_embeddings)
            return qc_config_fail(c, ctx_n, QS_EINVAL,
                                  "dataset.ctx %d is longer than the context model %s was trained "
                                  "for (max_position_embeddings %d)",
                                  g->ctx, m->name, m->facts.max_position_embeddings);
    }
    g->dataset = g->n_models ? g->models[0].dataset : g->dataset;
    return QS_OK;
}

qs_status qc_grid_parse_dataset(qc_config *c, struct fy_node *n, const qc_grid_probe *probe,
                                qc_grid *g) {
    if (!n || !fy_node_is_mapping(n))
        return qc_config_fail(c, n ? n : qc_config_root(c), QS_EFORMAT,
                              "expected 'dataset' as a mapping with 'tokens' (or 'text'), "
                              "'ctx' and 'max_chunks'");
    static const char *const keys[] = {"tokens", "text", "ctx", "max_chunks", "calibration", NULL};
    qs_status st = qc_config_check_keys(c, n, "the dataset", keys);
    if (st) return st;
    struct fy_node *t = qc_config_lookup(n, "tokens"), *ctx = qc_config_lookup(n, "ctx"),
                   *mc = qc_config_lookup(n, "max_chunks"), *text = qc_config_lookup(n, "text");
    if (t && text)
        return qc_config_fail(c, text, QS_EINVAL,
                              "expected one of 'tokens' (a token file) and 'text' (a UTF-8 text "
                              "file), not both");
    if (!t && !text)
        return qc_config_fail(c, n, QS_EFORMAT,
                              "expected a 'tokens' key naming the token file or a 'text' key "
                              "naming a UTF-8 text file");
    for (size_t i = 0; i < g->n_models; i++)
        g->models[i].bos_id = -1;
    if (text) {
        g->dataset_text = 1;
        if ((st = qc_config_path(c, text, "text file", &g->dataset_path))) return st;
    } else if ((st = qc_config_path(c, t, "token file", &g->dataset_path))) {
        return st;
    }
    g->ctx = 256;
    /* ctx >= 3: a chunk scores positions ctx/2 .. ctx-2 (worker/engine/eval.h), ctx-1-ctx/2 of
       them, which is 0 at ctx 2 (metrics over no position) and 1 at ctx 3. */
    if (ctx && (st = qc_config_int(c, ctx, "dataset.ctx (tokens per chunk)", 3, 1 << 20, &g->ctx)))
        return st;
    if (mc &&
        (st = qc_config_int(c, mc, "dataset.max_chunks (0: all)", 0, INT_MAX, &g->max_chunks)))
        return st;
    if (text) return text_against_models(c, g, probe, text, ctx ? ctx : text);
    qs_error e = {0};
    st = probe->dataset(probe->user, g->dataset_path, &g->dataset, &e);
    if (st) return qc_config_fail(c, t, st, "cannot read token file: %s", e.msg);
    if (g->dataset.n_tokens < (size_t)g->ctx)
        return qc_config_fail(c, ctx ? ctx : t, QS_EINVAL,
                              "the token file holds %zu tokens, fewer than one chunk of ctx %d",
                              g->dataset.n_tokens, g->ctx);
    for (size_t i = 0; i < g->n_models; i++)
        g->models[i].dataset = g->dataset;
    return check_against_models(c, g, probe, t, ctx ? ctx : t);
}
