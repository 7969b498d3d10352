/* Training checkpoints (ckpt.h). */
#include "ckpt.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "replace_file.h"

#define HDR 176
#define VERSION 2
#define POINT 32 /* bytes per curve point */

qs_status qw_train_history_add(qw_train_history *h, const char *name, int64_t step, double value,
                               qs_error *err) {
    if (strlen(name) >= QW_CKPT_METRIC_NAME)
        return qs_error_set(err, QS_EINVAL, "curve metric \"%s\": longer than %d bytes", name,
                            QW_CKPT_METRIC_NAME - 1);
    if (h->n == h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 64;
        qw_curve_point *p = realloc(h->points, cap * sizeof *p);
        if (!p) return qs_error_set(err, QS_ENOMEM, "curve history: %zu points", cap);
        h->points = p;
        h->cap = cap;
    }
    qw_curve_point *p = &h->points[h->n++];
    memset(p->name, 0, sizeof p->name);
    memcpy(p->name, name, strlen(name));
    p->step = step;
    p->value = value;
    return QS_OK;
}

void qw_train_history_free(qw_train_history *h) {
    free(h->points);
    memset(h, 0, sizeof *h);
}

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static uint64_t get64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void putf64(uint8_t *p, double v) {
    uint64_t u;
    memcpy(&u, &v, 8);
    put64(p, u);
}
static double getf64(const uint8_t *p) {
    uint64_t u = get64(p);
    double v;
    memcpy(&v, &u, 8);
    return v;
}

qs_status qw_train_checkpoint_save(const char *path, const qw_trainer *tr, const char *identity,
                                   const qw_train_history *h, qs_error *err) {
    if (strlen(identity) >= QW_CKPT_IDENTITY)
        return qs_error_set(err, QS_EINVAL, "%s: checkpoint identity longer than %d bytes", path,
                            QW_CKPT_IDENTITY - 1);
    qw_tmodel *m = tr->model;
    size_t n = qw_tmodel_n_params(m);
    uint8_t hdr[HDR] = {0};
    memcpy(hdr, "QSWTRCK\0", 8);
    put32(hdr + 8, VERSION);
    put32(hdr + 12, (uint32_t)tr->step);
    put64(hdr + 16, tr->data->epoch);
    put64(hdr + 24, tr->data->pos);
    put64(hdr + 32, tr->tokens_seen);
    put64(hdr + 40, n);
    memcpy(hdr + 48, identity, strlen(identity));
    crypto_generichash_state hs;
    crypto_generichash_init(&hs, NULL, 0, 32);
    crypto_generichash_update(&hs, hdr, HDR);
    /* the three arrays as the backend holds them, copied to the host */
    float *host = malloc(3 * n * sizeof *host);
    if (!host) return qs_error_set(err, QS_ENOMEM, "%s: %zu parameters", path, n);
    static const qw_tmodel_array which[3] = {QW_TMODEL_PARAMS, QW_TMODEL_MOMENT_M,
                                             QW_TMODEL_MOMENT_V};
    const float *arrays[3];
    qs_status st = QS_OK;
    for (int a = 0; a < 3 && st == QS_OK; a++) {
        st = qw_tmodel_fetch(m, which[a], host + (size_t)a * n, err);
        arrays[a] = host + (size_t)a * n;
    }
    /* write errors are sticky on the stream and reported by the commit */
    qs_replace_file f;
    if (st == QS_OK) st = qs_replace_file_open(path, NULL, &f, err);
    if (st != QS_OK) {
        free(host);
        return st;
    }
    fwrite(hdr, 1, HDR, f.f);
    for (int a = 0; a < 3; a++) {
        crypto_generichash_update(&hs, (const uint8_t *)arrays[a], n * 4);
        fwrite(arrays[a], 4, n, f.f);
    }
    size_t np = h ? h->n : 0;
    uint8_t head[16];
    putf64(head, h ? h->wall_s : 0.0);
    put64(head + 8, np);
    crypto_generichash_update(&hs, head, sizeof head);
    fwrite(head, 1, sizeof head, f.f);
    for (size_t i = 0; i < np; i++) {
        uint8_t pt[POINT] = {0};
        memcpy(pt, h->points[i].name, QW_CKPT_METRIC_NAME);
        put64(pt + 16, (uint64_t)h->points[i].step);
        putf64(pt + 24, h->points[i].value);
        crypto_generichash_update(&hs, pt, POINT);
        fwrite(pt, 1, POINT, f.f);
    }
    uint8_t sum[32];
    crypto_generichash_final(&hs, sum, 32);
    fwrite(sum, 1, 32, f.f);
    free(host);
    return qs_replace_file_commit(&f, err);
}

