/* Grid parsing, validation and expansion (coordinator/grid/grid.h) over real files: each
 * test writes a checkpoint, a token file and a grid, and loads it through the real loaders
 * (cli/probe.h). One test per rule of the issue ("Bad input is refused ... with a clear
 * error", expansion counts per isolation mode, job_key identity). */
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
#include <jansson.h>
#include <sodium.h>

#include "fixtures.h"
#include "grid.h"
#include "probe.h"
#include "spec.h"

#define N_LAYERS 3
#define VOCAB 64

typedef struct env {
    char *dir;
    char grid[512], ckpt[512], tokens[512];
} env;

static int setup(void **state) {
    env *e = calloc(1, sizeof *e);
    /* relative paths in --set values are relative to the current directory, in the grid to
       the grid's: both are the test directory here (fx_grid_dir makes it current) */
    if (!e || !(e->dir = fx_grid_dir("qsweep-grid", N_LAYERS, VOCAB, 300))) {
        free(e);
        return -1;
    }
    snprintf(e->grid, sizeof e->grid, "%s/grid.yaml", e->dir);
    snprintf(e->ckpt, sizeof e->ckpt, "%s/ckpt", e->dir);
    snprintf(e->tokens, sizeof e->tokens, "%s/toks.bin", e->dir);
    *state = e;
    return 0;
}

static int teardown(void **state) {
    env *e = *state;
    if (fx_grid_dir_release(e->dir)) return -1;
    free(e);
    return 0;
}

/* The reference grid: one model, both FP4 formats, both quantize modes, component-wise. */
static const char *const GOOD = "name: t\n"
                                "description: a test grid\n"
                                "models:\n"
                                "  - ckpt\n"
                                "dataset: {tokens: toks.bin, ctx: 16, max_chunks: 4}\n"
                                "sensitivity:\n"
                                "  formats: [nvfp4, mxfp4]\n"
                                "  quantize: [weights, weights+activations]\n"
                                "  modes: [component]\n"
                                "priority: 2\n"
                                "max_attempts: 4\n";

static qs_status load(env *e, const char *text, const char *const *sets, size_t n_sets, qc_grid **g,
                      qs_error *err) {
    assert_int_equal(fx_write_text(e->grid, text), 0);
    return qc_grid_load(e->grid, sets, n_sets, qsweep_probe(), g, err);
}

/* Asserts that the error message starts with "<grid file>:<line>:<col>: " and holds `what`. */
static void assert_error_at(env *e, const qs_error *err, int line, int col, const char *what) {
    char prefix[600];
    snprintf(prefix, sizeof prefix, "%s:%d:%d: ", e->grid, line, col);
    if (strncmp(err->msg, prefix, strlen(prefix)) != 0 || !strstr(err->msg, what))
        fail_msg("error '%s' does not start with '%s' or lacks '%s'", err->msg, prefix, what);
}

static size_t count_mode(const qc_job_list *l, const char *mode) {
    size_t n = 0;
    for (size_t i = 0; i < l->n; i++) {
        json_t *s = json_loads(l->jobs[i].spec, 0, NULL);
        const char *m = json_string_value(json_object_get(s, "mode"));
        n += m && !strcmp(m, mode);
        json_decref(s);
    }
    return n;
}

static void test_valid_grid_loads_with_its_values(void **state) {
    env *e = *state;
    qc_grid *g = NULL;
    qs_error err = {0};
    assert_int_equal(load(e, GOOD, NULL, 0, &g, &err), QS_OK);
    assert_string_equal(g->name, "t");
    assert_string_equal(g->description, "a test grid");
    assert_int_equal(g->n_models, 1);
    assert_int_equal(g->models[0].facts.n_layers, N_LAYERS);
    assert_int_equal(g->models[0].facts.vocab_size, VOCAB);
    assert_int_equal(g->ctx, 16);
    assert_int_equal(g->max_chunks, 4);
    assert_int_equal(g->dataset.n_tokens, 300);
    assert_int_equal(g->dataset.max_token, VOCAB - 1);
    assert_int_equal(g->priority, 2);
    assert_int_equal(g->max_attempts, 4);
    assert_int_equal(g->n_formats, 2);
    assert_string_equal(g->formats[1].options_json,
                        "{\"rounding\":\"rne\",\"scale_rule\":\"rceil\"}");
    assert_string_equal(g->metrics_json, "[\"kl\",\"ppl\",\"sqnr\",\"top1\"]");
    qc_grid_free(g);
}

/* Expansion counts (grid.h): component 7, block n_layers, layer 7*n_layers, leave_one_out 7,
 * cumulative n_layers per (format, quantize), plus one baseline per model. */
static void test_expansion_counts_per_mode(void **state) {
    env *e = *state;
    const char *sets[] = {"sensitivity.modes=[component, block, layer, leave_one_out, cumulative]"};
    qc_grid *g = NULL;
    qs_error err = {0};
    assert_int_equal(load(e, GOOD, sets, 1, &g, &err), QS_OK);
    qc_job_list l = {0};
    assert_int_equal(qc_grid_expand(g, &l, &err), QS_OK);
    size_t per = 2 * 2; /* formats x quantize */
    assert_int_equal(l.n, 1 + per * (7 + N_LAYERS + 7 * N_LAYERS + 7 + N_LAYERS));
    assert_int_equal(count_mode(&l, "component"), per * 7);
    assert_int_equal(count_mode(&l, "block"), per * N_LAYERS);
    assert_int_equal(count_mode(&l, "layer"), per * 7 * N_LAYERS);
    assert_int_equal(count_mode(&l, "leave_one_out"), per * 7);
    assert_int_equal(count_mode(&l, "cumulative"), per * N_LAYERS);
    qc_job_list_free(&l);
    qc_grid_free(g);
}

/* One baseline per model, first; every eval depends on its model's baseline. */
static void test_every_eval_depends_on_its_baseline(void **state) {
    env *e = *state;
    char second[600];
    snprintf(second, sizeof second, "%s/ckpt2", e->dir);
    assert_int_equal(fx_write_checkpoint(second, 2, VOCAB, 2), 0);
    const char *sets[] = {"models=[ckpt, ckpt2]"};
    qc_grid *g = NULL;
    qs_error err = {0};
    assert_int_equal(load(e, GOOD, sets, 1, &g, &err), QS_OK);
    qc_job_list l = {0};
    assert_int_equal(qc_grid_expand(g, &l, &err), QS_OK);
    assert_int_equal(l.n, 2 * (1 + 4 * 7));
    size_t baselines = 0;
    for (size_t i = 0; i < l.n; i++) {
        json_t *s = json_loads(l.jobs[i].spec, 0, NULL);
        const char *digest =
            json_string_value(json_object_get(json_object_get(s, "model"), "digest"));
        if (!strcmp(l.jobs[i].kind, "baseline")) {
            baselines++;
            assert_int_equal(l.jobs[i].n_deps, 0);
        } else {
            assert_int_equal(l.jobs[i].n_deps, 1);
            long b = l.jobs[i].deps[0];
            assert_true(b >= 0 && b < (long)i);
            assert_string_equal(l.jobs[b].kind, "baseline");
            json_t *bs = json_loads(l.jobs[b].spec, 0, NULL);
            assert_string_equal(
                json_string_value(json_object_get(json_object_get(bs, "model"), "digest")), digest);
            json_decref(bs);
        }
        json_decref(s);
    }
    assert_int_equal(baselines, 2);
    qc_job_list_free(&l);
    qc_grid_free(g);
}

