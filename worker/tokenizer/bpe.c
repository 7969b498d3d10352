/* BPE by merge rank over one pre-tokenized word, as Hugging Face tokenizers'
 * models/bpe/word.rs Word::merge_all: a min-heap of candidate merges ordered by (rank,
 * position); a popped merge is applied when its left symbol is alive and the pair it names
 * still merges to the same id; each merge queues the new pairs with its neighbours.
 * llama.cpp's llm_tokenizer_bpe_session orders its bigrams the same way (rank, then left
 * position), so both give the same ids. */
#include "tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct qw_merge_cand {
    uint32_t rank, pos, merged;
} qw_merge_cand;

struct qw_bpe_scratch {
    uint32_t *id;
    int32_t *prev, *next;
    uint8_t *alive;
    size_t cap;
    qw_merge_cand *heap;
    size_t heap_n, heap_cap;
    char *buf; /* the byte-level mapped word, for ignore_merges */
    size_t buf_cap;
};

qw_bpe_scratch *qw_bpe_scratch_new(void) {
    return calloc(1, sizeof(qw_bpe_scratch));
}

void qw_bpe_scratch_free(qw_bpe_scratch *s) {
    if (!s) return;
    free(s->id);
    free(s->prev);
    free(s->next);
    free(s->alive);
    free(s->heap);
    free(s->buf);
    free(s);
}

static qs_status qw_scratch_reserve(qw_bpe_scratch *s, size_t n, qs_error *err) {
    if (n > s->cap) {
        size_t cap = s->cap ? s->cap : 64;
        while (cap < n)
            cap *= 2;
        uint32_t *id = realloc(s->id, cap * sizeof *id);
        if (id) s->id = id;
        int32_t *prev = realloc(s->prev, cap * sizeof *prev);
        if (prev) s->prev = prev;
        int32_t *next = realloc(s->next, cap * sizeof *next);
        if (next) s->next = next;
        uint8_t *alive = realloc(s->alive, cap);
        if (alive) s->alive = alive;
        if (!id || !prev || !next || !alive)
            return qs_error_set(err, QS_ENOMEM, "out of memory for a word of %zu symbols", n);
        s->cap = cap;
    }
    return QS_OK;
}

static int qw_cand_less(const qw_merge_cand *a, const qw_merge_cand *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static qs_status qw_heap_push(qw_bpe_scratch *s, qw_merge_cand c, qs_error *err) {
    if (s->heap_n == s->heap_cap) {
        size_t cap = s->heap_cap ? s->heap_cap * 2 : 64;
        qw_merge_cand *h = realloc(s->heap, cap * sizeof *h);
        if (!h) return qs_error_set(err, QS_ENOMEM, "out of memory for %zu merge candidates", cap);
        s->heap = h;
        s->heap_cap = cap;
    }
    size_t i = s->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!qw_cand_less(&c, &s->heap[p])) break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = c;
    return QS_OK;
}

static qw_merge_cand qw_heap_pop(qw_bpe_scratch *s) {
    qw_merge_cand top = s->heap[0], last = s->heap[--s->heap_n];
    size_t i = 0, n = s->heap_n;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const qw_merge_cand *mv = &last;
        if (l < n && qw_cand_less(&s->heap[l], mv)) {
            m = l;
            mv = &s->heap[l];
        }
        if (r < n && qw_cand_less(&s->heap[r], mv)) m = r;
        if (m == i) break;
        s->heap[i] = s->heap[m];
        i = m;
    }
    if (n) s->heap[i] = last;
    return top;
}

static qs_status qw_try_pair(const qw_tokenizer *t, qw_bpe_scratch *s, int32_t left,
                             qs_error *err) {
    if (left < 0) return QS_OK;
    int32_t right = s->next[left];
    if (right < 0) return QS_OK;
    uint32_t rank, merged;
    if (!qw_pairmap_get(&t->merges, s->id[left], s->id[right], &rank, &merged)) return QS_OK;
    return qw_heap_push(s, (qw_merge_cand){rank, (uint32_t)left, merged}, err);
}

