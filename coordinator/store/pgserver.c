/* A private PostgreSQL cluster: initdb, pg_ctl start/stop, SIGKILL. Contract: pgserver.h. */
#include "pgserver.h"
#include "clock.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
#include <grp.h>
#include <libpq-fe.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Port number used for the socket file name (.s.PGSQL.<port>); no TCP port is opened. */
#define PGSERVER_PORT 5432
/* Tail of a command's output kept for an error message, in bytes. */
#define OUTPUT_TAIL 700

struct qc_pgserver {
    char bindir[PATH_MAX];
    char data_dir[PATH_MAX];
    char sock_dir[PATH_MAX];
    char temp_root[PATH_MAX / 2]; /* <base>/qspg-XXXXXX; "" unless made by _start_temp */
    bool sock_dir_is_temp;        /* sock_dir was made under /tmp and is ours to remove */
    int port;
    bool drop_privileges; /* euid 0: run commands as run_uid/run_gid */
    uid_t run_uid;
    gid_t run_gid;
    char conninfo[PATH_MAX + 96];
};

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

/* Locates initdb/pg_ctl: `pg_config --bindir` first, else the highest-numbered
 * /usr/lib/postgresql/NN/bin that holds initdb. */
static qs_status find_bindir(char *out, size_t cap, qs_error *err) {
    FILE *p = popen("pg_config --bindir 2>/dev/null", "r");
    if (p) {
        char line[PATH_MAX];
        bool got = fgets(line, sizeof line, p) != NULL;
        pclose(p);
        if (got) {
            line[strcspn(line, "\r\n")] = '\0';
            char probe[PATH_MAX + 16];
            snprintf(probe, sizeof probe, "%s/initdb", line);
            if (access(probe, X_OK) == 0 && strlen(line) < cap) {
                strcpy(out, line);
                return QS_OK;
            }
        }
    }
    glob_t g;
    int rc = glob("/usr/lib/postgresql/*/bin/initdb", 0, NULL, &g);
    if (rc == 0 && g.gl_pathc > 0) {
        long best_ver = -1;
        const char *best = g.gl_pathv[0];
        for (size_t i = 0; i < g.gl_pathc; i++) {
            long ver = strtol(g.gl_pathv[i] + strlen("/usr/lib/postgresql/"), NULL, 10);
            if (ver > best_ver) {
                best_ver = ver;
                best = g.gl_pathv[i];
            }
        }
        size_t n = strlen(best) - strlen("/initdb");
        if (n < cap) {
            memcpy(out, best, n);
            out[n] = '\0';
            globfree(&g);
            return QS_OK;
        }
    }
    if (rc == 0) globfree(&g);
    return qs_error_set(err, QS_EIO,
                        "PostgreSQL server binaries not found: `pg_config --bindir` has no initdb "
                        "and no /usr/lib/postgresql/*/bin/initdb exists");
}

/* Chooses the unprivileged account to run the server as when we are root: `qsweep`
 * (created as a system user if missing), else `nobody`. */
static qs_status choose_run_user(qc_pgserver *srv, qs_error *err) {
    srv->drop_privileges = geteuid() == 0;
    if (!srv->drop_privileges) return QS_OK;
    struct passwd *pw = getpwnam("qsweep");
    /* Test binaries started together may race to create the user: useradd then fails on
     * the locked /etc/passwd, and a retry finds the user the other one made. A useradd that
     * keeps failing falls back to nobody below. */
    for (int tries = 0; !pw && tries < 5; tries++) {
        if (tries) sleep_ms(200);
        int rc = system("useradd --system --no-create-home --shell /usr/sbin/nologin qsweep "
                        ">/dev/null 2>&1");
        (void)rc;
        pw = getpwnam("qsweep");
    }
    if (!pw) pw = getpwnam("nobody");
    if (!pw)
        return qs_error_set(err, QS_EIO,
                            "running as root and neither user `qsweep` (useradd failed) nor "
                            "`nobody` exists to run PostgreSQL as");
    srv->run_uid = pw->pw_uid;
    srv->run_gid = pw->pw_gid;
    return QS_OK;
}