/* The spec carries exactly the keys the schema's views read. */
static void test_spec_keys(void **state) {
    env *e = *state;
    qc_grid *g = NULL;
    qs_error err = {0};
    assert_int_equal(load(e, GOOD, NULL, 0, &g, &err), QS_OK);
    qc_job_list l = {0};
    assert_int_equal(qc_grid_expand(g, &l, &err), QS_OK);
    json_t *s = json_loads(l.jobs[1].spec, 0, NULL);
    const char *keys[] = {"dataset", "format", "format_options",   "kind", "metrics",
                          "mode",    "model",  "numerics_version", "part", "quantize"};
    assert_int_equal(json_object_size(s), 10);
    for (size_t i = 0; i < 10; i++)
        assert_non_null(json_object_get(s, keys[i]));
    assert_string_equal(json_string_value(json_object_get(s, "kind")), "eval");
    assert_string_equal(json_string_value(json_object_get(s, "mode")), "component");
    assert_string_equal(json_string_value(json_object_get(s, "part")), "q");
    assert_string_equal(json_string_value(json_object_get(s, "quantize")), "weights");
    json_t *d = json_object_get(s, "dataset");
    assert_int_equal(json_object_size(d), 4);
    assert_int_equal(json_integer_value(json_object_get(d, "ctx")), 16);
    assert_string_equal(json_string_value(json_object_get(d, "path")), e->tokens);
    json_decref(s);
    /* canonical text: what jansson writes with sorted keys, compact */
    s = json_loads(l.jobs[1].spec, 0, NULL);
    char *again = json_dumps(s, JSON_SORT_KEYS | JSON_COMPACT);
    assert_string_equal(again, l.jobs[1].spec);
    free(again);
    json_decref(s);
    qc_job_list_free(&l);
    qc_grid_free(g);
}

/* job_key = BLAKE2b-256 of the canonical spec without model.path and dataset.path. The
 * expected value is computed here directly with libsodium over the hand-written canonical
 * text, whatever the key order and spacing of the input. */
static void test_job_key_is_blake2b_of_spec_without_paths(void **state) {
    (void)state;
    const char *spec = "{ \"model\": {\"path\": \"/a/m\", \"digest\": \"ab\"}, \"kind\": \"eval\","
                       " \"dataset\": {\"path\": \"/b/t\", \"digest\": \"cd\", \"ctx\": 8}}";
    const char *canon = "{\"dataset\":{\"ctx\":8,\"digest\":\"cd\"},\"kind\":\"eval\",\"model\":{"
                        "\"digest\":\"ab\"}}";
    unsigned char h[32];
    char want[65], got[65];
    assert_int_equal(sodium_init() >= 0, 1);
    crypto_generichash(h, 32, (const unsigned char *)canon, strlen(canon), NULL, 0);
    sodium_bin2hex(want, sizeof want, h, 32);
    qs_error err = {0};
    assert_int_equal(qc_job_key(spec, got, &err), QS_OK);
    assert_string_equal(got, want);
    assert_int_equal(qc_job_key("[1]", got, &err), QS_EFORMAT);
}

/* Moving the files changes no key: digests are identity, paths are not. */
static void test_keys_survive_moving_the_files(void **state) {
    env *e = *state;
    qc_grid *g = NULL;
    qs_error err = {0};
    assert_int_equal(load(e, GOOD, NULL, 0, &g, &err), QS_OK);
    qc_job_list a = {0}, b = {0};
    assert_int_equal(qc_grid_expand(g, &a, &err), QS_OK);
    qc_grid_free(g);
    char moved[600], cmd[4096];
    snprintf(moved, sizeof moved, "%s/elsewhere", e->dir);
    snprintf(cmd, sizeof cmd, "mkdir -p %s && cp -r %s %s %s/", moved, e->ckpt, e->tokens, moved);
    assert_int_equal(system(cmd), 0);
    const char *sets[] = {"models.0=elsewhere/ckpt", "dataset.tokens=elsewhere/toks.bin"};
    assert_int_equal(load(e, GOOD, sets, 2, &g, &err), QS_OK);
    assert_int_equal(qc_grid_expand(g, &b, &err), QS_OK);
    assert_int_equal(a.n, b.n);
    for (size_t i = 0; i < a.n; i++) {
        assert_string_equal(a.jobs[i].key, b.jobs[i].key);
        assert_string_not_equal(a.jobs[i].spec, b.jobs[i].spec);
    }
    qc_job_list_free(&a);
    qc_job_list_free(&b);
    qc_grid_free(g);
}

/* Default options are written out, so "mxfp4" and mxfp4 with its default rule are one job,
 * and another rule is another job. */
static void test_format_options_are_canonical(void **state) {
    env *e = *state;
    const char *s1[] = {"sensitivity.formats=[mxfp4]"};
    const char *s2[] = {"sensitivity.formats=[{name: mxfp4, options: {scale_rule: rceil}}]"};
    const char *s3[] = {"sensitivity.formats=[{name: mxfp4, options: {scale_rule: floor}}]"};
    const char *const *sets[] = {s1, s2, s3};
    char keys[3][65];
    for (int i = 0; i < 3; i++) {
        qc_grid *g = NULL;
        qs_error err = {0};
        assert_int_equal(load(e, GOOD, sets[i], 1, &g, &err), QS_OK);
        qc_job_list l = {0};
        assert_int_equal(qc_grid_expand(g, &l, &err), QS_OK);
        memcpy(keys[i], l.jobs[1].key, 65);
        qc_job_list_free(&l);
        qc_grid_free(g);
    }
    assert_string_equal(keys[0], keys[1]);
    assert_string_not_equal(keys[0], keys[2]);
}

static void test_syntax_error_names_file_line_column(void **state) {
    env *e = *state;
    qc_grid *g = NULL;
    qs_error err = {0};
    const char *bad = "name: t\n"
                      "models:\n"
                      "  - ckpt\n"
                      "dataset: {tokens: toks.bin, ctx: 16]\n"
                      "sensitivity: {formats: [nvfp4]}\n";
    assert_int_equal(load(e, bad, NULL, 0, &g, &err), QS_EFORMAT);
    assert_null(g);
    /* column 36 is the ']' that cannot close a flow mapping */
    assert_error_at(e, &err, 4, 36, "YAML syntax error");
}

/* A grid is UTF-8 text. (libfyaml 0.7 never returns on a directive line holding an invalid
 * byte: this input hung the parser before the check.) */
