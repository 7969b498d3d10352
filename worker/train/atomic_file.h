/* A file replaced atomically: written to "<path>.tmp.<pid>", fsynced, renamed over path and
 * the directory fsynced (POSIX rename(2) is atomic), so a crash or kill -9 leaves the old file
 * or the new one, never a torn one. */
#ifndef QW_TRAIN_ATOMIC_FILE_H
#define QW_TRAIN_ATOMIC_FILE_H

#include <stddef.h>
#include <stdio.h>

#include "error.h"

typedef struct qw_atomic_file {
    FILE *f;
    char path[4096], tmp[4200];
} qw_atomic_file;

/* Opens the temporary file. Errors: QS_EIO (path and errno text). */
qs_status qw_atomic_open(qw_atomic_file *a, const char *path, qs_error *err);

/* Appends n bytes. Errors: QS_EIO. */
qs_status qw_atomic_write(qw_atomic_file *a, const void *p, size_t n, qs_error *err);

/* With st == QS_OK: flushes, fsyncs and renames into place; otherwise (or when that fails)
 * removes the temporary file. Returns st, or the QS_EIO of the failing step. */
qs_status qw_atomic_commit(qw_atomic_file *a, qs_status st, qs_error *err);

#endif
