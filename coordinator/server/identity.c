/* Who may speak for a worker and for an attempt (server_internal.h, docs/security.md):
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

#include "server_internal.h"

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

qs_status qc_srv_owners_load(server *s, qs_error *err) {
    qc_srv_owners_free(s);
    qs_status st = qc_store_worker_keys(s->store, &s->owners, &s->n_owners, err);
    s->cap_owners = s->n_owners;
    return st;
}

const char *qc_srv_owner(const server *s, const char *name) {
    for (size_t i = 0; i < s->n_owners; i++)
        if (!strcmp(s->owners[i].worker, name)) return s->owners[i].key;
    return NULL;
}

void qc_srv_own(server *s, const char *name, const char *key) {
    s->owners = qc_srv_grow(s->owners, &s->cap_owners, s->n_owners + 1, sizeof *s->owners);
    qc_worker_key *k = &s->owners[s->n_owners];
    if (!(k->worker = strdup(name)) || !(k->key = strdup(key))) abort();
    s->n_owners++;
}

void qc_srv_owners_free(server *s) {
    for (size_t i = 0; i < s->n_owners; i++) {
        free(s->owners[i].worker);
        free(s->owners[i].key);
    }
    free(s->owners);
    s->owners = NULL;
    s->n_owners = s->cap_owners = 0;
}
