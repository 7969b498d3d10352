#include "model_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "golden.h"

void fill_tokens(uint32_t *ids, size_t n, uint32_t vocab, uint32_t seed) {
    uint32_t x = seed ? seed : 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        ids[i] = x % vocab;
    }
}

int model_fixture_open(model_fixture *f, const char *model, int max_ctx, int threads,
                       size_t n_tokens, uint32_t seed) {
    memset(f, 0, sizeof *f);
    if (make_temp_dir(f->dir, sizeof f->dir) != 0) {
        perror("model_fixture: temporary directory");
        return -1;
    }
    snprintf(f->tokens_path, sizeof f->tokens_path, "%.500s/text.tokens", f->dir);
    snprintf(f->baseline_path, sizeof f->baseline_path, "%.500s/baseline.blp", f->dir);
    qs_error err = {0};
    if (strncmp(model, "synthetic:", 10) == 0
            ? qw_model_create_synthetic(model, max_ctx, threads, &f->m, &err) != QS_OK
            : (qw_checkpoint_open(model, &f->ck, &err) != QS_OK ||
               qw_model_create(f->ck, max_ctx, threads, &f->m, &err) != QS_OK)) {
        fprintf(stderr, "model_fixture: %s\n", err.msg);
        return -1;
    }
    uint32_t vocab = (uint32_t)qw_model_config(f->m)->vocab_size;
    uint32_t *ids = malloc((n_tokens ? n_tokens : 1) * sizeof *ids);
    if (!ids) {
        fprintf(stderr, "model_fixture: out of memory for %zu token ids\n", n_tokens);
        return -1;
    }
    fill_tokens(ids, n_tokens, vocab, seed);
    int bad = write_token_file(f->tokens_path, ids, n_tokens, vocab);
    free(ids);
    if (bad) {
        fprintf(stderr, "model_fixture: %s: cannot write the token file\n", f->tokens_path);
        return -1;
    }
    if (qw_tokens_load(f->tokens_path, &f->toks, &err) != QS_OK) {
        fprintf(stderr, "model_fixture: %s\n", err.msg);
        return -1;
    }
    return 0;
}

void model_fixture_close(model_fixture *f) {
    qw_tokens_free(&f->toks);
    qw_model_destroy(f->m);
    qw_checkpoint_close(f->ck);
    if (f->dir[0]) remove_temp_dir(f->dir);
    memset(f, 0, sizeof *f);
}