static void test_bytes_that_are_not_utf8_are_refused(void **state) {
    env *e = *state;
    qc_grid *g = NULL;
    qs_error err = {0};
    assert_int_equal(load(e, "name: t\n%a b\x90\n", NULL, 0, &g, &err), QS_EFORMAT);
    assert_error_at(e, &err, 2, 5, "byte 0x90 is not UTF-8 text");
    assert_int_equal(load(e, "name: \xc3\xa9t\xc3\xa9\x01\n", NULL, 0, &g, &err), QS_EFORMAT);
    assert_error_at(e, &err, 1, 10, "byte 0x01 is not UTF-8 text");
    assert_int_equal(load(e, "name: \xc0\xae\n", NULL, 0, &g, &err), QS_EFORMAT); /* overlong '.' */
    assert_error_at(e, &err, 1, 7, "byte 0xc0");
}

static void test_missing_model_file_is_refused(void **state) {
    env *e = *state;
    const char *sets[] = {"models=[ckpt, no-such-model.gguf]"};
    qc_grid *g = NULL;
    qs_error err = {0};
    assert_int_equal(load(e, GOOD, NULL, 0, &g, &err), QS_OK);
    qc_grid_free(g);
    g = NULL;
    const char *text = "name: t\n"
                       "models:\n"
                       "  - ckpt\n"
                       "  - no-such-model.gguf\n"
                       "dataset: {tokens: toks.bin, ctx: 16}\n"
                       "sensitivity: {formats: [nvfp4]}\n";
    assert_int_equal(load(e, text, NULL, 0, &g, &err), QS_ENOTFOUND);
    assert_null(g);
    assert_error_at(e, &err, 4, 5, "no-such-model.gguf: no such file or directory");
    /* the same, from an override: the error names the --set argument */
    assert_int_equal(load(e, GOOD, sets, 1, &g, &err), QS_ENOTFOUND);
    assert_non_null(strstr(err.msg, "--set models=[ckpt, no-such-model.gguf]: model file"));
}

static void test_unknown_format_is_refused(void **state) {
    env *e = *state;
    const char *text = "name: t\n"
                       "models: [ckpt]\n"
                       "dataset: {tokens: toks.bin, ctx: 16}\n"
                       "sensitivity:\n"
                       "  formats: [nvfp4, nvfp5]\n";
    qc_grid *g = NULL;
    qs_error err = {0};
    assert_int_equal(load(e, text, NULL, 0, &g, &err), QS_EINVAL);
    assert_error_at(e, &err, 5, 20, "unknown format 'nvfp5'");
}

/* Format options go through the numeric core's parser: an option of another format is
 * refused at its key, an unknown value at the value, each naming what would be accepted. */
static void test_format_option_errors_point_at_key_or_value(void **state) {
    env *e = *state;
    const char *wrong_key = "name: t\n"
                            "models: [ckpt]\n"
                            "dataset: {tokens: toks.bin, ctx: 16}\n"
                            "sensitivity:\n"
                            "  formats: [{name: nvfp4, options: {scale_rule: floor}}]\n";
    qc_grid *g = NULL;
    qs_error err = {0};
    assert_int_equal(load(e, wrong_key, NULL, 0, &g, &err), QS_EINVAL);
    assert_error_at(e, &err, 5, 37, "option 'scale_rule' does not apply to format nvfp4");
    assert_non_null(strstr(err.msg, "rounding, clamp"));
    const char *wrong_value = "name: t\n"
                              "models: [ckpt]\n"
                              "dataset: {tokens: toks.bin, ctx: 16}\n"
                              "sensitivity:\n"
                              "  formats: [{name: mxfp4, options: {scale_rule: flor}}]\n";
    qs_error err2 = {0};
    assert_int_equal(load(e, wrong_value, NULL, 0, &g, &err2), QS_EINVAL);
    assert_error_at(e, &err2, 5, 49, "unknown value 'flor' for option scale_rule");
    assert_non_null(strstr(err2.msg, "rceil, floor, ceil, even"));
}

static void test_tokens_beyond_vocabulary_are_refused(void **state) {
    env *e = *state;
    char path[600];
    snprintf(path, sizeof path, "%s/big.bin", e->dir);
    uint32_t ids[40];
    for (int i = 0; i < 40; i++)
        ids[i] = (uint32_t)i;
    ids[33] = VOCAB; /* one id past the model's vocabulary (the file's own header allows it) */
    assert_int_equal(fx_write_tokens(path, ids, 40, 2 * VOCAB), 0);
    const char *text = "name: t\n"
                       "models: [ckpt]\n"
                       "dataset:\n"
                       "  tokens: big.bin\n"
                       "  ctx: 16\n"
                       "sensitivity: {formats: [nvfp4]}\n";
    qc_grid *g = NULL;
    qs_error err = {0};
    assert_int_equal(load(e, text, NULL, 0, &g, &err), QS_EINVAL);
    assert_error_at(e, &err, 4, 11, "token id 64");
    assert_non_null(strstr(err.msg, "beyond the vocabulary of model ckpt (vocab_size 64)"));
}

static void test_same_model_twice_is_refused(void **state) {
    env *e = *state;
    char copy[600], cmd[1400];
    snprintf(copy, sizeof copy, "%s/copy", e->dir);
    snprintf(cmd, sizeof cmd, "cp -r %s %s", e->ckpt, copy);
    assert_int_equal(system(cmd), 0);
    const char *sets[] = {"models=[ckpt, copy]"}; /* another path, the same bytes */
    qc_grid *g = NULL;
    qs_error err = {0};
    assert_int_equal(load(e, GOOD, sets, 1, &g, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "model copy is the same model as ckpt (equal digests)"));
}

static void test_unknown_key_is_refused(void **state) {
    env *e = *state;
    const char *text = "name: t\n"
                       "models: [ckpt]\n"
                       "datset: {tokens: toks.bin}\n";
    qc_grid *g = NULL;
    qs_error err = {0};
    assert_int_equal(load(e, text, NULL, 0, &g, &err), QS_EINVAL);
    assert_error_at(e, &err, 3, 1, "unknown key 'datset' in the grid: did you mean 'dataset'?");
}

static void test_value_of_wrong_type_is_refused(void **state) {
    env *e = *state;
    const char *text = "name: t\n"
                       "models: [ckpt]\n"
                       "dataset: {tokens: toks.bin, ctx: many}\n"
                       "sensitivity: {formats: [nvfp4]}\n";
    qc_grid *g = NULL;
    qs_error err = {0};
    assert_int_equal(load(e, text, NULL, 0, &g, &err), QS_EFORMAT);
    assert_error_at(e, &err, 3, 34, "expected an integer in [3, 1048576] for dataset.ctx");
}

static void test_unknown_mode_and_metric_are_refused(void **state) {
    env *e = *state;
    const char *s1[] = {"sensitivity.modes=[component, blocks]"};
    const char *s2[] = {"+sensitivity.metrics=[ppl, bleu]"};
    qc_grid *g = NULL;
    qs_error err = {0};
    assert_int_equal(load(e, GOOD, s1, 1, &g, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "unknown isolation mode 'blocks'"));
    assert_int_equal(load(e, GOOD, s2, 1, &g, &err), QS_EINVAL);
    assert_non_null(
        strstr(err.msg, "--set +sensitivity.metrics=[ppl, bleu]: unknown metric 'bleu'"));
}

