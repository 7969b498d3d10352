/* Decoding ids to text, as llama.cpp's token_to_piece/detokenize and the decoders of the
 * tokenizer.json files (ByteLevel; Replace("▁", " ") + ByteFallback + Fuse + Strip(1 left)):
 * normal byte-level pieces go back through the inverse byte-to-unicode map, "▁" becomes a
 * space, <0xNN> byte tokens give their byte, added tokens give their text. */
#include "tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct qw_buf {
    char *p;
    size_t n, cap;
} qw_buf;

static int qw_buf_put(qw_buf *b, const void *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    return 0;
}

/* <0xNN> with two hex digits: the byte, else -1. */
static int qw_fallback_byte(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                       : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

qs_status qw_tokenizer_decode(const qw_tokenizer *t, const uint32_t *ids, size_t n,
                              int skip_special, char **text, size_t *len, qs_error *err) {
    qw_buf b = {0};
    *text = NULL;
    *len = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t id = ids[i];
        if (id >= t->n_vocab) {
            free(b.p);
            return qs_error_set(err, QS_EINVAL,
                                "ids: index %zu: id %u is not below the "
                                "vocabulary size %u",
                                i, id, t->n_vocab);
        }
        uint8_t ty = t->type[id];
        if (skip_special && ty == QW_TT_CONTROL) continue;
        const char *s = t->pool + t->off[id];
        size_t sn = t->off[id + 1] - t->off[id];
        int rc = 0;
        if (ty == QW_TT_CONTROL || ty == QW_TT_USER_DEFINED) {
            rc = qw_buf_put(&b, s, sn);
        } else if (t->kind == QW_TOK_BYTE_BPE) {
            for (size_t k = 0; k < sn && !rc;) {
                uint32_t cp;
                size_t cl = qw_utf8_char((const uint8_t *)s + k, sn - k, &cp);
                if (cl == 0) cl = 1, cp = 0xFFFFFFFFu;
                if (cp < 324 && t->cp_byte[cp] >= 0) {
                    uint8_t byte = (uint8_t)t->cp_byte[cp];
                    rc = qw_buf_put(&b, &byte, 1);
                } else {
                    rc = qw_buf_put(&b, s + k, cl); /* not from the map: kept as it is */
                }
                k += cl;
            }
        } else {
            int fb = qw_fallback_byte(s, sn);
            if (fb >= 0 && (t->byte_fallback || ty == QW_TT_BYTE || t->kind == QW_TOK_SPM)) {
                uint8_t byte = (uint8_t)fb;
                rc = qw_buf_put(&b, &byte, 1);
            } else {
                for (size_t k = 0; k < sn && !rc;) {
                    if (sn - k >= 3 && memcmp(s + k, "\xe2\x96\x81", 3) == 0) {
                        rc = qw_buf_put(&b, " ", 1);
                        k += 3;
                    } else {
                        rc = qw_buf_put(&b, s + k, 1);
                        k++;
                    }
                }
            }
        }
        if (rc) {
            free(b.p);
            return qs_error_set(err, QS_ENOMEM, "out of memory decoding %zu ids", n);
        }
    }
    if (qw_buf_put(&b, "", 0)) {
        free(b.p);
        return qs_error_set(err, QS_ENOMEM, "out of memory decoding %zu ids", n);
    }
    size_t from = 0;
    /* the space that encode put in front (Strip decoder; llama.cpp remove_space) */
    int strip = t->kind == QW_TOK_SPM       ? t->add_space_prefix
                : t->kind == QW_TOK_SPM_BPE ? t->prepend != NULL || (t->ms && t->ms_scheme != 2)
                                            : 0;
    if (strip && b.n > 0 && b.p[0] == ' ') from = 1;
    if (from) memmove(b.p, b.p + from, b.n - from);
    b.n -= from;
    b.p[b.n] = 0;
    *text = b.p;
    *len = b.n;
    return QS_OK;
}
