/* The conversion cache (convcache.h): a chained hash table of FP32 pieces and a doubly linked
 * LRU list (most recent at the head), under one mutex. */
#include "convcache.h"

#include "gemm_fixed.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What a piece's values are a function of (convcache.h). */
typedef struct piece_key {
    int form;          /* QW_WEIGHT_STORED or QW_WEIGHT_PACKED */
    int panels;        /* 1: qw_gemm_fixed_pack_b's panels; 0: rows */
    uint64_t version;  /* packed: its version; stored: qw_weight.version */
    const void *data;  /* stored: view.data; packed: the qk_packed */
    const void *codes; /* packed: its codes; stored: NULL */
    int64_t rows, cols, r0, n;
    int dtype, permute; /* stored: view.dtype, view.permute_heads */
    size_t row_bytes;   /* stored: view.row_bytes */
} piece_key;

typedef struct piece {
    piece_key key;
    float *data; /* [n x cols] */
    size_t bytes;
    int pins;
    struct piece *next_hash;
    struct piece *prev, *next; /* LRU list */
} piece;

/* A buffer of a dropped piece, kept for the next piece of its size (convcache.h). */
typedef struct spare {
    float *data;
    size_t bytes;
    struct spare *next;
} spare;

struct qw_convcache {
    pthread_mutex_t mu;
    piece **table; /* [nbuckets] chains */
    size_t nbuckets;
    piece *head, *tail; /* LRU: head most recently used */
    spare *spares;      /* buffers of dropped packed pieces, counted in st.bytes and st.spare */
    qw_convcache_stats st;
};

static piece_key key_of(const qw_weight *w, int64_t r0, int64_t n, int panels) {
    piece_key k;
    memset(&k, 0, sizeof k); /* padding too: keys are compared with memcmp */
    k.form = (int)w->form;
    k.panels = panels;
    k.rows = w->rows;
    k.cols = w->cols;
    k.r0 = r0;
    k.n = n;
    if (w->form == QW_WEIGHT_PACKED) {
        k.data = w->packed;
        k.codes = w->packed->codes;
        k.version = w->packed->version;
    } else {
        k.version = w->version;
        k.data = w->view.data;
        k.dtype = (int)w->view.dtype;
        k.permute = w->view.permute_heads;
        k.row_bytes = w->view.row_bytes;
    }
    return k;
}

/* FNV-1a over the key's bytes. */
static size_t key_hash(const piece_key *k) {
    const unsigned char *p = (const unsigned char *)k;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sizeof *k; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return (size_t)h;
}

qs_status qw_convcache_create(size_t budget_bytes, qw_convcache **out, qs_error *err) {
    *out = NULL;
    qw_convcache *c = calloc(1, sizeof *c);
    if (!c) return qs_error_set(err, QS_ENOMEM, "conversion cache");
    c->nbuckets = 1024;
    c->table = calloc(c->nbuckets, sizeof *c->table);
    if (!c->table) {
        free(c);
        return qs_error_set(err, QS_ENOMEM, "conversion cache: %zu buckets", (size_t)1024);
    }
    pthread_mutex_init(&c->mu, NULL);
    c->st.budget = budget_bytes;
    *out = c;
    return QS_OK;
}

static void lru_unlink(qw_convcache *c, piece *p) {
    if (p->prev)
        p->prev->next = p->next;
    else
        c->head = p->next;
    if (p->next)
        p->next->prev = p->prev;
    else
        c->tail = p->prev;
    p->prev = p->next = NULL;
}

static void lru_push_head(qw_convcache *c, piece *p) {
    p->prev = NULL;
    p->next = c->head;
    if (c->head) c->head->prev = p;
    c->head = p;
    if (!c->tail) c->tail = p;
}

/* Frees the spare buffers while more than `keep` bytes are held (the caller holds the mutex). */
static void free_spares(qw_convcache *c, size_t keep) {
    while (c->spares && c->st.bytes > keep) {
        spare *s = c->spares;
        c->spares = s->next;
        c->st.bytes -= s->bytes;
        c->st.spare -= s->bytes;
        free(s->data);
        free(s);
    }
}

/* A spare buffer of exactly `bytes`, taken off the list (its bytes stay counted as held, no
 * longer as spare), or NULL (the caller holds the mutex). */
static float *take_spare(qw_convcache *c, size_t bytes) {
    for (spare **sp = &c->spares; *sp; sp = &(*sp)->next)
        if ((*sp)->bytes == bytes) {
            spare *s = *sp;
            float *d = s->data;
            *sp = s->next;
            c->st.spare -= bytes;
            free(s);
            return d;
        }
    return NULL;
}

/* Unlinks p from its chain and the list and frees it, its buffer kept as a spare when
 * keep_buffer and the spare record can be made (the caller holds the mutex). */
