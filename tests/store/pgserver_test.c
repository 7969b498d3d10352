/* store_pgserver: the private PostgreSQL cluster starts, answers on a Unix socket only,
 * survives a restart and a kill -9 with its committed data, and is removed afterwards. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <libpq-fe.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pgserver.h"

static qc_pgserver *srv;

/* True when pid has exited: no such process, or a zombie waiting for init to reap it (the
 * postmaster is not our child). State letter from /proc/<pid>/stat, proc(5). */
static bool process_gone(pid_t pid) {
    if (kill(pid, 0) != 0) return true;
    char path[64], buf[512] = "";
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return true;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    return p && (p[2] == 'Z' || p[2] == 'X');
}

static int setup(void **state) {
    (void)state;
    qs_error err = {0};
    qs_status st = qc_pgserver_start_temp(&srv, &err);
    if (st) fprintf(stderr, "pgserver start: %s\n", err.msg);
    return st == QS_OK ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    qc_pgserver_destroy(srv);
    return 0;
}

static PGconn *connect_ok(void) {
    PGconn *c = PQconnectdb(qc_pgserver_conninfo(srv));
    if (PQstatus(c) != CONNECTION_OK) fprintf(stderr, "connect: %s\n", PQerrorMessage(c));
    assert_int_equal(PQstatus(c), CONNECTION_OK);
    return c;
}

static char *query_one(PGconn *c, const char *sql) {
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) fprintf(stderr, "%s: %s\n", sql, PQerrorMessage(c));
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    assert_int_equal(PQntuples(r), 1);
    char *v = strdup(PQgetvalue(r, 0, 0));
    PQclear(r);
    return v;
}

static void exec_ok(PGconn *c, const char *sql) {
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) fprintf(stderr, "%s: %s\n", sql, PQerrorMessage(c));
    assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
    PQclear(r);
}

static void test_listens_on_unix_socket_only(void **state) {
    (void)state;
    PGconn *c = connect_ok();
    char *listen = query_one(c, "SHOW listen_addresses");
    assert_string_equal(listen, "");
    free(listen);
    char *db = query_one(c, "SELECT current_database()");
    assert_string_equal(db, "qsweep");
    free(db);
    assert_non_null(strstr(qc_pgserver_conninfo(srv), "host=/"));
    PQfinish(c);
}

static void test_server_runs_unprivileged(void **state) {
    (void)state;
    struct stat sb;
    assert_int_equal(stat(qc_pgserver_data_dir(srv), &sb), 0);
    /* PostgreSQL refuses root; as root the cluster must belong to another user. */
    if (geteuid() == 0)
        assert_int_not_equal(sb.st_uid, 0);
    else
        assert_int_equal(sb.st_uid, geteuid());
    assert_true(qc_pgserver_pid(srv) > 0);
}

static void test_restart_keeps_data_and_drops_connections(void **state) {
    (void)state;
    PGconn *c = connect_ok();
    exec_ok(c, "CREATE TABLE IF NOT EXISTS kept (v int); INSERT INTO kept VALUES (1)");
    qs_error err = {0};
    qs_status st = qc_pgserver_restart(srv, &err);
    if (st) fprintf(stderr, "restart: %s\n", err.msg);
    assert_int_equal(st, QS_OK);
    PGresult *r = PQexec(c, "SELECT 1");
    assert_int_not_equal(PQresultStatus(r), PGRES_TUPLES_OK); /* old connection is gone */
    PQclear(r);
    PQfinish(c);
    c = connect_ok();
    char *n = query_one(c, "SELECT count(*) FROM kept WHERE v = 1");
    assert_string_equal(n, "1");
    free(n);
    PQfinish(c);
}

static void test_kill9_then_resume_recovers_committed_rows(void **state) {
    (void)state;
    PGconn *c = connect_ok();
    exec_ok(c, "CREATE TABLE crash (v int); INSERT INTO crash SELECT generate_series(1, 100)");
    PQfinish(c);
    pid_t old = qc_pgserver_pid(srv);
    qs_error err = {0};
    assert_int_equal(qc_pgserver_kill(srv, &err), QS_OK);
    assert_true(process_gone(old));
    assert_int_equal(qc_pgserver_pid(srv), 0);
    PGconn *down = PQconnectdb(qc_pgserver_conninfo(srv));
    assert_int_not_equal(PQstatus(down), CONNECTION_OK);
    PQfinish(down);
    /* A second kill has nothing to kill. */
    assert_int_equal(qc_pgserver_kill(srv, &err), QS_ESTATE);
    qs_status st = qc_pgserver_resume(srv, &err);
    if (st) fprintf(stderr, "resume: %s\n", err.msg);
    assert_int_equal(st, QS_OK);
    c = connect_ok();
    char *n = query_one(c, "SELECT sum(v) FROM crash");
    assert_string_equal(n, "5050"); /* 1 + ... + 100 */
    free(n);
    PQfinish(c);
}

static void test_stop_twice_is_fine(void **state) {
    (void)state;
    qs_error err = {0};
    assert_int_equal(qc_pgserver_stop(srv, &err), QS_OK);
    assert_int_equal(qc_pgserver_stop(srv, &err), QS_OK);
    assert_int_equal(qc_pgserver_pid(srv), 0);
    assert_int_equal(qc_pgserver_resume(srv, &err), QS_OK);
    assert_true(qc_pgserver_pid(srv) > 0);
}