/* Runs argv[0] (absolute path) with the given arguments, as the unprivileged user when
 * srv->drop_privileges, with stdout+stderr captured. On a failure to run or a non-zero
 * exit returns QS_EIO naming the command line and the tail of its output. */
static qs_status run_cmd(const qc_pgserver *srv, char *const argv[], qs_error *err) {
    char cmdline[1024] = "";
    size_t used = 0;
    for (int i = 0; argv[i] && used < sizeof cmdline - 1; i++)
        used +=
            (size_t)snprintf(cmdline + used, sizeof cmdline - used, "%s%s", i ? " " : "", argv[i]);
    int pipefd[2];
    if (pipe(pipefd) != 0)
        return qs_error_set(err, QS_EIO, "%s: pipe: %s", cmdline, strerror(errno));
    pid_t pid = fork();
    if (pid < 0) {
        close(pipefd[0]);
        close(pipefd[1]);
        return qs_error_set(err, QS_EIO, "%s: fork: %s", cmdline, strerror(errno));
    }
    if (pid == 0) {
        /* Child: only async-signal-safe calls until execv (the caller may be threaded). Its
           own process group: a Ctrl-C at the terminal goes to the caller alone, which decides
           (qsweep run finishes starting the cluster, then stops it), instead of killing
           initdb or pg_ctl half-way through. */
        setpgid(0, 0);
        dup2(pipefd[1], STDOUT_FILENO);
        dup2(pipefd[1], STDERR_FILENO);
        close(pipefd[0]);
        close(pipefd[1]);
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0) dup2(devnull, STDIN_FILENO);
        if (srv->drop_privileges) {
            if (setgroups(0, NULL) != 0 || setgid(srv->run_gid) != 0 || setuid(srv->run_uid) != 0) {
                static const char msg[] = "cannot drop privileges (setgid/setuid failed)\n";
                ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
                (void)w;
                _exit(126);
            }
        }
        execv(argv[0], argv);
        static const char msg[] = "execv failed\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)w;
        _exit(127);
    }
    close(pipefd[1]);
    /* Keep the last OUTPUT_TAIL bytes in a ring so long logs still show their end. */
    char ring[OUTPUT_TAIL];
    size_t total = 0;
    char buf[512];
    ssize_t n;
    while ((n = read(pipefd[0], buf, sizeof buf)) != 0) {
        if (n < 0) {
            if (errno == EINTR) continue;
            break;
        }
        for (ssize_t i = 0; i < n; i++)
            ring[(total + (size_t)i) % OUTPUT_TAIL] = buf[i];
        total += (size_t)n;
    }
    close(pipefd[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR)
            return qs_error_set(err, QS_EIO, "%s: waitpid: %s", cmdline, strerror(errno));
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return QS_OK;
    char out[OUTPUT_TAIL + 1];
    size_t keep = total < OUTPUT_TAIL ? total : OUTPUT_TAIL;
    for (size_t i = 0; i < keep; i++)
        out[i] = ring[(total - keep + i) % OUTPUT_TAIL];
    out[keep] = '\0';
    if (WIFEXITED(status))
        return qs_error_set(err, QS_EIO, "`%s` exited with status %d: %s", cmdline,
                            WEXITSTATUS(status), out);
    return qs_error_set(err, QS_EIO, "`%s` killed by signal %d: %s", cmdline,
                        WIFSIGNALED(status) ? WTERMSIG(status) : -1, out);
}

