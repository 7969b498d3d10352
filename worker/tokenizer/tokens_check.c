/* Pairing a token file with a model: the token file must come from the model's tokenizer
 * (a byte-level file of vocabulary 256 given to SmolLM2's 49152 is refused). */
#include "tokenizer_internal.h"

#include <string.h>

qs_status qw_tokenizer_check_tokens(const char *tokens_path, const qw_tokens *tok,
                                    const char *model_path, qs_error *err) {
    qw_tokenizer *t;
    qs_status st = qw_tokenizer_open(model_path, &t, err);
    if (st == QS_ENOTFOUND) {
        qs_error_clear(err);
        return QS_OK;
    }
    if (st) return st;
    if (tok->version == QW_TOKENS_VERSION_2) {
        if (strcmp(tok->tokenizer_digest, t->digest) != 0)
            st =
                qs_error_set(err, QS_EINVAL,
                             "%s: made by tokenizer %.16s..., but the tokenizer of %s is "
                             "%.16s...: tokenize the text again with `qsweep tokenize %s`",
                             tokens_path, tok->tokenizer_digest, model_path, t->digest, model_path);
    } else if (tok->vocab_size != t->n_vocab) {
        st = qs_error_set(err, QS_EINVAL,
                          "%s: field \"vocab_size\" = %u, but the tokenizer of %s has %u tokens: "
                          "the file was made by another tokenizer",
                          tokens_path, tok->vocab_size, model_path, t->n_vocab);
    }
    qw_tokenizer_free(t);
    return st;
}