qs_status qw_train_checkpoint_load(const char *path, qw_trainer *tr, const char *identity,
                                   qw_train_history *h, qs_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return qs_error_set(err, errno == ENOENT ? QS_ENOTFOUND : QS_EIO, "%s: open: %s", path,
                            strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0) {
        fclose(f);
        return qs_error_set(err, QS_EIO, "%s: stat: %s", path, strerror(errno));
    }
    qw_tmodel *m = tr->model;
    size_t n = qw_tmodel_n_params(m);
    size_t fixed = HDR + 3 * n * 4 + 16 + 32, want = fixed;
    uint8_t magic[8] = {0};
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, "QSWTRCK\0", 8) != 0) {
        fclose(f);
        return qs_error_set(err, QS_EFORMAT, "%s: offset 0: not a qsweep training checkpoint",
                            path);
    }
    rewind(f);
    if ((size_t)sb.st_size < HDR + 32) {
        fclose(f);
        return qs_error_set(err, QS_EFORMAT, "%s: %lld bytes, shorter than a checkpoint header",
                            path, (long long)sb.st_size);
    }
    uint8_t *buf = malloc((size_t)sb.st_size);
    if (!buf) {
        fclose(f);
        return qs_error_set(err, QS_ENOMEM, "%s: %lld bytes", path, (long long)sb.st_size);
    }
    size_t got = fread(buf, 1, (size_t)sb.st_size, f);
    fclose(f);
    qs_status st = QS_OK;
    if (got != (size_t)sb.st_size)
        st = qs_error_set(err, QS_EIO, "%s: short read (%zu of %lld bytes)", path, got,
                          (long long)sb.st_size);
    else if (memcmp(buf, "QSWTRCK\0", 8))
        st = qs_error_set(err, QS_EFORMAT, "%s: offset 0: not a qsweep training checkpoint", path);
    else if (get32(buf + 8) != VERSION)
        st = qs_error_set(err, QS_EFORMAT, "%s: offset 8: version %u, expected %d", path,
                          get32(buf + 8), VERSION);
    else if (get64(buf + 40) != n)
        st = qs_error_set(err, QS_EFORMAT, "%s: offset 40: n_params %llu, the model has %zu", path,
                          (unsigned long long)get64(buf + 40), n);
    else if ((size_t)sb.st_size < fixed)
        st = qs_error_set(err, QS_EFORMAT,
                          "%s: %lld bytes, expected at least %zu for %zu parameters", path,
                          (long long)sb.st_size, fixed, n);
    else if (get64(buf + fixed - 40) > ((size_t)sb.st_size - fixed) / POINT)
        st = qs_error_set(
            err, QS_EFORMAT, "%s: offset %zu: n_points %llu beyond the file's %lld bytes", path,
            fixed - 40, (unsigned long long)get64(buf + fixed - 40), (long long)sb.st_size);
    else if ((size_t)sb.st_size != (want = fixed + POINT * (size_t)get64(buf + fixed - 40)))
        st = qs_error_set(err, QS_EFORMAT,
                          "%s: %lld bytes, expected %zu for %zu parameters and %llu curve points",
                          path, (long long)sb.st_size, want, n,
                          (unsigned long long)get64(buf + fixed - 40));
    else if (strncmp((const char *)buf + 48, identity, QW_CKPT_IDENTITY) != 0)
        st = qs_error_set(err, QS_EFORMAT, "%s: offset 48: identity \"%.127s\", expected \"%s\"",
                          path, (const char *)buf + 48, identity);
    if (st == QS_OK) {
        uint8_t sum[32];
        crypto_generichash(sum, 32, buf, want - 32, NULL, 0);
        if (memcmp(sum, buf + want - 32, 32))
            st =
                qs_error_set(err, QS_EFORMAT, "%s: offset %zu: checksum mismatch", path, want - 32);
    }
    qw_train_history got_h = {0};
    size_t np = st == QS_OK ? (size_t)get64(buf + fixed - 40) : 0;
    const uint8_t *pts = buf + fixed - 32;
    for (size_t i = 0; st == QS_OK && h && i < np; i++) {
        const uint8_t *pt = pts + i * POINT;
        if (memchr(pt, 0, QW_CKPT_METRIC_NAME) == NULL || pt[0] == 0)
            st = qs_error_set(err, QS_EFORMAT, "%s: offset %zu: curve point %zu: bad metric name",
                              path, (size_t)(pt - buf), i);
        else
            st = qw_train_history_add(&got_h, (const char *)pt, (int64_t)get64(pt + 16),
                                      getf64(pt + 24), err);
    }
    if (st == QS_OK && h && !(getf64(buf + fixed - 48) >= 0 && getf64(buf + fixed - 48) < 1e15))
        st = qs_error_set(err, QS_EFORMAT, "%s: offset %zu: wall seconds %g", path, fixed - 48,
                          getf64(buf + fixed - 48));
    if (st == QS_OK) {
        uint64_t epoch = get64(buf + 16), pos = get64(buf + 24);
        if (pos > tr->data->n_windows)
            st = qs_error_set(err, QS_EFORMAT,
                              "%s: offset 24: data position %llu beyond %zu windows", path,
                              (unsigned long long)pos, tr->data->n_windows);
        else
            st = qw_data_seek(tr->data, epoch, (size_t)pos, err);
    }
    if (st == QS_OK && h) {
        got_h.wall_s = getf64(buf + fixed - 48);
        qw_train_history_free(h);
        *h = got_h;
    } else {
        qw_train_history_free(&got_h);
    }
    if (st == QS_OK) {
        qw_backend *be = qw_tmodel_backend(m);
        qw_tmodel_weights_changed(m);
        st = be->ops->upload(be, qw_tmodel_params(m), buf + HDR, n * 4, err);
        if (st == QS_OK)
            st = be->ops->upload(be, qw_tmodel_moment(m, 0), buf + HDR + n * 4, n * 4, err);
        if (st == QS_OK)
            st = be->ops->upload(be, qw_tmodel_moment(m, 1), buf + HDR + 2 * n * 4, n * 4, err);
    }
    if (st == QS_OK) {
        tr->step = (int)get32(buf + 12);
        tr->tokens_seen = (size_t)get64(buf + 32);
        tr->diverged = 0;
    }
    free(buf);
    return st;
}