static bool file_exists(const char *dir, const char *name) {
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

/* Whether pid names a live process. A zombie counts as dead: a killed postmaster is not our
 * child (pg_ctl daemonised it) and stays a zombie until init reaps it, which can take
 * seconds in a container. State letter from /proc/<pid>/stat (proc(5)). */
static bool process_alive(pid_t pid, bool *zombie) {
    if (zombie) *zombie = false;
    if (pid <= 0) return false;
    if (kill(pid, 0) != 0 && errno == ESRCH) return false;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return true; /* no /proc: trust kill() */
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *close_paren = strrchr(buf, ')');
    if (close_paren && close_paren[1] == ' ' && (close_paren[2] == 'Z' || close_paren[2] == 'X')) {
        if (zombie) *zombie = true;
        return false;
    }
    return true;
}

/* Reads postmaster.pid (PostgreSQL docs, "Database File Layout": line 1 pid, line 4 port,
 * line 5 socket directory). Returns the pid when the file exists and the process is alive,
 * else 0. Optionally returns port and socket directory. */
static pid_t read_postmaster_pid(const char *data_dir, int *port, char *sock_dir, size_t cap) {
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/postmaster.pid", data_dir);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[PATH_MAX];
    pid_t pid = 0;
    for (int lineno = 1; lineno <= 5 && fgets(line, sizeof line, f); lineno++) {
        line[strcspn(line, "\r\n")] = '\0';
        if (lineno == 1) pid = (pid_t)strtol(line, NULL, 10);
        if (lineno == 4 && port) *port = (int)strtol(line, NULL, 10);
        if (lineno == 5 && sock_dir && strlen(line) < cap) strcpy(sock_dir, line);
    }
    fclose(f);
    return process_alive(pid, NULL) ? pid : 0;
}

static qs_status chown_to_run_user(const qc_pgserver *srv, const char *path, qs_error *err) {
    if (!srv->drop_privileges) return QS_OK;
    if (chown(path, srv->run_uid, srv->run_gid) != 0)
        return qs_error_set(err, QS_EIO, "%s: chown to uid %d: %s", path, (int)srv->run_uid,
                            strerror(errno));
    return QS_OK;
}

/* Picks the socket directory: the data directory when "<dir>/.s.PGSQL.<port>" fits in
 * sockaddr_un.sun_path, else a fresh /tmp/qspgsock-XXXXXX. */
static qs_status choose_sock_dir(qc_pgserver *srv, qs_error *err) {
    struct sockaddr_un sa;
    if (strlen(srv->data_dir) + strlen("/.s.PGSQL.65535") < sizeof sa.sun_path) {
        strcpy(srv->sock_dir, srv->data_dir);
        return QS_OK;
    }
    strcpy(srv->sock_dir, "/tmp/qspgsock-XXXXXX");
    if (!mkdtemp(srv->sock_dir))
        return qs_error_set(err, QS_EIO, "mkdtemp /tmp/qspgsock-XXXXXX: %s", strerror(errno));
    srv->sock_dir_is_temp = true;
    return chown_to_run_user(srv, srv->sock_dir, err);
}

/* Appends the settings that make the cluster private and predictable to postgresql.conf,
 * once, after initdb. The socket directory is passed on each start instead (pg_ctl -o), so a
 * temporary one may change between runs. */
static qs_status write_settings(const qc_pgserver *srv, qs_error *err) {
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/postgresql.conf", srv->data_dir);
    FILE *f = fopen(path, "a");
    if (!f) return qs_error_set(err, QS_EIO, "%s: open for append: %s", path, strerror(errno));
    fputs("\n# qsweep private cluster (coordinator/store/pgserver.c)\n"
          "listen_addresses = ''\n"
          "unix_socket_permissions = 0700\n"
          "max_connections = 100\n"
          "logging_collector = off\n"
          "log_min_messages = warning\n"
          "# crash recovery (after kill -9) syncs the data directory with one syncfs() instead\n"
          "# of an fsync() per file, which took seconds (PostgreSQL 14+, Linux)\n"
          "recovery_init_sync_method = syncfs\n",
          f);
    if (fclose(f) != 0) return qs_error_set(err, QS_EIO, "%s: write: %s", path, strerror(errno));
    return QS_OK;
}

/* Runs initdb on an empty data directory: trust auth (local socket only, no TCP is
 * opened), UTF8, C locale so results do not depend on the environment. */
static qs_status init_cluster(qc_pgserver *srv, qs_error *err) {
    DIR *d = opendir(srv->data_dir);
    if (!d) return qs_error_set(err, QS_EIO, "%s: opendir: %s", srv->data_dir, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            /* Report before closedir: e points into the DIR's buffer. */
            qs_status st = qs_error_set(err, QS_EINVAL,
                                        "%s: not a PostgreSQL data directory (no PG_VERSION) "
                                        "and not empty (holds %s); refusing to initdb over it",
                                        srv->data_dir, e->d_name);
            closedir(d);
            return st;
        }
    }
    closedir(d);
    qs_status st = chown_to_run_user(srv, srv->data_dir, err);
    if (st) return st;
    char initdb[PATH_MAX + 16], dopt[PATH_MAX + 4];
    snprintf(initdb, sizeof initdb, "%s/initdb", srv->bindir);
    snprintf(dopt, sizeof dopt, "%s", srv->data_dir);
    char *argv[] = {initdb,       "-D",
                    dopt,         "-U",
                    "qsweep",     "--auth=trust",
                    "-E",         "UTF8",
                    "--locale=C", "--no-instructions",
                    NULL};
    st = run_cmd(srv, argv, err);
    if (st) return qs_error_wrap(err, "initdb of %s", srv->data_dir);
    return write_settings(srv, err);
}

