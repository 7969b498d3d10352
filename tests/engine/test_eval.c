/* Evaluation definitions (worker/engine/eval.h, llama.cpp's perplexity tool): chunking, NLL and
 * perplexity, the baseline file, KL and top-1 against it, cancellation and progress. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "eval.h"
#include "golden.h"
#include "model.h"
#include "model_fixture.h"
#include "profile.h"

typedef model_fixture fixture;

/* The fixture of the running test, built here by fixture_open and copied to the test's: when
 * an assertion jumps out of a test before its fixture_close, the teardown frees what was
 * opened and removes the temporary directory (nothing is left behind, nothing leaks). */
static fixture live;

/* The tied-embeddings golden model (vocab 256) with max_ctx positions, and a token file of n
 * tokens. */
static void fixture_open(fixture *f, size_t n_tokens, int max_ctx) {
    char ckpt[1024];
    snprintf(ckpt, sizeof ckpt, "%s/llama32_tied", engine_data_dir());
    assert_int_equal(model_fixture_open(&live, ckpt, max_ctx, 0, n_tokens, 12345), 0);
    *f = live;
}

/* Frees the fixture of the running test (f is its copy) and removes its directory. */
static void fixture_close(fixture *f) {
    (void)f;
    model_fixture_close(&live);
}

/* cmocka teardown: runs after every test, passed or failed. */
static int teardown(void **state) {
    (void)state;
    fixture_close(&live);
    return 0;
}

static qw_eval_options opts(int ctx) {
    qw_eval_options o = {.ctx = ctx, .bos_id = -1};
    return o;
}

static void uniform_logits_give_perplexity_equal_to_vocab(void **state) {
    (void)state;
    const int ctx = 64, vocab = 300;
    float *logits = calloc((size_t)ctx * vocab, sizeof *logits);
    uint32_t ids[64];
    assert_non_null(logits);
    fill_tokens(ids, ctx, vocab, 7);
    double nll = 0.0, nll2 = 0.0;
    size_t n = 0;
    qw_eval_score_chunk(logits, ids, ctx, vocab, &nll, &nll2, &n);
    assert_int_equal(n, ctx - 1 - ctx / 2);
    assert_close(exp(nll / (double)n), (double)vocab, 1e-9 * vocab);
    free(logits);
}

static void scored_positions_are_second_half_minus_last(void **state) {
    (void)state;
    /* Logits that put probability 1/2 on token 0 and spread the rest: NLL of position j is
     * -log(1/2) when token j+1 is 0 and -log(1/(2*(V-1))) otherwise; only j in
     * ctx/2..ctx-2 count (llama.cpp: first = n_ctx/2, n_ctx - 1 - first positions). */
    const int ctx = 10, vocab = 5;
    float logits[10 * 5];
    for (int j = 0; j < ctx; j++)
        for (int i = 0; i < vocab; i++)
            logits[j * vocab + i] = i == 0 ? logf((float)(vocab - 1)) : 0.0f;
    uint32_t ids[10] = {0, 0, 0, 0, 0, 0, 1, 0, 2, 0}; /* scored targets: ids[6..9] = 1, 0, 2, 0 */
    double nll = 0.0, nll2 = 0.0;
    size_t n = 0;
    qw_eval_score_chunk(logits, ids, ctx, vocab, &nll, &nll2, &n);
    assert_int_equal(n, 4);
    double expect = 2.0 * log(2.0) + 2.0 * log(2.0 * (vocab - 1));
    assert_close(nll, expect, 1e-6);
}

static void plan_counts_whole_chunks(void **state) {
    (void)state;
    size_t nc, ns;
    assert_int_equal(qw_eval_plan(2048, 512, 0, &nc, &ns, NULL), QS_OK);
    assert_int_equal(nc, 4);
    assert_int_equal(ns, 4 * 255);
    assert_int_equal(qw_eval_plan(2047, 512, 0, &nc, &ns, NULL), QS_OK);
    assert_int_equal(nc, 3);
    assert_int_equal(qw_eval_plan(2048, 512, 2, &nc, &ns, NULL), QS_OK);
    assert_int_equal(nc, 2);
    qs_error err = {0};
    assert_int_equal(qw_eval_plan(511, 512, 0, &nc, &ns, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "fewer than one chunk"));
}

