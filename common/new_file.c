#include "new_file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

qs_status qs_write_new_file(const char *path, const void *data, size_t n, mode_t mode,
                            qs_error *err) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0)
        return qs_error_set(err, QS_EIO, "%s: %s%s", path, strerror(errno),
                            errno == EEXIST ? " (not overwritten: remove it first)" : "");
    const char *p = data;
    int bad = fchmod(fd, mode) != 0; /* the umask narrowed open's mode */
    while (n && !bad) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) {
            bad = 1;
        } else {
            p += k;
            n -= (size_t)k;
        }
    }
    if (!bad) bad = fsync(fd) != 0;
    int e = errno;
    if (close(fd) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    if (bad) {
        unlink(path);
        return qs_error_set(err, QS_EIO, "%s: writing: %s", path, strerror(e));
    }
    return QS_OK;
}
