/* Token files: the tokenized evaluation text a job reads.
 *
 * CONTRACT HEADER (engineer B2 writes the files with tools/make_tokens.py). Extend, never rename.
 */
#ifndef QW_TOKENS_H
#define QW_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* Token file (format written by tools/make_tokens.py, engineer B2): little-endian
 * offset 0  8 bytes magic "QSWTOKS\0"
 * offset 8  u32 version = 1
 * offset 12 u32 vocab_size of the tokenizer
 * offset 16 u32 dtype: 1 = uint32
 * offset 20 u32 reserved = 0
 * offset 24 u64 count
 * offset 32 count x u32 token ids (each < vocab_size)
 * then optionally a UTF-8 JSON trailer is NOT allowed: file size must be exactly 32 + 4*count. */
#define QW_TOKENS_MAGIC "QSWTOKS" /* 7 characters plus the NUL: the 8 magic bytes */
#define QW_TOKENS_HEADER_BYTES 32
#define QW_TOKENS_VERSION 1
#define QW_TOKENS_DTYPE_U32 1

/* A loaded token file. ids: n token ids (heap, owned); vocab_size from the header;
 * digest: BLAKE2b-256 (libsodium crypto_generichash, 32 bytes) of the whole file, 64 lowercase hex
 * + NUL. */
typedef struct qw_tokens {
    uint32_t *ids;
    size_t n;
    uint32_t vocab_size;
    char digest[65]; /* BLAKE2b-256 hex of the file */
} qw_tokens;

/* Reads and validates `path`. Errors (message names the file and the offset/field):
 * QS_EIO (open/read), QS_EFORMAT (bad magic, version != 1, dtype != 1, reserved != 0,
 * vocab_size 0, size != 32 + 4*count, a token id >= vocab_size: names its index and offset),
 * QS_ENOMEM. On error *out is left zeroed (safe to pass to qw_tokens_free). */
qs_status qw_tokens_load(const char *path, qw_tokens *out, qs_error *err);

/* Frees ids and zeroes the struct. NULL or a zeroed struct is a no-op. */
void qw_tokens_free(qw_tokens *t);

#endif
