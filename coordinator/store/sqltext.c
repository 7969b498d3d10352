/* Array literals and COPY binary rows. Contract and format references: sqltext.h. */
#include "sqltext.h"

#include "utf8.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool reserve(qc_sbuf *b, size_t extra) {
    if (b->oom) return false;
    if (b->len + extra + 1 <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

void qc_sbuf_free(qc_sbuf *b) {
    free(b->p);
    *b = (qc_sbuf){0};
}

void qc_sbuf_truncate(qc_sbuf *b, size_t len) {
    if (len < b->len) {
        b->len = len;
        b->p[len] = '\0';
    }
}

void qc_sbuf_putn(qc_sbuf *b, const char *s, size_t n) {
    if (!reserve(b, n)) return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void qc_sbuf_puts(qc_sbuf *b, const char *s) {
    qc_sbuf_putn(b, s, strlen(s));
}

void qc_sbuf_printf(qc_sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char small[128];
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = true;
        return;
    }
    if ((size_t)n < sizeof small) {
        qc_sbuf_putn(b, small, (size_t)n);
        return;
    }
    if (!reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* Writes v into buf (>= 32 bytes) in a form float8in reads back exactly. */
static void format_double(char *buf, size_t cap, double v) {
    if (isnan(v))
        snprintf(buf, cap, "NaN");
    else if (isinf(v))
        snprintf(buf, cap, v > 0 ? "Infinity" : "-Infinity");
    else
        snprintf(buf, cap, "%.17g", v);
}

static void sep(qc_sqlarray *a) {
    if (a->n++) qc_sbuf_putn(&a->text, ",", 1);
}

void qc_sqlarray_int(qc_sqlarray *a, int64_t v) {
    sep(a);
    qc_sbuf_printf(&a->text, "%lld", (long long)v);
}

void qc_sqlarray_double(qc_sqlarray *a, double v) {
    char buf[40];
    format_double(buf, sizeof buf, v);
    sep(a);
    qc_sbuf_puts(&a->text, buf);
}

void qc_sqlarray_text(qc_sqlarray *a, const char *s) {
    sep(a);
    if (!s) {
        qc_sbuf_puts(&a->text, "NULL");
        return;
    }
    qc_sbuf_putn(&a->text, "\"", 1);
    const char *run = s;
    for (const char *c = s; *c; c++) {
        if (*c == '"' || *c == '\\') {
            qc_sbuf_putn(&a->text, run, (size_t)(c - run));
            qc_sbuf_putn(&a->text, "\\", 1);
            run = c;
        }
    }
    qc_sbuf_puts(&a->text, run);
    qc_sbuf_putn(&a->text, "\"", 1);
}

const char *qc_sqlarray_literal(const qc_sqlarray *a, qc_sbuf *out) {
    qc_sbuf_truncate(out, 0);
    qc_sbuf_putn(out, "{", 1);
    if (a->text.len) qc_sbuf_putn(out, a->text.p, a->text.len);
    qc_sbuf_putn(out, "}", 1);
    return out->oom ? NULL : out->p;
}

void qc_sqlarray_clear(qc_sqlarray *a) {
    qc_sbuf_truncate(&a->text, 0);
    a->text.oom = false;
    a->n = 0;
}

void qc_sqlarray_free(qc_sqlarray *a) {
    qc_sbuf_free(&a->text);
    a->n = 0;
}

/* Appends the low n bytes of v, most significant first (network order). */
static void put_be(qc_sbuf *b, uint64_t v, int n) {
    char out[8];
    for (int i = 0; i < n; i++)
        out[i] = (char)(v >> (8 * (n - 1 - i)));
    qc_sbuf_putn(b, out, (size_t)n);
}

void qc_copybin_header(qc_sbuf *b) {
    /* signature, flags (no OIDs), header extension length */
    qc_sbuf_putn(b, "PGCOPY\n\377\r\n\0", 11);
    put_be(b, 0, 4);
    put_be(b, 0, 4);
}

void qc_copybin_trailer(qc_sbuf *b) {
    put_be(b, 0xFFFF, 2);
}

void qc_copybin_row(qc_sbuf *b, int16_t n_fields) {
    put_be(b, (uint16_t)n_fields, 2);
}

void qc_copybin_int4(qc_sbuf *b, int32_t v) {
    put_be(b, 4, 4);
    put_be(b, (uint32_t)v, 4);
}

void qc_copybin_int8(qc_sbuf *b, int64_t v) {
    put_be(b, 8, 4);
    put_be(b, (uint64_t)v, 8);
}

void qc_copybin_float8(qc_sbuf *b, double v) {
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    put_be(b, 8, 4);
    put_be(b, bits, 8);
}

void qc_copybin_bool(qc_sbuf *b, bool v) {
    put_be(b, 1, 4);
    put_be(b, v ? 1 : 0, 1);
}

void qc_copybin_text(qc_sbuf *b, const char *s) {
    size_t n = strlen(s);
    put_be(b, (uint32_t)n, 4);
    qc_sbuf_putn(b, s, n);
}

bool qc_utf8_valid(const char *s, size_t *bad) {
    return qs_utf8_valid(s, bad); /* the one checker: common/utf8.h */
}
