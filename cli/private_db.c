/* The private PostgreSQL cluster of `qsweep run` and `qsweep db start|stop` (cli.h). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <fcntl.h>
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

/* The lock and the users' file of the cluster in dir: "<dir>.lock" and "<dir>.runs", next to
 * the data directory (initdb wants that one empty, dot files included). */
static void side_path(const char *dir, const char *suffix, char *out, size_t cap) {
    snprintf(out, cap, "%s%s", dir, suffix);
}

/* Takes the exclusive flock of dir's cluster (waits for it); the descriptor, or -1 with err
 * set (QS_EIO naming the file). Closing the descriptor releases it. */
static int lock_cluster(const char *dir, qs_error *err) {
    char path[PATH_MAX + 16];
    side_path(dir, ".lock", path, sizeof path);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        qs_error_set(err, QS_EIO, "open %s: %s", path, strerror(errno));
        return -1;
    }
    while (flock(fd, LOCK_EX) != 0) {
        if (errno == EINTR) continue;
        qs_error_set(err, QS_EIO, "flock %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

enum { MAX_USERS = 256 };

/* The live pids of dir's users' file into pids (at most MAX_USERS); dead ones are dropped.
 * A missing file is no users. */
static size_t read_users(const char *dir, long *pids) {
    char path[PATH_MAX + 16];
    side_path(dir, ".runs", path, sizeof path);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = 0;
    long pid;
    while (n < MAX_USERS && fscanf(f, "%ld", &pid) == 1)
        if (pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM)) pids[n++] = pid;
    fclose(f);
    return n;
}

/* Writes pids[0..n) as dir's users' file (replaced through a rename). QS_EIO naming it. */
static qs_status write_users(const char *dir, const long *pids, size_t n, qs_error *err) {
    char path[PATH_MAX + 16], tmp[PATH_MAX + 32];
    side_path(dir, ".runs", path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return qs_error_set(err, QS_EIO, "open %s: %s", tmp, strerror(errno));
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%ld\n", pids[i]);
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        qs_status st = qs_error_set(err, QS_EIO, "write %s: %s", path, strerror(errno));
        unlink(tmp);
        return st;
    }
    return QS_OK;
}

qs_status qsweep_private_db_start(const char *pg_dir, qc_pgserver **out, int *adopted,
                                  qs_error *err) {
    char dir[PATH_MAX];
    qs_status st = QS_OK;
    if (pg_dir)
        snprintf(dir, sizeof dir, "%s", pg_dir);
    else
        st = qsweep_xdg_path("XDG_DATA_HOME", ".local/share", "pg", dir, sizeof dir, err);
    if (st) return st;
    /* the parent first: the lock lives next to the data directory */
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    if (slash && slash > parent) {
        *slash = 0;
        st = qsweep_make_dirs(parent, err);
    }
    int lock = st ? -1 : lock_cluster(dir, err);
    if (lock < 0) return st ? st : err->code;
    /* under the lock: no other run starts or stops this cluster meanwhile */
    long pids[MAX_USERS + 1];
    size_t n = read_users(dir, pids);
    int running = server_running(dir);
    if (adopted) *adopted = !running ? QSWEEP_PG_STARTED : n ? QSWEEP_PG_SHARED : QSWEEP_PG_ADOPTED;
    st = qsweep_make_dirs(dir, err);
    if (!st) st = let_server_user_traverse(dir, err);
    if (!st) st = qc_pgserver_start(dir, out, err);
    if (!st && adopted && *adopted != QSWEEP_PG_ADOPTED) {
        if (!running) n = 0; /* pids of runs whose server is gone (killed) own nothing */
        pids[n++] = (long)getpid();
        st = write_users(dir, pids, n, err);
    } else if (!st && !adopted) {
        /* qsweep db start|stop: the cluster is the user's now, no run stops it */
        st = write_users(dir, pids, 0, err);
    }
    if (st && *out && adopted && *adopted == QSWEEP_PG_STARTED) {
        qc_pgserver_destroy(*out);
        *out = NULL;
    }
    close(lock);
    return st;
}

/* Handles of clusters another run or the user still uses: kept, never destroyed (destroying
 * one stops its server; volatile: LeakSanitizer sees them reachable). */
static qc_pgserver *volatile kept_pg[4];

void qsweep_private_db_end(qc_pgserver *pg) {
    if (!pg) return;
    const char *dir = qc_pgserver_data_dir(pg);
    qs_error err = {0};
    int lock = lock_cluster(dir, &err);
    long pids[MAX_USERS];
    size_t n = read_users(dir, pids), k = 0;
    int mine = 0;
    for (size_t i = 0; i < n; i++) {
        if (pids[i] == (long)getpid())
            mine = 1;
        else
            pids[k++] = pids[i];
    }
    if (mine) write_users(dir, pids, k, &err);
    if (mine && k == 0 && lock >= 0) {
        qc_pgserver_destroy(pg); /* the last run out stops it, still under the lock */
    } else {
        for (size_t i = 0; i < sizeof kept_pg / sizeof kept_pg[0]; i++)
            if (!kept_pg[i]) {
                kept_pg[i] = pg;
                break;
            }
    }
    if (lock >= 0) close(lock);
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
            "of qsweep run%s%s%s is not running (eval \"$(%s db start)\" starts it and sets "
            "QSWEEP_DB)\n",
            cmd, dir[0] ? " (" : "", dir, dir[0] ? ")" : "", qsweep_invoked());
    return NULL;
}
