/* A text file as an evaluation dataset (`dataset: {text: FILE}` in a grid): the text
 * is tokenized once per (tokenizer digest, text digest, tokenizer code version) into a version 2
 * token file in a cache folder, with the file's BLAKE2b-256 digest in a ".b2" file beside it;
 * every later use reads that file and checks it against the digest, the tokenizer digest and
 * the vocabulary size, and rebuilds it (with a warning) when it does not match. */
#include "replace_file.h"
#include "tokenizer_internal.h"

#include <errno.h>
#include <fcntl.h>
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

/* Opens text_path for reading, refusing anything that is not a regular file after symlinks are
 * followed (a FIFO would block the reader forever, a directory has no text). Opened with
 * O_NONBLOCK so a FIFO never blocks the open itself; the check is on the opened file (fstat).
 * Errors: QS_ENOTFOUND (no file), QS_EINVAL (a directory: "Is a directory"; a FIFO, socket or
 * device: says which), QS_EIO. */
static qs_status qw_open_text(const char *text_path, FILE **out, qs_error *err) {
    *out = NULL;
    int fd = open(text_path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return qs_error_set(err, errno == ENOENT ? QS_ENOTFOUND : QS_EIO, "%s: cannot open: %s",
                            text_path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        qs_status st = qs_error_set(err, QS_EIO, "%s: cannot stat: %s", text_path, strerror(errno));
        close(fd);
        return st;
    }
    if (!S_ISREG(sb.st_mode)) {
        const char *what = S_ISDIR(sb.st_mode)    ? strerror(EISDIR)
                           : S_ISFIFO(sb.st_mode) ? "is a FIFO (named pipe), not a regular file"
                           : S_ISSOCK(sb.st_mode) ? "is a socket, not a regular file"
                           : S_ISCHR(sb.st_mode)  ? "is a character device, not a regular file"
                           : S_ISBLK(sb.st_mode)  ? "is a block device, not a regular file"
                                                  : "is not a regular file";
        close(fd);
        return qs_error_set(err, QS_EINVAL, "%s: cannot read the text: %s", text_path, what);
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        qs_status st = qs_error_set(err, QS_EIO, "%s: %s", text_path, strerror(errno));
        close(fd);
        return st;
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        qs_status st = qs_error_set(err, QS_EIO, "%s: %s", text_path, strerror(errno));
        close(fd);
        return st;
    }
    *out = f;
    return QS_OK;
}

/* The digest recorded beside a cache file (<tokens_path>.b2: 64 hex digits and a newline) into
 * hex (65 bytes). Returns 0 when it is there and well formed, -1 otherwise. */
static int qw_read_sidecar(const char *sidecar, char hex[65]) {
    FILE *f = fopen(sidecar, "rb");
    if (!f) return -1;
    char buf[80];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    if (n != 65 || buf[64] != '\n') return -1;
    for (int i = 0; i < 64; i++)
        if (!((buf[i] >= '0' && buf[i] <= '9') || (buf[i] >= 'a' && buf[i] <= 'f'))) return -1;
    memcpy(hex, buf, 64);
    hex[64] = 0;
    return 0;
}

/* Writes the file digest hex beside the cache file, atomically (common/replace_file.h). */
static qs_status qw_write_sidecar(const char *sidecar, const char *hex, qs_error *err) {
    qs_replace_file r;
    qs_status st = qs_replace_file_open(sidecar, NULL, &r, err);
    if (st) return st;
    if (fprintf(r.f, "%s\n", hex) != 65) {
        qs_replace_file_abort(&r);
        return qs_error_set(err, QS_EIO, "%s: cannot write: %s", sidecar, strerror(errno));
    }
    return qs_replace_file_commit(&r, err);
}

/* Whether a loaded cache file is the one that was written for tokenizer t: its digest is the
 * recorded one, its header names t's digest and t's vocabulary size. Returns NULL when it is,
 * else what is wrong (for the warning). */
static const char *qw_cache_mismatch(const qw_tokens *tk, const char *recorded,
                                     const qw_tokenizer *t) {
    if (strcmp(tk->digest, recorded) != 0) return "its digest is not the one recorded beside it";
    if (tk->version != 2 || strcmp(tk->tokenizer_digest, t->digest) != 0)
        return "its header names another tokenizer";
    if (tk->vocab_size != t->n_vocab) return "its header gives another vocabulary size";
    return NULL;
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
    FILE *f;
    if ((st = qw_open_text(text_path, &f, err))) {
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
        return qs_error_set(err, text ? QS_EIO : QS_ENOMEM, "%s: cannot read the text: %s",
                            text_path, text ? strerror(errno) : "out of memory");
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
    int len = snprintf(tokens_path, tokens_path_cap, "%s/%s-%s-c%d.tokens", dir, t->digest, hex,
                       QW_TOKENIZER_CODE_VERSION);
    char sidecar[4200];
    if (len < 0 || (size_t)len >= tokens_path_cap ||
        (size_t)snprintf(sidecar, sizeof sidecar, "%s.b2", tokens_path) >= sizeof sidecar) {
        st = qs_error_set(err, QS_EINVAL, "%s: token cache path too long", dir);
        goto done;
    }
    if (access(tokens_path, F_OK) == 0) {
        /* a cached file is used only when it is exactly the file that was written */
        char recorded[65];
        const char *why = NULL;
        qs_error le = {0};
        if (qw_read_sidecar(sidecar, recorded) != 0)
            why = "no valid digest is recorded beside it";
        else if (qw_tokens_load(tokens_path, out, &le) != QS_OK)
            why = le.msg;
        else
            why = qw_cache_mismatch(out, recorded, t);
        if (!why) goto done;
        qw_tokens_free(out);
        fprintf(stderr, "qsweep: warning: token cache %s is damaged (%s); rebuilding it from %s\n",
                tokens_path, why, text_path);
    }
    qw_token_vec ids = {0};
    st = qw_tokenizer_encode(t, text, n, 0, &ids, err);
    if (st)
        qs_error_wrap(err, "%s", text_path);
    else
        st = qw_tokens_write(tokens_path, ids.ids, ids.n, t->n_vocab, t->digest, err);
    qw_token_vec_free(&ids);
    if (st) goto done;
    st = qw_tokens_load(tokens_path, out, err);
    if (!st && (qw_cache_mismatch(out, out->digest, t) ||
                (st = qw_write_sidecar(sidecar, out->digest, err)))) {
        if (!st)
            st = qs_error_set(err, QS_EIO, "%s: the file just written reads back differently",
                              tokens_path);
        qw_tokens_free(out);
    }
done:
    free(text);
    qw_tokenizer_free(t);
    return st;
}
