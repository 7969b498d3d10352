/* The tiny training experiment in a shortened form through the real `qsweep run` (it runs in
 * CI with fewer steps): KJV text made by tools/kjv_text.sh from
 * Debian's bible-kjv-text, a private PostgreSQL cluster, a coordinator and 2 workers, all six
 * recipes x 1 seed for 6 steps; every job succeeds and the training table lists each recipe
 * with its gap to bf16. Own XDG directories, so nothing mixes with a user's cluster. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

static char dir[256];

static void run(const char *cmd, char *out, size_t cap, int *rc) {
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    *rc = pclose(p);
}

static void tiny_training_experiment_runs_shortened(void **s) {
    (void)s;
    snprintf(dir, sizeof dir, "/tmp/qsweep_train_run_XXXXXX");
    assert_non_null(mkdtemp(dir));
    char env[1024], cmd[4096];
    snprintf(env, sizeof env,
             "XDG_DATA_HOME=%s/data XDG_STATE_HOME=%s/state XDG_CACHE_HOME=%s/cache "
             "QSWEEP_DB= OMP_WAIT_POLICY=PASSIVE",
             dir, dir, dir);
    static char out[1 << 16];
    int rc;
    snprintf(cmd, sizeof cmd, "%s bash %s/tools/kjv_text.sh 2>&1", env, QW_SOURCE_DIR);
    run(cmd, out, sizeof out, &rc);
    if (rc != 0)
        fail_msg("tools/kjv_text.sh failed (bible-kjv installed? tools/install-deps.sh):\n%s", out);
    snprintf(cmd, sizeof cmd,
             "env -u QSWEEP_DB %s %s run %s/experiments/tiny-fp4-training.yaml --workers 2 "
             "--set training.steps=6 --set training.warmup=1 --set 'training.seeds=[1]' "
             "--set training.eval_every=3 --set training.checkpoint_every=3 "
             "--set training.log_every=2 2>&1",
             env, QSWEEP_BIN, QW_SOURCE_DIR);
    run(cmd, out, sizeof out, &rc);
    printf("%s\n", out);
    if (rc != 0) fail_msg("qsweep run exited %d", rc);
    assert_non_null(strstr(out, "succeeded 6"));
    assert_non_null(strstr(out, "final validation loss per recipe"));
    const char *recipes[] = {"bf16 ",       "nvfp4 ",      "nvfp4-no-rht",
                             "nvfp4-no-sr", "nvfp4-no-2d", "mxfp4"};
    for (int i = 0; i < 6; i++)
        if (!strstr(out, recipes[i])) fail_msg("recipe %s missing from the table", recipes[i]);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tiny_training_experiment_runs_shortened),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