/* Appends the last lines of server.log to err, which is where a failed start explains
 * itself. */
static void append_server_log(const qc_pgserver *srv, qs_error *err) {
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/server.log", srv->data_dir);
    FILE *f = fopen(path, "r");
    if (!f || !err) {
        if (f) fclose(f);
        return;
    }
    char tail[400] = "";
    if (fseek(f, -(long)(sizeof tail - 1), SEEK_END) != 0) rewind(f);
    size_t n = fread(tail, 1, sizeof tail - 1, f);
    tail[n] = '\0';
    fclose(f);
    size_t used = strlen(err->msg);
    snprintf(err->msg + used, sizeof err->msg - used, " | %s: ...%s", path, tail);
}

static qs_status pg_ctl_start(qc_pgserver *srv, qs_error *err) {
    char pg_ctl[PATH_MAX + 16], logpath[PATH_MAX + 32];
    snprintf(pg_ctl, sizeof pg_ctl, "%s/pg_ctl", srv->bindir);
    snprintf(logpath, sizeof logpath, "%s/server.log", srv->data_dir);
    /* pg_ctl hands -o to a shell: quote the directory. */
    char opts[PATH_MAX + 64];
    snprintf(opts, sizeof opts, "-k '%s' -p %d", srv->sock_dir, srv->port);
    char *argv[] = {pg_ctl,        "start", "-w",    "-t", "60", "-D",
                    srv->data_dir, "-l",    logpath, "-o", opts, NULL};
    qs_status st = run_cmd(srv, argv, err);
    if (st) append_server_log(srv, err);
    return st;
}

/* Creates the `qsweep` database when missing, through the `postgres` maintenance db. */
static qs_status ensure_database(qc_pgserver *srv, qs_error *err) {
    char ci[PATH_MAX + 96];
    snprintf(ci, sizeof ci, "host=%s port=%d user=qsweep dbname=postgres", srv->sock_dir,
             srv->port);
    PGconn *c = PQconnectdb(ci);
    if (PQstatus(c) != CONNECTION_OK) {
        qs_status st = qs_error_set(err, QS_EDB, "connect %s: %s", ci, PQerrorMessage(c));
        PQfinish(c);
        return st;
    }
    PGresult *r = PQexec(c, "SELECT 1 FROM pg_database WHERE datname = 'qsweep'");
    bool exists = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
    PQclear(r);
    qs_status st = QS_OK;
    if (!exists) {
        r = PQexec(c, "CREATE DATABASE qsweep");
        if (PQresultStatus(r) != PGRES_COMMAND_OK)
            st = qs_error_set(err, QS_EDB, "%s: CREATE DATABASE qsweep: %s", ci,
                              PQresultErrorMessage(r));
        PQclear(r);
    }
    PQfinish(c);
    return st;
}

