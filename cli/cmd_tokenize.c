/* qsweep tokenize MODEL TEXT -o FILE: a text file through the model's own tokenizer into a
 * token file (version 2, tokens.h: its header carries the tokenizer digest).
 * qsweep tokenize MODEL --decode TOKENS [-o FILE]: a token file back to text.
 * MODEL: a tokenizer.json, a SentencePiece .model file, a Hugging Face directory holding either,
 * a .gguf file, or `bytes`: the training shapes' bytes tokenizer (bytes_tokenizer.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bytes_tokenizer.h"
#include "cli.h"
#include "replace_file.h"
#include "tokenizer.h"
#include "tokens.h"

static void tokenize_usage(FILE *out) {
    fprintf(out,
            "usage: qsweep tokenize MODEL TEXT -o FILE [--bos] [--special] [--print]\n"
            "       qsweep tokenize MODEL --decode TOKENS [-o FILE] [--skip-special]\n"
            "  MODEL           a tokenizer.json, a SentencePiece .model, a Hugging Face directory\n"
            "                  holding either (tokenizer.json or tokenizer.model), a .gguf, or\n"
            "                  bytes: the training shapes' bytes tokenizer (ids 0..255 the\n"
            "                  text's bytes, BOS 256, EOS 257; any bytes, not only UTF-8)\n"
            "  TEXT            a UTF-8 text file (invalid UTF-8 is refused with its byte offset)\n"
            "  -o FILE         the token file to write (version 2: it names the tokenizer), or\n"
            "                  with --decode the text file (default: standard output); written\n"
            "                  whole then renamed over FILE: a FILE that is a symlink, device,\n"
            "                  FIFO or directory, or is the input file, is refused (exit 2)\n"
            "  --bos           add BOS/EOS as the model's tokenizer config says (default: the\n"
            "                  text's own tokens only; evaluation puts BOS at each chunk start)\n"
            "  --special       match special tokens' text (e.g. <|im_start|>) in the input\n"
            "  --print         also print the ids, space-separated, on standard output\n"
            "  --skip-special  with --decode: leave special tokens out of the text\n");
}

static qs_status read_all(const char *path, char **data, size_t *size, qs_error *err) {
    *data = NULL;
    *size = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return qs_error_set(err, errno == ENOENT ? QS_ENOTFOUND : QS_EIO, "%s: cannot open: %s",
                            path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *b = realloc(buf, cap * 2);
        if (!b) free(buf);
        buf = b;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf) return qs_error_set(err, QS_ENOMEM, "%s: out of memory reading it", path);
    if (bad) {
        free(buf);
        return qs_error_set(err, QS_EIO, "%s: read failed", path);
    }
    *data = buf;
    *size = n;
    return QS_OK;
}

static int do_decode(const qw_tokenizer *t, const char *tokens, const char *out, int skip) {
    qs_error err = {0};
    qw_tokens tk = {0};
    qs_status st = qw_tokens_load(tokens, &tk, &err);
    if (st) return qsweep_fail("tokenize", &err);
    char *text;
    size_t len;
    st = qw_tokenizer_decode(t, tk.ids, tk.n, skip, &text, &len, &err);
    qw_tokens_free(&tk);
    if (st) {
        qs_error_wrap(&err, "%s", tokens);
        return qsweep_fail("tokenize", &err);
    }
    if (out) {
        qs_replace_file r;
        if ((st = qs_replace_file_open(out, tokens, &r, &err))) {
            free(text);
            return qsweep_fail("tokenize", &err);
        }
        if (fwrite(text, 1, len, r.f) != len) {
            qs_error_set(&err, QS_EIO, "%s: write failed: %s", out, strerror(errno));
            qs_replace_file_abort(&r);
            st = QS_EIO;
        } else {
            st = qs_replace_file_commit(&r, &err);
        }
        free(text);
        return st ? qsweep_fail("tokenize", &err) : QS_EXIT_OK;
    }
    int bad = fwrite(text, 1, len, stdout) != len;
    bad |= fflush(stdout) != 0;
    free(text);
    if (bad) {
        qs_error_set(&err, QS_EIO, "standard output: write failed: %s", strerror(errno));
        return qsweep_fail("tokenize", &err);
    }
    return QS_EXIT_OK;
}

/* `qsweep tokenize bytes TEXT -o FILE`: the text's bytes as ids (BOS 256 first with --bos, as
 * a training grid's `tokenizer: bytes` reads it), written as a version 2 token file naming the
 * bytes tokenizer's digest. Exit status as qsweep_cmd_tokenize's. */