/* ctx/2..ctx-2 is empty at ctx 2 (and below): the plan refuses it, naming ctx and why. */
static void ctx_below_3_scores_nothing_and_is_refused(void **state) {
    (void)state;
    size_t nc = 99, ns = 99;
    qs_error err = {0};
    assert_int_equal(qw_eval_plan(2048, 2, 0, &nc, &ns, &err), QS_EINVAL);
    printf("plan: %s\n", err.msg);
    assert_non_null(strstr(err.msg, "ctx 2 scores no position"));
    assert_non_null(strstr(err.msg, "ctx/2..ctx-2"));
    assert_non_null(strstr(err.msg, "at least 3"));
    assert_int_equal(qw_eval_plan(2048, 1, 0, &nc, &ns, &err), QS_EINVAL);
    assert_int_equal(qw_eval_plan(2048, 0, 0, &nc, &ns, &err), QS_EINVAL);
    assert_int_equal(qw_eval_plan(2048, -4, 0, &nc, &ns, &err), QS_EINVAL);
    assert_int_equal(qw_eval_plan(2048, 3, 0, &nc, &ns, &err), QS_OK);
    assert_int_equal(nc, 682);
    assert_int_equal(ns, 682);
}

/* A baseline and a compare at ctx 2 return QS_EINVAL instead of dividing by (and taking
 * percentiles of) zero scored positions; ctx 3 runs, one scored position per chunk. */
