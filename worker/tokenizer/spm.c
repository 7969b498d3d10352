/* SentencePiece BPE by piece score, as llama.cpp's llm_tokenizer_spm_session (llama-vocab.cpp)
 * runs the "llama" vocabulary of a GGUF file, and as sentencepiece's bpe_model.cc Encode runs
 * a .model file (the same merge order; the differences are marked where they act): start from UTF-8
 * characters, repeatedly merge the adjacent pair whose concatenation is the token with the highest
 * score (ties: the leftmost pair), then emit each symbol's token, or its bytes as <0xNN> tokens
 * when the symbol is a character outside the vocabulary. Every merged symbol is a token by
 * construction, so llama.cpp's rev_merge re-segmentation reduces to that byte fallback. */
#include "tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct qw_spm_sym {
    size_t at, n; /* bytes [at, at + n) of the fragment */
    int32_t prev, next;
    int frozen; /* a user-defined piece of a .model file: never merged (bpe_model.cc) */
} qw_spm_sym;

typedef struct qw_bigram {
    float score;
    int32_t left, right;
    size_t size;
} qw_bigram;

/* llama.cpp's comparator: the queue's top has the highest score, then the lowest left. */
static int qw_bigram_before(const qw_bigram *a, const qw_bigram *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

typedef struct qw_bigram_heap {
    qw_bigram *v;
    size_t n, cap;
} qw_bigram_heap;

static int qw_bh_push(qw_bigram_heap *h, qw_bigram b) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        qw_bigram *v = realloc(h->v, cap * sizeof *v);
        if (!v) return -1;
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!qw_bigram_before(&b, &h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = b;
    return 0;
}

static qw_bigram qw_bh_pop(qw_bigram_heap *h) {
    qw_bigram top = h->v[0], last = h->v[--h->n];
    size_t i = 0, n = h->n;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const qw_bigram *mv = &last;
        if (l < n && qw_bigram_before(&h->v[l], mv)) {
            m = l;
            mv = &h->v[l];
        }
        if (r < n && qw_bigram_before(&h->v[r], mv)) m = r;
        if (m == i) break;
        h->v[i] = h->v[m];
        i = m;
    }
    if (n) h->v[i] = last;
    return top;
}

static int qw_spm_try(const qw_tokenizer *t, const uint8_t *w, const qw_spm_sym *sym,
                      qw_bigram_heap *h, int32_t left, int32_t right) {
    if (left < 0 || right < 0 || sym[left].frozen || sym[right].frozen) return 0;
    size_t size = sym[left].n + sym[right].n;
    int64_t id = qw_strmap_get(t, (const char *)w + sym[left].at, size);
    if (id < 0) return 0;
    /* sentencepiece merges into NORMAL, USER_DEFINED and UNUSED pieces only (its pieces_ map;
     * model_interface.cc); llama.cpp into any token */
    if (t->sp_model && t->type[id] != QW_TT_NORMAL && t->type[id] != QW_TT_USER_DEFINED &&
        t->type[id] != QW_TT_UNUSED)
        return 0;
    return qw_bh_push(h, (qw_bigram){t->score ? t->score[id] : 0.0f, left, right, size});
}

qs_status qw_spm_tokenize(const qw_tokenizer *t, const uint8_t *w, size_t n, qw_token_vec *out,
                          qs_error *err) {
    qs_status st = QS_OK;
    if (n == 0) return QS_OK;
    qw_spm_sym *sym = malloc(n * sizeof *sym);
    qw_bigram_heap h = {0};
    if (!sym) return qs_error_set(err, QS_ENOMEM, "out of memory for %zu bytes of text", n);
    int32_t ns = 0;
    for (size_t at = 0; at < n; ns++) {
        /* llama.cpp unicode_len_utf8: the length the lead byte announces, cut at the end */
        uint8_t c = w[at];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
        if (len > n - at) len = n - at;
        /* sentencepiece's PrefixMatch: the longest user-defined piece here is one symbol */
        int frozen = 0;
        for (size_t k = 0; k < t->n_user; k++) {
            uint32_t id = t->user_ids[k];
            size_t ul = t->off[id + 1] - t->off[id];
            if (ul <= n - at && memcmp(w + at, t->pool + t->off[id], ul) == 0) {
                len = ul;
                frozen = 1;
                break;
            }
        }
        sym[ns] = (qw_spm_sym){at, len, ns - 1, at + len < n ? ns + 1 : -1, frozen};
        at += len;
    }
    for (int32_t i = 1; i < ns; i++)
        if (qw_spm_try(t, w, sym, &h, i - 1, i)) goto oom;
    while (h.n) {
        qw_bigram b = qw_bh_pop(&h);
        qw_spm_sym *l = &sym[b.left], *r = &sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = b.left;
        if (qw_spm_try(t, w, sym, &h, l->prev, b.left) ||
            qw_spm_try(t, w, sym, &h, b.left, l->next))
            goto oom;
    }
    int prev_unk = 0;
    for (int32_t i = 0; i >= 0 && !st; i = sym[i].next) {
        int64_t id = qw_strmap_get(t, (const char *)w + sym[i].at, sym[i].n);
        int unk = id < 0;
        if (id >= 0) {
            st = qw_token_vec_push(out, (uint32_t)id, err);
            prev_unk = 0;
            continue;
        }
        if (t->sp_model && !t->byte_fallback) {
            /* sentencepiece_processor.cc: a run of unknown pieces is one unk_id */
            if (!prev_unk && t->unk_id >= 0) st = qw_token_vec_push(out, (uint32_t)t->unk_id, err);
            prev_unk = unk;
            continue;
        }
        for (size_t j = 0; j < sym[i].n && !st; j++) {
            uint8_t byte = w[sym[i].at + j];
            uint32_t fb = t->fallback_id[byte];
            if (fb == UINT32_MAX) {
                /* llama.cpp byte_to_token: the byte itself as a one-byte piece, else <unk> */
                int64_t one = qw_strmap_get(t, (const char *)&byte, 1);
                fb = one >= 0 ? (uint32_t)one : t->unk_id >= 0 ? (uint32_t)t->unk_id : UINT32_MAX;
            }
            if (fb != UINT32_MAX) st = qw_token_vec_push(out, fb, err);
        }
    }
    free(sym);
    free(h.v);
    return st;
oom:
    free(sym);
    free(h.v);
    return qs_error_set(err, QS_ENOMEM, "out of memory for the merges of %zu bytes of text", n);
}