static qs_status start_in(qc_pgserver *srv, qs_error *err) {
    qs_status st = find_bindir(srv->bindir, sizeof srv->bindir, err);
    if (st) return st;
    if ((st = choose_run_user(srv, err))) return st;
    srv->port = PGSERVER_PORT;
    pid_t pid = read_postmaster_pid(srv->data_dir, &srv->port, srv->sock_dir, sizeof srv->sock_dir);
    if (pid > 0) {
        /* Adopt a running server: it tells us where its socket is. */
        snprintf(srv->conninfo, sizeof srv->conninfo, "host=%s port=%d user=qsweep dbname=qsweep",
                 srv->sock_dir, srv->port);
        return ensure_database(srv, err);
    }
    if ((st = choose_sock_dir(srv, err))) return st;
    if (!file_exists(srv->data_dir, "PG_VERSION") && (st = init_cluster(srv, err))) return st;
    if ((st = pg_ctl_start(srv, err))) return st;
    snprintf(srv->conninfo, sizeof srv->conninfo, "host=%s port=%d user=qsweep dbname=qsweep",
             srv->sock_dir, srv->port);
    return ensure_database(srv, err);
}

qs_status qc_pgserver_start(const char *data_dir, qc_pgserver **out, qs_error *err) {
    *out = NULL;
    if (!data_dir || !*data_dir) return qs_error_set(err, QS_EINVAL, "pgserver: data_dir is empty");
    qc_pgserver *srv = calloc(1, sizeof *srv);
    if (!srv) return qs_error_set(err, QS_ENOMEM, "pgserver: out of memory");
    if (mkdir(data_dir, 0700) != 0 && errno != EEXIST) {
        qs_status st = qs_error_set(err, QS_EIO, "%s: mkdir: %s", data_dir, strerror(errno));
        free(srv);
        return st;
    }
    if (!realpath(data_dir, srv->data_dir)) {
        qs_status st = qs_error_set(err, QS_EINVAL, "%s: realpath: %s", data_dir, strerror(errno));
        free(srv);
        return st;
    }
    qs_status st = start_in(srv, err);
    if (st) {
        qc_pgserver_destroy(srv);
        return st;
    }
    *out = srv;
    return QS_OK;
}

/* Whether /dev/shm is writable with at least 1 GiB free: a cluster takes ~40 MiB before any
 * data, and containers often mount a 64 MiB /dev/shm that PostgreSQL also needs for its
 * dynamic shared memory. */
static bool roomy_tmpfs(void) {
    struct statvfs vfs;
    if (access("/dev/shm", W_OK | X_OK) != 0 || statvfs("/dev/shm", &vfs) != 0) return false;
    return (unsigned long long)vfs.f_bavail * vfs.f_frsize >= (1ULL << 30);
}

static void reap_orphans(const char *base, const qc_pgserver *like);

qs_status qc_pgserver_start_temp(qc_pgserver **out, qs_error *err) {
    *out = NULL;
    qc_pgserver *srv = calloc(1, sizeof *srv);
    if (!srv) return qs_error_set(err, QS_ENOMEM, "pgserver: out of memory");
    /* tmpfs makes initdb, crash recovery and removal fast; the data is thrown away anyway. */
    const char *base = getenv("QSWEEP_PG_TMPDIR");
    if (!base || !*base) base = roomy_tmpfs() ? "/dev/shm" : "/tmp";
    if (strlen(base) > sizeof srv->temp_root - 16) {
        free(srv);
        return qs_error_set(err, QS_EINVAL, "QSWEEP_PG_TMPDIR %s: path too long", base);
    }
    snprintf(srv->temp_root, sizeof srv->temp_root, "%s/qspg-XXXXXX", base);
    if (!mkdtemp(srv->temp_root)) {
        qs_status st =
            qs_error_set(err, QS_EIO, "mkdtemp %s/qspg-XXXXXX: %s", base, strerror(errno));
        free(srv);
        return st;
    }
    /* The owner's pid, so a later start can tell an orphan (its test was killed) from a
     * cluster in use. */
    char owner[sizeof srv->temp_root + 16];
    snprintf(owner, sizeof owner, "%s/owner.pid", srv->temp_root);
    FILE *f = fopen(owner, "w");
    qs_status st = f ? QS_OK : qs_error_set(err, QS_EIO, "%s: %s", owner, strerror(errno));
    if (f) {
        fprintf(f, "%d\n", (int)getpid());
        if (fclose(f) != 0) st = qs_error_set(err, QS_EIO, "%s: %s", owner, strerror(errno));
    }
    if (!st) st = choose_run_user(srv, err);
    if (!st) st = find_bindir(srv->bindir, sizeof srv->bindir, err);
    if (!st) reap_orphans(base, srv);
    if (!st) st = chown_to_run_user(srv, srv->temp_root, err);
    if (!st) {
        snprintf(srv->data_dir, sizeof srv->data_dir, "%s/data", srv->temp_root);
        if (mkdir(srv->data_dir, 0700) != 0)
            st = qs_error_set(err, QS_EIO, "%s: mkdir: %s", srv->data_dir, strerror(errno));
    }
    if (!st) st = start_in(srv, err);
    if (st) {
        qc_pgserver_destroy(srv);
        return st;
    }
    *out = srv;
    return QS_OK;
}