/* Merges the n symbols in s->id[0..n) and appends the survivors to out. */
static qs_status qw_merge_all(const qw_tokenizer *t, qw_bpe_scratch *s, size_t n, qw_token_vec *out,
                              qs_error *err) {
    qs_status st;
    for (size_t i = 0; i < n; i++) {
        s->prev[i] = (int32_t)i - 1;
        s->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
        s->alive[i] = 1;
    }
    s->heap_n = 0;
    for (size_t i = 0; i + 1 < n; i++)
        if ((st = qw_try_pair(t, s, (int32_t)i, err))) return st;
    while (s->heap_n) {
        qw_merge_cand c = qw_heap_pop(s);
        int32_t p = (int32_t)c.pos;
        if (!s->alive[p]) continue;
        int32_t r = s->next[p];
        if (r < 0) continue;
        uint32_t rank, merged;
        if (!qw_pairmap_get(&t->merges, s->id[p], s->id[r], &rank, &merged) || merged != c.merged)
            continue;
        s->id[p] = merged;
        s->alive[r] = 0;
        s->next[p] = s->next[r];
        if (s->next[r] >= 0) s->prev[s->next[r]] = p;
        if ((st = qw_try_pair(t, s, s->prev[p], err)) || (st = qw_try_pair(t, s, p, err)))
            return st;
    }
    for (int32_t i = n ? 0 : -1; i >= 0; i = s->next[i])
        if ((st = qw_token_vec_push(out, s->id[i], err))) return st;
    return QS_OK;
}

qs_status qw_bpe_word_bytes(const qw_tokenizer *t, qw_bpe_scratch *s, const uint8_t *w, size_t n,
                            qw_token_vec *out, qs_error *err) {
    qs_status st;
    if (n == 0) return QS_OK;
    if (t->ignore_merges) {
        /* llama.cpp and HF: a word that is itself a token is that token, whatever the merges. */
        if (2 * n > s->buf_cap) {
            size_t cap = 2 * n < 256 ? 256 : 2 * n;
            char *b = realloc(s->buf, cap);
            if (!b) return qs_error_set(err, QS_ENOMEM, "out of memory for a word of %zu bytes", n);
            s->buf = b;
            s->buf_cap = cap;
        }
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            k += qw_utf8_put(qw_byte_to_cp(w[i]), s->buf + k);
        int64_t id = qw_strmap_get(t, s->buf, k);
        if (id >= 0) return qw_token_vec_push(out, (uint32_t)id, err);
    }
    if ((st = qw_scratch_reserve(s, n, err))) return st;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t id = t->byte_id[w[i]];
        if (id != UINT32_MAX)
            s->id[m++] = id;
        else if (t->unk_id >= 0 && !t->drop_missing_bytes)
            s->id[m++] = (uint32_t)t->unk_id;
        /* else dropped, as HF's BPE does for a character outside the vocabulary without unk
         * and llama.cpp always does */
    }
    return qw_merge_all(t, s, m, out, err);
}

qs_status qw_bpe_word_utf8(const qw_tokenizer *t, qw_bpe_scratch *s, const uint8_t *w, size_t n,
                           qw_token_vec *out, qs_error *err) {
    qs_status st;
    if ((st = qw_scratch_reserve(s, 4 * n + 1, err))) return st;
    size_t m = 0;
    int last_unk = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = qw_utf8_char(w + i, n - i, &cp);
        if (k == 0) k = 1; /* the caller checked the text; a stray byte stays one symbol */
        int64_t id = qw_strmap_get(t, (const char *)w + i, k);
        if (id >= 0) {
            s->id[m++] = (uint32_t)id;
            last_unk = 0;
        } else {
            int all = t->byte_fallback;
            for (size_t j = 0; all && j < k; j++)
                if (t->fallback_id[w[i + j]] == UINT32_MAX) all = 0;
            if (all) {
                for (size_t j = 0; j < k; j++)
                    s->id[m++] = t->fallback_id[w[i + j]];
                last_unk = 0;
            } else if (t->unk_id >= 0) {
                /* fuse_unk: a run of unknown characters is one <unk> (HF BPE) */
                if (!(t->fuse_unk && last_unk)) s->id[m++] = (uint32_t)t->unk_id;
                last_unk = 1;
            }
        }
        i += k;
    }
    return qw_merge_all(t, s, m, out, err);
}
