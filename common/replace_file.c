/* Whole-file replacement of an output file (replace_file.h). */
#include "replace_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void release(qs_replace_file *r) {
    free(r->path);
    free(r->tmp);
    memset(r, 0, sizeof *r);
}

qs_status qs_replace_file_open(const char *path, const char *input, qs_replace_file *r,
                               qs_error *err) {
    memset(r, 0, sizeof *r);
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (S_ISLNK(st.st_mode))
            return qs_error_set(err, QS_EINVAL,
                                "%s: is a symbolic link: refusing to replace it (give the file "
                                "it points to)",
                                path);
        if (!S_ISREG(st.st_mode))
            return qs_error_set(err, QS_EINVAL,
                                "%s: exists and is not a regular file (a directory, device or "
                                "FIFO): refusing to replace it",
                                path);
        if (input && qs_same_file(input, path))
            return qs_error_set(err, QS_EINVAL,
                                "%s: is the input file %s: refusing to write over it", path, input);
        r->mode = (int)(st.st_mode & 07777);
    } else if (errno != ENOENT) {
        return qs_error_set(err, QS_EIO, "%s: cannot stat: %s", path, strerror(errno));
    } else {
        mode_t mask = umask(0);
        umask(mask);
        r->mode = (int)(0666 & ~mask);
    }
    size_t n = strlen(path);
    const char *slash = strrchr(path, '/');
    size_t dir = slash ? (size_t)(slash - path) + 1 : 0;
    r->path = malloc(n + 1);
    r->tmp = malloc(n + 16);
    if (!r->path || !r->tmp) {
        release(r);
        return qs_error_set(err, QS_ENOMEM, "%s: out of memory", path);
    }
    memcpy(r->path, path, n + 1);
    /* ".NAME.XXXXXX" in path's own directory, so the rename stays on one file system */
    snprintf(r->tmp, n + 16, "%.*s.%s.XXXXXX", (int)dir, path, path + dir);
    int fd = mkstemp(r->tmp);
    if (fd < 0) {
        qs_status s = qs_error_set(err, QS_EIO, "%s: cannot create a temporary file %s: %s", path,
                                   r->tmp, strerror(errno));
        release(r);
        return s;
    }
    r->f = fdopen(fd, "wb");
    if (!r->f) {
        qs_status s =
            qs_error_set(err, QS_EIO, "%s: cannot open %s: %s", path, r->tmp, strerror(errno));
        close(fd);
        unlink(r->tmp);
        release(r);
        return s;
    }
    return QS_OK;
}

int qs_replace_file_sweep(const char *path, long long *bytes) {
    if (bytes) *bytes = 0;
    const char *slash = strrchr(path, '/');
    const char *name = slash ? slash + 1 : path;
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
    if (slash == path) snprintf(dir, sizeof dir, "/");
    size_t nl = strlen(name);
    DIR *d = opendir(dir);
    if (!d) return 0;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *f = e->d_name;
        size_t fl = strlen(f);
        /* "." NAME "." and six characters */
        if (fl != nl + 8 || f[0] != '.' || strncmp(f + 1, name, nl) != 0 || f[nl + 1] != '.')
            continue;
        struct stat st;
        if (fstatat(dirfd(d), f, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
        if (unlinkat(dirfd(d), f, 0) == 0) {
            removed++;
            if (bytes) *bytes += (long long)st.st_size;
        }
    }
    closedir(d);
    return removed;
}

int qs_same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

/* fsync of the folder holding path, so the rename itself survives a crash (rename(2) is atomic,
 * but the new directory entry is durable only once its folder is synced). Best effort: a
 * folder that cannot be opened leaves the rename as durable as the file system makes it. */
static void sync_dir(const char *path) {
    char *copy = strdup(path);
    if (!copy) return;
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(copy);
}

qs_status qs_replace_file_commit(qs_replace_file *r, qs_error *err) {
    qs_status s = QS_OK;
    int bad = ferror(r->f) || fflush(r->f) != 0;
    int e = errno;
    if (!bad && (fchmod(fileno(r->f), (mode_t)r->mode) != 0 || fsync(fileno(r->f)) != 0)) {
        bad = 1;
        e = errno;
    }
    if (fclose(r->f) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    r->f = NULL;
    if (bad)
        s = qs_error_set(err, QS_EIO, "%s: write failed (%s): %s", r->path, r->tmp, strerror(e));
    else if (rename(r->tmp, r->path) != 0)
        s = qs_error_set(err, QS_EIO, "%s: cannot rename %s over it: %s", r->path, r->tmp,
                         strerror(errno));
    if (s) unlink(r->tmp);
    else
        sync_dir(r->path);
    release(r);
    return s;
}

void qs_replace_file_abort(qs_replace_file *r) {
    if (r->f) fclose(r->f);
    if (r->tmp) unlink(r->tmp);
    release(r);
}
