/* A new output file written whole: created with O_EXCL (an existing file is never
 * overwritten), given mode, written, fsync'd and closed; on any failure it is removed, so no
 * half-written file stays under the name. */
#ifndef QS_NEW_FILE_H
#define QS_NEW_FILE_H

#include <stddef.h>
#include <sys/types.h>

#include "error.h"

/* Writes n bytes of data to a new file at path with permissions mode.
 * Errors: QS_EIO naming path and the system's reason ("exists: not overwritten" when it does). */
qs_status qs_write_new_file(const char *path, const void *data, size_t n, mode_t mode,
                            qs_error *err);

#endif
