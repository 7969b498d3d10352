/* Schema migrations: the numbered files of schema/ (NNN_name.sql), embedded into qc_store at
 * build time (embed_schema.cmake), applied in version order, each in its own transaction,
 * and recorded in schema_migrations (version, name, checksum, applied_at).
 *
 * The checksum is BLAKE2b-256 (libsodium crypto_generichash, 32-byte output, no key) of the
 * file's bytes, as 64 lowercase hex digits. A migration that was applied with a different
 * checksum is an error naming it: applied migrations are never edited, new ones are added. */
#ifndef QC_STORE_MIGRATE_H
#define QC_STORE_MIGRATE_H

#include <libpq-fe.h>
#include <stddef.h>

#include "error.h"

/* One migration: version (the file's NNN), file name, SQL text (NUL-terminated, len bytes).
 * The SQL must not contain transaction control (BEGIN/COMMIT): it runs inside one. */
typedef struct qc_migration {
    int version;
    const char *name;
    const char *sql;
    size_t len;
} qc_migration;

/* The embedded migrations of schema/, sorted by version (generated file). */
extern const qc_migration qc_schema_migrations[];
extern const size_t qc_schema_migrations_count;

/* Applies the embedded migrations to the database of conn: qc_migrate_list over
 * qc_schema_migrations. */
qs_status qc_migrate(PGconn *conn, int *applied, qs_error *err);

/* Applies list[0..n) (sorted by increasing version) to the database of conn.
 * When the database has applied exactly these migrations (same checksums) it returns at once,
 * taking no lock. Otherwise holds a session advisory lock (pg_advisory_lock, waiting for
 * another migrator) for the duration, creates schema_migrations if missing, then:
 *   - checks every recorded migration first: one whose checksum differs from the list's is
 *     QS_ESTATE naming its version, file and both checksums; a recorded version missing from
 *     the list (a database newer than this program) is QS_ESTATE naming it. Nothing is
 *     applied in either case;
 *   - applies each migration not yet recorded in one transaction with its schema_migrations
 *     row; a failing one is rolled back and reported as QS_EDB naming the file, the line in
 *     it (from the server's error position) and the server's message; migrations before it
 *     stay applied.
 * *applied (may be NULL) receives the number of migrations applied by this call (0 when the
 * schema was already current). Errors: QS_EDB for server errors, QS_ESTATE as above,
 * QS_EINVAL for a list that is not sorted by increasing version. */
qs_status qc_migrate_list(PGconn *conn, const qc_migration *list, size_t n, int *applied,
                          qs_error *err);

/* Writes the 64-hex-digit checksum of sql[0..len) and a NUL into out. */
void qc_migration_checksum(const char *sql, size_t len, char out[65]);

#endif
