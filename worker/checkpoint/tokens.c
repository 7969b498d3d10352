/* Token files (format: tokens.h). Read whole, validated, ids copied out, file hashed with
 * BLAKE2b-256 (libsodium crypto_generichash, 32-byte output) for the dataset digest in job keys. */
#include "checkpoint_internal.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>

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
    if (version != QW_TOKENS_VERSION)
        return qs_error_set(err, QS_EFORMAT,
                            "%s: offset 8: field \"version\" = %u (only %d is read)", file, version,
                            QW_TOKENS_VERSION);
    if (vocab == 0)
        return qs_error_set(err, QS_EFORMAT, "%s: offset 12: field \"vocab_size\" is 0", file);
    if (dtype != QW_TOKENS_DTYPE_U32)
        return qs_error_set(err, QS_EFORMAT,
                            "%s: offset 16: field \"dtype\" = %u (only 1 = uint32)", file, dtype);
    if (reserved != 0)
        return qs_error_set(err, QS_EFORMAT, "%s: offset 20: field \"reserved\" = %u, must be 0",
                            file, reserved);
    if (count > (size - QW_TOKENS_HEADER_BYTES) / 4 || QW_TOKENS_HEADER_BYTES + 4 * count != size)
        return qs_error_set(
            err, QS_EFORMAT,
            "%s: offset 24: field \"count\" = %llu needs 32 + 4 x count bytes but the file has %zu",
            file, (unsigned long long)count, size);
    const uint8_t *ids = data + QW_TOKENS_HEADER_BYTES;
    for (uint64_t i = 0; i < count; i++) {
        uint32_t id = qw_le32(ids + 4 * i);
        if (id >= vocab)
            return qs_error_set(err, QS_EFORMAT,
                                "%s: offset %llu: token %llu = %u is not below \"vocab_size\" %u",
                                file, (unsigned long long)(QW_TOKENS_HEADER_BYTES + 4 * i),
                                (unsigned long long)i, id, vocab);
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
    sodium_bin2hex(out->digest, sizeof out->digest, h, sizeof h);
    return QS_OK;
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