const char *qc_pgserver_conninfo(const qc_pgserver *srv) {
    return srv->conninfo;
}

const char *qc_pgserver_data_dir(const qc_pgserver *srv) {
    return srv->data_dir;
}

pid_t qc_pgserver_pid(const qc_pgserver *srv) {
    return read_postmaster_pid(srv->data_dir, NULL, NULL, 0);
}

/* Waits up to 10 s for a process that is not our child to disappear. */
static bool wait_gone(pid_t pid) {
    for (int i = 0; i < 1000 && process_alive(pid, NULL); i++)
        sleep_ms(10);
    return !process_alive(pid, NULL);
}

/* pg_ctl stop in the given shutdown mode ("fast": roll back, checkpoint; "immediate": no
 * checkpoint, crash recovery at next start), then waits for the postmaster to exit. */
static qs_status stop_mode(qc_pgserver *srv, char *mode, qs_error *err) {
    pid_t pid = read_postmaster_pid(srv->data_dir, NULL, NULL, 0);
    if (pid == 0) return QS_OK;
    char pg_ctl[PATH_MAX + 16];
    snprintf(pg_ctl, sizeof pg_ctl, "%s/pg_ctl", srv->bindir);
    char *argv[] = {pg_ctl, "stop", "-w", "-t", "60", "-m", mode, "-D", srv->data_dir, NULL};
    qs_status st = run_cmd(srv, argv, err);
    if (st) return st;
    /* pg_ctl returns once postmaster.pid is gone; the process may still be exiting. */
    if (!wait_gone(pid))
        return qs_error_set(err, QS_EIO, "postmaster %d still alive 10 s after pg_ctl stop",
                            (int)pid);
    return QS_OK;
}

qs_status qc_pgserver_stop(qc_pgserver *srv, qs_error *err) {
    return stop_mode(srv, "fast", err);
}

/* Removes the lock file at path when the pid on its first line is a zombie. */
static void remove_zombie_lock(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return;
    long pid = 0;
    if (fscanf(f, "%ld", &pid) != 1) pid = 0;
    fclose(f);
    bool zombie = false;
    if (pid > 0 && !process_alive((pid_t)pid, &zombie) && zombie) unlink(path);
}

/* A killed postmaster that is still a zombie makes the new one refuse to start ("lock file
 * ... already exists": PostgreSQL checks the old pid in postmaster.pid and in the socket's
 * .s.PGSQL.<port>.lock with kill(pid, 0)). The process is dead, so those lock files are
 * stale: remove them. Orphaned backends still attached to the old shared memory are
 * detected by PostgreSQL itself. */
static void remove_zombie_locks(const qc_pgserver *srv) {
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/postmaster.pid", srv->data_dir);
    remove_zombie_lock(path);
    snprintf(path, sizeof path, "%s/.s.PGSQL.%d.lock", srv->sock_dir, srv->port);
    remove_zombie_lock(path);
}