/* Hydra-style overrides: replace a value, a list item, add an absent key with '+'. */
/* A single-quoted scalar of consecutive escaped quotes is one libfyaml 0.7 miscounts: it
 * would make a wrong text and leak 1 KiB (coordinator/grid/config.c, misread_scalar). It is
 * refused at its position, in the file (a newline and 20 single quotes, and as a value) and
 * in --set, before any text of it is made: under the sanitizer build LeakSanitizer fails this
 * test if anything leaks. The same escapes with letters between them load. */
static void test_scalars_libfyaml_misreads_are_refused_without_a_leak(void **state) {
    env *e = *state;
    qc_grid *g = NULL;
    qs_error err = {0};
    char quotes[32];
    memset(quotes, '\'', 20);
    quotes[20] = '\0';
    char text[64];
    snprintf(text, sizeof text, "\n%s", quotes);
    assert_int_equal(strlen(text), 21);
    assert_int_equal(load(e, text, NULL, 0, &g, &err), QS_EFORMAT);
    assert_null(g);
    /* at the scalar's line (the column is libfyaml's report of the node) */
    char at[600];
    snprintf(at, sizeof at, "%s:2:", e->grid);
    assert_int_equal(strncmp(err.msg, at, strlen(at)), 0);
    assert_non_null(strstr(err.msg, "a quoted scalar this libfyaml"));
    char with[1200];
    snprintf(with, sizeof with, "name: %s\n%s", quotes, GOOD + strlen("name: t\n"));
    assert_int_equal(load(e, with, NULL, 0, &g, &err), QS_EFORMAT);
    snprintf(at, sizeof at, "%s:1:", e->grid);
    assert_int_equal(strncmp(err.msg, at, strlen(at)), 0);
    assert_non_null(strstr(err.msg, "write it in double quotes"));
    char set[64];
    snprintf(set, sizeof set, "name=%s", quotes);
    const char *sets[] = {set};
    assert_int_equal(load(e, GOOD, sets, 1, &g, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "--set name="));
    assert_non_null(strstr(err.msg, "a quoted scalar this libfyaml"));
    /* nine escaped quotes with letters between: read right, loads */
    snprintf(with, sizeof with, "name: 'a''b''c''d''e''f''g''h''i''j'\n%s",
             GOOD + strlen("name: t\n"));
    assert_int_equal(load(e, with, NULL, 0, &g, &err), QS_OK);
    assert_string_equal(g->name, "a'b'c'd'e'f'g'h'i'j");
    qc_grid_free(g);
}

static void test_set_overrides_apply_before_validation(void **state) {
    env *e = *state;
    const char *sets[] = {"dataset.ctx=32", "sensitivity.formats.1=nvfp4_2d",
                          "+sensitivity.metrics=[ppl, kl]", "priority=-3", "name=renamed"};
    qc_grid *g = NULL;
    qs_error err = {0};
    assert_int_equal(load(e, GOOD, sets, 5, &g, &err), QS_OK);
    assert_int_equal(g->ctx, 32);
    assert_string_equal(g->formats[1].name, "nvfp4_2d");
    assert_string_equal(g->metrics_json, "[\"kl\",\"ppl\"]");
    assert_int_equal(g->priority, -3);
    assert_string_equal(g->name, "renamed");
    assert_non_null(strstr(g->source, "renamed"));
    qc_grid_free(g);
}

static void test_set_of_mistyped_key_names_the_nearest(void **state) {
    env *e = *state;
    const char *leaf[] = {"dataset.ctxx=32"};
    const char *parent[] = {"datasett.ctx=32"};
    qc_grid *g = NULL;
    qs_error err = {0};
    assert_int_equal(load(e, GOOD, leaf, 1, &g, &err), QS_EINVAL);
    assert_non_null(
        strstr(err.msg, "the grid has no key 'dataset.ctxx'; did you mean 'dataset.ctx'?"));
    assert_null(strstr(err.msg, "+dataset.ctxx"));
    assert_int_equal(load(e, GOOD, parent, 1, &g, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "the grid has no key 'datasett'; did you mean 'dataset'?"));
}

static void test_set_of_absent_key_needs_plus(void **state) {
    env *e = *state;
    const char *sets[] = {"dataset.newthing=32"};
    const char *bad[] = {"dataset.ctx"};
    const char *idx[] = {"models.5=ckpt"};
    qc_grid *g = NULL;
    qs_error err = {0};
    assert_int_equal(load(e, GOOD, sets, 1, &g, &err), QS_EINVAL);
    assert_non_null(strstr(
        err.msg, "the grid has no key 'dataset.newthing' (write +dataset.newthing=32 to add it)"));
    assert_int_equal(load(e, GOOD, bad, 1, &g, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "expected key=value"));
    assert_int_equal(load(e, GOOD, idx, 1, &g, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "'5' is not an index of a list of 1 items"));
}

static void test_environment_in_paths(void **state) {
    env *e = *state;
    setenv("QSWEEP_TEST_GRID_DIR", e->dir, 1);
    unsetenv("QSWEEP_TEST_UNSET");
    const char *sets[] = {"models.0=${QSWEEP_TEST_UNSET:-${QSWEEP_TEST_GRID_DIR}}/ckpt"};
    const char *unset[] = {"models.0=${QSWEEP_TEST_UNSET}/ckpt"};
    qc_grid *g = NULL;
    qs_error err = {0};
    assert_int_equal(load(e, GOOD, sets, 1, &g, &err), QS_OK);
    assert_string_equal(g->models[0].path, e->ckpt);
    qc_grid_free(g);
    g = NULL;
    assert_int_equal(load(e, GOOD, unset, 1, &g, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "environment variable QSWEEP_TEST_UNSET is not set"));
}

/* A path in the grid is relative to the grid file, a path given with --set to the current
 * directory (where the command was typed). */
static void test_relative_paths(void **state) {
    env *e = *state;
    char sub[600];
    snprintf(sub, sizeof sub, "%s/sub", e->dir);
    assert_int_equal(mkdir(sub, 0755), 0);
    assert_int_equal(chdir(sub), 0);
    const char *sets[] = {"dataset.tokens=../toks.bin"};
    qc_grid *g = NULL;
    qs_error err = {0};
    assert_int_equal(load(e, GOOD, sets, 1, &g, &err), QS_OK);
    assert_string_equal(g->models[0].path, e->ckpt);
    assert_string_equal(g->dataset_path, e->tokens);
    qc_grid_free(g);
    const char *grid_relative[] = {"dataset.tokens=toks.bin"};
    assert_int_equal(load(e, GOOD, grid_relative, 1, &g, &err), QS_ENOTFOUND);
    assert_non_null(strstr(err.msg, "/sub/toks.bin: no such file or directory"));
}

