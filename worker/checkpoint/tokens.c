/* Token files (format: tokens.h, versions 1 and 2). Read whole, validated, ids copied out, file
 * hashed with BLAKE2b-256 (libsodium crypto_generichash, 32-byte output) for the dataset digest in
 * job keys. */
#include "checkpoint_internal.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replace_file.h"

static uint32_t qw_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

qs_status qw_tokens_parse(const char *file, const uint8_t *data, size_t size, qw_tokens *out,
                          qs_error *err) {
    memset(out, 0, sizeof *out);
    if (size < QW_TOKENS_HEADER_BYTES)
        return qs_error_set(err, QS_EFORMAT, "%s: truncated: %zu bytes, the header needs %d", file,
                            size, QW_TOKENS_HEADER_BYTES);
    if (memcmp(data, QW_TOKENS_MAGIC, 8) != 0)
        return qs_error_set(err, QS_EFORMAT, "%s: offset 0: bad magic (not \"QSWTOKS\\0\")", file);
    uint32_t version = qw_le32(data + 8), vocab = qw_le32(data + 12), dtype = qw_le32(data + 16),
             reserved = qw_le32(data + 20);
    uint64_t count;
    memcpy(&count, data + 24, 8);
    if (version != QW_TOKENS_VERSION && version != QW_TOKENS_VERSION_2)
        return qs_error_set(err, QS_EFORMAT,
                            "%s: offset 8: field \"version\" = %u (only %d and %d are read)", file,
                            version, QW_TOKENS_VERSION, QW_TOKENS_VERSION_2);
    size_t hdr =
        version == QW_TOKENS_VERSION_2 ? QW_TOKENS_V2_HEADER_BYTES : QW_TOKENS_HEADER_BYTES;
    if (size < hdr)
        return qs_error_set(err, QS_EFORMAT,
                            "%s: truncated: %zu bytes, a version %u header needs %zu", file, size,
                            version, hdr);
    if (vocab == 0)
        return qs_error_set(err, QS_EFORMAT, "%s: offset 12: field \"vocab_size\" is 0", file);
    if (dtype != QW_TOKENS_DTYPE_U32)
        return qs_error_set(err, QS_EFORMAT,
                            "%s: offset 16: field \"dtype\" = %u (only 1 = uint32)", file, dtype);
    if (reserved != 0)
        return qs_error_set(err, QS_EFORMAT, "%s: offset 20: field \"reserved\" = %u, must be 0",
                            file, reserved);
    if (count > (size - hdr) / 4 || hdr + 4 * count != size)
        return qs_error_set(err, QS_EFORMAT,
                            "%s: offset 24: field \"count\" = %llu needs %zu + 4 x count bytes but "
                            "the file has %zu",
                            file, (unsigned long long)count, hdr, size);
    const uint8_t *ids = data + hdr;
    for (uint64_t i = 0; i < count; i++) {
        uint32_t id = qw_le32(ids + 4 * i);
        if (id >= vocab)
            return qs_error_set(
                err, QS_EFORMAT, "%s: offset %llu: token %llu = %u is not below \"vocab_size\" %u",
                file, (unsigned long long)(hdr + 4 * i), (unsigned long long)i, id, vocab);
    }
    if (sodium_init() < 0)
        return qs_error_set(err, QS_EIO, "%s: libsodium failed to initialise", file);
    uint8_t h[crypto_generichash_BYTES];
    crypto_generichash(h, sizeof h, data, size, NULL, 0);
    out->ids = malloc(count ? (size_t)count * 4 : 1);
    if (!out->ids)
        return qs_error_set(err, QS_ENOMEM, "%s: out of memory for %llu tokens", file,
                            (unsigned long long)count);
    memcpy(out->ids, ids, (size_t)count * 4);
    out->n = (size_t)count;
    out->vocab_size = vocab;
    out->version = version;
    sodium_bin2hex(out->digest, sizeof out->digest, h, sizeof h);
    if (version == QW_TOKENS_VERSION_2)
        sodium_bin2hex(out->tokenizer_digest, sizeof out->tokenizer_digest, data + 32, 32);
    return QS_OK;
}

static void qw_put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

qs_status qw_tokens_write(const char *path, const uint32_t *ids, size_t n, uint32_t vocab_size,
                          const char *tokenizer_digest_hex, qs_error *err) {
    uint8_t hdr[QW_TOKENS_V2_HEADER_BYTES] = {0};
    size_t dlen = 0;
    if (!tokenizer_digest_hex || strlen(tokenizer_digest_hex) != 64 ||
        sodium_hex2bin(hdr + 32, 32, tokenizer_digest_hex, 64, NULL, &dlen, NULL) != 0 ||
        dlen != 32)
        return qs_error_set(err, QS_EINVAL, "%s: the tokenizer digest is not 64 hex digits", path);
    if (vocab_size == 0) return qs_error_set(err, QS_EINVAL, "%s: field \"vocab_size\" is 0", path);
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= vocab_size)
            return qs_error_set(err, QS_EINVAL, "%s: token %zu = %u is not below vocab_size %u",
                                path, i, ids[i], vocab_size);
    memcpy(hdr, QW_TOKENS_MAGIC, 8);
    qw_put32(hdr + 8, QW_TOKENS_VERSION_2);
    qw_put32(hdr + 12, vocab_size);
    qw_put32(hdr + 16, QW_TOKENS_DTYPE_U32);
    uint64_t count = n;
    memcpy(hdr + 24, &count, 8);
    qs_replace_file r;
    qs_status st = qs_replace_file_open(path, NULL, &r, err);
    if (st) return st;
    /* ids are little-endian in the file; the loader needs a little-endian host as well */
    if (fwrite(hdr, 1, sizeof hdr, r.f) != sizeof hdr || (n && fwrite(ids, 4, n, r.f) != n)) {
        st = qs_error_set(err, QS_EIO, "%s: write failed (%s): %s", path, r.tmp, strerror(errno));
        qs_replace_file_abort(&r);
        return st;
    }
    return qs_replace_file_commit(&r, err);
}

qs_status qw_tokens_load(const char *path, qw_tokens *out, qs_error *err) {
    memset(out, 0, sizeof *out);
    qw_mapped_file f;
    qs_status st = qw_map_file(path, &f, err);
    if (st) return st;
    st = qw_tokens_parse(path, f.data, f.size, out, err);
    qw_unmap_file(&f);
    return st;
}

void qw_tokens_free(qw_tokens *t) {
    if (!t) return;
    free(t->ids);
    memset(t, 0, sizeof *t);
}
