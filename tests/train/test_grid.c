/* The training grid kind (coordinator/grid/grid_training.c) and the train job spec
 * (kinds/train.h):
 * - a grid expands into shapes x recipes x lrs x seeds `train` jobs with distinct keys, each
 *   spec decoding back to what the grid said, and the experiment file in experiments/ loads;
 * - the grid's named recipes carry exactly the ingredients of the worker's recipe table
 *   (worker/train/recipe.h), so a name means the same on both sides;
 * - bad values are refused at file:line:column; the spec decoder names the bad field;
 * - the job key ignores where the data lives but not what the run does, and checkpoint_dir is
 *   part of it: two grids with different folders share no job, one folder written two ways
 *   (relative to the grid file, with ./, .. and trailing slashes) is the same job;
 * - named shapes are the engine's table: llama2-7b, llama3-8b and llama3.2-1b are accepted
 *   with their published parameter counts (6,738,415,616; 8,030,261,248; 1,235,814,400:
 *   the Hugging Face model cards' totals);
 * - what a run would fail on is refused at submit time, at file:line:column or naming the
 *   --set argument: duplicate learning rates, a recipe without name or base, a text that is
 *   not a regular file, an uncreatable checkpoint_dir, diverge_loss at or below ln(vocab),
 *   GPU resources too small for the FP32 training state. */
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
    "name: t\nkind: training\ntraining:\n  shapes: [micro]\n  dataset: {text: text.txt, ctx: 32, " \
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
        assert_string_equal(t.shape, "micro");
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
        "name: t\nkind: training\ntraining:\n  shapes: [micro]\n  dataset: {text: none.txt}\n"
        "  recipes: [bf16]\n  lrs: [0.001]\n  steps: 5\n",
        "notext.yaml:5:", "none.txt");
    expect_error("rhtdim",
                 GRID_HEAD "  recipes: [{name: x, base: mxfp4, rht_dim: 24}]\n  lrs: [0.001]\n"
                           "  steps: 5\n",
                 "rhtdim.yaml:6:", "rht_dim 16 or 32");
    expect_error("duplr", GRID_HEAD "  recipes: [bf16]\n  lrs: [0.001, 1e-3]\n  steps: 5\n",
                 "duplr.yaml:7:16", "learning rate 0.001 is listed twice");
    expect_error("nobase",
                 GRID_HEAD "  recipes: [bf16, {name: x, rht: 0}]\n  lrs: [0.001]\n  steps: 5\n",
                 "nobase.yaml:6:", "'name' and 'base'");
    expect_error("builtinname",
                 GRID_HEAD "  recipes: [{name: bf16, base: nvfp4}]\n  lrs: [0.001]\n  steps: 5\n",
                 "builtinname.yaml:6:20", "recipe name 'bf16' is a built-in recipe's");
    expect_error("builtinname2",
                 GRID_HEAD "  recipes: [bf16, {name: nvfp4, base: nvfp4, sr: 0}]\n"
                           "  lrs: [0.001]\n  steps: 5\n",
                 "builtinname2.yaml:6:", "recipe name 'nvfp4' is a built-in recipe's");
    expect_error("textdir",
                 "name: t\nkind: training\ntraining:\n  shapes: [micro]\n  dataset: {text: .}\n"
                 "  recipes: [bf16]\n  lrs: [0.001]\n  steps: 5\n",
                 "textdir.yaml:5:", "not a regular file");
    expect_error("cdfile",
                 GRID_HEAD "  recipes: [bf16]\n  lrs: [0.001]\n  steps: 5\n"
                           "  checkpoint_dir: text.txt/ck\n",
                 "cdfile.yaml:9:", "text.txt is not a folder");
    expect_error("cdproc",
                 GRID_HEAD "  recipes: [bf16]\n  lrs: [0.001]\n  steps: 5\n"
                           "  checkpoint_dir: /proc/qsweep/ck\n",
                 "cdproc.yaml:9:", "cannot create folders in /proc");
    expect_error("diverge",
                 GRID_HEAD "  recipes: [bf16]\n  lrs: [0.001]\n  steps: 5\n  diverge_loss: 5\n",
                 "diverge.yaml:9:", "ln(258)");
    expect_error("gpus",
                 "name: t\nkind: training\nresources: {gpu_count: 1, gpu_memory_mib: 81920}\n"
                 "training:\n  shapes: [tiny, llama2-7b]\n  dataset: {text: text.txt, ctx: 32}\n"
                 "  recipes: [bf16]\n  lrs: [0.001]\n  steps: 5\n",
                 "gpus.yaml:5:18", "6738415616 parameters need 100.4 GiB");
    expect_error("longctx",
                 "name: t\nkind: training\ntraining:\n  shapes: [micro]\n  dataset: {text: "
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
    json_t *rec = json_object_get(spec, "recipe");
    json_object_set_new(rec, "rht_dim", json_integer(8));
    assert_int_equal(qs_train_decode(spec, &t, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "rht_dim"));
    json_object_del(rec, "rht_dim");
    assert_int_equal(qs_train_decode(spec, &t, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "rht_dim"));
    json_object_set_new(rec, "rht_dim", json_integer(16));
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

/* The --set argument is named, not file:0:0, for a recipe missing its base. */
static void set_errors_name_the_argument(void **s) {
    (void)s;
    const char *p = write_grid("set", GRID_HEAD "  recipes: [bf16]\n  lrs: [0.001]\n  steps: 5\n");
    const char *sets[1] = {"training.recipes=[{name: a}]"};
    qc_grid *g = NULL;
    qs_error err = {0};
    assert_int_not_equal(qc_grid_load(p, sets, 1, qsweep_probe(), &g, &err), QS_OK);
    if (!strstr(err.msg, "--set training.recipes=[{name: a}]") || strstr(err.msg, ":0:0"))
        fail_msg("got \"%s\"", err.msg);
    /* A built-in name for a custom recipe, given by --set, names the argument. */
    const char *sets2[1] = {"training.recipes=[{name: bf16, base: mxfp4}]"};
    qs_error err2 = {0};
    assert_int_not_equal(qc_grid_load(p, sets2, 1, qsweep_probe(), &g, &err2), QS_OK);
    assert_null(g);
    if (!strstr(err2.msg, "--set training.recipes=[{name: bf16, base: mxfp4}]") ||
        !strstr(err2.msg, "built-in"))
        fail_msg("got \"%s\"", err2.msg);
}

/* The same key given twice: an error in the value in effect names the last --set, not the
 * overridden one. */
static void repeated_set_names_the_argument_in_effect(void **s) {
    (void)s;
    const char *p = write_grid("set2", GRID_HEAD "  recipes: [bf16]\n  lrs: [0.001]\n  steps: 5\n");
    const char *const cases[][3] = {
        {"training.lrs=[0.002]", "training.lrs=[-1]"},
        {"training.recipes=[bf16]", "training.recipes=[{name: bf16, base: nvfp4}]"},
        {"training.steps=7", "training.steps=-3"},
        {"training.lrs=[0.002]", "training.lrs=[0.003]", "training.steps=-3"},
        {"training.lrs.0=0.002", "training.lrs.0=0.003", "training.steps=-3"},
        {"training.steps=7", "training.steps=8", "training.lrs=[-1]"},
        {"training.recipes.0=nvfp4", "training.recipes=[mxfp4]", "training.lrs=[-1]"},
        {"training.recipes=[bf16]", "training.recipes=[nvfp4]", "training.lrs=[0.1, 0.1]"}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        qc_grid *g = NULL;
        qs_error err = {0};
        size_t n = cases[k][2] ? 3 : 2;
        assert_int_not_equal(qc_grid_load(p, cases[k], n, qsweep_probe(), &g, &err), QS_OK);
        assert_null(g);
        char want[200];
        snprintf(want, sizeof want, "--set %s:", cases[k][n - 1]);
        if (!strstr(err.msg, want))
            fail_msg("case %zu: got \"%s\", expected \"%s\"", k, err.msg, want);
    }
}

static void job_keys_of(const char *name, const char *body, const char *const *sets, size_t n,
                        char keys[][65], size_t *nk, char *cdir, size_t cap) {
    qc_grid *g = NULL;
    qs_error err = {0};
    if (qc_grid_load(write_grid(name, body), sets, n, qsweep_probe(), &g, &err) != QS_OK)
        fail_msg("%s: %s", name, err.msg);
    qc_job_list jobs = {0};
    assert_int_equal(qc_grid_expand(g, &jobs, &err), QS_OK);
    for (size_t i = 0; i < jobs.n; i++)
        memcpy(keys[i], jobs.jobs[i].key, 65);
    *nk = jobs.n;
    json_t *spec = json_loads(jobs.jobs[0].spec, 0, NULL);
    snprintf(cdir, cap, "%s", json_string_value(json_object_get(spec, "checkpoint_dir")));
    json_decref(spec);
    qc_job_list_free(&jobs);
    qc_grid_free(g);
}

/* checkpoint_dir is part of the key: a resumed job finds its checkpoint at
 * checkpoint_dir/<job_key>.ckpt and leaves its trained model in checkpoint_dir/<job_key>/,
 * so a second grid naming another folder must not silently reuse the first grid's job (its
 * model would not be where the second grid says). One folder written several ways is one
 * canonical absolute path, so it is one job. */
static void checkpoint_dir_is_keyed_and_canonical(void **s) {
    (void)s;
    char k1[4][65], k2[4][65], k3[4][65], d1[600], d2[600], d3[600];
    size_t n1, n2, n3;
    job_keys_of("cd1",
                GRID_HEAD "  recipes: [bf16]\n  lrs: [0.001]\n  steps: 5\n"
                          "  checkpoint_dir: ck\n",
                NULL, 0, k1, &n1, d1, sizeof d1);
    job_keys_of("cd2",
                GRID_HEAD "  recipes: [bf16]\n  lrs: [0.001]\n  steps: 5\n"
                          "  checkpoint_dir: ./sub/../ck//\n",
                NULL, 0, k2, &n2, d2, sizeof d2);
    char other[400];
    snprintf(other, sizeof other, "+training.checkpoint_dir=%s/other", dir);
    const char *sets[1] = {other};
    job_keys_of("cd3", GRID_HEAD "  recipes: [bf16]\n  lrs: [0.001]\n  steps: 5\n", sets, 1, k3,
                &n3, d3, sizeof d3);
    char want[600], real[500];
    assert_non_null(realpath(dir, real));
    snprintf(want, sizeof want, "%s/ck", real);
    assert_string_equal(d1, want);
    assert_string_equal(d2, want);
    assert_string_equal(k1[0], k2[0]);
    snprintf(want, sizeof want, "%s/other", real);
    assert_string_equal(d3, want);
    assert_string_not_equal(k1[0], k3[0]);
    /* nothing was created by checking */
    snprintf(want, sizeof want, "%s/ck", dir);
    assert_int_equal(access(want, F_OK), -1);
}

/* The named shapes are the engine's table, big ones included: accepted by the grid, each
 * job labelled with its parameter count, the counts of the published models. */
static void big_named_shapes_are_accepted_with_their_parameter_counts(void **s) {
    (void)s;
    const struct {
        const char *name;
        long long params;
        const char *label;
    } want[] = {{"llama2-7b", 6738415616LL, "llama2-7b (6.74B parameters) nvfp4"},
                {"llama3-8b", 8030261248LL, "llama3-8b (8.03B parameters) nvfp4"},
                {"llama3.2-1b", 1235814400LL, "llama3.2-1b (1.24B parameters) nvfp4"},
                {"tiny", 0, "tiny (0.85M parameters) nvfp4"}};
    const qc_grid_probe *probe = qsweep_probe();
    for (size_t i = 0; i < 3; i++) {
        qc_model_facts f = {0};
        qs_error err = {0};
        assert_int_equal(probe->synthetic(probe->user, want[i].name, &f, &err), QS_OK);
        assert_int_equal(f.n_params, want[i].params);
    }
    const char *p = write_grid(
        "big", "name: t\nkind: training\ntraining:\n  shapes: [llama2-7b, llama3-8b, "
               "llama3.2-1b, tiny]\n  dataset: {text: text.txt, ctx: 64}\n  recipes: [nvfp4]\n"
               "  lrs: [0.0003]\n  steps: 5\n");
    qc_grid *g = NULL;
    qs_error err = {0};
    if (qc_grid_load(p, NULL, 0, qsweep_probe(), &g, &err) != QS_OK) fail_msg("%s", err.msg);
    qc_job_list jobs = {0};
    assert_int_equal(qc_grid_expand(g, &jobs, &err), QS_OK);
    assert_int_equal(jobs.n, 4);
    for (size_t i = 0; i < 4; i++) {
        if (!strstr(jobs.jobs[i].label, want[i].label))
            fail_msg("label \"%s\", expected \"%s\"", jobs.jobs[i].label, want[i].label);
        json_t *spec = json_loads(jobs.jobs[i].spec, 0, NULL);
        qs_train_spec t;
        assert_int_equal(qs_train_decode(spec, &t, &err), QS_OK);
        assert_string_equal(t.shape, want[i].name);
        qs_train_clear(&t);
        json_decref(spec);
    }
    qc_job_list_free(&jobs);
    qc_grid_free(g);
}

/* data_parallel: absent (or 1) leaves the spec and its job key as they were; 2 adds the key
 * (another job) and asks resources for 2 GPUs; a decoded spec refuses 1 (a one-rank job
 * leaves the key out) and a gpu_count other than the ranks. */
static void data_parallel_is_keyed_and_asks_its_gpus(void **s) {
    (void)s;
    char k1[4][65], k2[4][65], cd[1024];
    size_t n1 = 0, n2 = 0;
    job_keys_of("dp1", GRID_HEAD "  recipes: [bf16]\n  lrs: [0.001]\n  steps: 5\n", NULL, 0, k1,
                &n1, cd, sizeof cd);
    job_keys_of("dp1b",
                GRID_HEAD "  recipes: [bf16]\n  lrs: [0.001]\n  steps: 5\n  data_parallel: 1\n",
                NULL, 0, k2, &n2, cd, sizeof cd);
    assert_string_equal(k1[0], k2[0]);
    const char *p = write_grid(
        "dp2", GRID_HEAD "  recipes: [bf16]\n  lrs: [0.001]\n  steps: 5\n  data_parallel: 2\n");
    qc_grid *g = NULL;
    qs_error err = {0};
    if (qc_grid_load(p, NULL, 0, qsweep_probe(), &g, &err) != QS_OK) fail_msg("%s", err.msg);
    qc_job_list jobs = {0};
    assert_int_equal(qc_grid_expand(g, &jobs, &err), QS_OK);
    assert_string_not_equal(jobs.jobs[0].key, k1[0]);
    json_t *spec = json_loads(jobs.jobs[0].spec, 0, NULL);
    qs_train_spec t;
    if (qs_train_decode(spec, &t, &err) != QS_OK) fail_msg("%s", err.msg);
    assert_int_equal(t.data_parallel, 2);
    assert_true(t.resources.present);
    assert_int_equal(t.resources.gpu_count, 2);
    qs_train_clear(&t);
    json_object_set_new(spec, "data_parallel", json_integer(1));
    assert_int_equal(qs_train_decode(spec, &t, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "data_parallel"));
    json_object_set_new(spec, "data_parallel", json_integer(3));
    assert_int_equal(qs_train_decode(spec, &t, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "gpu_count"));
    json_decref(spec);
    qc_job_list_free(&jobs);
    qc_grid_free(g);
    expect_error("dp99",
                 GRID_HEAD "  recipes: [bf16]\n  lrs: [0.001]\n  steps: 5\n  data_parallel: 99\n",
                 "data_parallel", "");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(grid_expands_into_train_jobs),
        cmocka_unit_test(the_experiment_file_loads),
        cmocka_unit_test(grid_recipes_are_the_workers),
        cmocka_unit_test(bad_grids_are_refused_at_their_place),
        cmocka_unit_test(spec_decoder_names_the_field_and_key_ignores_paths),
        cmocka_unit_test(set_errors_name_the_argument),
        cmocka_unit_test(repeated_set_names_the_argument_in_effect),
        cmocka_unit_test(checkpoint_dir_is_keyed_and_canonical),
        cmocka_unit_test(big_named_shapes_are_accepted_with_their_parameter_counts),
        cmocka_unit_test(data_parallel_is_keyed_and_asks_its_gpus),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