static void test_synthetic_models_expand_by_their_shape(void **state) {
    env *e = *state;
    const char *sets[] = {"models=[{synthetic: llama2-7b, seed: 3}]", "dataset.tokens=toks.bin",
                          "sensitivity.modes=[block]", "sensitivity.quantize=weights",
                          "sensitivity.formats=[nvfp4]"};
    qc_grid *g = NULL;
    qs_error err = {0};
    assert_int_equal(load(e, GOOD, sets, 5, &g, &err), QS_OK);
    assert_string_equal(g->models[0].path, "synthetic:llama2-7b:3");
    qc_job_list l = {0};
    assert_int_equal(qc_grid_expand(g, &l, &err), QS_OK);
    assert_int_equal(l.n, 1 + 32); /* Llama-2-7B has 32 blocks */
    qc_job_list_free(&l);
    qc_grid_free(g);
    const char *bad[] = {"models=[{synthetic: llama9-1t}]"};
    assert_int_equal(load(e, GOOD, bad, 1, &g, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "unknown synthetic shape 'llama9-1t'"));
}

/* '+key=value' adding a key the grid does not know is refused naming the --set argument (the
 * key node it created has no position in the file: reporting on it crashed libfyaml). */
static void test_set_adding_an_unknown_key_names_the_set_argument(void **state) {
    env *e = *state;
    const char *top[] = {"+newkey=1"};
    const char *nested[] = {"+dataset.newkey=1"};
    qc_grid *g = NULL;
    qs_error err = {0};
    assert_int_equal(load(e, GOOD, top, 1, &g, &err), QS_EINVAL);
    assert_null(g);
    assert_non_null(strstr(err.msg, "--set +newkey=1: unknown key 'newkey' in the grid"));
    assert_int_equal(load(e, GOOD, nested, 1, &g, &err), QS_EINVAL);
    assert_non_null(
        strstr(err.msg, "--set +dataset.newkey=1: unknown key 'newkey' in the dataset"));
}

/* '+' adds a key; a key that exists is replaced without it. */
static void test_set_plus_of_an_existing_key_is_refused(void **state) {
    env *e = *state;
    const char *sets[] = {"+dataset.ctx=32"};
    qc_grid *g = NULL;
    qs_error err = {0};
    assert_int_equal(load(e, GOOD, sets, 1, &g, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "--set +dataset.ctx=32: the grid already has key "
                                    "'dataset.ctx' ('+' adds a key; write dataset.ctx=32"));
    const char *item[] = {"+models.0=ckpt"};
    assert_int_equal(load(e, GOOD, item, 1, &g, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "--set +models.0=ckpt: item 'models.0' exists ('+' adds a "
                                    "key; write models.0=ckpt to replace the item)"));
}

/* GOOD with `--set +numerics=value`: the load's status, its grid freed, its error in err. */
static qs_status load_numerics(env *e, const char *value, qs_error *err) {
    char set[96];
    snprintf(set, sizeof set, "+numerics=%s", value);
    const char *sets[] = {set};
    qc_grid *g = NULL;
    qs_status st = load(e, GOOD, sets, 1, &g, err);
    if (!st && strcmp(g->numerics, value)) fail_msg("numerics: %s read as %s", value, g->numerics);
    qc_grid_free(g);
    return st;
}

/* A `numerics` path names one a worker can announce (worker/jobs/jobs.h qw_jobs_numerics_path):
 * a prefix, a CUDA path without its GEMM request, a misspelt CPU family or an upper-case
 * OpenBLAS core would leave every job pending with no worker able to take it. */
static void test_numerics_path_no_worker_announces_is_refused(void **state) {
    env *e = *state;
    static const char *const bad[] = {"cpu-",
                                      "cuda-",
                                      "cuda-cc90",
                                      "cuda-cc-auto",
                                      "cuda-cc90-native",
                                      "cuda-ccx0-auto",
                                      "cpu-qsweep-fixed",
                                      "cpu-qsweep-fixed1",
                                      "cpu-openblas-",
                                      "cpu-openblas-0.3.21",
                                      "cpu-openblas-0.3.21-Haswell",
                                      "cpu-blas",
                                      "cuda-cc090-auto"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        qs_error err = {0};
        if (load_numerics(e, bad[i], &err) != QS_EINVAL) fail_msg("numerics: %s accepted", bad[i]);
        char want[128];
        snprintf(want, sizeof want, "numerics: '%s' is not a numerics path", bad[i]);
        if (!strstr(err.msg, want)) fail_msg("numerics: %s: %s", bad[i], err.msg);
    }
    static const char *const good[] = {"any",
                                       "cpu",
                                       "cuda",
                                       "cpu-qsweep-fixed2",
                                       "cpu-openblas-0.3.21-haswell",
                                       "cuda-cc90-auto",
                                       "cuda-cc100-emulated",
                                       "cuda-cc80-bf16",
                                       "cuda-cc120-fp32"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        qs_error err = {0};
        if (load_numerics(e, good[i], &err) != QS_OK)
            fail_msg("numerics: %s refused: %s", good[i], err.msg);
    }
}

/* A chunk scores positions ctx/2 .. ctx-2 (worker/engine/eval.h): none at ctx 2, one at 3. */
static void test_ctx_below_three_is_refused(void **state) {
    env *e = *state;
    const char *two[] = {"dataset.ctx=2"};
    const char *three[] = {"dataset.ctx=3"};
    qc_grid *g = NULL;
    qs_error err = {0};
    assert_int_equal(load(e, GOOD, two, 1, &g, &err), QS_EFORMAT);
    assert_non_null(strstr(
        err.msg, "--set dataset.ctx=2: expected an integer in [3, 1048576] for dataset.ctx"));
    assert_int_equal(load(e, GOOD, three, 1, &g, &err), QS_OK);
    assert_int_equal(g->ctx, 3);
    qc_grid_free(g);
}

/* An empty value has no position of its own: the error names its key's. */
static void test_empty_value_names_its_key(void **state) {
    env *e = *state;
    const char *text = "name: t\n"
                       "models: [ckpt]\n"
                       "dataset:\n"
                       "  tokens: toks.bin\n"
                       "  ctx:\n"
                       "sensitivity: {formats: [nvfp4]}\n";
    qc_grid *g = NULL;
    qs_error err = {0};
    assert_int_equal(load(e, text, NULL, 0, &g, &err), QS_EFORMAT);
    assert_error_at(e, &err, 5, 3, "expected an integer in [3, 1048576] for dataset.ctx");
}

/* A grid is one YAML document; a second one would be ignored silently. */
static void test_second_document_is_refused(void **state) {
    env *e = *state;
    char text[1024];
    snprintf(text, sizeof text, "%s---\nname: other\n", GOOD);
    qc_grid *g = NULL;
    qs_error err = {0};
    assert_int_equal(load(e, text, NULL, 0, &g, &err), QS_EFORMAT);
    assert_null(g);
    assert_error_at(e, &err, 12, 1, "a second YAML document");
}

/* NUL and control characters in strings are refused (a name cut at a NUL, a path with junk
 * after it); the description alone may hold tab and newline. */
