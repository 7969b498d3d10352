/* The bytes tokenizer (bytes_tokenizer.h). */
#include "bytes_tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <sodium.h>

qs_status qw_bytes_tokenize_file(const char *path, uint32_t **ids, size_t *n, qs_error *err) {
    *ids = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return qs_error_set(err, QS_EIO, "%s: open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0) {
        fclose(f);
        return qs_error_set(err, QS_EIO, "%s: stat: %s", path, strerror(errno));
    }
    size_t len = (size_t)sb.st_size;
    uint8_t *bytes = malloc(len + 1);
    uint32_t *out = malloc((len + 1) * sizeof *out);
    if (!bytes || !out) {
        free(bytes);
        free(out);
        fclose(f);
        return qs_error_set(err, QS_ENOMEM, "%s: %zu bytes", path, len);
    }
    size_t got = fread(bytes, 1, len, f);
    fclose(f);
    if (got != len) {
        free(bytes);
        free(out);
        return qs_error_set(err, QS_EIO, "%s: short read (%zu of %zu bytes)", path, got, len);
    }
    out[0] = QW_BYTES_BOS;
    for (size_t i = 0; i < len; i++)
        out[i + 1] = bytes[i];
    free(bytes);
    *ids = out;
    *n = len + 1;
    return QS_OK;
}

void qw_bytes_tokenizer_digest(char hex[65]) {
    static const char desc[] = "qsweep bytes tokenizer: ids 0..255 bytes, 256 BOS, 257 EOS";
    unsigned char h[32];
    crypto_generichash(h, sizeof h, (const unsigned char *)desc, sizeof desc - 1, NULL, 0);
    sodium_bin2hex(hex, 65, h, sizeof h);
}
