/* Training jobs end to end, with the real coordinator, a real
 * PostgreSQL and worker processes (train_test_worker) over ZeroMQ:
 * - kill -9 of the worker mid-training: the attempt is lost, the job runs again on another
 *   worker, resumes from its last checkpoint, and its final weights are byte-identical to an
 *   uninterrupted run of the same training (a second job that differs only in where it keeps
 *   its checkpoints);
 * - SIGTERM: the worker checkpoints, the attempt is reported preempted, and the next worker
 *   resumes from that checkpoint. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "train.h"

static long insert_train(harness *h, const char *ckdir, int steps, char key[65]) {
    qs_train_spec s;
    memset(&s, 0, sizeof s);
    snprintf(s.shape, sizeof s.shape, "micro");
    s.dataset.path = (char *)QW_SOURCE_DIR "/README.md";
    memset(s.dataset.digest, 'a', 64); /* identity only: the worker reads the path */
    s.dataset.ctx = 64;
    snprintf(s.tokenizer, sizeof s.tokenizer, "bytes");
    s.val_fraction = 0.1;
    snprintf(s.recipe, sizeof s.recipe, "nvfp4");
    s.recipe_version = QS_TRAIN_RECIPE_VERSION;
    snprintf(s.format, sizeof s.format, "nvfp4");
    s.w2d = s.rht = s.sr = 1;
    s.rht_dim = 16;
    s.bf16_last = 1;
    s.lr = 3e-3;
    s.min_lr = 3e-4;
    s.warmup = 10;
    snprintf(s.decay, sizeof s.decay, "cosine");
    s.weight_decay = 0.1;
    s.clip = 1.0;
    s.beta1 = 0.9;
    s.beta2 = 0.95;
    s.steps = steps;
    s.batch = 2;
    s.accum = 1;
    s.seed = 5;
    s.eval_every = 0;
    s.log_every = 1;
    s.checkpoint_every = 20;
    s.diverge_loss = 20;
    s.checkpoint_dir = (char *)ckdir;
    snprintf(s.numerics_version, sizeof s.numerics_version, "1");
    json_t *spec = NULL;
    qs_error err = {0};
    assert_int_equal(qs_train_encode(&s, &spec, &err), QS_OK);
    assert_int_equal(qs_spec_key(spec, key, &err), QS_OK);
    char *text = json_dumps(spec, JSON_SORT_KEYS | JSON_COMPACT);
    long id = h_insert_job(h, key, "train", text, 5, 0);
    free(text);
    json_decref(spec);
    return id;
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("%s: missing", path);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n);
    assert_int_equal(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

static void kill9_resumes_elsewhere_with_identical_weights(void **state) {
    harness *h = *state;
    h_begin(h, "train_kill9");
    h_start_coordinator(h);
    char d1[200], d2[200], k1[65], k2[65];
    snprintf(d1, sizeof d1, "%s/ck1", h->dir);
    snprintf(d2, sizeof d2, "%s/ck2", h->dir);
    long j1 = insert_train(h, d1, 600, k1);
    pid_t a = h_start_worker(h, "a");
    assert_true(h_wait_sql(
        h, 1, 120000,
        "SELECT (count(*) > 0)::int FROM results WHERE job = %ld AND name = 'train_loss' "
        "AND step >= 60",
        j1));
    h_signal(h, a, SIGKILL);
    long j2 = insert_train(h, d2, 600, k2);
    h_start_worker(h, "b");
    assert_true(h_wait_sql(
        h, 2, 240000, "SELECT count(*) FROM jobs WHERE id IN (%ld, %ld) AND state = 'succeeded'",
        j1, j2));
    assert_int_equal(
        h_sql_long(h, "SELECT count(*) FROM attempts WHERE job = %ld AND outcome = 'lost'", j1), 1);
    long resumed = h_sql_long(h,
                              "SELECT value::bigint FROM results WHERE job = %ld AND name = "
                              "'resumed_from_step' AND final",
                              j1);
    printf("job %ld resumed from step %ld after kill -9\n", j1, resumed);
    assert_true(resumed >= 60);
    assert_int_equal(h_sql_long(h,
                                "SELECT value::bigint FROM results WHERE job = %ld AND name = "
                                "'resumed_from_step' AND final",
                                j2),
                     0);
    char p1[300], p2[300];
    snprintf(p1, sizeof p1, "%s/%s/model.safetensors", d1, k1);
    snprintf(p2, sizeof p2, "%s/%s/model.safetensors", d2, k2);
    size_t n1, n2;
    unsigned char *b1 = slurp(p1, &n1), *b2 = slurp(p2, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(b1, b2, n1);
    free(b1);
    free(b2);
    h_end(h);
}

static void sigterm_checkpoints_and_reports_preempted(void **state) {
    harness *h = *state;
    h_begin(h, "train_sigterm");
    h_start_coordinator(h);
    char d[200], k[65];
    snprintf(d, sizeof d, "%s/ck", h->dir);
    long j = insert_train(h, d, 600, k);
    pid_t a = h_start_worker(h, "a");
    assert_true(h_wait_sql(
        h, 1, 120000,
        "SELECT (count(*) > 0)::int FROM results WHERE job = %ld AND name = 'train_loss' "
        "AND step >= 30",
        j));
    h_signal(h, a, SIGTERM);
    assert_true(h_wait_exit(a, 60000) >= 0);
    assert_true(h_wait_sql(
        h, 1, 30000, "SELECT count(*) FROM attempts WHERE job = %ld AND outcome = 'preempted'", j));
    char ck[300];
    snprintf(ck, sizeof ck, "%s/%s.ckpt", d, k);
    assert_int_equal(access(ck, F_OK), 0);
    h_start_worker(h, "b");
    assert_true(h_wait_sql(h, 1, 240000,
                           "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'succeeded'", j));
    long resumed = h_sql_long(h,
                              "SELECT value::bigint FROM results WHERE job = %ld AND name = "
                              "'resumed_from_step' AND final",
                              j);
    printf("job %ld resumed from step %ld after SIGTERM\n", j, resumed);
    assert_true(resumed >= 30);
    /* two attempts, and the preempted one does not count against the job's max_attempts */
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM attempts WHERE job = %ld", j), 2);
    assert_int_equal(h_sql_long(h, "SELECT attempts_used FROM jobs WHERE id = %ld", j), 0);
    h_end(h);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(kill9_resumes_elsewhere_with_identical_weights, h_setup,
                                        h_teardown),
        cmocka_unit_test_setup_teardown(sigterm_checkpoints_and_reports_preempted, h_setup,
                                        h_teardown),
    };
    return cmocka_run_group_tests(tests, h_group_setup, h_group_teardown);
}
