/* Growable buffers that build PostgreSQL array literals ("{1,2,NULL}") and COPY binary
 * rows for the store's set-based statements. Internal to qc_store.
 *
 * Array literal rules (PostgreSQL docs, "Arrays", 8.15.6 Array Input and Output Syntax):
 * elements separated by commas; an element in double quotes may hold any character, with
 * '"' and '\' backslash-escaped; an unquoted NULL is the null value. */
#ifndef QC_STORE_SQLTEXT_H
#define QC_STORE_SQLTEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A NUL-terminated growable string. oom is set (and further appends ignored) when an
 * allocation fails; callers check it once after a series of appends. */
typedef struct qc_sbuf {
    char *p;
    size_t len, cap;
    bool oom;
} qc_sbuf;

/* Frees b's text and resets it to empty (b itself is caller-owned). */
void qc_sbuf_free(qc_sbuf *b);
/* Cuts b back to its first len bytes (len <= b->len), e.g. to drop a trailing separator. */
void qc_sbuf_truncate(qc_sbuf *b, size_t len);
/* Appends n bytes of s, the NUL-terminated s, or printf-formatted text; on allocation failure
 * they set b->oom and append nothing more. */
void qc_sbuf_putn(qc_sbuf *b, const char *s, size_t n);
void qc_sbuf_puts(qc_sbuf *b, const char *s);
void qc_sbuf_printf(qc_sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A column of an array literal being built: its elements without the braces, and the count. */
typedef struct qc_sqlarray {
    qc_sbuf text;
    size_t n;
} qc_sqlarray;

/* An integer element, in decimal. */
void qc_sqlarray_int(qc_sqlarray *a, int64_t v);
/* A double as the shortest text that reads back to the same value ("%.17g"); NaN and the
 * infinities as PostgreSQL spells them. */
void qc_sqlarray_double(qc_sqlarray *a, double v);
/* A quoted string element, or NULL when s is NULL. */
void qc_sqlarray_text(qc_sqlarray *a, const char *s);
/* Writes "{elements}" into out (reused across calls) and returns out->p. */
const char *qc_sqlarray_literal(const qc_sqlarray *a, qc_sbuf *out);
void qc_sqlarray_clear(qc_sqlarray *a);
void qc_sqlarray_free(qc_sqlarray *a);

/* COPY binary format (docs, COPY, "Binary Format"): an 11-byte signature, 32-bit flags and
 * header-extension length; per row a 16-bit field count, then per field a 32-bit byte length
 * and the value in the type's send format; a 16-bit -1 ends the data. All integers are
 * big-endian. The value formats used here: int4 and int8 as two's complement, float8 as its
 * IEEE 754 bits, bool as one byte 0/1, text as its UTF-8 bytes without a NUL.
 * The header and trailer of one COPY's data: */
void qc_copybin_header(qc_sbuf *b);
void qc_copybin_trailer(qc_sbuf *b);
/* Starts a row of n_fields fields. */
void qc_copybin_row(qc_sbuf *b, int16_t n_fields);
/* One field of a row. */
void qc_copybin_int4(qc_sbuf *b, int32_t v);
void qc_copybin_int8(qc_sbuf *b, int64_t v);
void qc_copybin_float8(qc_sbuf *b, double v);
void qc_copybin_bool(qc_sbuf *b, bool v);
/* s: NUL-terminated UTF-8 (checked by the caller), shorter than 2^31 bytes. */
void qc_copybin_text(qc_sbuf *b, const char *s);

/* Whether s is valid UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing above
 * U+10FFFF). On false, *bad (when not NULL) is the offset of the first bad byte. The
 * database is UTF8: one invalid string would fail a whole batch, again at every retry. */
bool qc_utf8_valid(const char *s, size_t *bad);

#endif
