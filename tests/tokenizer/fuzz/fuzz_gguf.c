/* libFuzzer target: the GGUF vocabulary parser (qw_tokenizer_from_gguf: the tokenizer.ggml.*
 * metadata of a GGUF file) on arbitrary bytes; a vocabulary that loads is then used: a fixed
 * text encoded, decoded, and every id checked in range. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    qw_tokenizer *t;
    qs_error err;
    if (qw_tokenizer_from_gguf("fuzz.gguf", data, size, &t, &err) != QS_OK) return 0;
    static const char text[] = "Hello, world! 123 \xc3\xa9t\xc3\xa9  \n\t<s> \xe4\xb8\xad";
    qw_token_vec v = {0};
    if (qw_tokenizer_encode(t, text, sizeof text - 1,
                            QW_ENCODE_ADD_SPECIAL | QW_ENCODE_PARSE_SPECIAL, &v, &err) == QS_OK) {
        for (size_t i = 0; i < v.n; i++)
            if (v.ids[i] >= qw_tokenizer_vocab_size(t)) abort();
        char *s;
        size_t n;
        if (qw_tokenizer_decode(t, v.ids, v.n, 0, &s, &n, &err) == QS_OK) free(s);
    }
    qw_token_vec_free(&v);
    qw_tokenizer_free(t);
    return 0;
}
