/* Read-only whole-file mappings: checkpoints are read in place (as llama2.c's run.c does). */
#include "checkpoint_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const uint8_t qw_empty_file[1];

qs_status qw_map_file(const char *path, qw_mapped_file *f, qs_error *err) {
    memset(f, 0, sizeof *f);
    /* A FIFO or device would block open() or read() forever (a FIFO without a writer), and a
     * directory cannot be mapped: refuse anything but a regular file before opening it, and
     * again on the descriptor (O_NONBLOCK keeps a FIFO swapped in between from blocking). */
    struct stat pre;
    if (stat(path, &pre) == 0 && !S_ISREG(pre.st_mode))
        return qs_error_set(err, QS_EINVAL, "%s: not a regular file (%s)", path,
                            S_ISDIR(pre.st_mode) ? "a directory" : "a FIFO, socket or device");
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return qs_error_set(err, errno == ENOENT ? QS_ENOTFOUND : QS_EIO, "%s: cannot open: %s",
                            path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return qs_error_set(err, QS_EIO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return qs_error_set(err, QS_EINVAL, "%s: not a regular file", path);
    }
    const uint8_t *data = qw_empty_file;
    size_t size = (size_t)sb.st_size;
    if (size > 0) {
        void *m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            return qs_error_set(err, QS_EIO, "%s: cannot mmap %zu bytes: %s", path, size,
                                strerror(e));
        }
        data = m;
    }
    close(fd); /* the mapping stays valid after close (POSIX mmap) */
    f->path = strdup(path);
    if (!f->path) {
        if (size > 0) munmap((void *)data, size);
        return qs_error_set(err, QS_ENOMEM, "%s: out of memory", path);
    }
    f->data = data;
    f->size = size;
    return QS_OK;
}

void qw_unmap_file(qw_mapped_file *f) {
    if (f->size > 0) munmap((void *)f->data, f->size);
    free(f->path);
    memset(f, 0, sizeof *f);
}
