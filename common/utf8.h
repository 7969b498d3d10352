/* The one UTF-8 checker of qsweep: grid files, worker names and error texts
 * over the wire, and text columns of the store are all checked here.
 *
 * Rules: RFC 3629 section 4 (the UTF8-octets grammar): no overlong forms, no surrogates
 * (U+D800..U+DFFF), nothing above U+10FFFF; PostgreSQL's UTF8 encoding refuses the same. */
#ifndef QS_COMMON_UTF8_H
#define QS_COMMON_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Decodes the sequence that starts at s (n > 0 bytes available). Returns its length (1..4)
 * and stores the code point in *cp (may be NULL), or returns 0 when s does not start with a
 * valid sequence (bad lead byte, truncated, bad continuation, overlong, surrogate,
 * > U+10FFFF). */
size_t qs_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);

/* Whether the n bytes at s are valid UTF-8 (a NUL byte counts as U+0000). On false, *bad
 * (when not NULL) is the offset of the first byte of the first invalid sequence. */
bool qs_utf8_valid_n(const char *s, size_t n, size_t *bad);

/* Whether the NUL-terminated s is valid UTF-8; *bad as for qs_utf8_valid_n. */
bool qs_utf8_valid(const char *s, size_t *bad);

#endif
