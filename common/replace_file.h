/* Whole-file replacement of an output file (qsweep tokenize -o, qsweep report -o): written
 * under a unique temporary name beside it (mkstemp), then renamed over it, so a failed write
 * leaves the old file as it was. Only a regular file (or no file) is replaced: a symlink,
 * device, FIFO or directory at the path is refused, so running as root never turns /dev/null
 * into a regular file. */
#ifndef QS_REPLACE_FILE_H
#define QS_REPLACE_FILE_H

#include <stdio.h>

#include "error.h"

typedef struct qs_replace_file {
    FILE *f;    /* open on tmp for writing */
    char *path; /* the file to replace (malloc'd copy) */
    char *tmp;  /* the temporary file beside it (malloc'd) */
    int mode;   /* permissions the result gets: the old file's, else 0666 & ~umask */
} qs_replace_file;

/* Opens a temporary file beside path for writing. input, if not NULL, is a file the caller
 * reads: a path naming the same file (same st_dev and st_ino) is refused.
 * Errors: QS_EINVAL (path is a symlink, not a regular file, or the input file: names path),
 * QS_EIO (cannot create the temporary file), QS_ENOMEM. */
qs_status qs_replace_file_open(const char *path, const char *input, qs_replace_file *r,
                               qs_error *err);

/* Removes the temporary files qs_replace_file_open left beside path (".NAME.XXXXXX", six
 * mkstemp characters) when the writing process died before commit or abort (kill -9). Call
 * it only where no other process may be replacing path at that moment. Returns how many it
 * removed; *bytes (may be NULL) gets their total size. */
int qs_replace_file_sweep(const char *path, long long *bytes);

/* Whether paths a and b name the same existing file (same st_dev and st_ino). */
int qs_same_file(const char *a, const char *b);

/* Flushes, syncs and closes the temporary file, gives it the mode, renames it over path and
 * syncs path's folder (so a crash or kill -9 leaves the old file or the new one). On error the temporary file is removed. Always releases r. Errors: QS_EIO (names the file). */
qs_status qs_replace_file_commit(qs_replace_file *r, qs_error *err);

/* Closes and removes the temporary file, leaving path untouched; releases r. */
void qs_replace_file_abort(qs_replace_file *r);

#endif
