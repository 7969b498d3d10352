/* The worker's model cache (loop.h: qw_job_cache_get/put): at most CACHE_SLOTS entries that
 * survive across jobs, their keys advertised in HELLO and READY (model affinity). */
#include <pthread.h>
#include <string.h>

#include "cache.h"

void *qw_job_cache_get(qw_job_ctx *ctx, const char *key) {
    void *v = NULL;
    pthread_mutex_lock(&ctx->w->mu);
    for (int i = 0; i < CACHE_SLOTS && !v; i++)
        if (ctx->w->cache[i].key[0] && strcmp(ctx->w->cache[i].key, key) == 0)
            v = ctx->w->cache[i].value;
    pthread_mutex_unlock(&ctx->w->mu);
    return v;
}

static void cache_entry_drop(cache_entry *e) {
    if (e->key[0] && e->free_fn) e->free_fn(e->value);
    memset(e, 0, sizeof *e);
}

qs_status qw_job_cache_put(qw_job_ctx *ctx, const char *key, void *value, void (*free_fn)(void *),
                           qs_error *err) {
    if (!key || !key[0] || strlen(key) > KEY_MAX)
        return qs_error_set(err, QS_EINVAL, "cache key must be 1..%d bytes", KEY_MAX);
    worker *w = ctx->w;
    pthread_mutex_lock(&w->mu);
    cache_entry *slot = NULL;
    for (int i = 0; i < CACHE_SLOTS && !slot; i++)
        if (w->cache[i].key[0] && strcmp(w->cache[i].key, key) == 0) slot = &w->cache[i];
    for (int i = 0; i < CACHE_SLOTS && !slot; i++)
        if (!w->cache[i].key[0]) slot = &w->cache[i];
    if (!slot) { /* evict the oldest entry */
        slot = &w->cache[0];
        for (int i = 1; i < CACHE_SLOTS; i++)
            if (w->cache[i].stamp < slot->stamp) slot = &w->cache[i];
    }
    cache_entry_drop(slot);
    strcpy(slot->key, key);
    slot->value = value;
    slot->free_fn = free_fn;
    slot->stamp = ++w->cache_clock;
    pthread_mutex_unlock(&w->mu);
    return QS_OK;
}

/* Model keys held, for HELLO/READY: pointers into the cache (keys change only on the compute
 * thread, under the mutex, which the caller holds while packing). Returns the count. */
size_t qw_loop_cache_keys(worker *w, char **keys) {
    size_t n = 0;
    for (int i = 0; i < CACHE_SLOTS; i++)
        if (w->cache[i].key[0]) keys[n++] = w->cache[i].key;
    return n;
}

void qw_loop_cache_clear(worker *w) {
    for (int i = 0; i < CACHE_SLOTS; i++)
        cache_entry_drop(&w->cache[i]);
}
