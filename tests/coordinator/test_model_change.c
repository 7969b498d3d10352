/* coord_model_change: a checkpoint overwritten in place while a sweep runs never mixes
 * results (worker/jobs/jobs.c: the cached model's file identity is checked before and after
 * each job). A real `qsweep submit` of a sensitivity grid over a copy of a committed test
 * checkpoint, the real qsweep-coordinator and `qsweep worker` processes, a real private
 * PostgreSQL. While the worker runs jobs on the cached model, the test rewrites bytes in the
 * middle of model.safetensors (same size, same inode, so an mmap MAP_PRIVATE sees the new
 * bytes). No attempt that started after the write succeeds; the job that ran across it fails
 * saying the model changed while it ran; the later ones fail at once on the digest (one
 * attempt each); `qsweep results` counts them under its tables. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "fixtures.h"
#include "harness.h"

/* Rewrites len bytes at the middle of path in place (each byte XOR 0x5a): the size and the
 * inode stay, the content and the mtime change. */
static void overwrite_in_place(const char *path, size_t len) {
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    off_t off = st.st_size / 2;
    unsigned char *buf = malloc(len);
    assert_non_null(buf);
    assert_int_equal(pread(fd, buf, len, off), (ssize_t)len);
    for (size_t i = 0; i < len; i++)
        buf[i] ^= 0x5a;
    assert_int_equal(pwrite(fd, buf, len, off), (ssize_t)len);
    assert_int_equal(close(fd), 0);
    free(buf);
}

static void model_overwritten_in_place_mid_sweep_never_mixes_results(void **state) {
    harness *h = *state;
    h_begin(h, "coord_model_change");
    char cmd[1200], model[200], grid[200], baselines[200];
    snprintf(model, sizeof model, "%s/model", h->dir);
    snprintf(cmd, sizeof cmd, "cp -r %s/tests/engine/data/llama3_gqa %s", QS_SOURCE_DIR, model);
    assert_int_equal(system(cmd), 0);
    snprintf(baselines, sizeof baselines, "QSWEEP_BASELINE_DIR=%s/baselines", h->dir);
    putenv(baselines);
    snprintf(grid, sizeof grid, "%s/grid.yaml", h->dir);
    FILE *f = fopen(grid, "w");
    assert_non_null(f);
    fprintf(f,
            "name: mc\nkind: sensitivity\nmodels:\n  - %s\ndataset:\n  tokens: "
            "%s/experiments/data/gpl3.bytes.tokens\n  ctx: 64\n  max_chunks: 64\n"
            "sensitivity:\n  formats: [nvfp4, mxfp4]\n  quantize: [weights]\n"
            "  modes: [component]\n  metrics: [ppl]\nmax_attempts: 3\n",
            model, QS_SOURCE_DIR);
    assert_int_equal(fclose(f), 0);
    const char *submit[] = {"submit", grid, "--db", h->conninfo, NULL};
    char out[16384];
    int rc = fx_run(QS_QSWEEP_BIN, submit, out, sizeof out);
    if (rc != 0) fprintf(stderr, "%s", out);
    assert_int_equal(rc, 0);
    long total = h_sql_long(h, "SELECT count(*) FROM jobs");
    assert_true(total >= 10);
    h_start_coordinator(h);
    char *worker[] = {QS_QSWEEP_BIN, "worker",    "--connect", h->endpoint, "--id",
                      "w1",          "--threads", "1",         NULL};
    h_start_process(h, "worker-w1", worker);
    /* the baseline and two evaluations ran: the model is cached; then one is running */
    assert_true(
        h_wait_sql(h, 1, 60000, "SELECT (count(*) >= 3)::int FROM jobs WHERE state = 'succeeded'"));
    assert_true(h_wait_sql(h, 1, 20000, "SELECT count(*) FROM attempts WHERE outcome = 'running'"));
    char t0[64];
    h_sql_text(h, t0, sizeof t0, "SELECT now()::text");
    char weights[260];
    snprintf(weights, sizeof weights, "%s/model.safetensors", model);
    overwrite_in_place(weights, 4096);
    assert_true(h_wait_sql(h, 0, 120000,
                           "SELECT count(*) FROM jobs WHERE state IN ('pending', 'running')"));

    long ok_after = h_sql_long(h,
                               "SELECT count(*) FROM attempts WHERE outcome = 'succeeded' AND "
                               "started_at > '%s'::timestamptz",
                               t0);
    long succeeded = h_sql_long(h, "SELECT count(*) FROM jobs WHERE state = 'succeeded'");
    long failed = h_sql_long(h, "SELECT count(*) FROM jobs WHERE state = 'failed'");
    long across = h_sql_long(
        h, "SELECT count(*) FROM attempts WHERE error LIKE '%%changed while the job ran%%'");
    long digest = h_sql_long(
        h, "SELECT count(*) FROM attempts WHERE error LIKE '%%file changed since the grid%%'");
    long att_ok = h_sql_long(h, "SELECT count(*) FROM attempts WHERE outcome = 'succeeded'");
    long att_failed = h_sql_long(h, "SELECT count(*) FROM attempts WHERE outcome = 'failed'");
    long att_other =
        h_sql_long(h, "SELECT count(*) FROM attempts WHERE outcome NOT IN ('succeeded', 'failed')");
    long failed_rows = h_sql_long(h, "SELECT count(*) FROM results r JOIN jobs j ON j.id = r.job "
                                     "WHERE j.state = 'failed' AND r.final");
    long twice = h_sql_long(h, "SELECT count(*) - count(DISTINCT (job, name, step)) FROM results");
    fprintf(stderr,
            "model change: %ld jobs: succeeded %ld, failed %ld; attempts succeeded %ld, failed "
            "%ld (%ld across the write, %ld on the digest), other %ld; succeeded attempts "
            "started after the write %ld; final results of failed jobs %ld, twice %ld\n",
            total, succeeded, failed, att_ok, att_failed, across, digest, att_other, ok_after,
            failed_rows, twice);
    assert_int_equal(ok_after, 0);
    assert_int_equal(succeeded + failed, total);
    assert_true(failed >= 1);
    assert_int_equal(att_failed, failed); /* each failed once: permanent */
    assert_int_equal(across + digest, failed);
    assert_int_equal(att_other, 0);
    assert_int_equal(failed_rows, 0);
    assert_int_equal(twice, 0);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM jobs WHERE state = 'failed' AND "
                                   "attempts_used <> 1"),
                     0);

    const char *results[] = {"results", "mc", "--db", h->conninfo, NULL};
    assert_int_equal(fx_run(QS_QSWEEP_BIN, results, out, sizeof out), 0);
    char line[160];
    snprintf(line, sizeof line,
             "%ld failed job%s of experiment mc, not in the tables above (%ld because their "
             "model changed)",
             failed, failed == 1 ? "" : "s", failed);
    if (!strstr(out, line)) fprintf(stderr, "%s", out);
    assert_non_null(strstr(out, line));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(model_overwritten_in_place_mid_sweep_never_mixes_results,
                                        h_setup, h_teardown),
    };
    return cmocka_run_group_tests(tests, h_group_setup, h_group_teardown);
}
