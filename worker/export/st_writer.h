/* A safetensors file writer (https://github.com/huggingface/safetensors, "Format"): tensors are
 * added in order, each a copy of its bytes, and written as u64 N, N bytes of JSON (padded with
 * spaces to a multiple of 8 so every tensor starts 8-byte aligned), then the byte buffer. */
#ifndef QW_ST_WRITER_H
#define QW_ST_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* One tensor: its safetensors dtype ("F32", "BF16", "U8", "F8_E4M3", ...), HF shape, bytes. */
typedef struct qw_st_item {
    char *name;
    char dtype[12];
    int ndim;
    int64_t shape[2];
    uint8_t *data; /* owned copy */
    size_t nbytes;
} qw_st_item;

typedef struct qw_st_writer {
    qw_st_item *v;
    size_t n, cap;
    size_t total_bytes; /* sum of nbytes, for the progress line */
} qw_st_writer;

/* Appends a copy of nbytes at data as tensor `name` of dtype and shape (ndim 0: a scalar, 1, 2).
 * Errors: QS_EINVAL (a name already added), QS_ENOMEM. */
qs_status qw_st_writer_add(qw_st_writer *w, const char *name, const char *dtype, int ndim,
                           const int64_t shape[2], const void *data, size_t nbytes, qs_error *err);

/* Writes the file at path (created, never overwritten: O_EXCL) and fsyncs it. Errors: QS_EIO
 * naming the path and errno text (ENOSPC: the disk is full), QS_ENOMEM. A failed write removes
 * the partial file. */
qs_status qw_st_writer_write(const qw_st_writer *w, const char *path, qs_error *err);

/* Frees every copy; a zeroed writer is a no-op. */
void qw_st_writer_free(qw_st_writer *w);

#endif
