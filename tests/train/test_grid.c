/* The training grid kind (coordinator/grid/grid_training.c) and the train job spec
 * (kinds/train.h):
 * - a grid expands into shapes x recipes x lrs x seeds `train` jobs with distinct keys, each
 *   spec decoding back to what the grid said, and the experiment file in experiments/ loads;
 * - the grid's named recipes carry exactly the ingredients of the worker's recipe table
 *   (worker/train/recipe.h), so a name means the same on both sides;
 * - bad values are refused at file:line:column; the spec decoder names the bad field;
 * - the job key ignores where the data lives but not what the run does. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "grid.h"
#include "probe.h"
#include "recipe.h"
#include "registry.h"
#include "train.h"

static char dir[256], text[300];

static int setup(void **s) {
    (void)s;
    snprintf(dir, sizeof dir, "/tmp/qsweep_train_grid_XXXXXX");
    if (!mkdtemp(dir)) return -1;
    snprintf(text, sizeof text, "%s/text.txt", dir);
    FILE *f = fopen(text, "w");
    for (int i = 0; i < 200; i++)
        fprintf(f, "In the beginning was the word, line %d.\n", i);
    fclose(f);
    return 0;
}

static int teardown(void **s) {
    (void)s;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *write_grid(const char *name, const char *body) {
    static char path[400];
    snprintf(path, sizeof path, "%s/%s.yaml", dir, name);
    FILE *f = fopen(path, "w");
    fputs(body, f);
    fclose(f);
    return path;
}

#define GRID_HEAD                                                                                  \
    "name: t\nkind: training\ntraining:\n  shapes: [mini]\n  dataset: {text: text.txt, ctx: 32, "  \
    "val_fraction: 0.1}\n"

static void grid_expands_into_train_jobs(void **s) {
    (void)s;
    const char *p = write_grid(
        "ok", GRID_HEAD "  recipes: [bf16, nvfp4, {name: nvfp4-last2, base: nvfp4, bf16_last: 2}]\n"
                        "  lrs: [0.001, 0.003]\n  seeds: [1, 2]\n  steps: 20\n");
    qc_grid *g = NULL;
    qs_error err = {0};
    if (qc_grid_load(p, NULL, 0, qsweep_probe(), &g, &err) != QS_OK) fail_msg("%s", err.msg);
    qc_job_list jobs = {0};
    assert_int_equal(qc_grid_expand(g, &jobs, &err), QS_OK);
    assert_int_equal(jobs.n, 3 * 2 * 2);
    for (size_t i = 0; i < jobs.n; i++) {
        assert_string_equal(jobs.jobs[i].kind, "train");
        for (size_t k = 0; k < i; k++)
            assert_string_not_equal(jobs.jobs[i].key, jobs.jobs[k].key);
        json_t *spec = json_loads(jobs.jobs[i].spec, 0, NULL);
        qs_train_spec t;
        if (qs_train_decode(spec, &t, &err) != QS_OK) fail_msg("%s", err.msg);
        assert_string_equal(t.shape, "mini");
        assert_int_equal(t.steps, 20);
        assert_int_equal(t.warmup, 2);
        assert_int_equal(t.dataset.ctx, 32);
        assert_string_equal(t.tokenizer, "bytes");
        if (!strcmp(t.recipe, "nvfp4-last2")) {
            assert_int_equal(t.bf16_last, 2);
            assert_int_equal(t.rht, 1);
        }
        assert_true(t.min_lr > 0.099 * t.lr && t.min_lr < 0.101 * t.lr);
        qs_train_clear(&t);
        json_decref(spec);
    }
    qc_job_list_free(&jobs);
    qc_grid_free(g);
}

static void the_experiment_file_loads(void **s) {
    (void)s;
    char set[400];
    snprintf(set, sizeof set, "training.dataset.text=%s", text);
    const char *sets[1] = {set};
    qc_grid *g = NULL;
    qs_error err = {0};
    if (qc_grid_load(QW_SOURCE_DIR "/experiments/tiny-fp4-training.yaml", sets, 1, qsweep_probe(),
                     &g, &err) != QS_OK)
        fail_msg("%s", err.msg);
    qc_job_list jobs = {0};
    assert_int_equal(qc_grid_expand(g, &jobs, &err), QS_OK);
    assert_int_equal(jobs.n, 6 * 3);
    qc_job_list_free(&jobs);
    qc_grid_free(g);
}

static void grid_recipes_are_the_workers(void **s) {
    (void)s;
    const char *names[] = {"fp32",         "bf16",        "fp8",         "nvfp4",
                           "nvfp4-no-rht", "nvfp4-no-sr", "nvfp4-no-2d", "nvfp4-all-blocks",
                           "mxfp4"};
    char body[2048];
    snprintf(body, sizeof body,
             GRID_HEAD "  recipes: [fp32, bf16, fp8, nvfp4, nvfp4-no-rht, "
                       "nvfp4-no-sr, nvfp4-no-2d, nvfp4-all-blocks, mxfp4]\n"
                       "  lrs: [0.001]\n  steps: 5\n");
    qc_grid *g = NULL;
    qs_error err = {0};
    if (qc_grid_load(write_grid("recipes", body), NULL, 0, qsweep_probe(), &g, &err) != QS_OK)
        fail_msg("%s", err.msg);
    qc_job_list jobs = {0};
    assert_int_equal(qc_grid_expand(g, &jobs, &err), QS_OK);
    assert_int_equal(jobs.n, 9);
    for (size_t i = 0; i < jobs.n; i++) {
        json_t *spec = json_loads(jobs.jobs[i].spec, 0, NULL);
        qs_train_spec t;
        assert_int_equal(qs_train_decode(spec, &t, &err), QS_OK);
        qw_recipe r;
        assert_int_equal(qw_recipe_by_name(names[i], &r, &err), QS_OK);
        assert_string_equal(t.recipe, names[i]);
        assert_string_equal(t.format, r.fmt ? qk_format_name(r.fmt) : "none");
        assert_int_equal(t.w2d, r.w2d);
        assert_int_equal(t.rht, r.rht);
        assert_int_equal(t.rht_dim, r.rht_dim);
        assert_int_equal(t.sr, r.sr);
        assert_int_equal(t.bf16_first, r.bf16_first);
        assert_int_equal(t.bf16_last, r.bf16_last);
        assert_int_equal(t.recipe_version, r.version);
        qs_train_clear(&t);
        json_decref(spec);
    }
    qc_job_list_free(&jobs);
    qc_grid_free(g);
}

static void expect_error(const char *name, const char *body, const char *where, const char *what) {
    qc_grid *g = NULL;
    qs_error err = {0};
    assert_int_not_equal(qc_grid_load(write_grid(name, body), NULL, 0, qsweep_probe(), &g, &err),
                         QS_OK);
    assert_null(g);
    if (!strstr(err.msg, where) || !strstr(err.msg, what))
        fail_msg("%s: got \"%s\", expected \"%s\" and \"%s\"", name, err.msg, where, what);
}

static void bad_grids_are_refused_at_their_place(void **s) {
    (void)s;
    expect_error("badrecipe", GRID_HEAD "  recipes: [bf16, nvfp5]\n  lrs: [0.001]\n  steps: 5\n",
                 "badrecipe.yaml:6:", "unknown recipe 'nvfp5'");
    expect_error("mx2d",
                 GRID_HEAD
                 "  recipes: [{name: x, base: mxfp4, w2d: 1}]\n  lrs: [0.001]\n  steps: 5\n",
                 "mx2d.yaml:6:", "w2d");
    expect_error(
        "badshape",
        "name: t\nkind: training\ntraining:\n  shapes: [llama9]\n  dataset: {text: text.txt}\n"
        "  recipes: [bf16]\n  lrs: [0.001]\n  steps: 5\n",
        "badshape.yaml:4:", "unknown shape 'llama9'");
    expect_error("badkey",
                 GRID_HEAD "  recipes: [bf16]\n  lrs: [0.001]\n  steps: 5\n  momentum: 0.9\n",
                 "badkey.yaml:9:", "momentum");
    expect_error("nolr", GRID_HEAD "  recipes: [bf16]\n  lrs: [-1]\n  steps: 5\n",
                 "nolr.yaml:7:", "learning rate");
    expect_error(
        "notext",
        "name: t\nkind: training\ntraining:\n  shapes: [mini]\n  dataset: {text: none.txt}\n"
        "  recipes: [bf16]\n  lrs: [0.001]\n  steps: 5\n",
        "notext.yaml:5:", "none.txt");
    expect_error("longctx",
                 "name: t\nkind: training\ntraining:\n  shapes: [mini]\n  dataset: {text: "
                 "text.txt, ctx: 512}\n"
                 "  recipes: [bf16]\n  lrs: [0.001]\n  steps: 5\n",
                 "longctx.yaml:5:", "ctx 512");
}

static void spec_decoder_names_the_field_and_key_ignores_paths(void **s) {
    (void)s;
    const char *p = write_grid("one", GRID_HEAD "  recipes: [nvfp4]\n  lrs: [0.001]\n  steps: 5\n");
    qc_grid *g = NULL;
    qs_error err = {0};
    assert_int_equal(qc_grid_load(p, NULL, 0, qsweep_probe(), &g, &err), QS_OK);
    qc_job_list jobs = {0};
    assert_int_equal(qc_grid_expand(g, &jobs, &err), QS_OK);
    json_t *spec = json_loads(jobs.jobs[0].spec, 0, NULL);
    char k0[65], k1[65];
    assert_int_equal(qs_spec_key(spec, k0, &err), QS_OK);
    json_object_set_new(json_object_get(spec, "dataset"), "path",
                        json_string("/elsewhere/text.txt"));
    assert_int_equal(qs_spec_key(spec, k1, &err), QS_OK);
    assert_string_equal(k0, k1);
    json_object_set_new(spec, "lr", json_real(0.002));
    assert_int_equal(qs_spec_key(spec, k1, &err), QS_OK);
    assert_string_not_equal(k0, k1);
    qs_train_spec t;
    json_object_set_new(spec, "steps", json_integer(0));
    assert_int_equal(qs_train_decode(spec, &t, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "steps"));
    json_object_set_new(spec, "steps", json_integer(5));
    json_object_set_new(spec, "momentum", json_real(0.9));
    assert_int_equal(qs_train_decode(spec, &t, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "momentum"));
    json_object_del(spec, "momentum");
    json_object_set_new(json_object_get(spec, "recipe"), "format", json_string("mxfp4"));
    assert_int_equal(qs_train_decode(spec, &t, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "w2d"));
    char *text_spec = json_dumps(spec, 0);
    assert_int_equal(qs_job_spec_check(jobs.jobs[0].spec, &err), QS_OK);
    assert_int_equal(qs_job_spec_check(text_spec, &err), QS_EINVAL);
    free(text_spec);
    json_decref(spec);
    qc_job_list_free(&jobs);
    qc_grid_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(grid_expands_into_train_jobs),
        cmocka_unit_test(the_experiment_file_loads),
        cmocka_unit_test(grid_recipes_are_the_workers),
        cmocka_unit_test(bad_grids_are_refused_at_their_place),
        cmocka_unit_test(spec_decoder_names_the_field_and_key_ignores_paths),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
