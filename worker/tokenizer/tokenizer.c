/* The tokenizer object: accessors, added tokens, the digest, freeing (tokenizer_open.c opens one by
 * path). */
#include "tokenizer_internal.h"

#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

qs_status qw_tok_add_added(qw_tokenizer *t, uint32_t id, int special, qs_error *err) {
    for (size_t k = 0; k < t->n_added; k++)
        if (t->added[k].id == id) {
            t->added[k].special = special;
            t->type[id] = special ? QW_TT_CONTROL : QW_TT_USER_DEFINED;
            return QS_OK;
        }
    if (t->off[id + 1] == t->off[id]) return QS_OK; /* an empty text can never be matched */
    qw_added *a = realloc(t->added, (t->n_added + 1) * sizeof *a);
    if (!a) return qs_error_set(err, QS_ENOMEM, "%s: out of memory for added tokens", t->source);
    t->added = a;
    t->added[t->n_added++] = (qw_added){id, special};
    t->type[id] = special ? QW_TT_CONTROL : QW_TT_USER_DEFINED;
    return QS_OK;
}

/* Longest text first; equal lengths by id, so the order does not depend on the file's. */
static int qw_added_cmp(const void *a, const void *b, void *ctx) {
    const qw_tokenizer *t = ctx;
    uint32_t x = ((const qw_added *)a)->id, y = ((const qw_added *)b)->id;
    size_t lx = t->off[x + 1] - t->off[x], ly = t->off[y + 1] - t->off[y];
    if (lx != ly) return lx > ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

static void qw_hash_u64(crypto_generichash_state *h, uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    crypto_generichash_update(h, b, 8);
}

static void qw_hash_bytes(crypto_generichash_state *h, const void *p, size_t n) {
    qw_hash_u64(h, n);
    crypto_generichash_update(h, p, n);
}

qs_status qw_tok_finish(qw_tokenizer *t, qs_error *err) {
    if (t->n_added) qsort_r(t->added, t->n_added, sizeof *t->added, qw_added_cmp, t);
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        int64_t id = qw_strmap_get(t, name, 6);
        t->fallback_id[b] = id < 0 ? UINT32_MAX : (uint32_t)id;
    }
    qw_byte_level_init(t);
    t->cut_at_space = t->kind != QW_TOK_BYTE_BPE;
    for (uint32_t id = 0; id < t->n_vocab && t->cut_at_space; id++) {
        const char *s = t->pool + t->off[id];
        size_t n = t->off[id + 1] - t->off[id];
        for (size_t i = 1; i + 3 <= n; i++)
            if (memcmp(s + i, "\xe2\x96\x81", 3) == 0 &&
                !(i >= 3 && memcmp(s + i - 3, "\xe2\x96\x81", 3) == 0)) {
                t->cut_at_space = 0;
                break;
            }
    }
    if (sodium_init() < 0)
        return qs_error_set(err, QS_EIO, "%s: libsodium failed to initialise", t->source);
    char unicode[32];
    qw_tokenizer_regex_unicode_version(unicode, sizeof unicode);
    qw_tokenizer_compute_digest(t, unicode, t->digest);
    return QS_OK;
}

void qw_tokenizer_regex_unicode_version(char *out, size_t cap) {
    char v[64] = "";
    /* PCRE2_CONFIG_UNICODE_VERSION: a string such as "14.0.0" (pcre2api(3)) */
    if (pcre2_config(PCRE2_CONFIG_UNICODE_VERSION, v) < 0 || !*v) snprintf(v, sizeof v, "unknown");
    snprintf(out, cap, "%s", v);
}

