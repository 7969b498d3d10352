/* The forward pass and the evaluation do not depend on the thread count (worker/engine/model.h
 * promises it, and the stored FP32 baseline relies on it: a compare run
 * with another team size than its baseline's must see the same bits). For 1, 2, 3 and 7
 * threads and the unquantized, W4A16 and W4A4 paths, the prefix cache and the SQNR probe:
 * logits bit-identical, perplexity equal, KL exactly 0, SQNR equal.
 *
 * Run without arguments on the committed tied-embeddings golden model (tests/engine/data);
 * with the argument "smollm2" on SmolLM2-135M from the user cache (tools/fetch_smollm2.sh),
 * whose GEMMs have many column pieces and whose vocabulary is 49152 (skipped when absent).
 * ctest runs both on the default fixed numerics path (which also splits a linear's rows between
 * threads) and again under QSWEEP_CPU_GEMM=openblas (worker/engine/gemm_cpu.h). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "eval.h"
#include "golden.h"
#include "model_fixture.h" /* fill_tokens */

static const int team_sizes[] = {1, 2, 3, 7};
enum { N_TEAMS = sizeof team_sizes / sizeof team_sizes[0] };

/* One model and a token file in a temporary directory; heap state, so the teardown frees it and
 * removes the directory even when an assertion fails half-way. */
typedef struct fixture {
    char dir[512];
    char tokens_path[600];
    char baseline_path[600];
    qw_checkpoint *ck;
    qw_model *m;
    qw_tokens toks;
    int ctx;     /* tokens per chunk */
    float *ref;  /* [ctx x vocab] logits of the 1-thread run */
    float *pre;  /* [ctx x vocab] scratch copy */
    int skipped; /* the model file is absent */
} fixture;

static int open_model(void **state, const char *ckpt, int ctx, size_t n_chunks) {
    fixture *f = calloc(1, sizeof *f);
    if (!f) return -1;
    *state = f;
    f->ctx = ctx;
    if (access(ckpt, R_OK) != 0) {
        f->skipped = 1;
        return 0;
    }
    if (make_temp_dir(f->dir, sizeof f->dir) != 0) return -1;
    snprintf(f->tokens_path, sizeof f->tokens_path, "%s/text.tokens", f->dir);
    snprintf(f->baseline_path, sizeof f->baseline_path, "%s/baseline.blp", f->dir);
    qs_error err = {0};
    if (qw_checkpoint_open(ckpt, &f->ck, &err) != QS_OK ||
        qw_model_create(f->ck, ctx, 1, &f->m, &err) != QS_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    uint32_t vocab = (uint32_t)qw_model_config(f->m)->vocab_size;
    size_t n = n_chunks * (size_t)ctx + 3;
    uint32_t *ids = malloc(n * sizeof *ids);
    if (!ids) return -1;
    fill_tokens(ids, n, vocab, 4242);
    int bad = write_token_file(f->tokens_path, ids, n, vocab);
    free(ids);
    if (bad || qw_tokens_load(f->tokens_path, &f->toks, &err) != QS_OK) return -1;
    f->ref = malloc((size_t)ctx * vocab * sizeof(float));
    f->pre = malloc((size_t)ctx * vocab * sizeof(float));
    return f->ref && f->pre ? 0 : -1;
}

/* The tied-embeddings golden model (2 blocks, dim 64, hidden 192, vocab 256): 2 chunks of 96. */
static int setup_golden(void **state) {
    char ckpt[1024];
    snprintf(ckpt, sizeof ckpt, "%s/llama32_tied", engine_data_dir());
    return open_model(state, ckpt, 96, 2);
}

/* SmolLM2-135M (30 blocks, dim 576, hidden 1536, vocab 49152): 1 chunk of 48. */
static int setup_smollm2(void **state) {
    char ckpt[1024];
    smollm2_gguf_path(ckpt, sizeof ckpt);
    return open_model(state, ckpt, 48, 1);
}

static int teardown(void **state) {
    fixture *f = *state;
    if (!f) return 0;
    qw_tokens_free(&f->toks);
    qw_model_destroy(f->m);
    qw_checkpoint_close(f->ck);
    free(f->ref);
    free(f->pre);
    if (f->dir[0]) remove_temp_dir(f->dir);
    free(f);
    *state = NULL;
    return 0;
}

static size_t vocab_of(const fixture *f) {
    return (size_t)qw_model_config(f->m)->vocab_size;
}

/* Every block linear to `weight`, with `act` for the input activations when non-NULL. */
static void apply_all(fixture *f, const char *weight, const char *act) {
    qs_error err = {0};
    if (!weight) {
        if (qw_model_apply_policy(f->m, NULL, &err) != QS_OK) fail_msg("%s", err.msg);
        return;
    }
    qw_policy p;
    assert_int_equal(qw_policy_init(&p, qw_model_config(f->m)->n_layers, &err), QS_OK);
    qw_quant_spec s = {.weight = qk_format_by_name(weight)};
    assert_non_null(s.weight);
    if (act) {
        s.act = qk_format_by_name(act);
        assert_non_null(s.act);
    }
    qs_status st = qw_policy_isolation(&p, QW_ISO_ALL, 0, 0, &s, &err);
    if (st == QS_OK) st = qw_model_apply_policy(f->m, &p, &err);
    qw_policy_free(&p);
    if (st != QS_OK) fail_msg("%s", err.msg);
}

static void set_threads(fixture *f, int t) {
    qs_error err = {0};
    if (qw_model_set_threads(f->m, t, &err) != QS_OK) fail_msg("%s", err.msg);
    assert_int_equal(qw_model_threads(f->m), t);
}

/* Logits of the first chunk into out [ctx x vocab]. */
static void forward(fixture *f, float *out) {
    const float *logits;
    qs_error err = {0};
    if (qw_model_forward(f->m, f->toks.ids, f->ctx, &logits, &err) != QS_OK)
        fail_msg("%s", err.msg);
    memcpy(out, logits, (size_t)f->ctx * vocab_of(f) * sizeof(float));
}

/* Fails naming the first differing logit. */
static void assert_same_logits(const fixture *f, const float *got, int threads, const char *what) {
    size_t n = (size_t)f->ctx * vocab_of(f);
    if (memcmp(got, f->ref, n * sizeof(float)) == 0) return;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &f->ref[i], sizeof(float)) != 0)
            fail_msg("%s: %d threads, logit [%zu][%zu] = %.9g, 1 thread %.9g", what, threads,
                     i / vocab_of(f), i % vocab_of(f), got[i], f->ref[i]);
}

