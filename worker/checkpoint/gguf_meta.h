/* GGUF metadata read alone, without the tensors: for readers of other keys than the llama.*
 * ones qw_checkpoint uses (the tokenizer.ggml.* keys, worker/tokenizer). */
#ifndef QW_GGUF_META_H
#define QW_GGUF_META_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* GGUF value types (ggml docs/gguf.md "Metadata"). */
enum {
    QW_GGUF_U8 = 0,
    QW_GGUF_I8,
    QW_GGUF_U16,
    QW_GGUF_I16,
    QW_GGUF_U32,
    QW_GGUF_I32,
    QW_GGUF_F32,
    QW_GGUF_BOOL,
    QW_GGUF_STRING,
    QW_GGUF_ARRAY,
    QW_GGUF_U64,
    QW_GGUF_I64,
    QW_GGUF_F64,
};

/* One metadata entry: the key (key_len bytes, not NUL-terminated), its value type, and the
 * value's bytes [value, value + value_bytes) inside the caller's buffer, every length in it
 * already checked against the file (a string: u64 length + bytes; an array: u32 element
 * type, u64 count, elements). */
typedef struct qw_gguf_kv_view {
    const char *key;
    size_t key_len;
    uint32_t type;
    const uint8_t *value;
    size_t value_bytes;
} qw_gguf_kv_view;

/* Parses the header and every key/value of a GGUF v3 file held in memory (the whole file or
 * its first bytes up to the end of the metadata); *kv (heap, free()) gets *n entries in file
 * order. Errors name `file` and the offset and key: QS_EFORMAT (bad magic, truncated, unknown
 * value type, a key twice, arrays nested deeper than 8), QS_EUNSUPPORTED (version != 3),
 * QS_ENOMEM. */
qs_status qw_gguf_metadata(const char *file, const uint8_t *data, size_t size, qw_gguf_kv_view **kv,
                           size_t *n, qs_error *err);

#endif
