/* A text file as an evaluation dataset (issue 13, `dataset: {text: FILE}` in a grid): the text
 * is tokenized once per (tokenizer digest, text digest) into a version 2 token file in a cache
 * folder, and every later use reads that file. */
#include "tokenizer_internal.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* mkdir -p for the cache folder (0700 parts that do not exist yet). */
static qs_status qw_mkdirs(const char *dir, qs_error *err) {
    char p[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof p) return qs_error_set(err, QS_EINVAL, "%s: bad folder name", dir);
    memcpy(p, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != 0) continue;
        char c = p[i];
        p[i] = 0;
        if (mkdir(p, 0700) != 0 && errno != EEXIST)
            return qs_error_set(err, QS_EIO, "%s: cannot create: %s", p, strerror(errno));
        p[i] = c;
    }
    return QS_OK;
}

static qs_status qw_cache_dir(const char *given, char *out, size_t cap, qs_error *err) {
    const char *env = getenv("QSWEEP_TOKENS_DIR"), *xdg = getenv("XDG_CACHE_HOME"),
               *home = getenv("HOME");
    int n;
    if (given && *given)
        n = snprintf(out, cap, "%s", given);
    else if (env && *env)
        n = snprintf(out, cap, "%s", env);
    else if (xdg && *xdg)
        n = snprintf(out, cap, "%s/qsweep/tokens", xdg);
    else if (home && *home)
        n = snprintf(out, cap, "%s/.cache/qsweep/tokens", home);
    else
        return qs_error_set(
            err, QS_EINVAL,
            "token cache: neither QSWEEP_TOKENS_DIR, XDG_CACHE_HOME nor HOME is set");
    if (n < 0 || (size_t)n >= cap)
        return qs_error_set(err, QS_EINVAL, "token cache: path too long");
    return qw_mkdirs(out, err);
}

qs_status qw_text_dataset(const char *model_path, const char *text_path, const char *cache_dir,
                          qw_tokens *out, char *tokens_path, size_t tokens_path_cap,
                          qs_error *err) {
    memset(out, 0, sizeof *out);
    qw_tokenizer *t;
    qs_status st = qw_tokenizer_open(model_path, &t, err);
    if (st) {
        if (st == QS_ENOTFOUND)
            qs_error_wrap(err, "%s: a text dataset needs the model's tokenizer", text_path);
        return st;
    }
    FILE *f = fopen(text_path, "rb");
    if (!f) {
        st = qs_error_set(err, errno == ENOENT ? QS_ENOTFOUND : QS_EIO, "%s: cannot open: %s",
                          text_path, strerror(errno));
        qw_tokenizer_free(t);
        return st;
    }
    size_t cap = 1 << 16, n = 0;
    char *text = malloc(cap);
    while (text) {
        n += fread(text + n, 1, cap - n, f);
        if (n < cap) break;
        char *b = realloc(text, cap * 2);
        if (!b) free(text);
        text = b;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (!text || bad) {
        free(text);
        qw_tokenizer_free(t);
        return qs_error_set(err, text ? QS_EIO : QS_ENOMEM, "%s: cannot read the text", text_path);
    }
    size_t at = qw_utf8_check((const uint8_t *)text, n);
    if (at != n) {
        st = qs_error_set(err, QS_EINVAL, "%s: byte offset %zu: invalid UTF-8 (byte 0x%02x)",
                          text_path, at, (uint8_t)text[at]);
        goto done;
    }
    if (sodium_init() < 0) {
        st = qs_error_set(err, QS_EIO, "libsodium failed to initialise");
        goto done;
    }
    uint8_t h[crypto_generichash_BYTES];
    char hex[2 * crypto_generichash_BYTES + 1];
    crypto_generichash(h, sizeof h, (const uint8_t *)text, n, NULL, 0);
    sodium_bin2hex(hex, sizeof hex, h, sizeof h);
    char dir[4096];
    if ((st = qw_cache_dir(cache_dir, dir, sizeof dir, err))) goto done;
    int len = snprintf(tokens_path, tokens_path_cap, "%s/%s-%s.tokens", dir, t->digest, hex);
    if (len < 0 || (size_t)len >= tokens_path_cap) {
        st = qs_error_set(err, QS_EINVAL, "%s: token cache path too long", dir);
        goto done;
    }
    if (access(tokens_path, F_OK) != 0) {
        qw_token_vec ids = {0};
        st = qw_tokenizer_encode(t, text, n, 0, &ids, err);
        if (st)
            qs_error_wrap(err, "%s", text_path);
        else
            st = qw_tokens_write(tokens_path, ids.ids, ids.n, t->n_vocab, t->digest, err);
        qw_token_vec_free(&ids);
        if (st) goto done;
    }
    st = qw_tokens_load(tokens_path, out, err);
    if (!st && strcmp(out->tokenizer_digest, t->digest) != 0) {
        /* a file in the cache that is not what its name says: refuse it, never trust it */
        st = qs_error_set(err, QS_EFORMAT, "%s: names tokenizer %.16s..., not %.16s...",
                          tokens_path, out->tokenizer_digest, t->digest);
        qw_tokens_free(out);
    }
done:
    free(text);
    qw_tokenizer_free(t);
    return st;
}
