/* SmolLM2-135M-Instruct's baseline perplexity on the committed GPL-3 tokens matches transformers'
 * within 0.1%. Reference: tests/engine/data/smollm2/ppl.txt, written by
 * tools/make_goldens.py with the same chunking (ctx 512, 4 chunks, llama.cpp's definition), or
 * ppl_14chunks.txt (every chunk: the baseline of experiments/smollm2-fp4-components.yaml) when
 * its name is the argument.
 * Skipped with a message when the GGUF is not in the cache (tools/fetch_smollm2.sh). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "eval.h"
#include "golden.h"

/* Reads "key value" lines of ppl.txt into the named doubles. */
static void read_reference(const char *path, double *ctx, double *n_chunks, double *n_scored,
                           double *ppl) {
    FILE *f = fopen(path, "r");
    if (!f) fail_msg("%s: cannot open", path);
    char line[256], key[64];
    double v;
    int seen = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || sscanf(line, "%63s %lf", key, &v) != 2) continue;
        if (!strcmp(key, "ctx")) *ctx = v, seen |= 1;
        if (!strcmp(key, "n_chunks")) *n_chunks = v, seen |= 2;
        if (!strcmp(key, "n_scored")) *n_scored = v, seen |= 4;
        if (!strcmp(key, "ppl")) *ppl = v, seen |= 8;
    }
    fclose(f);
    if (seen != 15) fail_msg("%s: missing ctx, n_chunks, n_scored or ppl", path);
}

/* The reference file under tests/engine/data/smollm2/: ppl.txt (4 chunks), or the one named
 * on the command line (ppl_14chunks.txt: every chunk, the baseline of the full sweep). */
static const char *reference_name = "ppl.txt";

static void smollm2_baseline_perplexity_matches_transformers(void **state) {
    (void)state;
    char gguf[1024], ref[1024], tok[1024];
    if (!smollm2_gguf_path(gguf, sizeof gguf)) {
        printf("SKIP: %s absent (run tools/fetch_smollm2.sh)\n", gguf);
        skip();
    }
    snprintf(ref, sizeof ref, "%s/smollm2/%s", engine_data_dir(), reference_name);
    snprintf(tok, sizeof tok, "%s/gpl3.smollm2.tokens", engine_data_dir());
    double ctx = 0, n_chunks = 0, n_scored = 0, ppl_ref = 0;
    read_reference(ref, &ctx, &n_chunks, &n_scored, &ppl_ref);
    qs_error err = {0};
    qw_checkpoint *ck;
    qw_model *m;
    qw_tokens t;
    if (qw_checkpoint_open(gguf, &ck, &err) != QS_OK) fail_msg("%s", err.msg);
    if (qw_model_create(ck, (int)ctx, 0, &m, &err) != QS_OK) fail_msg("%s", err.msg);
    if (qw_tokens_load(tok, &t, &err) != QS_OK) fail_msg("%s", err.msg);
    qw_eval_options o = {.ctx = (int)ctx, .max_chunks = (size_t)n_chunks, .bos_id = -1};
    qw_eval_metrics r;
    if (qw_eval_baseline(m, &t, &o, NULL, &r, &err) != QS_OK) fail_msg("%s", err.msg);
    double rel = fabs(r.ppl - ppl_ref) / ppl_ref;
    printf(
        "%s: n_tokens %zu n_chunks %zu ctx %zu n_scored %zu: ppl %.6f +/- %.4f, transformers %.6f, "
        "relative difference %.2e (tolerance 1e-3)\n",
        rel <= 1e-3 ? "OK" : "NOT OK", r.n_tokens, r.n_chunks, r.ctx, r.n_scored, r.ppl,
        r.ppl_stderr, ppl_ref, rel);
    assert_int_equal(r.n_chunks, (size_t)n_chunks);
    assert_int_equal(r.n_scored, (size_t)n_scored);
    assert_true(rel <= 1e-3);
    qw_eval_metrics_free(&r);
    qw_tokens_free(&t);
    qw_model_destroy(m);
    qw_checkpoint_close(ck);
}

int main(int argc, char **argv) {
    if (argc > 1) reference_name = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(smollm2_baseline_perplexity_matches_transformers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