void qw_tokenizer_compute_digest(const qw_tokenizer *t, const char *unicode_version,
                                 char out_hex[65]) {
    /* Canonical description (tokenizer.h): every field length-prefixed, integers as u64 LE. */
    crypto_generichash_state h;
    crypto_generichash_init(&h, NULL, 0, crypto_generichash_BYTES);
    qw_hash_bytes(&h, "qsweep-tokenizer-v1", 19);
    qw_hash_u64(&h, (uint64_t)t->kind);
    qw_hash_u64(&h, t->n_vocab);
    for (uint32_t id = 0; id < t->n_vocab; id++) {
        qw_hash_u64(&h, t->type[id]);
        qw_hash_bytes(&h, t->pool + t->off[id], t->off[id + 1] - t->off[id]);
        if (t->score) {
            uint32_t bits;
            memcpy(&bits, &t->score[id], 4);
            qw_hash_u64(&h, bits);
        }
    }
    qw_hash_u64(&h, t->n_merges);
    for (uint32_t i = 0; i < t->n_merges; i++) {
        qw_hash_u64(&h, t->merge_l[i]);
        qw_hash_u64(&h, t->merge_r[i]);
    }
    qw_hash_u64(&h, (uint64_t)t->n_steps);
    for (int i = 0; i < t->n_steps; i++) {
        qw_hash_bytes(&h, t->step[i].pattern, strlen(t->step[i].pattern));
        qw_hash_u64(&h, (uint64_t)t->step[i].behavior);
        qw_hash_u64(&h, (uint64_t)t->step[i].invert);
    }
    qw_hash_bytes(&h, t->prepend ? t->prepend : "", t->prepend_len);
    qw_hash_u64(&h, (uint64_t)t->ms);
    qw_hash_bytes(&h, t->ms_rep, t->ms_rep_len);
    qw_hash_u64(&h, (uint64_t)t->ms_scheme);
    qw_hash_u64(&h, (uint64_t)t->n_repl);
    for (int i = 0; i < t->n_repl; i++) {
        qw_hash_bytes(&h, t->repl[i].from, t->repl[i].from_len);
        qw_hash_bytes(&h, t->repl[i].to, t->repl[i].to_len);
        if (t->repl[i].re) qw_hash_bytes(&h, "regex", 5); /* a String pattern hashes as before */
    }
    int64_t flags[] = {t->byte_fallback,    t->fuse_unk,
                       t->ignore_merges,    t->unk_id,
                       t->bos_id,           t->eos_id,
                       t->add_bos,          t->add_eos,
                       t->add_space_prefix, t->drop_missing_bytes};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        qw_hash_u64(&h, (uint64_t)flags[i]);
    qw_hash_u64(&h, t->n_added);
    for (size_t i = 0; i < t->n_added; i++) {
        qw_hash_u64(&h, t->added[i].id);
        qw_hash_u64(&h, (uint64_t)t->added[i].special);
    }
    /* The regexes' Unicode tables (\\p{L}, \\p{N}, case folding) decide where text splits, so
       a tokenizer with a regex step or replacement is another tokenizer under another PCRE2
       Unicode version; one without any is not (and keeps its digest). */
    bool regex = t->n_steps > 0;
    for (int i = 0; i < t->n_repl && !regex; i++)
        regex = t->repl[i].re != NULL;
    if (regex) {
        qw_hash_bytes(&h, "pcre2-unicode", 13);
        qw_hash_bytes(&h, unicode_version, strlen(unicode_version));
    }
    if (t->sp_model) { /* only then: the digests of the other families stay as they were */
        qw_hash_bytes(&h, "sentencepiece-model", 19);
        qw_hash_u64(&h, (uint64_t)t->sp_remove_ws);
        qw_hash_u64(&h, t->n_user);
        for (size_t i = 0; i < t->n_user; i++)
            qw_hash_u64(&h, t->user_ids[i]);
    }
    uint8_t out[crypto_generichash_BYTES];
    crypto_generichash_final(&h, out, sizeof out);
    sodium_bin2hex(out_hex, 65, out, sizeof out);
}

void qw_tokenizer_free(qw_tokenizer *t) {
    if (!t) return;
    free(t->source);
    free(t->pool);
    free(t->off);
    free(t->type);
    free(t->score);
    free(t->map.slot);
    qw_pairmap_free(&t->merges);
    free(t->merge_l);
    free(t->merge_r);
    free(t->prepend);
    for (int i = 0; i < t->n_repl; i++) {
        free(t->repl[i].from);
        free(t->repl[i].to);
        pcre2_code_free(t->repl[i].re);
    }
    for (int i = 0; i < t->n_steps; i++) {
        pcre2_code_free(t->step[i].re);
        free(t->step[i].pattern);
    }
    free(t->added);
    free(t->user_ids);
    free(t);
}

uint32_t qw_tokenizer_vocab_size(const qw_tokenizer *t) {
    return t->n_vocab;
}
int64_t qw_tokenizer_bos(const qw_tokenizer *t) {
    return t->bos_id;
}
int64_t qw_tokenizer_eos(const qw_tokenizer *t) {
    return t->eos_id;
}
int qw_tokenizer_adds_bos(const qw_tokenizer *t) {
    return t->add_bos && t->bos_id >= 0;
}
const char *qw_tokenizer_digest(const qw_tokenizer *t) {
    return t->digest;
}

const char *qw_tokenizer_piece(const qw_tokenizer *t, uint32_t id, size_t *len) {
    if (id >= t->n_vocab) return NULL;
    *len = t->off[id + 1] - t->off[id];
    return t->pool + t->off[id];
}

int qw_tokenizer_is_special(const qw_tokenizer *t, uint32_t id) {
    return id < t->n_vocab && t->type[id] == QW_TT_CONTROL;
}

const char *qw_tokenizer_kind(const qw_tokenizer *t) {
    switch (t->kind) {
    case QW_TOK_BYTE_BPE:
        return "byte-bpe";
    case QW_TOK_SPM_BPE:
        return "spm-bpe";
    case QW_TOK_SPM:
        return "spm";
    }
    return "?";
}
