/* Applies the numbered schema migrations. Contract: migrate.h. */
#include "migrate.h"

#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Advisory lock key held while migrating: "qsweepmg" read as a big-endian int64, so it does
 * not collide with the coordinator's lock (lock.c). */
#define MIGRATE_LOCK_KEY "8175009025984851303"

void qc_migration_checksum(const char *sql, size_t len, char out[65]) {
    unsigned char h[crypto_generichash_BYTES];
    crypto_generichash(h, sizeof h, (const unsigned char *)sql, len, NULL, 0);
    sodium_bin2hex(out, 65, h, sizeof h);
}

/* Checksums of earlier texts of applied migrations whose later edits changed comments only (a
 * comment's words, never a statement): a database that applied the earlier text has the same
 * schema, so its recorded checksum is accepted. Each row was computed from the file as it was
 * (git history of schema/) with qc_migration_checksum. */
static const struct {
    int version;
    const char *checksum;
} superseded[] = {
    {20, "0da9b194c13d9c93f02f6da4c5bfea77a970fa8b78613d67ef2dcf7bcc34d084"},
    {40, "d67f621163f37387c06eba2559c3a68d360d99d1130118bafafc801d75813611"},
    {70, "07047724088bcdc881d0cb1dbf36de41f7901cf19101617687d9e3b6c7a510af"},
    {80, "1b8ed7d9ebcc2804c024312ffb2b3fa3e371ed847b131b223e2d09ba446bfb04"},
};

/* Whether checksum `sum` recorded for migration `version` is an accepted earlier text. */
static bool is_superseded(int version, const char *sum) {
    for (size_t i = 0; i < sizeof superseded / sizeof superseded[0]; i++)
        if (superseded[i].version == version && strcmp(superseded[i].checksum, sum) == 0)
            return true;
    return false;
}

/* Runs a command with no result rows; QS_EDB with the server's message on failure. */
static qs_status exec_cmd(PGconn *conn, const char *sql, const char *what, qs_error *err) {
    PGresult *r = PQexec(conn, sql);
    ExecStatusType s = PQresultStatus(r);
    qs_status st = QS_OK;
    if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK)
        st = qs_error_set(err, QS_EDB, "%s: %s", what, PQerrorMessage(conn));
    PQclear(r);
    return st;
}

/* 1-based line of the 1-based character position pos in sql (PG_DIAG_STATEMENT_POSITION
 * counts characters; the files are ASCII, so characters are bytes). 0 when unknown. */
static int line_of_position(const char *sql, size_t len, long pos) {
    if (pos <= 0) return 0;
    int line = 1;
    for (size_t i = 0; i < len && (long)i < pos - 1; i++)
        if (sql[i] == '\n') line++;
    return line;
}

static qs_status apply_one(PGconn *conn, const qc_migration *m, const char *sum, qs_error *err) {
    qs_status st = exec_cmd(conn, "BEGIN", m->name, err);
    if (st) return st;
    PGresult *r = PQexec(conn, m->sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK) {
        const char *pos = PQresultErrorField(r, PG_DIAG_STATEMENT_POSITION);
        int line = line_of_position(m->sql, m->len, pos ? strtol(pos, NULL, 10) : 0);
        st = qs_error_set(err, QS_EDB, "schema/%s:%d: migration %d failed: %s", m->name, line,
                          m->version, PQresultErrorMessage(r));
        PQclear(r);
        qs_error ignored;
        exec_cmd(conn, "ROLLBACK", m->name, &ignored);
        return st;
    }
    PQclear(r);
    char ver[16];
    snprintf(ver, sizeof ver, "%d", m->version);
    const char *params[] = {ver, m->name, sum};
    r = PQexecParams(conn,
                     "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
                     3, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
        st = qs_error_set(err, QS_EDB, "schema/%s: recording migration %d: %s", m->name, m->version,
                          PQresultErrorMessage(r));
        PQclear(r);
        qs_error ignored;
        exec_cmd(conn, "ROLLBACK", m->name, &ignored);
        return st;
    }
    PQclear(r);
    return exec_cmd(conn, "COMMIT", m->name, err);
}

/* Checks the recorded migrations against the list; then applies the missing ones. Called
 * with the advisory lock held. */