static void test_control_characters_in_strings_are_refused(void **state) {
    env *e = *state;
    const char *nul_name = "name: \"a\\0b\"\n"
                           "models: [ckpt]\n"
                           "dataset: {tokens: toks.bin, ctx: 16}\n"
                           "sensitivity: {formats: [nvfp4]}\n";
    const char *nul_path = "name: t\n"
                           "models: [ckpt]\n"
                           "dataset: {tokens: \"toks.bin\\0junk\", ctx: 16}\n"
                           "sensitivity: {formats: [nvfp4]}\n";
    const char *newline_name[] = {"name=\"a\\nb\""};
    const char *multiline_description[] = {"description=\"line one\\n\\tline two\""};
    const char *escape_description[] = {"description=\"bell \\x07\""};
    qc_grid *g = NULL;
    qs_error err = {0};
    assert_int_equal(load(e, nul_name, NULL, 0, &g, &err), QS_EINVAL);
    /* libfyaml places a quoted scalar at its first character, after the quote */
    assert_error_at(e, &err, 1, 8, "control character U+0000 at byte 1 of a string");
    assert_int_equal(load(e, nul_path, NULL, 0, &g, &err), QS_EINVAL);
    assert_error_at(e, &err, 3, 20, "control character U+0000 at byte 8 of a string");
    assert_int_equal(load(e, GOOD, newline_name, 1, &g, &err), QS_EINVAL);
    assert_non_null(
        strstr(err.msg, "--set name=\"a\\nb\": control character U+000A at byte 1 of a string"));
    assert_int_equal(load(e, GOOD, escape_description, 1, &g, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "control character U+0007 at byte 5"));
    assert_int_equal(load(e, GOOD, multiline_description, 1, &g, &err), QS_OK);
    assert_string_equal(g->description, "line one\n\tline two");
    qc_grid_free(g);
}

/* Aliases work, but what they expand to is bounded: six levels of ten ("billion laughs")
 * would be 10^6 nodes and is refused at an alias before libfyaml copies anything. */
static void test_alias_expansion_is_capped(void **state) {
    env *e = *state;
    const char *small = "name: t\n"
                        "models: [ckpt]\n"
                        "dataset: {tokens: toks.bin, ctx: 16}\n"
                        "sensitivity:\n"
                        "  formats: &f [nvfp4, mxfp4]\n"
                        "  modes: [component]\n";
    qc_grid *g = NULL;
    qs_error err = {0};
    assert_int_equal(load(e, small, NULL, 0, &g, &err), QS_OK);
    qc_grid_free(g);
    g = NULL;
    const char *laughs = "name: t\n"
                         "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
                         "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                         "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
                         "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
                         "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
                         "f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n";
    assert_int_equal(load(e, laughs, NULL, 0, &g, &err), QS_EINVAL);
    assert_null(g);
    /* counted in file order, a, b, c and d reach 11110 nodes; the eighth alias of line 6
       passes 100000 (libfyaml places an alias at its name, after the '*') */
    assert_error_at(e, &err, 6, 37, "YAML aliases expand to more than 100000 nodes");
}

/* The worker refuses a token file whose header declares a vocabulary larger than the model's
 * (worker/engine/eval.c); so does the grid, whatever ids the file holds. */
static void test_token_header_vocab_beyond_model_is_refused(void **state) {
    env *e = *state;
    char path[600];
    snprintf(path, sizeof path, "%s/wide.bin", e->dir);
    uint32_t ids[40];
    for (int i = 0; i < 40; i++)
        ids[i] = (uint32_t)i; /* every id < VOCAB */
    assert_int_equal(fx_write_tokens(path, ids, 40, VOCAB + 1), 0);
    const char *text = "name: t\n"
                       "models: [ckpt]\n"
                       "dataset:\n"
                       "  tokens: wide.bin\n"
                       "  ctx: 16\n"
                       "sensitivity: {formats: [nvfp4]}\n";
    qc_grid *g = NULL;
    qs_error err = {0};
    assert_int_equal(load(e, text, NULL, 0, &g, &err), QS_EINVAL);
    assert_error_at(e, &err, 4, 11,
                    "declares vocab_size 65 in its header, larger than the "
                    "vocabulary of model ckpt (vocab_size 64)");
}

/* ctx beyond the context the model was trained for (max_position_embeddings 256 in the test
 * checkpoint's config.json) is refused. */
static void test_ctx_beyond_max_position_embeddings_is_refused(void **state) {
    env *e = *state;
    const char *at[] = {"dataset.ctx=256"};
    const char *past[] = {"dataset.ctx=257"};
    qc_grid *g = NULL;
    qs_error err = {0};
    assert_int_equal(load(e, GOOD, at, 1, &g, &err), QS_OK);
    assert_int_equal(g->models[0].facts.max_position_embeddings, 256);
    qc_grid_free(g);
    g = NULL;
    assert_int_equal(load(e, GOOD, past, 1, &g, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "--set dataset.ctx=257: dataset.ctx 257 is longer than the "
                                    "context model ckpt was trained for "
                                    "(max_position_embeddings 256)"));
}

/* A pipeline (grid_pipeline.c): micro trained with bf16 and nvfp4, seeds 1 and 2, then each
 * trained model swept component-wise in NVFP4. Line 16 holds the trained-model selection (its
 * "train" at column 21, "bf16" at 37, "nvfp4" at 43, "all" at 57), line 17 the sweep's
 * dataset (its ctx value at column 38). */
static const char *const PIPE = "name: p\n"
                                "kind: pipeline\n"
                                "stages:\n"
                                "  train:\n"
                                "    kind: training\n"
                                "    training:\n"
                                "      shapes: [micro]\n"
                                "      dataset: {tokens: toks.bin, ctx: 16, val_fraction: 0.1}\n"
                                "      recipes: [bf16, nvfp4]\n"
                                "      lrs: [0.003]\n"
                                "      seeds: [1, 2]\n"
                                "      steps: 4\n"
                                "      checkpoint_dir: ckpts\n"
                                "  sweep:\n"
                                "    kind: sensitivity\n"
                                "    models: [{from: train, recipe: [bf16, nvfp4], seed: all}]\n"
                                "    dataset: {tokens: toks.bin, ctx: 016}\n"
                                "    sensitivity: {formats: [nvfp4], modes: [component]}\n";

/* PIPE with the first `from` replaced by `to` (into a static buffer). */
static const char *pipe_with(const char *from, const char *to) {
    static char buf[4096];
    const char *at = strstr(PIPE, from);
    assert_non_null(at);
    snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - PIPE), PIPE, to, at + strlen(from));
    return buf;
}

static const char *spec_str(const json_t *spec, const char *obj, const char *key) {
    return json_string_value(json_object_get(obj ? json_object_get(spec, obj) : spec, key));
}

/* Each baseline and eval job of a trained model names its training job (model.trained_by),
 * depends on exactly it (and an eval job on its baseline too), and its model is
 * checkpoint_dir/<that key> with the stand-in digest; the facts come from the shape. */
