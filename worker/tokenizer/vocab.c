/* The vocabulary's lookup tables: piece text -> id, (left, right) -> (rank, merged id). */
#include "tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

/* FNV-1a, 64 bit (Fowler, Noll, Vo; the IETF draft's offset basis and prime). */
static uint64_t qw_fnv1a(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
    return h;
}

static size_t qw_pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n)
        c <<= 1;
    return c;
}

qs_status qw_tok_alloc(qw_tokenizer *t, uint32_t n, size_t pool_bytes, qs_error *err) {
    t->n_vocab = n;
    t->off = calloc((size_t)n + 1, sizeof *t->off);
    t->type = calloc(n ? n : 1, 1);
    t->pool = malloc(pool_bytes ? pool_bytes : 1);
    if (!t->off || !t->type || !t->pool)
        return qs_error_set(err, QS_ENOMEM, "%s: out of memory for %u tokens", t->source, n);
    return QS_OK;
}

qs_status qw_strmap_build(qw_tokenizer *t, qs_error *err) {
    size_t cap = qw_pow2_at_least((size_t)t->n_vocab * 2);
    t->map.slot = calloc(cap, sizeof *t->map.slot);
    if (!t->map.slot)
        return qs_error_set(err, QS_ENOMEM, "%s: out of memory for the vocabulary index",
                            t->source);
    t->map.mask = cap - 1;
    for (uint32_t id = 0; id < t->n_vocab; id++) {
        size_t len = t->off[id + 1] - t->off[id];
        if (len == 0) continue; /* a hole, or an empty piece that text can never produce */
        const char *s = t->pool + t->off[id];
        size_t i = (size_t)qw_fnv1a(s, len) & t->map.mask;
        for (;; i = (i + 1) & t->map.mask) {
            uint32_t v = t->map.slot[i];
            if (v == 0) {
                t->map.slot[i] = id + 1;
                break;
            }
            uint32_t o = v - 1;
            if (t->off[o + 1] - t->off[o] == len && memcmp(t->pool + t->off[o], s, len) == 0)
                break; /* duplicate text: the lower id keeps it */
        }
    }
    return QS_OK;
}

int64_t qw_strmap_get(const qw_tokenizer *t, const char *s, size_t len) {
    if (len == 0 || !t->map.slot) return -1;
    size_t i = (size_t)qw_fnv1a(s, len) & t->map.mask;
    for (;; i = (i + 1) & t->map.mask) {
        uint32_t v = t->map.slot[i];
        if (v == 0) return -1;
        uint32_t o = v - 1;
        if (t->off[o + 1] - t->off[o] == len && memcmp(t->pool + t->off[o], s, len) == 0) return o;
    }
}

/* splitmix64's finaliser (Steele, Lea, Flood 2014) spreads the pair over the table. */
static uint64_t qw_mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

qs_status qw_pairmap_init(qw_pairmap *m, size_t n, qs_error *err) {
    size_t cap = qw_pow2_at_least(n * 2);
    m->key = calloc(cap, sizeof *m->key);
    m->rank = malloc(cap * sizeof *m->rank);
    m->merged = malloc(cap * sizeof *m->merged);
    if (!m->key || !m->rank || !m->merged)
        return qs_error_set(err, QS_ENOMEM, "out of memory for %zu merges", n);
    m->mask = cap - 1;
    return QS_OK;
}

void qw_pairmap_put(qw_pairmap *m, uint32_t left, uint32_t right, uint32_t rank, uint32_t merged) {
    uint64_t k = ((uint64_t)left << 32 | right) + 1;
    for (size_t i = (size_t)qw_mix64(k) & m->mask;; i = (i + 1) & m->mask) {
        if (m->key[i] == k) return;
        if (m->key[i] == 0) {
            m->key[i] = k;
            m->rank[i] = rank;
            m->merged[i] = merged;
            return;
        }
    }
}

int qw_pairmap_get(const qw_pairmap *m, uint32_t left, uint32_t right, uint32_t *rank,
                   uint32_t *merged) {
    if (!m->key) return 0;
    uint64_t k = ((uint64_t)left << 32 | right) + 1;
    for (size_t i = (size_t)qw_mix64(k) & m->mask;; i = (i + 1) & m->mask) {
        if (m->key[i] == k) {
            *rank = m->rank[i];
            *merged = m->merged[i];
            return 1;
        }
        if (m->key[i] == 0) return 0;
    }
}

void qw_pairmap_free(qw_pairmap *m) {
    free(m->key);
    free(m->rank);
    free(m->merged);
    memset(m, 0, sizeof *m);
}

qs_status qw_token_vec_push(qw_token_vec *v, uint32_t id, qs_error *err) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 256;
        uint32_t *p = realloc(v->ids, cap * sizeof *p);
        if (!p) return qs_error_set(err, QS_ENOMEM, "out of memory for %zu token ids", cap);
        v->ids = p;
        v->cap = cap;
    }
    v->ids[v->n++] = id;
    return QS_OK;
}

void qw_token_vec_free(qw_token_vec *v) {
    if (!v) return;
    free(v->ids);
    memset(v, 0, sizeof *v);
}