static qs_status migrate_locked(PGconn *conn, const qc_migration *list, size_t n, int *applied,
                                qs_error *err) {
    /* Create the table only when missing (not IF NOT EXISTS: that prints a NOTICE on every
     * run into the caller's notice processor). */
    PGresult *exists = PQexec(conn, "SELECT to_regclass('schema_migrations') IS NOT NULL");
    if (PQresultStatus(exists) != PGRES_TUPLES_OK) {
        qs_status st =
            qs_error_set(err, QS_EDB, "looking for schema_migrations: %s", PQerrorMessage(conn));
        PQclear(exists);
        return st;
    }
    bool have_table = PQgetvalue(exists, 0, 0)[0] == 't';
    PQclear(exists);
    qs_status st = have_table ? QS_OK
                              : exec_cmd(conn,
                                         "CREATE TABLE schema_migrations ("
                                         " version integer PRIMARY KEY,"
                                         " name text NOT NULL,"
                                         " checksum text NOT NULL,"
                                         " applied_at timestamptz NOT NULL DEFAULT now())",
                                         "creating schema_migrations", err);
    if (st) return st;
    PGresult *r =
        PQexec(conn, "SELECT version, name, checksum FROM schema_migrations ORDER BY version");
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        st = qs_error_set(err, QS_EDB, "reading schema_migrations: %s", PQerrorMessage(conn));
        PQclear(r);
        return st;
    }
    int rows = PQntuples(r);
    bool *done = calloc(n ? n : 1, sizeof *done);
    if (!done) {
        PQclear(r);
        return qs_error_set(err, QS_ENOMEM, "migrate: out of memory");
    }
    for (int i = 0; i < rows && !st; i++) {
        int ver = atoi(PQgetvalue(r, i, 0));
        const char *name = PQgetvalue(r, i, 1), *sum = PQgetvalue(r, i, 2);
        size_t k = 0;
        while (k < n && list[k].version != ver)
            k++;
        if (k == n) {
            st = qs_error_set(err, QS_ESTATE,
                              "schema_migrations: migration %d (%s) is applied in the database "
                              "but unknown to this program: the database is newer than qsweep",
                              ver, name);
            break;
        }
        char want[65];
        qc_migration_checksum(list[k].sql, list[k].len, want);
        if (strcmp(want, sum) != 0 && !is_superseded(ver, sum))
            st = qs_error_set(err, QS_ESTATE,
                              "schema/%s: migration %d was applied with checksum %s but the file "
                              "now has checksum %s; applied migrations must not be edited "
                              "(add a new numbered migration instead)",
                              list[k].name, ver, sum, want);
        done[k] = true;
    }
    PQclear(r);
    for (size_t k = 0; k < n && !st; k++) {
        if (done[k]) continue;
        char sum[65];
        qc_migration_checksum(list[k].sql, list[k].len, sum);
        st = apply_one(conn, &list[k], sum, err);
        if (!st && applied) (*applied)++;
    }
    free(done);
    return st;
}

/* Whether the database has applied exactly the migrations of list, with their checksums (or
 * a superseded one): then nothing is to be done and no lock is needed. Any doubt (no table, a
 * failed query, a difference) says false, and the locked path decides and explains. */
static bool all_applied(PGconn *conn, const qc_migration *list, size_t n) {
    PGresult *r = PQexec(conn, "SELECT to_regclass('schema_migrations') IS NOT NULL");
    bool have = PQresultStatus(r) == PGRES_TUPLES_OK && PQgetvalue(r, 0, 0)[0] == 't';
    PQclear(r);
    if (!have) return false;
    r = PQexec(conn, "SELECT version, checksum FROM schema_migrations ORDER BY version");
    bool same = PQresultStatus(r) == PGRES_TUPLES_OK && (size_t)PQntuples(r) == n;
    for (size_t k = 0; same && k < n; k++) {
        char want[65];
        qc_migration_checksum(list[k].sql, list[k].len, want);
        const char *sum = PQgetvalue(r, (int)k, 1);
        same = atoi(PQgetvalue(r, (int)k, 0)) == list[k].version &&
               (strcmp(want, sum) == 0 || is_superseded(list[k].version, sum));
    }
    PQclear(r);
    return same;
}

qs_status qc_migrate_list(PGconn *conn, const qc_migration *list, size_t n, int *applied,
                          qs_error *err) {
    if (applied) *applied = 0;
    for (size_t k = 1; k < n; k++)
        if (list[k].version <= list[k - 1].version)
            return qs_error_set(err, QS_EINVAL,
                                "migrations not sorted by increasing version: %s (%d) after %s "
                                "(%d)",
                                list[k].name, list[k].version, list[k - 1].name,
                                list[k - 1].version);
    if (sodium_init() < 0) return qs_error_set(err, QS_EINVAL, "migrate: sodium_init failed");
    /* An up-to-date database is the common case (every store open): it takes no lock, so no
     * session holding the migration's advisory key (any login may take one) holds up a
     * coordinator's start. */
    if (all_applied(conn, list, n)) return QS_OK;
    qs_status st =
        exec_cmd(conn, "SELECT pg_advisory_lock(" MIGRATE_LOCK_KEY ")", "migration lock", err);
    if (st) return st;
    st = migrate_locked(conn, list, n, applied, err);
    qs_error ignored;
    exec_cmd(conn, "SELECT pg_advisory_unlock(" MIGRATE_LOCK_KEY ")", "migration unlock", &ignored);
    return st;
}

qs_status qc_migrate(PGconn *conn, int *applied, qs_error *err) {
    return qc_migrate_list(conn, qc_schema_migrations, qc_schema_migrations_count, applied, err);
}
