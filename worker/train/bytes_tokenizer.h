/* The bytes tokenizer of the training shapes (micro, tiny, mini, small): vocabulary 258, ids
 * 0..255 the bytes of the text, 256 BOS, 257 EOS. Training grids name it as
 * `tokenizer: bytes`. */
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

#endif