/* The forward pass at each team size gives the 1-thread logits, and a compare run at each team
 * size against the 1-thread baseline of the same model gives KL exactly 0 and the same
 * perplexity. */
static void path_is_thread_count_free(fixture *f, const char *weight, const char *act,
                                      const char *what) {
    if (f->skipped) skip();
    apply_all(f, weight, act);
    qw_eval_options o = {.ctx = f->ctx, .bos_id = -1};
    qw_eval_metrics b = {0}, c = {0};
    qs_error err = {0};
    set_threads(f, 1);
    forward(f, f->ref);
    if (qw_eval_baseline(f->m, &f->toks, &o, f->baseline_path, &b, &err) != QS_OK)
        fail_msg("%s", err.msg);
    for (int i = 1; i < N_TEAMS; i++) {
        set_threads(f, team_sizes[i]);
        forward(f, f->pre);
        assert_same_logits(f, f->pre, team_sizes[i], what);
        if (qw_eval_compare(f->m, &f->toks, &o, f->baseline_path, &c, &err) != QS_OK)
            fail_msg("%s", err.msg);
        printf("%s: %d threads ppl %.17g (1 thread %.17g), KL mean %g max %g, top1 %g\n", what,
               team_sizes[i], c.ppl, b.ppl, c.kl_mean, c.kl_max, c.top1);
        if (!(c.ppl == b.ppl && c.kl_mean == 0.0 && c.kl_max == 0.0 && c.top1 == 1.0))
            fail_msg("%s: %d threads differ from 1 thread", what, team_sizes[i]);
        qw_eval_metrics_free(&c);
    }
    qw_eval_metrics_free(&b);
}

static void unquantized_does_not_depend_on_thread_count(void **state) {
    path_is_thread_count_free(*state, NULL, NULL, "unquantized");
}

static void nvfp4_w4a16_does_not_depend_on_thread_count(void **state) {
    path_is_thread_count_free(*state, "nvfp4", NULL, "NVFP4 W4A16");
}

static void nvfp4_w4a4_does_not_depend_on_thread_count(void **state) {
    path_is_thread_count_free(*state, "nvfp4", "nvfp4", "NVFP4 W4A4");
}

static void mxfp4_w4a4_does_not_depend_on_thread_count(void **state) {
    path_is_thread_count_free(*state, "mxfp4", "mxfp4", "MXFP4 W4A4");
}

/* Only the last block quantized (W4A4), so the prefix cache skips every block before it: at
 * every team size, a run that fills the cache and one that reads it (entries filled at another
 * team size) give the logits of a 1-thread run without the cache. */
