/* libFuzzer target: encode of arbitrary bytes with the real tokenizers (SmolLM2's GGUF
 * vocabulary: byte-level BPE with the smollm regexes; Llama 2's tokenizer.json: SentencePiece-
 * style BPE; Llama 2's GGUF: SentencePiece scores). The first byte picks the tokenizer and the
 * flags. Invalid UTF-8 must be refused; valid text must give ids in range and, without special
 * token parsing, decode back to itself (Llama 2 keeps a literal U+2581 only as a space, so that
 * text is left out of the round trip). Run from the build dir of tests/tokenizer (QW_TOK_DATA
 * is compiled in). */
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"
#include "tokenizer_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static qw_tokenizer *tok[3];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *names[3] = {"smollm2.vocab.gguf", "llama2/tokenizer.json", "llama2.vocab.gguf"};
    for (int i = 0; i < 3; i++) {
        char path[4096];
        qs_error err;
        strcpy(path, QW_TOK_DATA "/");
        strcat(path, names[i]);
        if (qw_tokenizer_open(path, &tok[i], &err) != QS_OK) abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    const qw_tokenizer *t = tok[data[0] % 3];
    unsigned flags = (data[0] >> 2) & 3;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    qw_token_vec v = {0};
    qs_error err;
    qs_status st = qw_tokenizer_encode(t, text, len, flags, &v, &err);
    int valid = qw_utf8_check((const uint8_t *)text, len) == len;
    if ((st == QS_OK) != valid) abort();
    if (st) return 0;
    for (size_t i = 0; i < v.n; i++)
        if (v.ids[i] >= qw_tokenizer_vocab_size(t)) abort();
    char *s;
    size_t n;
    if (qw_tokenizer_decode(t, v.ids, v.n, 0, &s, &n, &err) != QS_OK) abort();
    int spm = t != tok[0], all_bytes = 1;
    /* SmolLM2's vocabulary lacks some byte symbols: llama.cpp drops such bytes, so do we */
    for (size_t i = 0; !spm && i < len; i++)
        if (t->byte_id[(uint8_t)text[i]] == UINT32_MAX) all_bytes = 0;
    if (flags == 0 && all_bytes && !(spm && memmem(text, len, "\xe2\x96\x81", 3)) &&
        (n != len || memcmp(s, text, len) != 0))
        abort();
    free(s);
    qw_token_vec_free(&v);
    return 0;
}
