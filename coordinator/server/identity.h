/* Who may speak for an attempt and for a worker id (coordinator/server only,
 * docs/security.md): each attempt's token, and the CURVE key each worker id belongs to. */
#ifndef QC_SERVER_IDENTITY_H
#define QC_SERVER_IDENTITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "job.h"
#include "store.h"

/* Gives job j's new attempt a fresh random token (libsodium randombytes) and its hash. */
void qc_srv_token_new(job *j);

/* The hash of j's token as 64 lowercase hex digits into out (for attempts.token_hash). */
void qc_srv_token_hash_hex(const job *j, char out[2 * TOKEN_HASH_BYTES + 1]);

/* Takes j's token hash from attempts.token_hash (hex; "" or malformed: none). */
void qc_srv_token_load(job *j, const char *hex);

/* Whether the len bytes t are j's current attempt token (constant-time compare of hashes);
 * false when j has none. */
bool qc_srv_token_ok(const job *j, const uint8_t *t, size_t len);

/* Worker id -> the CURVE key that first registered it (workers.curve_key). */
typedef struct qc_owners {
    qc_worker_key *all;
    size_t n, cap;
} qc_owners;

/* Reads the stored bindings at start (replacing any held). QS_EDB. */
qs_status qc_srv_owners_load(qc_owners *o, qc_store *store, qs_error *err);

/* The CURVE key worker id name belongs to, or NULL when none registered it yet. */
const char *qc_srv_owner(const qc_owners *o, const char *name);

/* Binds name to key (the first HELLO of that id with CURVE); aborts without memory. */
void qc_srv_own(qc_owners *o, const char *name, const char *key);

/* Frees the bindings. */
void qc_srv_owners_free(qc_owners *o);

#endif
