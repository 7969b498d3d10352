/* GPT-2's byte-to-unicode map and UTF-8 (RFC 3629) coding. */
#include "tokenizer_internal.h"

#include <string.h>

/* openai/gpt-2 src/encoder.py bytes_to_unicode(): bs = '!'..'~' + '¡'..'¬' + '®'..'ÿ' map to
 * themselves; every other byte b, in increasing order, maps to 256 + (its rank among them). */
static int qw_byte_printable(uint8_t b) {
    return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae);
}

uint32_t qw_byte_to_cp(uint8_t b) {
    if (qw_byte_printable(b)) return b;
    uint32_t n = 0;
    for (int c = 0; c < b; c++)
        if (!qw_byte_printable((uint8_t)c)) n++;
    return 256 + n;
}

size_t qw_utf8_put(uint32_t cp, char *buf) {
    if (cp < 0x80) {
        buf[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        buf[0] = (char)(0xc0 | cp >> 6);
        buf[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        buf[0] = (char)(0xe0 | cp >> 12);
        buf[1] = (char)(0x80 | (cp >> 6 & 0x3f));
        buf[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    buf[0] = (char)(0xf0 | cp >> 18);
    buf[1] = (char)(0x80 | (cp >> 12 & 0x3f));
    buf[2] = (char)(0x80 | (cp >> 6 & 0x3f));
    buf[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

void qw_byte_level_init(qw_tokenizer *t) {
    for (int i = 0; i < 324; i++)
        t->cp_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        uint32_t cp = qw_byte_to_cp((uint8_t)b);
        t->cp_byte[cp] = (int16_t)b;
        char buf[4];
        size_t n = qw_utf8_put(cp, buf);
        int64_t id = qw_strmap_get(t, buf, n);
        t->byte_id[b] = id < 0 ? UINT32_MAX : (uint32_t)id;
    }
}

size_t qw_utf8_char(const uint8_t *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    uint8_t c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t len;
    uint32_t v, min;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
        v = c & 0x1f;
        min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        v = c & 0x0f;
        min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        v = c & 0x07;
        min = 0x10000;
    } else {
        return 0;
    }
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        v = v << 6 | (s[i] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
    *cp = v;
    return len;
}

size_t qw_utf8_check(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        size_t k = qw_utf8_char(s + i, n - i, &cp);
        if (k == 0) return i;
        i += k;
    }
    return n;
}