static void piece_remove(qw_convcache *c, piece *p, int keep_buffer) {
    piece **pp = &c->table[key_hash(&p->key) & (c->nbuckets - 1)];
    while (*pp != p)
        pp = &(*pp)->next_hash;
    *pp = p->next_hash;
    lru_unlink(c, p);
    c->st.entries--;
    spare *s = keep_buffer ? malloc(sizeof *s) : NULL;
    if (s) {
        *s = (spare){p->data, p->bytes, c->spares};
        c->spares = s;
        c->st.spare += p->bytes;
    } else {
        c->st.bytes -= p->bytes;
        free(p->data);
    }
    free(p);
}

void qw_convcache_destroy(qw_convcache *c) {
    if (!c) return;
    while (c->head)
        piece_remove(c, c->head, 0);
    free_spares(c, 0);
    pthread_mutex_destroy(&c->mu);
    free(c->table);
    free(c);
}

/* Doubles the table when it holds more pieces than buckets (the caller holds the mutex); on
 * allocation failure the chains just grow longer. */
static void maybe_grow(qw_convcache *c) {
    if (c->st.entries < c->nbuckets) return;
    size_t nb = c->nbuckets * 2;
    piece **t = calloc(nb, sizeof *t);
    if (!t) return;
    for (size_t b = 0; b < c->nbuckets; b++)
        for (piece *p = c->table[b], *nx; p; p = nx) {
            nx = p->next_hash;
            size_t i = key_hash(&p->key) & (nb - 1);
            p->next_hash = t[i];
            t[i] = p;
        }
    free(c->table);
    c->table = t;
    c->nbuckets = nb;
}

static piece *find(qw_convcache *c, const piece_key *k) {
    for (piece *p = c->table[key_hash(k) & (c->nbuckets - 1)]; p; p = p->next_hash)
        if (memcmp(&p->key, k, sizeof *k) == 0) return p;
    return NULL;
}

/* Evicts unpinned pieces from the LRU end until `bytes` more fit in the budget (the caller
 * holds the mutex). 1 when they fit. */
static int make_room(qw_convcache *c, size_t bytes) {
    if (bytes > c->st.budget) return 0;
    free_spares(c, c->st.budget - bytes);
    piece *p = c->tail;
    while (c->st.bytes + bytes > c->st.budget && p) {
        piece *prev = p->prev;
        if (p->pins == 0) {
            piece_remove(c, p, 0);
            c->st.evictions++;
        }
        p = prev;
    }
    return c->st.bytes + bytes <= c->st.budget;
}

/* qw_convcache_get (scratch NULL) or qw_convcache_get_panels (the rows converted into scratch,
 * then packed into the piece). */
static const float *get_piece(qw_convcache *c, const qw_weight *w, int64_t r0, int64_t n,
                              float *scratch) {
    if (!c || w->form == QW_WEIGHT_F32) return NULL;
    piece_key k = key_of(w, r0, n, scratch != NULL);
    size_t floats =
        scratch ? qw_gemm_fixed_packed_floats((int)n, (int)w->cols) : (size_t)n * (size_t)w->cols;
    size_t bytes = floats * sizeof(float);
    pthread_mutex_lock(&c->mu);
    piece *p = find(c, &k);
    if (p) {
        p->pins++;
        lru_unlink(c, p);
        lru_push_head(c, p);
        c->st.hits++;
        pthread_mutex_unlock(&c->mu);
        return p->data;
    }
    /* Room is made and counted now, so that threads converting at the same time cannot
     * overrun the budget together; the piece enters the table once it holds its values. A
     * spare buffer of the size is taken first: its pages are already mapped (a fresh buffer
     * costs a page fault per 4 KiB on its first write, more than converting into it). */
    float *data = take_spare(c, bytes);
    int fits = data != NULL || make_room(c, bytes);
    if (fits && !data) c->st.bytes += bytes;
    if (!fits) c->st.bypassed++;
    pthread_mutex_unlock(&c->mu);
    if (!fits) return NULL;
    p = calloc(1, sizeof *p);
    if (p && !data) data = malloc(bytes);
    qs_status st =
        p && data ? qw_weight_rows_f32(w, r0, n, scratch ? scratch : data, NULL) : QS_ENOMEM;
    if (st == QS_OK && scratch)
        qw_gemm_fixed_pack_b(1, (int)n, (int)w->cols, scratch, (int)w->cols, data);
    pthread_mutex_lock(&c->mu);
    piece *other = st == QS_OK ? find(c, &k) : NULL; /* converted meanwhile by another thread */
    if (st != QS_OK || other) {
        if (other) {
            other->pins++;
            c->st.hits++;
        } else {
            c->st.bypassed++;
        }
        c->st.bytes -= bytes;
        pthread_mutex_unlock(&c->mu);
        free(data);
        free(p);
        return other ? other->data : NULL;
    }
    p->key = k;
    p->data = data;
    p->bytes = bytes;
    p->pins = 1;
    maybe_grow(c);
    size_t i = key_hash(&k) & (c->nbuckets - 1);
    p->next_hash = c->table[i];
    c->table[i] = p;
    lru_push_head(c, p);
    c->st.entries++;
    c->st.misses++;
    pthread_mutex_unlock(&c->mu);
    return data;
}

