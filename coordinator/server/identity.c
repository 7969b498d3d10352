/* Who may speak for a worker and for an attempt (identity.h, docs/security.md):
 *   - an attempt token: TOKEN_BYTES random bytes made for each attempt, sent only in its
 *     ASSIGN, never logged; a HELLO re-attaching to the attempt, a HEARTBEAT renewing its
 *     lease and a RESULT or FAILED reporting it must carry it. The coordinator keeps the raw
 *     bytes in memory for a repeated ASSIGN and stores only their BLAKE2b-256 hash
 *     (attempts.token_hash), so a restarted coordinator still checks re-attaching workers;
 *   - with CURVE, the key a worker id belongs to: the key of the first HELLO of that id
 *     (workers.curve_key), after which a HELLO of that id from any other key is refused. */
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "grow.h"
#include "identity.h"

void qc_srv_token_new(job *j) {
    randombytes_buf(j->token, sizeof j->token);
    crypto_generichash(j->token_hash, sizeof j->token_hash, j->token, sizeof j->token, NULL, 0);
    j->token_known = j->has_token_hash = true;
}

void qc_srv_token_hash_hex(const job *j, char out[2 * TOKEN_HASH_BYTES + 1]) {
    sodium_bin2hex(out, 2 * TOKEN_HASH_BYTES + 1, j->token_hash, sizeof j->token_hash);
}

void qc_srv_token_load(job *j, const char *hex) {
    size_t n = 0;
    j->token_known = false;
    j->has_token_hash = hex && strlen(hex) == 2 * TOKEN_HASH_BYTES &&
                        sodium_hex2bin(j->token_hash, sizeof j->token_hash, hex, strlen(hex), NULL,
                                       &n, NULL) == 0 &&
                        n == sizeof j->token_hash;
}

bool qc_srv_token_ok(const job *j, const uint8_t *t, size_t len) {
    if (!j->has_token_hash || !t || len != TOKEN_BYTES) return false;
    uint8_t h[TOKEN_HASH_BYTES];
    crypto_generichash(h, sizeof h, t, len, NULL, 0);
    return sodium_memcmp(h, j->token_hash, sizeof h) == 0;
}

qs_status qc_srv_owners_load(qc_owners *o, qc_store *store, qs_error *err) {
    qc_srv_owners_free(o);
    qs_status st = qc_store_worker_keys(store, &o->all, &o->n, err);
    o->cap = o->n;
    return st;
}

const char *qc_srv_owner(const qc_owners *o, const char *name) {
    for (size_t i = 0; i < o->n; i++)
        if (!strcmp(o->all[i].worker, name)) return o->all[i].key;
    return NULL;
}

void qc_srv_own(qc_owners *o, const char *name, const char *key) {
    o->all = qc_srv_grow(o->all, &o->cap, o->n + 1, sizeof *o->all);
    qc_worker_key *k = &o->all[o->n];
    if (!(k->worker = strdup(name)) || !(k->key = strdup(key))) abort();
    o->n++;
}

void qc_srv_owners_free(qc_owners *o) {
    for (size_t i = 0; i < o->n; i++) {
        free(o->all[i].worker);
        free(o->all[i].key);
    }
    free(o->all);
    *o = (qc_owners){0};
}
