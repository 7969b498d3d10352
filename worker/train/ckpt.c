/* Training checkpoints (ckpt.h). */
#include "ckpt.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "atomic_file.h"

#define HDR 176

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

qs_status qw_train_checkpoint_save(const char *path, const qw_trainer *tr, const char *identity,
                                   qs_error *err) {
    if (strlen(identity) >= QW_CKPT_IDENTITY)
        return qs_error_set(err, QS_EINVAL, "%s: checkpoint identity longer than %d bytes", path,
                            QW_CKPT_IDENTITY - 1);
    qw_tmodel *m = tr->model;
    size_t n = qw_tmodel_n_params(m);
    uint8_t hdr[HDR] = {0};
    memcpy(hdr, "QSWTRCK\0", 8);
    put32(hdr + 8, 1);
    put32(hdr + 12, (uint32_t)tr->step);
    put64(hdr + 16, tr->data->epoch);
    put64(hdr + 24, tr->data->pos);
    put64(hdr + 32, tr->tokens_seen);
    put64(hdr + 40, n);
    memcpy(hdr + 48, identity, strlen(identity));
    crypto_generichash_state h;
    crypto_generichash_init(&h, NULL, 0, 32);
    crypto_generichash_update(&h, hdr, HDR);
    const float *arrays[3] = {qw_tmodel_params(m), qw_tmodel_moment(m, 0), qw_tmodel_moment(m, 1)};
    qw_atomic_file f = {0};
    qs_status st = qw_atomic_open(&f, path, err);
    if (st == QS_OK) st = qw_atomic_write(&f, hdr, HDR, err);
    for (int a = 0; a < 3 && st == QS_OK; a++) {
        crypto_generichash_update(&h, (const uint8_t *)arrays[a], n * 4);
        st = qw_atomic_write(&f, arrays[a], n * 4, err);
    }
    uint8_t sum[32];
    crypto_generichash_final(&h, sum, 32);
    if (st == QS_OK) st = qw_atomic_write(&f, sum, 32, err);
    return qw_atomic_commit(&f, st, err);
}

qs_status qw_train_checkpoint_load(const char *path, qw_trainer *tr, const char *identity,
                                   qs_error *err) {
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
    size_t want = HDR + 3 * n * 4 + 32;
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
    else if (get32(buf + 8) != 1)
        st = qs_error_set(err, QS_EFORMAT, "%s: offset 8: version %u, expected 1", path,
                          get32(buf + 8));
    else if (get64(buf + 40) != n)
        st = qs_error_set(err, QS_EFORMAT, "%s: offset 40: n_params %llu, the model has %zu", path,
                          (unsigned long long)get64(buf + 40), n);
    else if ((size_t)sb.st_size != want)
        st = qs_error_set(err, QS_EFORMAT, "%s: %lld bytes, expected %zu for %zu parameters", path,
                          (long long)sb.st_size, want, n);
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
    if (st == QS_OK) {
        uint64_t epoch = get64(buf + 16), pos = get64(buf + 24);
        if (pos > tr->data->n_windows)
            st = qs_error_set(err, QS_EFORMAT,
                              "%s: offset 24: data position %llu beyond %zu windows", path,
                              (unsigned long long)pos, tr->data->n_windows);
        else
            st = qw_data_seek(tr->data, epoch, (size_t)pos, err);
    }
    if (st == QS_OK) {
        memcpy(qw_tmodel_params(m), buf + HDR, n * 4);
        memcpy(qw_tmodel_moment(m, 0), buf + HDR + n * 4, n * 4);
        memcpy(qw_tmodel_moment(m, 1), buf + HDR + 2 * n * 4, n * 4);
        tr->step = (int)get32(buf + 12);
        tr->tokens_seen = (size_t)get64(buf + 32);
        tr->diverged = 0;
    }
    free(buf);
    return st;
}
