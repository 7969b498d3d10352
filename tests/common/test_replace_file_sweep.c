/* qs_replace_file_sweep (common/replace_file.h): writers killed with SIGKILL between
 * qs_replace_file_open and commit leave ".NAME.XXXXXX" files; the sweep removes exactly
 * those, for that NAME, and leaves the target, other names' temporaries and look-alikes. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "replace_file.h"

/* A child opens path for replacement, writes n bytes and is killed by SIGKILL. */
static void killed_writer(const char *path, size_t n) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        qs_replace_file r;
        qs_error err;
        if (qs_replace_file_open(path, NULL, &r, &err) != QS_OK) _exit(1);
        for (size_t i = 0; i < n; i++)
            fputc('x', r.f);
        fflush(r.f);
        raise(SIGKILL);
        _exit(2);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
}

static void touch(const char *dir, const char *name) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs("keep", f);
    assert_int_equal(fclose(f), 0);
}

static bool exists(const char *dir, const char *name) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

static int count_dir(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls -A %s | wc -l", dir);
    FILE *p = popen(cmd, "r");
    int n = -1;
    assert_non_null(p);
    assert_int_equal(fscanf(p, "%d", &n), 1);
    pclose(p);
    return n;
}

static void sweep_removes_only_the_orphans_of_that_file(void **state) {
    (void)state;
    char dir[] = "/tmp/qs-sweep-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[600], other[600];
    snprintf(path, sizeof path, "%s/job1.ckpt", dir);
    snprintf(other, sizeof other, "%s/job2.ckpt", dir);
    for (int i = 0; i < 3; i++)
        killed_writer(path, 1000);
    killed_writer(other, 10);
    touch(dir, "job1.ckpt");
    touch(dir, ".job1.ckpt.toolong");
    touch(dir, ".job1.ckptXabcdef");
    assert_int_equal(count_dir(dir), 7);
    long long bytes = 0;
    assert_int_equal(qs_replace_file_sweep(path, &bytes), 3);
    assert_int_equal(bytes, 3000);
    assert_int_equal(count_dir(dir), 4);
    assert_true(exists(dir, "job1.ckpt"));
    assert_true(exists(dir, ".job1.ckpt.toolong"));
    assert_true(exists(dir, ".job1.ckptXabcdef"));
    assert_int_equal(qs_replace_file_sweep(path, NULL), 0);
    assert_int_equal(qs_replace_file_sweep(other, &bytes), 1);
    assert_int_equal(bytes, 10);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sweep_removes_only_the_orphans_of_that_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
