/* RFC 3629 UTF-8 validation (utf8.h). */
#include "utf8.h"

#include <string.h>

size_t qs_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    if (!n) return 0;
    unsigned c = s[0];
    if (c < 0x80) {
        if (cp) *cp = c;
        return 1;
    }
    /* Lead bytes C0, C1 and F5..FF never occur (RFC 3629 section 3). */
    size_t len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 ? 2 : 0;
    if (!len || len > n || c > 0xf4) return 0;
    uint32_t v = c & (0x3fu >> (len - 1));
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        v = v << 6 | (s[i] & 0x3fu);
    }
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000}; /* shortest form */
    if (v < min[len] || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
    if (cp) *cp = v;
    return len;
}

bool qs_utf8_valid_n(const char *s, size_t n, size_t *bad) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t len = qs_utf8_decode(p + i, n - i, NULL);
        if (!len) {
            if (bad) *bad = i;
            return false;
        }
        i += len;
    }
    return true;
}

bool qs_utf8_valid(const char *s, size_t *bad) {
    return qs_utf8_valid_n(s, strlen(s), bad);
}