static void test_pipeline_sweep_jobs_depend_on_the_training_job_of_their_model(void **state) {
    env *e = *state;
    qc_grid *g = NULL;
    qs_error err = {0};
    assert_int_equal(load(e, pipe_with("ctx: 016", "ctx: 16"), NULL, 0, &g, &err), QS_OK);
    assert_int_equal(qc_grid_pipeline_stages(g), 2);
    const char *kind = NULL;
    assert_string_equal(qc_grid_pipeline_stage(g, 1, &kind), "sweep");
    assert_string_equal(kind, "sensitivity");
    qc_job_list l = {0};
    assert_int_equal(qc_grid_expand(g, &l, &err), QS_OK);
    /* 4 train jobs, then per trained model (micro: 2 blocks) 1 baseline and 7 component jobs */
    assert_int_equal(l.n, 4 + 4 * (1 + 7));
    char real[4096], dir[4200];
    assert_non_null(realpath(e->dir, real));
    snprintf(dir, sizeof dir, "%s/ckpts/", real);
    for (size_t i = 0; i < l.n; i++) {
        const qc_job *j = &l.jobs[i];
        if (i < 4) {
            assert_string_equal(j->kind, "train");
            assert_string_equal(j->stage, "train");
            assert_int_equal(j->n_deps, 0);
            continue;
        }
        assert_string_equal(j->stage, "sweep");
        json_t *s = json_loads(j->spec, 0, NULL);
        const char *by = spec_str(s, "model", "trained_by");
        assert_non_null(by);
        size_t trains = 0;
        long train = -1;
        for (size_t d = 0; d < j->n_deps; d++)
            if (!strcmp(l.jobs[j->deps[d]].kind, "train")) {
                trains++;
                train = j->deps[d];
            }
        assert_int_equal(trains, 1);
        assert_string_equal(l.jobs[train].key, by);
        assert_int_equal(j->n_deps, strcmp(j->kind, "eval") ? 1 : 2);
        char want[65], path[4300];
        assert_int_equal(qs_trained_model_digest(by, want, &err), QS_OK);
        assert_string_equal(spec_str(s, "model", "digest"), want);
        snprintf(path, sizeof path, "%s%s", dir, by);
        assert_string_equal(spec_str(s, "model", "path"), path);
        json_decref(s);
    }
    assert_int_equal(count_mode(&l, "component"), 4 * 7);
    /* the same grid again: the same keys (the sweep's derive from the training jobs') */
    qc_grid *g2 = NULL;
    qc_job_list l2 = {0};
    assert_int_equal(load(e, pipe_with("ctx: 016", "ctx: 16"), NULL, 0, &g2, &err), QS_OK);
    assert_int_equal(qc_grid_expand(g2, &l2, &err), QS_OK);
    assert_int_equal(l2.n, l.n);
    for (size_t i = 0; i < l.n; i++)
        assert_string_equal(l.jobs[i].key, l2.jobs[i].key);
    qc_job_list_free(&l);
    qc_job_list_free(&l2);
    qc_grid_free(g);
    qc_grid_free(g2);
}

/* A selection keeps the training jobs whose axes it names; {init: path} fine-tunes in a
 * pipeline too, its model's facts (3 blocks) those of the checkpoint. */
static void test_pipeline_selects_by_axes_and_fine_tunes(void **state) {
    env *e = *state;
    qc_grid *g = NULL;
    qs_error err = {0};
    const char *sets[] = {"stages.sweep.models=[{from: train, recipe: nvfp4, seed: [2]}]",
                          "stages.sweep.dataset.ctx=16"};
    assert_int_equal(load(e, PIPE, sets, 2, &g, &err), QS_OK);
    qc_job_list l = {0};
    assert_int_equal(qc_grid_expand(g, &l, &err), QS_OK);
    assert_int_equal(l.n, 4 + 1 + 7);
    /* expansion order: recipes, then seeds: nvfp4 seed 2 is the 4th training job */
    json_t *s = json_loads(l.jobs[4].spec, 0, NULL);
    assert_string_equal(spec_str(s, "model", "trained_by"), l.jobs[3].key);
    json_decref(s);
    qc_job_list_free(&l);
    qc_grid_free(g);
    g = NULL;
    const char *init[] = {"stages.train.training.shapes=[{init: ckpt}]",
                          "stages.sweep.dataset.ctx=16"};
    assert_int_equal(load(e, PIPE, init, 2, &g, &err), QS_OK);
    assert_int_equal(qc_grid_expand(g, &l, &err), QS_OK);
    assert_int_equal(l.n, 4 + 4 * (1 + 7));
    assert_int_equal(count_mode(&l, "component"), 4 * 7);
    qc_job_list_free(&l);
    qc_grid_free(g);
    g = NULL;
    /* mode block: one job per block of the shape (micro: 2) */
    const char *blocks[] = {"stages.sweep.sensitivity.modes=[block]",
                            "stages.sweep.dataset.ctx=16"};
    assert_int_equal(load(e, PIPE, blocks, 2, &g, &err), QS_OK);
    assert_int_equal(qc_grid_expand(g, &l, &err), QS_OK);
    assert_int_equal(count_mode(&l, "block"), 4 * 2);
    qc_job_list_free(&l);
    qc_grid_free(g);
}

/* Errors of a pipeline name file:line:column: a `from` naming no training stage before, an
 * axis value the training stage does not have, a stage of another kind, a key a selection
 * does not take, ctx beyond the trained shape's context, a text for a trained model. */
static void test_pipeline_errors_name_file_line_column(void **state) {
    env *e = *state;
    qc_grid *g = NULL;
    qs_error err = {0};
    assert_int_equal(load(e, pipe_with("from: train", "from: nope"), NULL, 0, &g, &err), QS_EINVAL);
    assert_null(g);
    assert_error_at(e, &err, 16, 21,
                    "from: 'nope' is not a training stage before this one (expected train)");
    assert_int_equal(
        load(e, pipe_with("[bf16, nvfp4], seed", "[bf16, fp8], seed"), NULL, 0, &g, &err),
        QS_EINVAL);
    assert_error_at(e, &err, 16, 43,
                    "recipe 'fp8': stage train has no such recipe (it has bf16, nvfp4)");
    assert_int_equal(load(e, pipe_with("seed: all", "seed: 3"), NULL, 0, &g, &err), QS_EINVAL);
    assert_error_at(e, &err, 16, 57, "seed '3': stage train has no such seed (it has 1, 2)");
    assert_int_equal(load(e, pipe_with("seed: all", "seeds: all"), NULL, 0, &g, &err), QS_EINVAL);
    assert_error_at(e, &err, 16, 51, "seeds");
    assert_int_equal(load(e, pipe_with("ctx: 016", "ctx: 200"), NULL, 0, &g, &err), QS_EINVAL);
    assert_error_at(e, &err, 17, 38,
                    "dataset.ctx 200 is longer than the context model train/micro/bf16/seed=1 "
                    "was trained for (max_position_embeddings 128)");
    assert_int_equal(load(e, pipe_with("kind: training", "kind: pipeline"), NULL, 0, &g, &err),
                     QS_EINVAL);
    assert_error_at(e, &err, 5, 11, "stage train: expected kind training or sensitivity");
    assert_int_equal(load(e, pipe_with("tokens: toks.bin, ctx: 016", "text: toks.bin, ctx: 16"),
                          NULL, 0, &g, &err),
                     QS_EINVAL);
    assert_error_at(e, &err, 17, 21, "is trained by the pipeline and has no tokenizer");
    /* a tensor-parallel degree the trained shape cannot be split over (micro: 4 heads) */
    const char *tp[] = {"+resources={tensor_parallel: 3}"};
    assert_int_equal(load(e, pipe_with("ctx: 016", "ctx: 16"), tp, 1, &g, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "resources: model train/micro/bf16/seed=1: tensor parallel 3"));
    /* a sensitivity stage before the training stage it names */
    char swapped[4096];
    const char *sweep = strstr(PIPE, "  sweep:\n");
    const char *train = strstr(PIPE, "  train:\n");
    snprintf(swapped, sizeof swapped, "%.*s%s%.*s", (int)(train - PIPE), PIPE, sweep,
             (int)(sweep - train), train);
    assert_int_equal(load(e, swapped, NULL, 0, &g, &err), QS_EINVAL);
    assert_error_at(e, &err, 6, 21, "from: 'train' is not a training stage before this one");
    assert_null(g);
}