static void test_start_adopts_running_server_and_nonempty_dir_is_refused(void **state) {
    (void)state;
    qs_error err = {0};
    qc_pgserver *again = NULL;
    assert_int_equal(qc_pgserver_start(qc_pgserver_data_dir(srv), &again, &err), QS_OK);
    assert_string_equal(qc_pgserver_conninfo(again), qc_pgserver_conninfo(srv));
    free(again); /* not destroyed: that would stop the shared server */

    char dir[] = "/tmp/qspgjunk-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char junk[64];
    snprintf(junk, sizeof junk, "%s/notes.txt", dir);
    FILE *f = fopen(junk, "w");
    assert_non_null(f);
    fclose(f);
    qc_pgserver *bad = NULL;
    assert_int_equal(qc_pgserver_start(dir, &bad, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "notes.txt"));
    assert_null(bad);
    unlink(junk);
    rmdir(dir);
}

static void test_failed_start_names_the_command_and_its_output(void **state) {
    (void)state;
    /* A PG_VERSION file alone is not a cluster: pg_ctl refuses it. */
    char dir[] = "/tmp/qspgbad-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[64];
    snprintf(path, sizeof path, "%s/PG_VERSION", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("15\n", f);
    fclose(f);
    qs_error err = {0};
    qc_pgserver *bad = NULL;
    assert_int_equal(qc_pgserver_start(dir, &bad, &err), QS_EIO);
    assert_null(bad);
    assert_non_null(strstr(err.msg, "pg_ctl start"));
    assert_non_null(strstr(err.msg, "exited with status"));
    assert_non_null(strstr(err.msg, dir));
    unlink(path);
    rmdir(dir);
}

/* A test binary killed before its teardown leaves its cluster running; the next temporary
 * cluster made in the same place stops and removes it. */
static void test_orphaned_temp_cluster_is_reaped(void **state) {
    (void)state;
    /* tmpfs when there is one: two initdb runs and a removal are slow on a busy disk. */
    char base[64];
    snprintf(base, sizeof base, "%s/qspgbase-XXXXXX",
             access("/dev/shm", W_OK | X_OK) == 0 ? "/dev/shm" : "/tmp");
    assert_non_null(mkdtemp(base));
    assert_int_equal(chmod(base, 0711), 0); /* the server's user must pass through */
    setenv("QSWEEP_PG_TMPDIR", base, 1);
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        qs_error err = {0};
        qc_pgserver *mine = NULL;
        char dir[4096] = "";
        if (qc_pgserver_start_temp(&mine, &err) == QS_OK)
            snprintf(dir, sizeof dir, "%s", qc_pgserver_data_dir(mine));
        ssize_t w = write(pipefd[1], dir, strlen(dir) + 1);
        _exit(w > 0 && dir[0] ? 0 : 1); /* "killed": no destroy */
    }
    close(pipefd[1]);
    char orphan[4096] = "";
    ssize_t r = read(pipefd[0], orphan, sizeof orphan - 1);
    close(pipefd[0]);
    int status = 0;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(r > 1 && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    char pidfile[4200];
    snprintf(pidfile, sizeof pidfile, "%s/postmaster.pid", orphan);
    FILE *f = fopen(pidfile, "r");
    assert_non_null(f);
    int orphan_pid = 0;
    assert_int_equal(fscanf(f, "%d", &orphan_pid), 1);
    fclose(f);
    assert_false(process_gone(orphan_pid)); /* still running without its owner */

    qs_error err = {0};
    qc_pgserver *next = NULL;
    qs_status st = qc_pgserver_start_temp(&next, &err);
    unsetenv("QSWEEP_PG_TMPDIR");
    if (st) fprintf(stderr, "start: %s\n", err.msg);
    assert_int_equal(st, QS_OK);
    assert_true(process_gone(orphan_pid));
    assert_int_equal(access(orphan, F_OK), -1);
    qc_pgserver_destroy(next);
    assert_int_equal(rmdir(base), 0); /* nothing left behind */
}

static void test_destroy_removes_temp_tree(void **state) {
    (void)state;
    qs_error err = {0};
    qc_pgserver *tmp = NULL;
    assert_int_equal(qc_pgserver_start_temp(&tmp, &err), QS_OK);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", qc_pgserver_data_dir(tmp));
    pid_t pid = qc_pgserver_pid(tmp);
    assert_true(pid > 0);
    qc_pgserver_destroy(tmp);
    assert_int_equal(access(dir, F_OK), -1);
    assert_true(process_gone(pid));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_listens_on_unix_socket_only),
        cmocka_unit_test(test_server_runs_unprivileged),
        cmocka_unit_test(test_restart_keeps_data_and_drops_connections),
        cmocka_unit_test(test_kill9_then_resume_recovers_committed_rows),
        cmocka_unit_test(test_stop_twice_is_fine),
        cmocka_unit_test(test_start_adopts_running_server_and_nonempty_dir_is_refused),
        cmocka_unit_test(test_failed_start_names_the_command_and_its_output),
        cmocka_unit_test(test_destroy_removes_temp_tree),
        cmocka_unit_test(test_orphaned_temp_cluster_is_reaped),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
