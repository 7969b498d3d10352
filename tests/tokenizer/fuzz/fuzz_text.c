/* libFuzzer target: the plain-text dataset reader (qw_text_dataset, tokenizer.h) on arbitrary
 * bytes as the text file, with SmolLM2's GGUF vocabulary (byte-level BPE with the smollm
 * regexes) as the model's tokenizer and a token cache of its own. Invalid UTF-8 must be refused
 * naming the file and the byte offset of the first bad byte (qw_utf8_check); valid text must
 * give a version 2 token file naming the tokenizer's digest, ids in range and the same ids as
 * encoding the text directly; reading it a second time must take the cached file and give the
 * same ids and dataset digest. Every file it writes is removed after each input and its folder
 * at exit. Run from the build dir of tests/tokenizer (QW_TOK_DATA is compiled in). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tokenizer.h"
#include "tokenizer_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static qw_tokenizer *tok;
static char dir[4096], text_path[4200], model[4096];

static void remove_dir(void) {
    unlink(text_path);
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    qs_error err;
    snprintf(model, sizeof model, "%s/smollm2.vocab.gguf", QW_TOK_DATA);
    if (qw_tokenizer_open(model, &tok, &err) != QS_OK) abort();
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/qsweep-fuzz-text.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) abort();
    snprintf(text_path, sizeof text_path, "%s/text.txt", dir);
    atexit(remove_dir);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FILE *f = fopen(text_path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) abort();
    qw_tokens a, b;
    char path_a[4200], path_b[4200];
    qs_error err;
    qs_status st = qw_text_dataset(model, text_path, dir, &a, path_a, sizeof path_a, &err);
    size_t at = qw_utf8_check(data, size);
    if (at != size) {
        char want[64];
        snprintf(want, sizeof want, ": byte offset %zu: invalid UTF-8", at);
        if (st != QS_EINVAL || !strstr(err.msg, text_path) || !strstr(err.msg, want)) abort();
        return 0;
    }
    if (st != QS_OK) abort();
    if (a.version != 2 || strcmp(a.tokenizer_digest, qw_tokenizer_digest(tok)) != 0 ||
        a.vocab_size != qw_tokenizer_vocab_size(tok))
        abort();
    qw_token_vec v = {0};
    if (qw_tokenizer_encode(tok, (const char *)data, size, 0, &v, &err) != QS_OK || v.n != a.n ||
        (a.n && memcmp(v.ids, a.ids, a.n * sizeof *a.ids) != 0))
        abort();
    qw_token_vec_free(&v);
    /* the second read takes the cache */
    if (qw_text_dataset(model, text_path, dir, &b, path_b, sizeof path_b, &err) != QS_OK ||
        strcmp(path_a, path_b) != 0 || strcmp(a.digest, b.digest) != 0 || a.n != b.n ||
        (a.n && memcmp(a.ids, b.ids, a.n * sizeof *a.ids) != 0))
        abort();
    qw_tokens_free(&a);
    qw_tokens_free(&b);
    char sidecar[4300];
    snprintf(sidecar, sizeof sidecar, "%s.b2", path_a);
    unlink(path_a);
    unlink(sidecar);
    return 0;
}