qs_status qc_pgserver_resume(qc_pgserver *srv, qs_error *err) {
    if (read_postmaster_pid(srv->data_dir, NULL, NULL, 0) > 0) return QS_OK;
    /* After SIGKILL the old backends may still hold the shared memory segment for a moment;
     * the postmaster then refuses to start ("pre-existing shared memory block is still in
     * use"). Retry until they have gone. */
    qs_status st = QS_OK;
    int64_t t0 = qs_clock_ms();
    for (;;) {
        remove_zombie_locks(srv);
        st = pg_ctl_start(srv, err);
        if (st == QS_OK) return QS_OK;
        if (qs_clock_ms() - t0 >= 30000) break; /* each pg_ctl start waits up to 60 s itself */
        sleep_ms(500);
    }
    return qs_error_wrap(err, "%s: no successful start in 30 s of retries", srv->data_dir);
}

qs_status qc_pgserver_restart(qc_pgserver *srv, qs_error *err) {
    qs_status st = qc_pgserver_stop(srv, err);
    if (st) return st;
    return qc_pgserver_resume(srv, err);
}

qs_status qc_pgserver_kill(qc_pgserver *srv, qs_error *err) {
    pid_t pid = read_postmaster_pid(srv->data_dir, NULL, NULL, 0);
    if (pid == 0)
        return qs_error_set(err, QS_ESTATE, "%s: no running postmaster to kill", srv->data_dir);
    if (kill(pid, SIGKILL) != 0)
        return qs_error_set(err, QS_EIO, "kill -9 postmaster %d: %s", (int)pid, strerror(errno));
    /* The postmaster is not our child (pg_ctl daemonised it): poll until it is gone. */
    if (!wait_gone(pid))
        return qs_error_set(err, QS_EIO, "postmaster %d still alive 10 s after SIGKILL", (int)pid);
    return QS_OK;
}

static int remove_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
    (void)sb;
    (void)type;
    (void)ftw;
    return remove(path);
}

/* Removes temporary clusters under base (qspg-XXXXXX with an owner.pid) whose owner process
 * is gone: a test binary killed by a timeout or a crash leaves its server running and its
 * tree behind. A tree without owner.pid (being created, or made by an older qsweep) is left
 * alone, and so is one whose owner is alive. `like` supplies the binaries and the user. */
static void reap_orphans(const char *base, const qc_pgserver *like) {
    DIR *d = opendir(base);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "qspg-", 5) != 0 || strlen(e->d_name) != 11) continue;
        qc_pgserver *orphan = calloc(1, sizeof *orphan);
        if (!orphan) break;
        *orphan = *like;
        orphan->sock_dir_is_temp = false;
        snprintf(orphan->temp_root, sizeof orphan->temp_root, "%s/%s", base, e->d_name);
        if (strcmp(orphan->temp_root, like->temp_root) != 0) {
            char owner[sizeof orphan->temp_root + 16];
            snprintf(owner, sizeof owner, "%s/owner.pid", orphan->temp_root);
            FILE *f = fopen(owner, "r");
            long pid = 0;
            if (f) {
                if (fscanf(f, "%ld", &pid) != 1) pid = 0;
                fclose(f);
            }
            if (pid > 0 && !process_alive((pid_t)pid, NULL)) {
                snprintf(orphan->data_dir, sizeof orphan->data_dir, "%s/data", orphan->temp_root);
                /* Remove the tree only with no server in it: one this process can see and
                 * stop, or none at all. A postmaster.pid naming a process we cannot see may
                 * belong to another PID namespace sharing this directory: leave it. */
                qs_error ignored;
                bool stopped = read_postmaster_pid(orphan->data_dir, NULL, NULL, 0) > 0 &&
                               stop_mode(orphan, "immediate", &ignored) == QS_OK;
                if (stopped || !file_exists(orphan->data_dir, "postmaster.pid"))
                    nftw(orphan->temp_root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
            }
        }
        free(orphan);
    }
    closedir(d);
}

void qc_pgserver_destroy(qc_pgserver *srv) {
    if (!srv) return;
    if (srv->bindir[0]) {
        /* A temporary cluster is deleted next: skip the shutdown checkpoint. */
        qs_error ignored;
        stop_mode(srv, srv->temp_root[0] ? "immediate" : "fast", &ignored);
    }
    if (srv->sock_dir_is_temp) rmdir(srv->sock_dir);
    if (srv->temp_root[0]) nftw(srv->temp_root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(srv);
}
