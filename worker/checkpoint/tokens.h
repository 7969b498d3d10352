/* Token files: the tokenized evaluation text a job reads.
 *
 * CONTRACT HEADER. Extend, never rename. Version 1 files come from tools/make_tokens.py;
 * version 2 files from `qsweep tokenize` (worker/tokenizer), whose header names the tokenizer.
 */
#ifndef QW_TOKENS_H
#define QW_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* Token file (format written by tools/make_tokens.py): little-endian
 * offset 0  8 bytes magic "QSWTOKS\0"
 * offset 8  u32 version = 1
 * offset 12 u32 vocab_size of the tokenizer
 * offset 16 u32 dtype: 1 = uint32
 * offset 20 u32 reserved = 0
 * offset 24 u64 count
 * offset 32 count x u32 token ids (each < vocab_size)
 * then optionally a UTF-8 JSON trailer is NOT allowed: file size must be exactly 32 + 4*count.
 *
 * Version 2 (`qsweep tokenize`): the same first 32 bytes with version = 2, then
 * offset 32 32 bytes: the tokenizer's digest (qw_tokenizer_digest, BLAKE2b-256, raw bytes)
 * offset 64 count x u32 token ids; file size exactly 64 + 4*count.
 * Readers accept both versions. */
#define QW_TOKENS_MAGIC "QSWTOKS" /* 7 characters plus the NUL: the 8 magic bytes */
#define QW_TOKENS_HEADER_BYTES 32
#define QW_TOKENS_VERSION 1
#define QW_TOKENS_V2_HEADER_BYTES 64
#define QW_TOKENS_VERSION_2 2
#define QW_TOKENS_DTYPE_U32 1

/* A loaded token file. ids: n token ids (heap, owned); vocab_size from the header;
 * digest: BLAKE2b-256 (libsodium crypto_generichash, 32 bytes) of the whole file, 64 lowercase hex
 * + NUL. */
typedef struct qw_tokens {
    uint32_t *ids;
    size_t n;
    uint32_t vocab_size;
    char digest[65];           /* BLAKE2b-256 hex of the file */
    uint32_t version;          /* 1 or 2 */
    char tokenizer_digest[65]; /* version 2: hex of the header's tokenizer digest; else "" */
} qw_tokens;

/* Reads and validates `path`. Errors (message names the file and the offset/field):
 * QS_EIO (open/read), QS_EFORMAT (bad magic, version not 1 or 2, dtype != 1, reserved != 0,
 * vocab_size 0, size != 32 + 4*count, a token id >= vocab_size: names its index and offset),
 * QS_ENOMEM. On error *out is left zeroed (safe to pass to qw_tokens_free). */
qs_status qw_tokens_load(const char *path, qw_tokens *out, qs_error *err);

/* Writes a version 2 token file: n ids (each < vocab_size), the tokenizer digest given as 64
 * hex digits. Written under a unique temporary name beside path then renamed over it
 * (common/replace_file.h), so a reader never sees half a file; an existing file keeps its mode.
 * Errors: QS_EINVAL (an id >= vocab_size: names its index; a digest that is not 64 hex
 * digits; path is a symlink, device, FIFO or directory), QS_EIO (create, write, rename: path and errno text). */
qs_status qw_tokens_write(const char *path, const uint32_t *ids, size_t n, uint32_t vocab_size,
                          const char *tokenizer_digest_hex, qs_error *err);

/* Frees ids and zeroes the struct. NULL or a zeroed struct is a no-op. */
void qw_tokens_free(qw_tokens *t);

#endif