const float *qw_convcache_get(qw_convcache *c, const qw_weight *w, int64_t r0, int64_t n) {
    return get_piece(c, w, r0, n, NULL);
}

const float *qw_convcache_get_panels(qw_convcache *c, const qw_weight *w, int64_t r0, int64_t n,
                                     float *scratch) {
    return scratch ? get_piece(c, w, r0, n, scratch) : NULL;
}

/* The panels piece of rows [p0, p0+pn) of w, pinned, when the cache holds it (no conversion). */
static const float *find_panels(qw_convcache *c, const qw_weight *w, int64_t p0, int64_t pn) {
    if (!c || w->form == QW_WEIGHT_F32) return NULL;
    piece_key k = key_of(w, p0, pn, 1);
    pthread_mutex_lock(&c->mu);
    piece *p = find(c, &k);
    if (p) {
        p->pins++;
        lru_unlink(c, p);
        lru_push_head(c, p);
        c->st.hits++;
    }
    pthread_mutex_unlock(&c->mu);
    return p ? p->data : NULL;
}

qs_status qw_convcache_rows_f32(qw_convcache *c, const qw_weight *w, int64_t r0, int64_t n,
                                int64_t piece_rows, float *dst, qs_error *err) {
    if (piece_rows < 1)
        return qs_error_set(err, QS_EINVAL, "conversion cache: piece rows %lld",
                            (long long)piece_rows);
    if (r0 < 0 || n < 1 || r0 + n > w->rows)
        return qw_weight_rows_f32(w, r0, n, dst, err); /* which names the bad range */
    size_t cols = (size_t)w->cols;
    for (int64_t r = r0; r < r0 + n;) {
        int64_t p0 = r / piece_rows * piece_rows;
        int64_t pn = p0 + piece_rows < w->rows ? piece_rows : w->rows - p0;
        int64_t end = p0 + pn < r0 + n ? p0 + pn : r0 + n; /* rows r..end-1 from this piece */
        float *out = dst + (size_t)(r - r0) * cols;
        const float *piece = find_panels(c, w, p0, pn);
        if (piece) {
            /* row q of the piece is column q of the packed op(B): panel q/16, lane q%16; a
             * panel's rows are read in order, its lanes written to up to 16 rows */
            for (int64_t qa = r - p0; qa < end - p0;) {
                int64_t qb = (qa / 16 + 1) * 16 < end - p0 ? (qa / 16 + 1) * 16 : end - p0;
                const float *src = piece + (size_t)(qa / 16) * cols * 16;
                float *o = out + (size_t)(qa - (r - p0)) * cols;
                for (size_t e = 0; e < cols; e++)
                    for (int64_t q = qa; q < qb; q++)
                        o[(size_t)(q - qa) * cols + e] = src[e * 16 + (size_t)(q % 16)];
                qa = qb;
            }
            qw_convcache_release(c, piece);
            r = end;
            continue;
        }
        piece = qw_convcache_get(c, w, p0, pn);
        if (piece) {
            memcpy(out, piece + (size_t)(r - p0) * cols, (size_t)(end - r) * cols * sizeof *out);
            qw_convcache_release(c, piece);
        } else {
            qs_status st = qw_weight_rows_f32(w, r, end - r, out, err);
            if (st != QS_OK) return st;
        }
        r = end;
    }
    return QS_OK;
}

void qw_convcache_release(qw_convcache *c, const float *piece_data) {
    if (!c || !piece_data) return;
    pthread_mutex_lock(&c->mu);
    /* Pinned pieces are the recently used ones: found from the head in a few steps. */
    for (piece *p = c->head; p; p = p->next)
        if (p->data == piece_data) {
            if (p->pins > 0) p->pins--;
            break;
        }
    pthread_mutex_unlock(&c->mu);
}

void qw_convcache_drop_packed(qw_convcache *c) {
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    for (piece *p = c->head, *nx; p; p = nx) {
        nx = p->next;
        if (p->key.form == QW_WEIGHT_PACKED) {
            piece_remove(c, p, 1); /* the next policy's pieces have the same sizes */
            c->st.dropped++;
        }
    }
    pthread_mutex_unlock(&c->mu);
}

void qw_convcache_get_stats(qw_convcache *c, qw_convcache_stats *out) {
    memset(out, 0, sizeof *out);
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    *out = c->st;
    pthread_mutex_unlock(&c->mu);
}

/* MemAvailable of /proc/meminfo in bytes (free memory plus what the kernel can reclaim, such
 * as the page cache); sysconf's free pages when it cannot be read. */
static size_t available_bytes(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        unsigned long long kb = 0;
        int found = 0;
        while (!found && fgets(line, sizeof line, f))
            found = sscanf(line, "MemAvailable: %llu kB", &kb) == 1;
        fclose(f);
        if (found) return (size_t)kb * 1024;
    }
    long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (size_t)pages * (size_t)size : 0;
}

size_t qw_convcache_default_bytes(void) {
    const char *env = getenv("QSWEEP_CONVERT_CACHE_MB");
    if (env && *env) return (size_t)strtoull(env, NULL, 10) << 20;
    return available_bytes() / 4;
}
