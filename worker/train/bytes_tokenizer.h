/* The bytes tokenizer of the training shapes (micro, tiny, mini, small): vocabulary 258, ids
 * 0..255 the bytes of the text, 256 BOS, 257 EOS. Training grids name it as
 * `tokenizer: bytes`; `qsweep tokenize bytes TEXT -o FILE` writes a token file of it, so a
 * sensitivity sweep of a bytes-trained model can read held-out text. */
#ifndef QW_BYTES_TOKENIZER_H
#define QW_BYTES_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

#define QW_BYTES_VOCAB 258
#define QW_BYTES_BOS 256
#define QW_BYTES_EOS 257

/* Reads the file at path into *ids (heap, caller frees; *n ids) as BOS followed by its bytes.
 * Errors: QS_EIO naming the path, QS_ENOMEM. */
qs_status qw_bytes_tokenize_file(const char *path, uint32_t **ids, size_t *n, qs_error *err);

/* The bytes tokenizer's digest for token file headers (tokens.h, version 2): BLAKE2b-256
 * (libsodium crypto_generichash) of its description string "qsweep bytes tokenizer: ids
 * 0..255 bytes, 256 BOS, 257 EOS", as 64 lowercase hex digits and a NUL into hex. It names
 * the tokenizer; it changes only if the id assignment above ever does. */
void qw_bytes_tokenizer_digest(char hex[65]);

#endif