static void prefix_cache_does_not_depend_on_thread_count(void **state) {
    fixture *f = *state;
    if (f->skipped) skip();
    int L = qw_model_config(f->m)->n_layers;
    qs_error err = {0};
    qw_policy p;
    assert_int_equal(qw_policy_init(&p, L, &err), QS_OK);
    qw_quant_spec s = {.weight = qk_format_by_name("nvfp4"), .act = qk_format_by_name("nvfp4")};
    assert_int_equal(qw_policy_isolation(&p, QW_ISO_BLOCK, 0, L - 1, &s, &err), QS_OK);
    qs_status st = qw_model_apply_policy(f->m, &p, &err);
    qw_policy_free(&p);
    if (st != QS_OK) fail_msg("%s", err.msg);
    set_threads(f, 1);
    forward(f, f->ref);
    if (qw_model_set_prefix_cache(f->m, (size_t)64 << 20, &err) != QS_OK) fail_msg("%s", err.msg);
    size_t hits = 0, skipped = 0;
    for (int i = 0; i < N_TEAMS; i++) {
        set_threads(f, team_sizes[i]);
        forward(f, f->pre); /* the first fills the cache, the later ones read it */
        assert_same_logits(f, f->pre, team_sizes[i], "prefix cache");
        forward(f, f->pre);
        assert_same_logits(f, f->pre, team_sizes[i], "prefix cache (hit)");
    }
    qw_model_prefix_cache_stats(f->m, &hits, &skipped);
    printf("prefix cache: %zu hits, %zu blocks skipped\n", hits, skipped);
    assert_int_equal(hits, 2 * N_TEAMS - 1);
    assert_int_equal(skipped, (size_t)(2 * N_TEAMS - 1) * (size_t)(L - 1));
    assert_int_equal(qw_model_set_prefix_cache(f->m, 0, &err), QS_OK);
}

/* The SQNR probe's sums (worker/engine/model.c) are taken in an order fixed by the shape: the
 * per-linear SQNR, KL and perplexity of a W4A4 compare run are equal at every team size. */
static void sqnr_probe_does_not_depend_on_thread_count(void **state) {
    fixture *f = *state;
    if (f->skipped) skip();
    qw_eval_options o = {.ctx = f->ctx, .bos_id = -1};
    qw_eval_metrics b = {0}, c1 = {0}, c = {0};
    qs_error err = {0};
    apply_all(f, NULL, NULL);
    set_threads(f, 1);
    if (qw_eval_baseline(f->m, &f->toks, &o, f->baseline_path, &b, &err) != QS_OK)
        fail_msg("%s", err.msg);
    apply_all(f, "nvfp4", "nvfp4");
    o.sqnr = 1;
    if (qw_eval_compare(f->m, &f->toks, &o, f->baseline_path, &c1, &err) != QS_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(c1.n_sqnr, (size_t)qw_model_config(f->m)->n_layers * QW_LINEAR_KINDS);
    assert_true(c1.kl_mean > 0.0);
    for (int i = 1; i < N_TEAMS; i++) {
        set_threads(f, team_sizes[i]);
        if (qw_eval_compare(f->m, &f->toks, &o, f->baseline_path, &c, &err) != QS_OK)
            fail_msg("%s", err.msg);
        printf("SQNR probe: %d threads, %s %.17g dB (1 thread %.17g), KL mean %.17g (%.17g)\n",
               team_sizes[i], c.sqnr[0].name, c.sqnr[0].sqnr_db, c1.sqnr[0].sqnr_db, c.kl_mean,
               c1.kl_mean);
        assert_int_equal(c.n_sqnr, c1.n_sqnr);
        for (size_t j = 0; j < c.n_sqnr; j++) {
            assert_string_equal(c.sqnr[j].name, c1.sqnr[j].name);
            if (!(c.sqnr[j].sqnr_db == c1.sqnr[j].sqnr_db))
                fail_msg("SQNR of %s: %d threads %.17g dB, 1 thread %.17g dB", c.sqnr[j].name,
                         team_sizes[i], c.sqnr[j].sqnr_db, c1.sqnr[j].sqnr_db);
        }
        if (!(c.kl_mean == c1.kl_mean && c.kl_max == c1.kl_max && c.ppl == c1.ppl &&
              c.top1 == c1.top1))
            fail_msg("W4A4 compare: %d threads differ from 1 thread", team_sizes[i]);
        qw_eval_metrics_free(&c);
    }
    qw_eval_metrics_free(&c1);
    qw_eval_metrics_free(&b);
}

#define EACH(setup)                                                                                \
    cmocka_unit_test_setup_teardown(unquantized_does_not_depend_on_thread_count, setup, teardown), \
        cmocka_unit_test_setup_teardown(nvfp4_w4a16_does_not_depend_on_thread_count, setup,        \
                                        teardown),                                                 \
        cmocka_unit_test_setup_teardown(nvfp4_w4a4_does_not_depend_on_thread_count, setup,         \
                                        teardown),                                                 \
        cmocka_unit_test_setup_teardown(mxfp4_w4a4_does_not_depend_on_thread_count, setup,         \
                                        teardown),                                                 \
        cmocka_unit_test_setup_teardown(prefix_cache_does_not_depend_on_thread_count, setup,       \
                                        teardown),                                                 \
        cmocka_unit_test_setup_teardown(sqnr_probe_does_not_depend_on_thread_count, setup,         \
                                        teardown)

int main(int argc, char **argv) {
    const struct CMUnitTest golden_tests[] = {EACH(setup_golden)};
    const struct CMUnitTest smollm2_tests[] = {EACH(setup_smollm2)};
    if (argc > 1 && strcmp(argv[1], "smollm2") == 0)
        return cmocka_run_group_tests_name("threads_smollm2", smollm2_tests, NULL, NULL);
    return cmocka_run_group_tests_name("threads_golden", golden_tests, NULL, NULL);
}
