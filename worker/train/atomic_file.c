/* Atomic file replacement (atomic_file.h). */
#include "atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <string.h>
#include <unistd.h>

qs_status qw_atomic_open(qw_atomic_file *a, const char *path, qs_error *err) {
    snprintf(a->path, sizeof a->path, "%s", path);
    snprintf(a->tmp, sizeof a->tmp, "%s.tmp.%ld", path, (long)getpid());
    a->f = fopen(a->tmp, "wb");
    if (!a->f) return qs_error_set(err, QS_EIO, "%s: open: %s", a->tmp, strerror(errno));
    return QS_OK;
}

qs_status qw_atomic_write(qw_atomic_file *a, const void *p, size_t n, qs_error *err) {
    if (n && fwrite(p, 1, n, a->f) != n)
        return qs_error_set(err, QS_EIO, "%s: write: %s", a->tmp, strerror(errno));
    return QS_OK;
}

qs_status qw_atomic_commit(qw_atomic_file *a, qs_status st, qs_error *err) {
    if (!a->f) return st;
    if (st == QS_OK && fflush(a->f) != 0)
        st = qs_error_set(err, QS_EIO, "%s: flush: %s", a->tmp, strerror(errno));
    if (st == QS_OK && fsync(fileno(a->f)) != 0)
        st = qs_error_set(err, QS_EIO, "%s: fsync: %s", a->tmp, strerror(errno));
    if (fclose(a->f) != 0 && st == QS_OK)
        st = qs_error_set(err, QS_EIO, "%s: close: %s", a->tmp, strerror(errno));
    a->f = NULL;
    if (st == QS_OK && rename(a->tmp, a->path) != 0)
        st = qs_error_set(err, QS_EIO, "%s: rename to %s: %s", a->tmp, a->path, strerror(errno));
    if (st != QS_OK) {
        unlink(a->tmp);
        return st;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", a->path);
    int fd = open(dirname(dir), O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    return QS_OK;
}