/* Learning rates that %g prints alike stay apart: the selection `lr: 0.001` keeps the 4 runs
 * of 0.001 (not those of 0.0010000001), whose models are named with the lr. */
static void test_pipeline_learning_rates_print_apart(void **state) {
    env *e = *state;
    char grid[4096];
    snprintf(grid, sizeof grid, "%s", pipe_with("lrs: [0.003]", "lrs: [0.001, 0.0010000001]"));
    char *at = strstr(grid, "seed: all}");
    assert_non_null(at);
    char tail[4096];
    snprintf(tail, sizeof tail, "%s", at + strlen("seed: all}"));
    snprintf(at, sizeof grid - (size_t)(at - grid), "seed: all, lr: 0.001}%s", tail);
    at = strstr(grid, "ctx: 016");
    assert_non_null(at);
    memcpy(at, "ctx:  16", 8);
    qc_grid *g = NULL;
    qs_error err = {0};
    if (load(e, grid, NULL, 0, &g, &err) != QS_OK) fail_msg("%s", err.msg);
    qc_job_list l = {0};
    assert_int_equal(qc_grid_expand(g, &l, &err), QS_OK);
    assert_int_equal(l.n, 8 + 4 * (1 + 7)); /* 8 training runs, 4 of them swept */
    size_t named = 0;
    for (size_t i = 8; i < l.n; i++) {
        assert_non_null(strstr(l.jobs[i].label, "/lr=0.001/seed="));
        named++;
    }
    assert_int_equal(named, 32);
    qc_job_list_free(&l);
    qc_grid_free(g);
}

/* Two stages that make the same jobs (a training stage repeated under another name, a sweep
 * repeated) are refused at expansion, naming both stages: the counts would hold every job
 * twice while the store keeps it once. */
static void test_pipeline_stages_that_repeat_jobs_are_refused(void **state) {
    env *e = *state;
    char twice[4096];
    const char *sweep = strstr(PIPE, "  sweep:\n");
    const char *train = strstr(PIPE, "  train:\n");
    /* train, then the same training body as train2, then the sweep */
    snprintf(twice, sizeof twice, "%.*s  train2:%.*s%s", (int)(sweep - PIPE), PIPE,
             (int)(sweep - train - strlen("  train:")), train + strlen("  train:"), sweep);
    char *at = strstr(twice, "ctx: 016");
    assert_non_null(at);
    memcpy(at, "ctx:  16", 8);
    qc_grid *g = NULL;
    qs_error err = {0};
    assert_int_equal(load(e, twice, NULL, 0, &g, &err), QS_OK);
    qc_job_list l = {0};
    assert_int_equal(qc_grid_expand(g, &l, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "stages train and train2 make the same job (train "));
    qc_job_list_free(&l);
    qc_grid_free(g);
    /* the sweep repeated as sweep2 */
    const char *valid = pipe_with("ctx: 016", "ctx: 16");
    size_t n = strlen(valid);
    assert_true(2 * n + 16 < sizeof twice);
    memcpy(twice, valid, n);
    memcpy(twice + n, "  sweep2:", 9);
    const char *body = strstr(valid, "  sweep:\n") + strlen("  sweep:");
    memcpy(twice + n + 9, body, strlen(body) + 1);
    g = NULL;
    assert_int_equal(load(e, twice, NULL, 0, &g, &err), QS_OK);
    assert_int_equal(qc_grid_expand(g, &l, &err), QS_EINVAL);
    if (!strstr(err.msg, "stages sweep and sweep2 make the same job (")) fail_msg("%s", err.msg);
    qc_job_list_free(&l);
    qc_grid_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_valid_grid_loads_with_its_values, setup, teardown),
        cmocka_unit_test_setup_teardown(test_expansion_counts_per_mode, setup, teardown),
        cmocka_unit_test_setup_teardown(test_every_eval_depends_on_its_baseline, setup, teardown),
        cmocka_unit_test_setup_teardown(test_spec_keys, setup, teardown),
        cmocka_unit_test(test_job_key_is_blake2b_of_spec_without_paths),
        cmocka_unit_test_setup_teardown(test_keys_survive_moving_the_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_format_options_are_canonical, setup, teardown),
        cmocka_unit_test_setup_teardown(test_format_option_errors_point_at_key_or_value, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_syntax_error_names_file_line_column, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bytes_that_are_not_utf8_are_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_model_file_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_format_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tokens_beyond_vocabulary_are_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_same_model_twice_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_key_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_value_of_wrong_type_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_mode_and_metric_are_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_scalars_libfyaml_misreads_are_refused_without_a_leak,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_set_overrides_apply_before_validation, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_set_of_mistyped_key_names_the_nearest, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_set_of_absent_key_needs_plus, setup, teardown),
        cmocka_unit_test_setup_teardown(test_environment_in_paths, setup, teardown),
        cmocka_unit_test_setup_teardown(test_relative_paths, setup, teardown),
        cmocka_unit_test_setup_teardown(test_synthetic_models_expand_by_their_shape, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_set_adding_an_unknown_key_names_the_set_argument,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_set_plus_of_an_existing_key_is_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_ctx_below_three_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_numerics_path_no_worker_announces_is_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_empty_value_names_its_key, setup, teardown),
        cmocka_unit_test_setup_teardown(test_second_document_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_control_characters_in_strings_are_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_alias_expansion_is_capped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_token_header_vocab_beyond_model_is_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_pipeline_sweep_jobs_depend_on_the_training_job_of_their_model, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pipeline_selects_by_axes_and_fine_tunes, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_pipeline_learning_rates_print_apart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pipeline_stages_that_repeat_jobs_are_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_pipeline_errors_name_file_line_column, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_ctx_beyond_max_position_embeddings_is_refused, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