static void eval_with_no_scored_position_fails_cleanly(void **state) {
    (void)state;
    fixture f;
    fixture_open(&f, 64, 64);
    qw_eval_options o = opts(2);
    qw_eval_metrics b, c;
    qs_error err = {0};
    assert_int_equal(qw_eval_baseline(f.m, &f.toks, &o, f.baseline_path, &b, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "ctx 2"));
    assert_int_equal(access(f.baseline_path, F_OK), -1);
    assert_int_equal(qw_eval_compare(f.m, &f.toks, &o, f.baseline_path, &c, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "ctx 2"));

    o = opts(3);
    if (qw_eval_baseline(f.m, &f.toks, &o, f.baseline_path, &b, &err) != QS_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(b.n_chunks, 21);
    assert_int_equal(b.n_scored, 21);
    if (qw_eval_compare(f.m, &f.toks, &o, f.baseline_path, &c, &err) != QS_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(c.n_scored, 21);
    assert_true(isfinite(c.kl_median) && isfinite(c.kl_p99) && isfinite(c.ppl));
    qw_eval_metrics_free(&b);
    qw_eval_metrics_free(&c);
    fixture_close(&f);
}

static void token_file_of_2048_at_ctx_512_gives_4_chunks(void **state) {
    (void)state;
    fixture f;
    fixture_open(&f, 2048, 512);
    qw_eval_options o = opts(512);
    qw_eval_metrics r;
    qs_error err = {0};
    if (qw_eval_baseline(f.m, &f.toks, &o, NULL, &r, &err) != QS_OK) fail_msg("%s", err.msg);
    printf("n_tokens %zu n_chunks %zu ctx %zu n_scored %zu ppl %.4f +/- %.4f\n", r.n_tokens,
           r.n_chunks, r.ctx, r.n_scored, r.ppl, r.ppl_stderr);
    assert_int_equal(r.n_tokens, 2048);
    assert_int_equal(r.n_chunks, 4);
    assert_int_equal(r.ctx, 512);
    assert_int_equal(r.n_scored, 4 * 255);
    assert_true(isfinite(r.ppl) && r.ppl > 1.0);
    qw_eval_metrics_free(&r);
    fixture_close(&f);
}

/* The perplexity of one chunk equals the definition applied to transformers' own logits of the
 * same tokens (the 40-token golden sequence of the tied model). */
static void perplexity_matches_definition_on_transformers_logits(void **state) {
    (void)state;
    char path[1024];
    snprintf(path, sizeof path, "%s/llama32_tied/goldens.bin", engine_data_dir());
    golden g;
    assert_int_equal(golden_load(path, &g), 0);
    const golden_seq *q = &g.seqs[g.n_seqs - 1];
    assert_int_equal(q->row0, 0);
    double nll = 0.0, nll2 = 0.0;
    size_t n = 0;
    qw_eval_score_chunk(q->logits, q->tokens, (int)q->n, (int)g.vocab, &nll, &nll2, &n);
    double expect = exp(nll / (double)n);

    fixture f;
    fixture_open(&f, 8, 128);
    char tp[700];
    snprintf(tp, sizeof tp, "%s/golden.tokens", f.dir);
    assert_int_equal(write_token_file(tp, q->tokens, q->n, g.vocab), 0);
    qw_tokens t;
    qs_error err = {0};
    if (qw_tokens_load(tp, &t, &err) != QS_OK) fail_msg("%s", err.msg);
    qw_eval_options o = opts((int)q->n);
    qw_eval_metrics r;
    if (qw_eval_baseline(f.m, &t, &o, NULL, &r, &err) != QS_OK) fail_msg("%s", err.msg);
    printf("ppl %.8f, from transformers' logits %.8f\n", r.ppl, expect);
    assert_int_equal(r.n_scored, n);
    assert_close(r.ppl, expect, 1e-5 * expect);
    qw_eval_metrics_free(&r);
    qw_tokens_free(&t);
    unlink(tp);
    golden_free(&g);
    fixture_close(&f);
}

static void kl_of_baseline_against_itself_is_below_1e7(void **state) {
    (void)state;
    fixture f;
    fixture_open(&f, 3 * 128 + 5, 128);
    qw_eval_options o = opts(128);
    o.model_digest = "model-abc";
    o.dataset_digest = f.toks.digest;
    qw_eval_metrics b, c;
    qs_error err = {0};
    if (qw_eval_baseline(f.m, &f.toks, &o, f.baseline_path, &b, &err) != QS_OK)
        fail_msg("%s", err.msg);
    if (qw_eval_compare(f.m, &f.toks, &o, f.baseline_path, &c, &err) != QS_OK)
        fail_msg("%s", err.msg);
    printf("KL mean %.3g median %.3g p90 %.3g p99 %.3g max %.3g top1 %.4f ppl %.6f / %.6f\n",
           c.kl_mean, c.kl_median, c.kl_p90, c.kl_p99, c.kl_max, c.top1, b.ppl, c.ppl);
    assert_true(c.has_kl);
    assert_true(fabs(c.kl_mean) < 1e-7);
    assert_true(fabs(c.kl_max) < 1e-7);
    assert_close(c.top1, 1.0, 0.0);
    assert_close(c.ppl, b.ppl, 0.0);
    assert_int_equal(c.n_scored, 3 * 63);
    /* The file is FP32: header + tokens + n_scored x vocab floats. */
    FILE *fp = fopen(f.baseline_path, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    long size = ftell(fp);
    fclose(fp);
    assert_int_equal(size, QW_BASELINE_HEADER_BYTES + 4 * 3 * 128 + 4L * 3 * 63 * 256);
    qw_eval_metrics_free(&b);
    qw_eval_metrics_free(&c);
    fixture_close(&f);
}

/* The model's time profile (profile.h) over a baseline run, then an NVFP4 policy and a
 * compare run with KL, top-1 and the SQNR probe: every phase the runs pass through has time,
 * none is negative, and because the phases never overlap and cover the work, their sum is at
 * most the wall time around the calls and most of it (a structure, not a speed). */
static void profile_phases_cover_an_evaluation(void **state) {
    (void)state;
    fixture f;
    fixture_open(&f, 2 * 128, 128);
    qw_eval_options o = opts(128);
    qw_eval_metrics b, c;
    qs_error err = {0};
    qw_profile *p = qw_model_profile(f.m);
    qw_profile_reset(p);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (qw_eval_baseline(f.m, &f.toks, &o, f.baseline_path, &b, &err) != QS_OK)
        fail_msg("%s", err.msg);
    const qw_config *cfg = qw_model_config(f.m);
    qw_policy pol;
    qw_quant_spec q = {.weight = qk_format_by_name("nvfp4")};
    assert_non_null(q.weight);
    assert_int_equal(qw_policy_init(&pol, cfg->n_layers, &err), QS_OK);
    for (int l = 0; l < cfg->n_layers; l++)
        for (int k = 0; k < QW_LINEAR_KINDS; k++)
            *qw_policy_linear(&pol, l, (qw_linear_kind)k) = q;
    qw_quant_spec *down = qw_policy_linear(&pol, 0, QW_LINEAR_DOWN);
    down->act = q.weight; /* one W4A4 linear: act_quant has time too */
    if (qw_model_apply_policy(f.m, &pol, &err) != QS_OK) fail_msg("%s", err.msg);
    o.sqnr = 1;
    if (qw_eval_compare(f.m, &f.toks, &o, f.baseline_path, &c, &err) != QS_OK)
        fail_msg("%s", err.msg);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double wall = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    double sum = 0.0;
    for (int i = 0; i < QW_PHASES; i++) {
        printf("%-14s %.6f s\n", qw_phase_name((qw_phase)i), p->s[i]);
        assert_true(p->s[i] > 0.0); /* every phase ran: packed weights, W4A4, probe, file */
        sum += p->s[i];
    }
    printf("sum %.6f s of %.6f s wall (%.1f%%)\n", sum, wall, 100.0 * sum / wall);
    assert_true(fabs(qw_profile_total(p) - sum) <= 1e-12 * sum);
    assert_true(sum <= wall);
    assert_true(sum >= 0.5 * wall);
    assert_string_equal(qw_phase_name(QW_PHASE_GEMM_LM_HEAD), "gemm_lm_head");
    qw_profile_reset(p);
    assert_true(qw_profile_total(p) == 0.0);
    qw_policy_free(&pol);
    qw_eval_metrics_free(&b);
    qw_eval_metrics_free(&c);
    fixture_close(&f);
}

/* A baseline made with 1 thread and a compare run with 3 see the same bits: KL exactly 0. */
static void results_do_not_depend_on_thread_count(void **state) {
    (void)state;
    fixture f;
    fixture_open(&f, 2 * 100, 100);
    qw_eval_options o = opts(100);
    qw_eval_metrics b, c;
    qs_error err = {0};
    assert_int_equal(qw_model_set_threads(f.m, 1, &err), QS_OK);
    if (qw_eval_baseline(f.m, &f.toks, &o, f.baseline_path, &b, &err) != QS_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(qw_model_set_threads(f.m, 3, &err), QS_OK);
    assert_int_equal(qw_model_threads(f.m), 3);
    if (qw_eval_compare(f.m, &f.toks, &o, f.baseline_path, &c, &err) != QS_OK)
        fail_msg("%s", err.msg);
    printf("1 thread ppl %.17g, 3 threads ppl %.17g, KL max %g\n", b.ppl, c.ppl, c.kl_max);
    assert_true(b.ppl == c.ppl);
    assert_true(c.kl_max == 0.0 && c.kl_mean == 0.0);
    qw_eval_metrics_free(&b);
    qw_eval_metrics_free(&c);
    fixture_close(&f);
}

/* An evaluation sharded over 2 and 4 ranks (qw_eval_options.tensor_parallel; the CPU runs the
 * ranks in this process) against the unsharded baseline: perplexity within 1e-5 relative, KL
 * at float rounding (< 1e-6), top-1 the same, and the model unsharded again afterwards; with the SQNR
 * probe (the unsharded model's) it is refused. */
static void tensor_parallel_eval_matches_the_unsharded_one(void **state) {
    (void)state;
    fixture f;
    fixture_open(&f, 2 * 96, 96);
    qw_eval_options o = opts(96);
    qw_eval_metrics b, c;
    qs_error err = {0};
    if (qw_eval_baseline(f.m, &f.toks, &o, f.baseline_path, &b, &err) != QS_OK)
        fail_msg("%s", err.msg);
    const int ns[] = {2, 4};
    for (int j = 0; j < 2; j++) {
        o.tensor_parallel = ns[j];
        if (qw_eval_compare(f.m, &f.toks, &o, f.baseline_path, &c, &err) != QS_OK)
            fail_msg("%s", err.msg);
        printf("tensor_parallel %d: ppl %.9g (unsharded %.9g), KL max %.3g, top1 %.4f\n", ns[j],
               c.ppl, b.ppl, c.kl_max, c.top1);
        assert_close(c.ppl, b.ppl, 1e-5 * b.ppl);
        /* FP32 log-probabilities: a self-compare already carries ~1e-7 of KL noise */
        assert_true(c.kl_max < 1e-6);
        assert_close(c.top1, 1.0, 0.0);
        assert_int_equal(qw_model_tensor_parallel(f.m), 1);
        qw_eval_metrics_free(&c);
    }
    o.sqnr = 1;
    o.tensor_parallel = 2;
    assert_int_equal(qw_eval_compare(f.m, &f.toks, &o, f.baseline_path, &c, &err),
                     QS_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "tensor_parallel 2"));
    assert_int_equal(qw_model_tensor_parallel(f.m), 1);
    qw_eval_metrics_free(&b);
    fixture_close(&f);
}

/* KL of a different distribution: quantized vs baseline is positive, median <= p90 <= p99 <= max.
 */
static void kl_statistics_are_ordered(void **state) {
    (void)state;
    fixture f;
    fixture_open(&f, 2 * 64, 64);
    qw_eval_options o = opts(64);
    qw_eval_metrics b, c;
    qs_error err = {0};
    if (qw_eval_baseline(f.m, &f.toks, &o, f.baseline_path, &b, &err) != QS_OK)
        fail_msg("%s", err.msg);
    qw_policy p;
    assert_int_equal(qw_policy_init(&p, qw_model_config(f.m)->n_layers, &err), QS_OK);
    qw_quant_spec s = {.weight = qk_format_by_name("mxfp4")};
    assert_non_null(s.weight);
    assert_int_equal(qw_policy_isolation(&p, QW_ISO_ALL, 0, 0, &s, &err), QS_OK);
    if (qw_model_apply_policy(f.m, &p, &err) != QS_OK) fail_msg("%s", err.msg);
    if (qw_eval_compare(f.m, &f.toks, &o, f.baseline_path, &c, &err) != QS_OK)
        fail_msg("%s", err.msg);
    printf("MXFP4 W4A16: KL mean %.4g median %.4g p90 %.4g p99 %.4g max %.4g top1 %.3f ppl %.4f -> "
           "%.4f\n",
           c.kl_mean, c.kl_median, c.kl_p90, c.kl_p99, c.kl_max, c.top1, b.ppl, c.ppl);
    assert_true(c.kl_mean > 1e-6);
    assert_true(c.kl_median <= c.kl_p90 && c.kl_p90 <= c.kl_p99 && c.kl_p99 <= c.kl_max);
    assert_true(c.top1 >= 0.0 && c.top1 <= 1.0);
    qw_policy_free(&p);
    qw_eval_metrics_free(&b);
    qw_eval_metrics_free(&c);
    fixture_close(&f);
}

static void baseline_mismatch_is_refused(void **state) {
    (void)state;
    fixture f;
    fixture_open(&f, 4 * 32, 64);
    qw_eval_options o = opts(32);
    o.model_digest = "model-A";
    qw_eval_metrics b, c;
    qs_error err = {0};
    if (qw_eval_baseline(f.m, &f.toks, &o, f.baseline_path, &b, &err) != QS_OK)
        fail_msg("%s", err.msg);
    qw_eval_metrics_free(&b);

    qw_eval_options o2 = o;
    o2.ctx = 64;
    assert_int_equal(qw_eval_compare(f.m, &f.toks, &o2, f.baseline_path, &c, &err), QS_EINVAL);
    printf("ctx: %s\n", err.msg);
    assert_non_null(strstr(err.msg, "ctx"));

    o2 = o;
    o2.max_chunks = 2;
    assert_int_equal(qw_eval_compare(f.m, &f.toks, &o2, f.baseline_path, &c, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "n_chunks"));

    o2 = o;
    o2.model_digest = "model-B";
    assert_int_equal(qw_eval_compare(f.m, &f.toks, &o2, f.baseline_path, &c, &err), QS_EINVAL);
    printf("digest: %s\n", err.msg);
    assert_non_null(strstr(err.msg, "model_digest"));

    /* Other tokens, same count. */
    f.toks.ids[40] = (f.toks.ids[40] + 1) % f.toks.vocab_size;
    assert_int_equal(qw_eval_compare(f.m, &f.toks, &o, f.baseline_path, &c, &err), QS_EINVAL);
    printf("tokens: %s\n", err.msg);
    assert_non_null(strstr(err.msg, "token 40"));
    f.toks.ids[40] = (f.toks.ids[40] + f.toks.vocab_size - 1) % f.toks.vocab_size;

    /* Truncated file. */
    FILE *fp = fopen(f.baseline_path, "rb+");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    long size = ftell(fp);
    fclose(fp);
    assert_int_equal(truncate(f.baseline_path, size - 4), 0);
    assert_int_equal(qw_eval_compare(f.m, &f.toks, &o, f.baseline_path, &c, &err), QS_EFORMAT);
    printf("truncated: %s\n", err.msg);
    assert_non_null(strstr(err.msg, "size"));

    /* Bad magic. */
    fp = fopen(f.baseline_path, "rb+");
    assert_non_null(fp);
    fputc('X', fp);
    fclose(fp);
    assert_int_equal(qw_eval_compare(f.m, &f.toks, &o, f.baseline_path, &c, &err), QS_EFORMAT);
    printf("magic: %s\n", err.msg);
    assert_non_null(strstr(err.msg, "magic"));

    assert_int_equal(qw_eval_compare(f.m, &f.toks, &o, "/nonexistent/baseline.blp", &c, &err),
                     QS_EIO);
    assert_non_null(strstr(err.msg, "/nonexistent/baseline.blp"));
    fixture_close(&f);
}

/* Overwrites `len` bytes at `off` of the file at path. */
static void patch(const char *path, long off, const void *bytes, size_t len) {
    FILE *fp = fopen(path, "rb+");
    assert_non_null(fp);
    assert_int_equal(fseek(fp, off, SEEK_SET), 0);
    assert_int_equal(fwrite(bytes, 1, len, fp), len);
    assert_int_equal(fclose(fp), 0);
}

/* NVFP4 weights on every linear of f's model. */
static void quantize_all_nvfp4(fixture *f) {
    qs_error err = {0};
    qw_policy pol;
    qw_quant_spec q = {.weight = qk_format_by_name("nvfp4")};
    assert_non_null(q.weight);
    assert_int_equal(qw_policy_init(&pol, qw_model_config(f->m)->n_layers, &err), QS_OK);
    for (int l = 0; l < pol.n_layers; l++)
        for (int k = 0; k < QW_LINEAR_KINDS; k++)
            *qw_policy_linear(&pol, l, (qw_linear_kind)k) = q;
    if (qw_model_apply_policy(f->m, &pol, &err) != QS_OK) fail_msg("%s", err.msg);
    qw_policy_free(&pol);
}

/* sqnr_rows samples the probe: as many rows as a call has (or more) is every row, bit for bit;
 * a quarter of the rows gives every linear a finite SQNR near the full one (another value:
 * another job), and a negative count is refused. */
static void sqnr_rows_samples_the_last_rows_of_each_call(void **state) {
    (void)state;
    fixture f;
    fixture_open(&f, 2 * 128, 128);
    qw_eval_options o = opts(128);
    qw_eval_metrics b, all, same, part;
    qs_error err = {0};
    if (qw_eval_baseline(f.m, &f.toks, &o, f.baseline_path, &b, &err) != QS_OK)
        fail_msg("%s", err.msg);
    quantize_all_nvfp4(&f);
    o.sqnr = 1;
    if (qw_eval_compare(f.m, &f.toks, &o, f.baseline_path, &all, &err) != QS_OK)
        fail_msg("%s", err.msg);
    o.sqnr_rows = 128;
    if (qw_eval_compare(f.m, &f.toks, &o, f.baseline_path, &same, &err) != QS_OK)
        fail_msg("%s", err.msg);
    o.sqnr_rows = 32;
    if (qw_eval_compare(f.m, &f.toks, &o, f.baseline_path, &part, &err) != QS_OK)
        fail_msg("%s", err.msg);
    assert_true(all.n_sqnr > 0);
    assert_int_equal(same.n_sqnr, all.n_sqnr);
    assert_int_equal(part.n_sqnr, all.n_sqnr);
    int differ = 0;
    for (size_t i = 0; i < all.n_sqnr; i++) {
        assert_memory_equal(&same.sqnr[i].sqnr_db, &all.sqnr[i].sqnr_db, sizeof(double));
        assert_true(isfinite(part.sqnr[i].sqnr_db));
        assert_true(fabs(part.sqnr[i].sqnr_db - all.sqnr[i].sqnr_db) < 3.0);
        differ += part.sqnr[i].sqnr_db != all.sqnr[i].sqnr_db;
    }
    printf("%s: %.4f dB every row, %.4f dB the last 32; %d of %zu linears differ\n",
           all.sqnr[0].name, all.sqnr[0].sqnr_db, part.sqnr[0].sqnr_db, differ, all.n_sqnr);
    assert_true(differ > 0);
    /* the scores are the forward's, whatever the probe samples */
    assert_memory_equal(&part.ppl, &all.ppl, sizeof(double));
    assert_memory_equal(&part.kl_mean, &all.kl_mean, sizeof(double));
    o.sqnr_rows = -1;
    qw_eval_metrics bad;
    assert_int_equal(qw_eval_compare(f.m, &f.toks, &o, f.baseline_path, &bad, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "sqnr_rows -1"));
    qw_eval_metrics_free(&b);
    qw_eval_metrics_free(&all);
    qw_eval_metrics_free(&same);
    qw_eval_metrics_free(&part);
    fixture_close(&f);
}

/* skip_kl and skip_top1 (the grid did not ask): the scores asked for keep their bits, the ones
 * left out are NaN, and with both left out the baseline's log-probabilities are never read
 * (NaN written over them changes nothing). */
static void scores_not_asked_for_are_not_computed(void **state) {
    (void)state;
    fixture f;
    fixture_open(&f, 2 * 96, 96);
    qw_eval_options o = opts(96);
    qw_eval_metrics b, full, nokl, notop, none;
    qs_error err = {0};
    if (qw_eval_baseline(f.m, &f.toks, &o, f.baseline_path, &b, &err) != QS_OK)
        fail_msg("%s", err.msg);
    quantize_all_nvfp4(&f);
    if (qw_eval_compare(f.m, &f.toks, &o, f.baseline_path, &full, &err) != QS_OK)
        fail_msg("%s", err.msg);
    o.skip_kl = 1;
    if (qw_eval_compare(f.m, &f.toks, &o, f.baseline_path, &nokl, &err) != QS_OK)
        fail_msg("%s", err.msg);
    o.skip_kl = 0, o.skip_top1 = 1;
    if (qw_eval_compare(f.m, &f.toks, &o, f.baseline_path, &notop, &err) != QS_OK)
        fail_msg("%s", err.msg);
    printf("full: ppl %.9g kl_mean %.6g top1 %.4f\n", full.ppl, full.kl_mean, full.top1);
    assert_true(full.kl_mean > 0.0 && full.top1 < 1.0);
    assert_memory_equal(&nokl.ppl, &full.ppl, sizeof(double));
    assert_memory_equal(&nokl.top1, &full.top1, sizeof(double));
    assert_true(isnan(nokl.kl_mean) && isnan(nokl.kl_max) && isnan(nokl.kl_p99));
    assert_memory_equal(&notop.ppl, &full.ppl, sizeof(double));
    const double kf[5] = {full.kl_mean, full.kl_median, full.kl_p90, full.kl_p99, full.kl_max};
    const double kn[5] = {notop.kl_mean, notop.kl_median, notop.kl_p90, notop.kl_p99,
                          notop.kl_max};
    assert_memory_equal(kn, kf, sizeof kf);
    assert_true(isnan(notop.top1));
    /* every log-probability of the baseline's chunks: NaN */
    qw_baseline_info h;
    assert_int_equal(qw_baseline_info_read(f.baseline_path, &h, &err), QS_OK);
    long rows0 = QW_BASELINE_HEADER_BYTES + 4L * h.n_chunks * h.ctx;
    size_t nbytes = (size_t)h.n_scored * h.vocab * sizeof(float);
    float *nan = malloc(nbytes);
    assert_non_null(nan);
    for (size_t i = 0; i < nbytes / sizeof(float); i++)
        nan[i] = NAN;
    patch(f.baseline_path, rows0, nan, nbytes);
    free(nan);
    o.skip_kl = 1, o.skip_top1 = 1;
    if (qw_eval_compare(f.m, &f.toks, &o, f.baseline_path, &none, &err) != QS_OK)
        fail_msg("%s", err.msg);
    assert_memory_equal(&none.ppl, &full.ppl, sizeof(double));
    assert_true(isnan(none.kl_mean) && isnan(none.top1));
    qw_eval_metrics_free(&b);
    qw_eval_metrics_free(&full);
    qw_eval_metrics_free(&nokl);
    qw_eval_metrics_free(&notop);
    qw_eval_metrics_free(&none);
    fixture_close(&f);
}

static void baseline_header_is_read_and_validated(void **state) {
    (void)state;
    fixture f;
    fixture_open(&f, 3 * 32, 64);
    qw_eval_options o = opts(32);
    o.model_digest = "m-digest";
    o.dataset_digest = f.toks.digest;
    qw_eval_metrics b;
    qs_error err = {0};
    if (qw_eval_baseline(f.m, &f.toks, &o, f.baseline_path, &b, &err) != QS_OK)
        fail_msg("%s", err.msg);
    qw_eval_metrics_free(&b);
    qw_baseline_info info;
    if (qw_baseline_info_read(f.baseline_path, &info, &err) != QS_OK) fail_msg("%s", err.msg);
    assert_int_equal(info.vocab, 256);
    assert_int_equal(info.ctx, 32);
    assert_int_equal(info.n_chunks, 3);
    assert_int_equal(info.first, 16);
    assert_int_equal(info.bos_id, -1);
    assert_int_equal(info.n_scored, 3 * 15);
    assert_string_equal(info.model_digest, "m-digest");
    assert_string_equal(info.dataset_digest, f.toks.digest);
    assert_int_equal(info.file_bytes, QW_BASELINE_HEADER_BYTES + 4 * 3 * 32 + 4 * 3 * 15 * 256);

    struct {
        long off;
        uint32_t value;
        const char *needle;
    } cases[] = {
        {24, 15, "first"},         /* first != ctx/2 */
        {184, 1, "reserved"},      /* reserved word */
        {28, 256, "bos_id"},       /* bos_id >= vocab */
        {32, 46, "n_scored"},      /* n_scored != n_chunks*(ctx-1-ctx/2) */
        {16, 1, "ctx"},            /* ctx < 2 */
        {12, 0x40000000u, "size"}, /* a vocab that does not fit the file */
        {8, 2, "version"},         /* version */
    };
    unsigned char orig[QW_BASELINE_HEADER_BYTES];
    FILE *fp = fopen(f.baseline_path, "rb");
    assert_non_null(fp);
    assert_int_equal(fread(orig, 1, sizeof orig, fp), sizeof orig);
    fclose(fp);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unsigned char le[4] = {(unsigned char)cases[i].value, (unsigned char)(cases[i].value >> 8),
                               (unsigned char)(cases[i].value >> 16),
                               (unsigned char)(cases[i].value >> 24)};
        patch(f.baseline_path, cases[i].off, le, 4);
        assert_int_equal(qw_baseline_info_read(f.baseline_path, &info, &err), QS_EFORMAT);
        printf("offset %ld = %u: %s\n", cases[i].off, cases[i].value, err.msg);
        assert_non_null(strstr(err.msg, cases[i].needle));
        patch(f.baseline_path, 0, orig, sizeof orig);
    }
    /* A digest without its terminating NUL. */
    char full[QW_BASELINE_DIGEST_CHARS];
    memset(full, 'a', sizeof full);
    patch(f.baseline_path, 40, full, sizeof full);
    assert_int_equal(qw_baseline_info_read(f.baseline_path, &info, &err), QS_EFORMAT);
    assert_non_null(strstr(err.msg, "model_digest"));
    patch(f.baseline_path, 0, orig, sizeof orig);
    assert_int_equal(qw_baseline_info_read(f.baseline_path, &info, &err), QS_OK);
    fixture_close(&f);
}

typedef struct progress_log {
    size_t calls, last_step, total;
    size_t stop_after; /* 0 = never */
} progress_log;

static int on_progress(void *ctx, size_t step, size_t total) {
    progress_log *p = ctx;
    p->calls++;
    p->last_step = step;
    p->total = total;
    return p->stop_after && step >= p->stop_after;
}

static void progress_reports_each_chunk_and_cancel_stops(void **state) {
    (void)state;
    fixture f;
    fixture_open(&f, 5 * 16, 64);
    qw_eval_options o = opts(16);
    progress_log pl = {0};
    o.progress = on_progress;
    o.progress_ctx = &pl;
    qw_eval_metrics r;
    qs_error err = {0};
    if (qw_eval_baseline(f.m, &f.toks, &o, NULL, &r, &err) != QS_OK) fail_msg("%s", err.msg);
    assert_int_equal(pl.calls, 5);
    assert_int_equal(pl.last_step, 5);
    assert_int_equal(pl.total, 5);
    qw_eval_metrics_free(&r);

    pl = (progress_log){.stop_after = 2};
    assert_int_equal(qw_eval_baseline(f.m, &f.toks, &o, f.baseline_path, &r, &err), QS_ECANCELLED);
    assert_int_equal(pl.calls, 2);
    assert_int_equal(access(f.baseline_path, F_OK), -1); /* nothing half-written left in place */

    atomic_int cancel = 1;
    o.progress = NULL;
    o.cancel = &cancel;
    assert_int_equal(qw_eval_baseline(f.m, &f.toks, &o, NULL, &r, &err), QS_ECANCELLED);
    assert_non_null(strstr(err.msg, "cancelled"));
    fixture_close(&f);
}

typedef struct rows_seen {
    int n;
    char names[20][64];
} rows_seen;

static int collect_rows(void *ctx, const char *name, double value) {
    (void)value;
    rows_seen *r = ctx;
    assert_true(r->n < 20);
    snprintf(r->names[r->n++], sizeof r->names[0], "%s", name);
    return 0;
}

static int stop_at_ppl(void *ctx, const char *name, double value) {
    (void)value;
    (*(int *)ctx)++;
    return strcmp(name, "ppl") == 0 ? 7 : 0;
}

static void metrics_rows_name_every_value(void **state) {
    (void)state;
    qw_eval_metrics m = {
        .n_tokens = 10, .n_chunks = 1, .ctx = 8, .n_scored = 3, .nll = 1.0, .ppl = exp(1.0)};
    rows_seen r = {0};
    assert_int_equal(qw_eval_metrics_foreach(&m, collect_rows, &r), 0);
    assert_int_equal(r.n, 8);
    assert_string_equal(r.names[5], "ppl");
    m.has_kl = 1;
    qw_linear_sqnr s[2] = {{.name = "model.layers.12.mlp.down_proj", .sqnr_db = 20.0},
                           {.name = "lm_head", .sqnr_db = 30.0}};
    m.sqnr = s;
    m.n_sqnr = 2;
    r.n = 0;
    assert_int_equal(qw_eval_metrics_foreach(&m, collect_rows, &r), 0);
    assert_int_equal(r.n, 14 + 2);
    assert_string_equal(r.names[13], "top1");
    assert_string_equal(r.names[14],
                        "sqnr_db.12.down"); /* schema 006 v_sqnr: block 12, kind down */
    assert_string_equal(r.names[15], "sqnr_db.lm_head");
    int calls = 0;
    assert_int_equal(qw_eval_metrics_foreach(&m, stop_at_ppl, &calls), 7);
    assert_int_equal(calls, 6);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(uniform_logits_give_perplexity_equal_to_vocab, teardown),
        cmocka_unit_test_teardown(scored_positions_are_second_half_minus_last, teardown),
        cmocka_unit_test_teardown(plan_counts_whole_chunks, teardown),
        cmocka_unit_test_teardown(ctx_below_3_scores_nothing_and_is_refused, teardown),
        cmocka_unit_test_teardown(eval_with_no_scored_position_fails_cleanly, teardown),
        cmocka_unit_test_teardown(token_file_of_2048_at_ctx_512_gives_4_chunks, teardown),
        cmocka_unit_test_teardown(perplexity_matches_definition_on_transformers_logits, teardown),
        cmocka_unit_test_teardown(kl_of_baseline_against_itself_is_below_1e7, teardown),
        cmocka_unit_test_teardown(profile_phases_cover_an_evaluation, teardown),
        cmocka_unit_test_teardown(results_do_not_depend_on_thread_count, teardown),
        cmocka_unit_test_teardown(tensor_parallel_eval_matches_the_unsharded_one, teardown),
        cmocka_unit_test_teardown(kl_statistics_are_ordered, teardown),
        cmocka_unit_test_teardown(baseline_mismatch_is_refused, teardown),
        cmocka_unit_test_teardown(baseline_header_is_read_and_validated, teardown),
        cmocka_unit_test_teardown(progress_reports_each_chunk_and_cancel_stops, teardown),
        cmocka_unit_test_teardown(metrics_rows_name_every_value, teardown),
        cmocka_unit_test_teardown(sqnr_rows_samples_the_last_rows_of_each_call, teardown),
        cmocka_unit_test_teardown(scores_not_asked_for_are_not_computed, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
