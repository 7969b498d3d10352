/* The private PostgreSQL cluster of `qsweep run` and `qsweep db start|stop` (cli.h). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

qs_status qsweep_make_dirs(const char *path, qs_error *err) {
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return qs_error_set(err, QS_EINVAL, "path too long: %s", path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == 0) {
            char c = *p;
            *p = 0;
            if (mkdir(buf, c ? 0755 : 0700) != 0 && errno != EEXIST)
                return qs_error_set(err, QS_EIO, "mkdir %s: %s", buf, strerror(errno));
            *p = c;
            if (!c) return QS_OK;
        }
    }
}

qs_status qsweep_xdg_path(const char *var, const char *fallback, const char *leaf, char *out,
                          size_t cap, qs_error *err) {
    const char *v = getenv(var), *home = getenv("HOME");
    int n;
    if (v && *v)
        n = snprintf(out, cap, "%s/qsweep/%s", v, leaf);
    else if (home && *home)
        n = snprintf(out, cap, "%s/%s/qsweep/%s", home, fallback, leaf);
    else
        return qs_error_set(err, QS_EINVAL, "neither %s nor HOME is set", var);
    return (n > 0 && (size_t)n < cap) ? QS_OK
                                      : qs_error_set(err, QS_EINVAL, "path too long under %s", var);
}

/* As root the cluster runs as an unprivileged user (pgserver.h), which must be able to
 * traverse every directory above its data directory: add the search bit (o+x, not read)
 * where it is missing, and say so. */
static qs_status let_server_user_traverse(const char *dir, qs_error *err) {
    if (geteuid() != 0) return QS_OK;
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = strrchr(buf, '/'); p && p > buf; p = strrchr(buf, '/')) {
        *p = 0;
        struct stat sb;
        if (stat(buf, &sb) != 0)
            return qs_error_set(err, QS_EIO, "stat %s: %s", buf, strerror(errno));
        if (!(sb.st_mode & S_IXOTH)) {
            if (chmod(buf, (sb.st_mode & 07777) | S_IXOTH) != 0)
                return qs_error_set(err, QS_EIO, "chmod o+x %s: %s", buf, strerror(errno));
            fprintf(
                stderr,
                "qsweep: running as root: PostgreSQL runs as an unprivileged user, so %s is now "
                "traversable by others (o+x)\n",
                buf);
        }
    }
    return QS_OK;
}

/* Whether a postmaster runs on dir: postmaster.pid's first line names a live process (the
 * test qc_pgserver_start makes before it adopts a server). */
static int server_running(const char *dir) {
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/postmaster.pid", dir);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    long pid = 0;
    int ok = fscanf(f, "%ld", &pid) == 1;
    fclose(f);
    return ok && pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
}

qs_status qsweep_private_db_start(const char *pg_dir, qc_pgserver **out, int *adopted,
                                  qs_error *err) {
    char dir[PATH_MAX];
    qs_status st = QS_OK;
    if (pg_dir)
        snprintf(dir, sizeof dir, "%s", pg_dir);
    else
        st = qsweep_xdg_path("XDG_DATA_HOME", ".local/share", "pg", dir, sizeof dir, err);
    if (adopted) *adopted = !st && server_running(dir);
    if (!st) st = qsweep_make_dirs(dir, err);
    if (!st) st = let_server_user_traverse(dir, err);
    if (!st) st = qc_pgserver_start(dir, out, err);
    return st;
}

/* The cluster qsweep_find_db adopted: kept, never destroyed (destroying the handle would stop
 * a server someone else started; volatile: LeakSanitizer sees it reachable). */
static qc_pgserver *volatile found_private;

const char *qsweep_find_db(const char *opt, const char *cmd) {
    const char *db = qsweep_db_arg(opt);
    if (db) return db;
    char dir[PATH_MAX] = "";
    qs_error err = {0};
    if (qsweep_xdg_path("XDG_DATA_HOME", ".local/share", "pg", dir, sizeof dir, &err) == QS_OK &&
        server_running(dir)) {
        qc_pgserver *pg = NULL;
        if (qc_pgserver_start(dir, &pg, &err) == QS_OK) {
            found_private = pg;
            return qsweep_db_arg(qc_pgserver_conninfo(pg));
        }
        fprintf(stderr, "qsweep %s: the private cluster in %s: %s\n", cmd, dir, err.msg);
    }
    fprintf(stderr,
            "qsweep %s: no database: give --db CONNINFO or set QSWEEP_DB; the private cluster "
            "of qsweep run%s%s%s is not running (eval \"$(qsweep db start)\" starts it and sets "
            "QSWEEP_DB)\n",
            cmd, dir[0] ? " (" : "", dir, dir[0] ? ")" : "");
    return NULL;
}
