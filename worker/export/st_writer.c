/* safetensors writer (st_writer.h). */
#include "st_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

qs_status qw_st_writer_add(qw_st_writer *w, const char *name, const char *dtype, int ndim,
                           const int64_t shape[2], const void *data, size_t nbytes, qs_error *err) {
    for (size_t i = 0; i < w->n; i++)
        if (strcmp(w->v[i].name, name) == 0)
            return qs_error_set(err, QS_EINVAL, "safetensors: tensor \"%s\" added twice", name);
    if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 64;
        qw_st_item *v = realloc(w->v, cap * sizeof *v);
        if (!v) return qs_error_set(err, QS_ENOMEM, "safetensors: out of memory");
        w->v = v;
        w->cap = cap;
    }
    qw_st_item *it = &w->v[w->n];
    memset(it, 0, sizeof *it);
    it->name = strdup(name);
    it->data = malloc(nbytes ? nbytes : 1);
    if (!it->name || !it->data) {
        free(it->name);
        free(it->data);
        return qs_error_set(err, QS_ENOMEM, "safetensors: out of memory copying \"%s\"", name);
    }
    snprintf(it->dtype, sizeof it->dtype, "%s", dtype);
    it->ndim = ndim;
    it->shape[0] = shape[0];
    it->shape[1] = ndim == 2 ? shape[1] : 0;
    memcpy(it->data, data, nbytes);
    it->nbytes = nbytes;
    w->total_bytes += nbytes;
    w->n++;
    return QS_OK;
}

/* The header JSON: {name: {dtype, shape, data_offsets}}, in the order added. */
static char *header_json(const qw_st_writer *w) {
    json_t *root = json_object();
    if (!root) return NULL;
    json_object_set_new(root, "__metadata__", json_pack("{s:s}", "format", "pt"));
    size_t off = 0;
    for (size_t i = 0; i < w->n; i++) {
        const qw_st_item *it = &w->v[i];
        json_t *shape = json_array();
        for (int d = 0; d < it->ndim; d++)
            json_array_append_new(shape, json_integer(it->shape[d]));
        json_object_set_new(root, it->name,
                            json_pack("{s:s, s:o, s:[I,I]}", "dtype", it->dtype, "shape", shape,
                                      "data_offsets", (json_int_t)off,
                                      (json_int_t)(off + it->nbytes)));
        off += it->nbytes;
    }
    char *s = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    return s;
}

static int write_all(int fd, const void *p, size_t n) {
    const uint8_t *b = p;
    while (n) {
        ssize_t k = write(fd, b, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

qs_status qw_st_writer_write(const qw_st_writer *w, const char *path, qs_error *err) {
    char *hdr = header_json(w);
    if (!hdr) return qs_error_set(err, QS_ENOMEM, "%s: out of memory for the header", path);
    size_t len = strlen(hdr), padded = (len + 7) / 8 * 8;
    char *h = malloc(padded);
    if (!h) {
        free(hdr);
        return qs_error_set(err, QS_ENOMEM, "%s: out of memory for the header", path);
    }
    memcpy(h, hdr, len);
    memset(h + len, ' ', padded - len);
    free(hdr);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        free(h);
        return qs_error_set(err, QS_EIO, "%s: %s", path, strerror(errno));
    }
    uint64_t n = padded; /* little-endian host (checkpoint_internal.h refuses others) */
    int bad = write_all(fd, &n, sizeof n) || write_all(fd, h, padded);
    for (size_t i = 0; i < w->n && !bad; i++)
        bad = write_all(fd, w->v[i].data, w->v[i].nbytes);
    if (!bad) bad = fsync(fd);
    int e = errno;
    if (close(fd) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    free(h);
    if (bad) {
        unlink(path);
        return qs_error_set(err, QS_EIO, "%s: writing: %s", path, strerror(e));
    }
    return QS_OK;
}

void qw_st_writer_free(qw_st_writer *w) {
    for (size_t i = 0; i < w->n; i++) {
        free(w->v[i].name);
        free(w->v[i].data);
    }
    free(w->v);
    memset(w, 0, sizeof *w);
}
