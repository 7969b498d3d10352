/* coord_standby_train: the active coordinator is killed with SIGKILL while a training job's
 * attempt runs; a standby coordinator (--standby) on the same database takes the lock, the
 * worker, given both endpoints, moves to it with its attempt still running and delivers the
 * training's results there. From SQL: the standby took over, the job succeeded in its one
 * attempt (not run again: it resumed from step 0), nothing counted against max_attempts, one
 * final value per metric and no curve point twice. Real coordinator processes, a real worker
 * with the train kind (tests/train's train_test_worker), real signals, a private PostgreSQL. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"
#include "train.h"

/* A tiny training job (the micro shape on this repository's README, bytes tokenizer, NVFP4
 * recipe) of steps steps, checkpoints in ckdir; its id. */
static long insert_train(harness *h, const char *ckdir, int steps) {
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
    char key[65];
    assert_int_equal(qs_train_encode(&s, &spec, &err), QS_OK);
    assert_int_equal(qs_spec_key(spec, key, &err), QS_OK);
    char *text = json_dumps(spec, JSON_SORT_KEYS | JSON_COMPACT);
    long id = h_insert_job(h, key, "train", text, 2, 0);
    free(text);
    json_decref(spec);
    return id;
}

static void standby_takes_over_during_a_training_job(void **state) {
    harness *h = *state;
    h_begin(h, "coord_standby_train");
    char ck[200], ep_b[160], both[330], log_b[160];
    snprintf(ck, sizeof ck, "%s/ck", h->dir);
    snprintf(ep_b, sizeof ep_b, "ipc://%s/coord-b.sock", h->dir);
    snprintf(both, sizeof both, "%s,%s", h->endpoint, ep_b);
    const int steps = 1000; /* a few seconds of CPU on an idle machine */
    long j = insert_train(h, ck, steps);
    pid_t active = h_start_coordinator(h);
    assert_true(h_wait_in_file(h->coord_log, "listening on", 2000) >= 0); /* it holds the lock */
    pid_t standby = h_start_standby(h, "standby", ep_b, log_b, sizeof log_b);
    const char *extra[] = {"--endpoint", both, NULL};
    h_start_worker_args(h, "t1", extra);
    assert_true(h_wait_in_file(log_b, "standby, waiting", 1000) >= 0);
    /* the training attempt runs: curve points of step 50 and more are stored, none final */
    assert_true(h_wait_sql(h, 1, 60000,
                           "SELECT (count(*) > 0)::int FROM results WHERE job = %ld AND name = "
                           "'train_loss' AND step >= 50",
                           j));
    long at_kill =
        h_sql_long(h, "SELECT max(step) FROM results WHERE job = %ld AND name = 'train_loss'", j);
    assert_int_equal(h_sql_long(h,
                                "SELECT count(*) FROM jobs WHERE id = %ld AND state = "
                                "'running'",
                                j),
                     1);
    assert_int_equal(h_sql_long(h, "SELECT count(*) FROM results WHERE job = %ld AND final", j), 0);
    assert_false(h_file_contains(log_b, "took the coordinator lock"));
    h_signal(h, active, SIGKILL);
    long ms = h_wait_in_file(log_b, "took the coordinator lock", 1500);
    assert_true(h_wait_sql(h, 1, 120000,
                           "SELECT count(*) FROM jobs WHERE id = %ld AND state = 'succeeded'", j));
    char outcomes[200];
    h_sql_text(h, outcomes, sizeof outcomes,
               "SELECT string_agg(attempt || ' ' || outcome, ', ' ORDER BY attempt) FROM attempts "
               "WHERE job = %ld",
               j);
    long used = h_sql_long(h, "SELECT attempts_used FROM jobs WHERE id = %ld", j);
    long finals = h_sql_long(h, "SELECT count(*) FROM results WHERE job = %ld AND final", j);
    long final_names =
        h_sql_long(h, "SELECT count(DISTINCT name) FROM results WHERE job = %ld AND final", j);
    long twice = h_sql_long(
        h, "SELECT count(*) - count(DISTINCT (name, step)) FROM results WHERE job = %ld", j);
    long points = h_sql_long(
        h, "SELECT count(*) FROM results WHERE job = %ld AND name = 'train_loss' AND NOT final", j);
    long last =
        h_sql_long(h, "SELECT max(step) FROM results WHERE job = %ld AND name = 'train_loss'", j);
    long resumed = h_sql_long(h,
                              "SELECT value::bigint FROM results WHERE job = %ld AND name = "
                              "'resumed_from_step' AND final",
                              j);
    long forged = h_sql_long(h,
                             "SELECT count(*) FROM results WHERE job <> %ld OR value = "
                             "'NaN'::float8 OR value IN ('Infinity', '-Infinity')",
                             j);
    fprintf(stderr,
            "standby took over %ld ms after the kill at step %ld of %d; attempts %s; used %ld; "
            "final results %ld (%ld names); curve points %ld up to step %ld, twice %ld; resumed "
            "from step %ld; other or non-finite results %ld\n",
            ms, at_kill, steps, outcomes, used, finals, final_names, points, last, twice, resumed,
            forged);
    assert_true(ms >= 0 && ms < 10000);
    assert_string_equal(outcomes, "1 succeeded");
    assert_int_equal(used, 0);
    assert_true(finals > 0);
    assert_int_equal(finals, final_names);
    assert_int_equal(h_sql_long(h,
                                "SELECT count(*) FROM results WHERE job = %ld AND final AND "
                                "name = 'final_train_loss'",
                                j),
                     1);
    assert_int_equal(twice, 0);
    assert_true(at_kill < steps);
    assert_int_equal(points, steps); /* every step's loss, those after the kill included */
    assert_int_equal(last, steps);
    assert_int_equal(resumed, 0); /* the attempt kept running: never restarted from a checkpoint */
    assert_int_equal(forged, 0);
    assert_true(h_file_contains(log_b, "re-attached to job"));
    assert_int_equal(h_wait_exit(standby, 0), -1); /* the one that took over still runs */
    h_end(h);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(standby_takes_over_during_a_training_job, h_setup,
                                        h_teardown),
    };
    return cmocka_run_group_tests(tests, h_group_setup, h_group_teardown);
}