static int tokenize_bytes(const char *text, const char *out, int bos, int print) {
    qs_error err = {0};
    uint32_t *ids;
    size_t n;
    qs_status st = qw_bytes_tokenize_file(text, &ids, &n, &err);
    if (st) return qsweep_fail("tokenize", &err);
    const uint32_t *from = bos ? ids : ids + 1; /* ids[0] is BOS */
    size_t count = bos ? n : n - 1;
    char digest[65];
    qw_bytes_tokenizer_digest(digest);
    if (out && qs_same_file(text, out))
        st = qs_error_set(&err, QS_EINVAL, "%s: is the input file %s: refusing to write over it",
                          out, text);
    if (!st && out) st = qw_tokens_write(out, from, count, QW_BYTES_VOCAB, digest, &err);
    if (!st && print) {
        for (size_t i = 0; i < count; i++)
            printf(i ? " %u" : "%u", from[i]);
        printf("\n");
        if (fflush(stdout) != 0)
            st = qs_error_set(&err, QS_EIO, "standard output: write failed: %s", strerror(errno));
    }
    if (!st && out)
        fprintf(stderr, "qsweep tokenize: %s: %zu tokens (tokenizer bytes %s)\n", out, count,
                digest);
    free(ids);
    return st ? qsweep_fail("tokenize", &err) : QS_EXIT_OK;
}

int qsweep_cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *text = NULL, *out = NULL, *decode = NULL;
    int bos = 0, special = 0, print = 0, skip = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            tokenize_usage(stdout);
            return QS_EXIT_OK;
        } else if (strcmp(a, "-o") == 0 || strcmp(a, "--decode") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "qsweep tokenize: %s needs a file\n", a);
                return QS_EXIT_USAGE;
            }
            if (a[1] == 'o')
                out = argv[++i];
            else
                decode = argv[++i];
        } else if (strcmp(a, "--bos") == 0) {
            bos = 1;
        } else if (strcmp(a, "--special") == 0) {
            special = 1;
        } else if (strcmp(a, "--print") == 0) {
            print = 1;
        } else if (strcmp(a, "--skip-special") == 0) {
            skip = 1;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "qsweep tokenize: unknown option %s\n", a);
            tokenize_usage(stderr);
            return QS_EXIT_USAGE;
        } else if (!model) {
            model = a;
        } else if (!text) {
            text = a;
        } else {
            fprintf(stderr, "qsweep tokenize: unexpected argument %s\n", a);
            return QS_EXIT_USAGE;
        }
    }
    if (!model || (decode ? text != NULL : (!text || (!out && !print)))) {
        tokenize_usage(stderr);
        return QS_EXIT_USAGE;
    }
    if (!strcmp(model, "bytes")) {
        if (decode || special) {
            fprintf(stderr, "qsweep tokenize: bytes: %s is not supported (the ids are the bytes)\n",
                    decode ? "--decode" : "--special");
            return QS_EXIT_USAGE;
        }
        return tokenize_bytes(text, out, bos, print);
    }
    qs_error err = {0};
    qw_tokenizer *t;
    qs_status st = qw_tokenizer_open(model, &t, &err);
    if (st) return qsweep_fail("tokenize", &err);
    if (decode) {
        int rc = do_decode(t, decode, out, skip);
        qw_tokenizer_free(t);
        return rc;
    }
    char *data;
    size_t size;
    if ((st = read_all(text, &data, &size, &err))) {
        qw_tokenizer_free(t);
        return qsweep_fail("tokenize", &err);
    }
    qw_token_vec ids = {0};
    unsigned flags = (bos ? QW_ENCODE_ADD_SPECIAL : 0) | (special ? QW_ENCODE_PARSE_SPECIAL : 0);
    st = qw_tokenizer_encode(t, data, size, flags, &ids, &err);
    free(data);
    if (st) {
        /* "text: byte offset N" names the file */
        char msg[sizeof err.msg];
        snprintf(msg, sizeof msg, "%s", err.msg);
        const char *m = strncmp(msg, "text: ", 6) == 0 ? msg + 6 : msg;
        qs_error_set(&err, st, "%s: %s", text, m);
    }
    if (!st && out && qs_same_file(text, out))
        st = qs_error_set(&err, QS_EINVAL, "%s: is the input file %s: refusing to write over it",
                          out, text);
    if (!st && out)
        st = qw_tokens_write(out, ids.ids, ids.n, qw_tokenizer_vocab_size(t),
                             qw_tokenizer_digest(t), &err);
    if (!st && print) {
        for (size_t i = 0; i < ids.n; i++)
            printf(i ? " %u" : "%u", ids.ids[i]);
        printf("\n");
        if (fflush(stdout) != 0)
            st = qs_error_set(&err, QS_EIO, "standard output: write failed: %s", strerror(errno));
    }
    if (!st && out)
        fprintf(stderr, "qsweep tokenize: %s: %zu tokens (tokenizer %s %s)\n", out, ids.n,
                qw_tokenizer_kind(t), qw_tokenizer_digest(t));
    qw_token_vec_free(&ids);
    qw_tokenizer_free(t);
    return st ? qsweep_fail("tokenize", &err) : QS_EXIT_OK;
}
