/* The conversion cache (worker/engine/convcache.h): a piece it returns is qw_weight_rows_f32's
 * output bit for bit, for checkpoint (BF16) and packed (NVFP4) weights; under a budget of a few
 * pieces it counts hits, misses, evictions and bypasses, evicts least recently used first and
 * never a pinned piece; drop_packed drops the packed pieces only; and a model's forwards and
 * evaluations (perplexity, KL, top-1, per-linear SQNR) give the same bits with the cache off,
 * with a budget of two pieces, and with room for every piece, where the second chunk's forward
 * converts nothing; a piece kept as the fixed GEMM's panels is the packed conversion, keyed by
 * the tensor's version. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "convcache.h"
#include "eval.h"
#include "gemm_fixed.h"
#include "format.h"
#include "golden.h"
#include "model.h"
#include "model_fixture.h"
#include "model_internal.h"
#include "policy.h"
#include "quant.h"
#include "weights.h"

#define SHAPE "synthetic:tiny-llama3:7"

static qw_model *model_of(int ctx) {
    qw_model *m = NULL;
    qs_error err = {0};
    if (qw_model_create_synthetic(SHAPE, ctx, 2, &m, &err) != QS_OK) fail_msg("%s", err.msg);
    return m;
}

/* Fails unless piece [n x w->cols] holds exactly what qw_weight_rows_f32 gives for rows r0... */
static void assert_piece_is_conversion(const qw_weight *w, int64_t r0, int64_t n,
                                       const float *piece) {
    assert_non_null(piece);
    float *ref = malloc((size_t)n * (size_t)w->cols * sizeof *ref);
    assert_non_null(ref);
    assert_int_equal(qw_weight_rows_f32(w, r0, n, ref, NULL), QS_OK);
    if (memcmp(ref, piece, (size_t)n * (size_t)w->cols * sizeof *ref) != 0)
        fail_msg("piece rows %lld..%lld differs from the conversion", (long long)r0,
                 (long long)(r0 + n - 1));
    free(ref);
}

static void get_and_release(qw_convcache *c, const qw_weight *w, int64_t r0, int64_t n) {
    const float *p = qw_convcache_get(c, w, r0, n);
    assert_piece_is_conversion(w, r0, n, p);
    qw_convcache_release(c, p);
}

/* Budget of two 16-row pieces of one BF16 master: the third piece evicts the least recently
 * used one, a hit refreshes a piece, a piece larger than the budget is bypassed, and a pinned
 * piece is never evicted. */
static void lru_counts_hits_misses_evictions_and_keeps_pinned_pieces(void **state) {
    (void)state;
    qw_model *m = model_of(16);
    const qw_weight *w = m->lin[QW_LINEAR_GATE].master; /* block 0's gate_proj */
    assert_int_equal(w->form, QW_WEIGHT_STORED);
    assert_true(w->rows >= 64);
    size_t piece = 16 * (size_t)w->cols * sizeof(float);
    qw_convcache *c;
    qs_error err = {0};
    assert_int_equal(qw_convcache_create(2 * piece, &c, &err), QS_OK);
    qw_convcache_stats s;

    get_and_release(c, w, 0, 16);  /* miss: A */
    get_and_release(c, w, 16, 16); /* miss: B */
    get_and_release(c, w, 0, 16);  /* hit: A is now the most recent */
    get_and_release(c, w, 32, 16); /* miss: C evicts B */
    qw_convcache_get_stats(c, &s);
    assert_int_equal(s.hits, 1);
    assert_int_equal(s.misses, 3);
    assert_int_equal(s.evictions, 1);
    assert_int_equal(s.entries, 2);
    assert_int_equal(s.bytes, 2 * piece);
    get_and_release(c, w, 0, 16); /* A stayed */
    qw_convcache_get_stats(c, &s);
    assert_int_equal(s.hits, 2);
    get_and_release(c, w, 16, 16); /* B was the one evicted: a miss, evicting C */
    qw_convcache_get_stats(c, &s);
    assert_int_equal(s.misses, 4);
    assert_int_equal(s.evictions, 2);

    /* 48 rows do not fit in two 16-row pieces' budget: nothing kept, nothing evicted. */
    assert_null(qw_convcache_get(c, w, 0, 48));
    qw_convcache_get_stats(c, &s);
    assert_int_equal(s.bypassed, 1);
    assert_int_equal(s.evictions, 2);

    /* Both pieces pinned: a third cannot make room. */
    const float *a = qw_convcache_get(c, w, 0, 16), *b = qw_convcache_get(c, w, 16, 16);
    assert_non_null(a);
    assert_non_null(b);
    assert_null(qw_convcache_get(c, w, 48, 16));
    qw_convcache_get_stats(c, &s);
    assert_int_equal(s.bypassed, 2);
    assert_int_equal(s.entries, 2);
    assert_piece_is_conversion(w, 0, 16, a);
    assert_piece_is_conversion(w, 16, 16, b);
    qw_convcache_release(c, a);
    get_and_release(c, w, 48, 16); /* a unpinned: it goes, b stays */
    qw_convcache_get_stats(c, &s);
    assert_int_equal(s.evictions, 3);
    assert_int_equal(s.entries, 2);
    assert_ptr_equal(qw_convcache_get(c, w, 16, 16), b);
    qw_convcache_release(c, b);
    qw_convcache_release(c, b);

    /* FP32 in place has nothing to convert; a NULL cache keeps nothing. */
    float f32[4] = {1, 2, 3, 4};
    qw_weight wf = {.form = QW_WEIGHT_F32, .rows = 2, .cols = 2, .f32 = f32};
    assert_null(qw_convcache_get(c, &wf, 0, 1));
    assert_null(qw_convcache_get(NULL, w, 0, 16));
    qw_convcache_destroy(c);
    qw_model_destroy(m);
}

/* Packed pieces are the packed tensor's dequantization bit for bit; drop_packed removes them
 * and only them, keeping their buffers as spares that new pieces of their size reuse and that
 * go first when room is needed. */
static void packed_pieces_are_dequantized_and_dropped_alone(void **state) {
    (void)state;
    qw_model *m = model_of(16);
    const qw_weight *master = m->lin[QW_LINEAR_UP].master;
    size_t rows = (size_t)master->rows, k = (size_t)master->cols;
    float *x = malloc(rows * k * sizeof *x);
    assert_non_null(x);
    qs_error err = {0};
    assert_int_equal(qw_weight_rows_f32(master, 0, (int64_t)rows, x, &err), QS_OK);
    const qk_format *f = qk_format_by_name("nvfp4");
    assert_non_null(f);
    qk_quant_options o = {0};
    qk_packed p;
    assert_int_equal(qk_packed_init(&p, f, &o, rows, k, &err), QS_OK);
    assert_int_equal(qk_quantize(f, &o, x, rows, k, &p, &err), QS_OK);
    qw_weight w = qw_weight_from_packed(&p);
    qw_convcache *c;
    assert_int_equal(qw_convcache_create((size_t)64 << 20, &c, &err), QS_OK);
    get_and_release(c, &w, 0, 16);
    get_and_release(c, &w, 16, (int64_t)rows - 16);
    get_and_release(c, master, 0, 16);
    get_and_release(c, &w, 0, 16);
    qw_convcache_stats s;
    qw_convcache_get_stats(c, &s);
    assert_int_equal(s.misses, 3);
    assert_int_equal(s.hits, 1);
    qw_convcache_drop_packed(c);
    qw_convcache_get_stats(c, &s);
    assert_int_equal(s.dropped, 2);
    assert_int_equal(s.entries, 1);
    assert_int_equal(s.spare, rows * k * sizeof(float)); /* both packed buffers kept */
    assert_int_equal(s.bytes - s.spare, 16 * k * sizeof(float));
    get_and_release(c, master, 0, 16); /* the master's piece stayed */
    qw_convcache_get_stats(c, &s);
    assert_int_equal(s.hits, 2);
    /* A new packed piece of a dropped one's size is converted into its spare buffer. */
    get_and_release(c, &w, 0, 16);
    qw_convcache_get_stats(c, &s);
    assert_int_equal(s.misses, 4);
    assert_int_equal(s.spare, (rows - 16) * k * sizeof(float));
    assert_int_equal(s.bytes, (rows + 16) * k * sizeof(float));
    /* Under a budget of two pieces, a spare of the size is taken before anything is evicted. */
    qw_convcache_destroy(c);
    assert_int_equal(qw_convcache_create(2 * 16 * k * sizeof(float), &c, &err), QS_OK);
    get_and_release(c, &w, 0, 16);
    get_and_release(c, &w, 16, 16);
    qw_convcache_drop_packed(c);
    get_and_release(c, master, 0, 16); /* a piece of the same size: a spare's buffer */
    qw_convcache_get_stats(c, &s);
    assert_int_equal(s.evictions, 0);
    assert_int_equal(s.bytes, 2 * 16 * k * sizeof(float));
    assert_int_equal(s.spare, 16 * k * sizeof(float));
    get_and_release(c, master, 16, 16);
    get_and_release(c, master, 32, 16); /* no spare left: the least recent piece goes */
    qw_convcache_get_stats(c, &s);
    assert_int_equal(s.spare, 0);
    assert_int_equal(s.evictions, 1);
    assert_int_equal(s.entries, 2);
    qw_convcache_destroy(c);
    qk_packed_release(&p);
    free(x);
    qw_model_destroy(m);
}

/* Fails unless panels hold qw_gemm_fixed_pack_b of rows [r0, r0+n) of w as qw_weight_rows_f32
 * converts them. */
static void assert_panels_are_packed_conversion(const qw_weight *w, int64_t r0, int64_t n,
                                                const float *panels) {
    assert_non_null(panels);
    int cols = (int)w->cols;
    size_t floats = qw_gemm_fixed_packed_floats((int)n, cols);
    float *rows = malloc((size_t)n * (size_t)cols * sizeof *rows), *ref = malloc(floats * 4);
    assert_non_null(rows);
    assert_non_null(ref);
    assert_int_equal(qw_weight_rows_f32(w, r0, n, rows, NULL), QS_OK);
    qw_gemm_fixed_pack_b(1, (int)n, cols, rows, cols, ref);
    if (memcmp(ref, panels, floats * sizeof *ref) != 0)
        fail_msg("panels of rows %lld..%lld differ from the packed conversion", (long long)r0,
                 (long long)(r0 + n - 1));
    free(rows);
    free(ref);
}

/* A piece kept as the fixed GEMM's panels is the packed conversion bit for bit, found again by
 * the next get; a packed tensor quantized again in place (same address, same codes buffer, a
 * new version) and a stored master under a new qw_weight.version miss instead of returning the
 * old values, without drop_packed; and reading rows through the cache where only panels are
 * held gives qw_weight_rows_f32's rows from them, converting nothing. */
static void panels_are_packed_conversions_keyed_by_version(void **state) {
    (void)state;
    qw_model *m = model_of(16);
    const qw_weight *master = m->lin[QW_LINEAR_UP].master;
    size_t rows = (size_t)master->rows, k = (size_t)master->cols;
    float *x = malloc(rows * k * sizeof *x), *scratch = malloc(rows * k * sizeof *scratch);
    float *got = malloc(rows * k * sizeof *got), *want = malloc(rows * k * sizeof *want);
    assert_non_null(x);
    assert_non_null(scratch);
    assert_non_null(got);
    assert_non_null(want);
    qs_error err = {0};
    assert_int_equal(qw_weight_rows_f32(master, 0, (int64_t)rows, x, &err), QS_OK);
    const qk_format *f = qk_format_by_name("nvfp4");
    assert_non_null(f);
    qk_quant_options o = {0};
    qk_packed p;
    assert_int_equal(qk_packed_init(&p, f, &o, rows, k, &err), QS_OK);
    assert_int_equal(qk_quantize(f, &o, x, rows, k, &p, &err), QS_OK);
    qw_weight w = qw_weight_from_packed(&p);
    qw_convcache *c;
    assert_int_equal(qw_convcache_create((size_t)64 << 20, &c, &err), QS_OK);
    assert_null(qw_convcache_get_panels(c, &w, 0, 16, NULL));
    assert_null(qw_convcache_get_panels(NULL, &w, 0, 16, scratch));

    const float *a = qw_convcache_get_panels(c, &w, 0, 16, scratch);
    assert_panels_are_packed_conversion(&w, 0, 16, a);
    qw_convcache_release(c, a);
    const float *b = qw_convcache_get_panels(c, &w, 16, 9, scratch); /* a part-filled panel */
    assert_panels_are_packed_conversion(&w, 16, 9, b);
    qw_convcache_release(c, b);
    assert_ptr_equal(qw_convcache_get_panels(c, &w, 0, 16, scratch), a);
    qw_convcache_release(c, a);
    qw_convcache_stats s;
    qw_convcache_get_stats(c, &s);
    assert_int_equal(s.misses, 2);
    assert_int_equal(s.hits, 1);
    assert_int_equal(s.bytes, (16 + 16) * k * sizeof(float)); /* 9 rows take a whole panel */

    /* rows 3..15 from the first panel piece: a hit, nothing converted */
    assert_int_equal(qw_convcache_rows_f32(c, &w, 3, 13, 16, got, &err), QS_OK);
    assert_int_equal(qw_weight_rows_f32(&w, 3, 13, want, &err), QS_OK);
    assert_memory_equal(got, want, 13 * k * sizeof *got);
    qw_convcache_get_stats(c, &s);
    assert_int_equal(s.misses, 2);
    assert_int_equal(s.hits, 2);

    /* The same tensor quantized again from other values: a new version, so a miss. */
    uint64_t v0 = p.version;
    for (size_t i = 0; i < rows * k; i++)
        x[i] = -2.0f * x[i];
    assert_int_equal(qk_quantize(f, &o, x, rows, k, &p, &err), QS_OK);
    assert_true(p.version != v0);
    const float *a2 = qw_convcache_get_panels(c, &w, 0, 16, scratch);
    assert_panels_are_packed_conversion(&w, 0, 16, a2);
    qw_convcache_release(c, a2);
    qw_convcache_get_stats(c, &s);
    assert_int_equal(s.misses, 3);

    /* A stored master's pieces, then the same view under a new version. */
    qw_weight mv = *master;
    const float *r = qw_convcache_get_panels(c, &mv, 0, 16, scratch);
    assert_panels_are_packed_conversion(&mv, 0, 16, r);
    qw_convcache_release(c, r);
    mv.version = qk_version_new();
    r = qw_convcache_get_panels(c, &mv, 0, 16, scratch);
    assert_panels_are_packed_conversion(&mv, 0, 16, r);
    qw_convcache_release(c, r);
    qw_convcache_get_stats(c, &s);
    assert_int_equal(s.misses, 5);
    printf("ok panels: %llu hits %llu misses, %zu pieces\n", (unsigned long long)s.hits,
           (unsigned long long)s.misses, s.entries);

    qw_convcache_destroy(c);
    qk_packed_release(&p);
    free(x);
    free(scratch);
    free(got);
    free(want);
    qw_model_destroy(m);
}

typedef struct run_result {
    float *logits; /* [ctx x vocab] of the second chunk's forward */
    qw_eval_metrics base, cmp;
    qw_convcache_stats fwd; /* counters over the second forward alone */
} run_result;

/* One model with the cache at `budget` bytes (SIZE_MAX: the default): two forwards (the second
 * one's logits and cache counters kept), then a baseline and an NVFP4 (every block linear,
 * one W4A4 down_proj) compare with KL, top-1 and SQNR over the token file. */
static void run_with_budget(size_t budget, const char *tokens_path, const char *baseline_path,
                            int ctx, run_result *out) {
    memset(out, 0, sizeof *out);
    qw_model *m = model_of(ctx);
    qs_error err = {0};
    if (budget != SIZE_MAX) assert_int_equal(qw_model_set_convert_cache(m, budget, &err), QS_OK);
    const qw_config *cfg = qw_model_config(m);
    qw_tokens toks;
    if (qw_tokens_load(tokens_path, &toks, &err) != QS_OK) fail_msg("%s", err.msg);
    const float *lg;
    assert_int_equal(qw_model_forward(m, toks.ids, ctx, &lg, &err), QS_OK);
    qw_convcache_stats s0, s1;
    qw_model_convert_cache_stats(m, &s0);
    assert_int_equal(qw_model_forward(m, toks.ids + ctx, ctx, &lg, &err), QS_OK);
    qw_model_convert_cache_stats(m, &s1);
    out->fwd = s1;
    out->fwd.hits -= s0.hits;
    out->fwd.misses -= s0.misses;
    out->fwd.bypassed -= s0.bypassed;
    out->fwd.evictions -= s0.evictions;
    size_t n = (size_t)ctx * (size_t)cfg->vocab_size;
    out->logits = malloc(n * sizeof *out->logits);
    assert_non_null(out->logits);
    memcpy(out->logits, lg, n * sizeof *lg);

    qw_eval_options o = {.ctx = ctx, .bos_id = -1};
    if (qw_eval_baseline(m, &toks, &o, baseline_path, &out->base, &err) != QS_OK)
        fail_msg("%s", err.msg);
    qw_policy pol;
    qw_quant_spec q = {.weight = qk_format_by_name("nvfp4")};
    assert_non_null(q.weight);
    assert_int_equal(qw_policy_init(&pol, cfg->n_layers, &err), QS_OK);
    for (int l = 0; l < cfg->n_layers; l++)
        for (int k = 0; k < QW_LINEAR_KINDS; k++)
            *qw_policy_linear(&pol, l, (qw_linear_kind)k) = q;
    qw_policy_linear(&pol, 0, QW_LINEAR_DOWN)->act = q.weight;
    if (qw_model_apply_policy(m, &pol, &err) != QS_OK) fail_msg("%s", err.msg);
    o.sqnr = 1;
    if (qw_eval_compare(m, &toks, &o, baseline_path, &out->cmp, &err) != QS_OK)
        fail_msg("%s", err.msg);
    qw_policy_free(&pol);
    qw_tokens_free(&toks);
    qw_model_destroy(m);
}

static void assert_same_bits(const void *a, const void *b, size_t n, const char *what) {
    if (memcmp(a, b, n) != 0) fail_msg("%s differs with the cache", what);
}

static void assert_same_results(const run_result *a, const run_result *b, size_t n_logits) {
    assert_same_bits(a->logits, b->logits, n_logits * sizeof(float), "logits");
    assert_same_bits(&a->base.ppl, &b->base.ppl, sizeof(double), "baseline ppl");
    assert_same_bits(&a->cmp.ppl, &b->cmp.ppl, sizeof(double), "quantized ppl");
    assert_same_bits(&a->cmp.kl_mean, &b->cmp.kl_mean, sizeof(double), "kl_mean");
    assert_same_bits(&a->cmp.kl_max, &b->cmp.kl_max, sizeof(double), "kl_max");
    assert_same_bits(&a->cmp.top1, &b->cmp.top1, sizeof(double), "top1");
    assert_int_equal(a->cmp.n_sqnr, b->cmp.n_sqnr);
    for (size_t i = 0; i < a->cmp.n_sqnr; i++) {
        assert_string_equal(a->cmp.sqnr[i].name, b->cmp.sqnr[i].name);
        assert_same_bits(&a->cmp.sqnr[i].sqnr_db, &b->cmp.sqnr[i].sqnr_db, sizeof(double),
                         a->cmp.sqnr[i].name);
    }
}

static void free_result(run_result *r) {
    free(r->logits);
    qw_eval_metrics_free(&r->base);
    qw_eval_metrics_free(&r->cmp);
}

static void results_are_identical_with_and_without_the_cache(void **state) {
    (void)state;
    const int ctx = 48;
    model_fixture f; /* the token file: 3 chunks of deterministic ids */
    assert_int_equal(model_fixture_open(&f, SHAPE, ctx, 2, 3 * 48, 2463534242u), 0);
    const qw_config cfg = *qw_model_config(f.m);
    size_t piece = (size_t)QW_GEMM_COLS * (size_t)cfg.hidden_dim * sizeof(float);
    const char *tokens_path = f.tokens_path, *baseline_path = f.baseline_path;
    run_result off, tiny, big;
    run_with_budget(0, tokens_path, baseline_path, ctx, &off);
    run_with_budget(2 * piece, tokens_path, baseline_path, ctx, &tiny);
    run_with_budget((size_t)1 << 30, tokens_path, baseline_path, ctx, &big);
    size_t n_logits = (size_t)ctx * (size_t)cfg.vocab_size;
    printf("cache off: %llu bypassed; 2 pieces: %llu hits %llu misses %llu evictions %llu "
           "bypassed; 1 GiB: %llu hits %llu misses, %zu pieces, %zu bytes\n",
           (unsigned long long)off.fwd.bypassed, (unsigned long long)tiny.fwd.hits,
           (unsigned long long)tiny.fwd.misses, (unsigned long long)tiny.fwd.evictions,
           (unsigned long long)tiny.fwd.bypassed, (unsigned long long)big.fwd.hits,
           (unsigned long long)big.fwd.misses, big.fwd.entries, big.fwd.bytes);
    assert_true(off.cmp.n_sqnr > 0);
    assert_same_results(&off, &tiny, n_logits);
    assert_same_results(&off, &big, n_logits);
    /* Off: every piece bypassed. Two pieces: the budget churns. Room for all: the second
     * forward converts nothing. */
    assert_true(off.fwd.bypassed > 0 && off.fwd.hits == 0 && off.fwd.misses == 0);
    assert_true(tiny.fwd.evictions > 0 && tiny.fwd.bytes <= 2 * piece);
    assert_true(big.fwd.hits > 0 && big.fwd.misses == 0 && big.fwd.bypassed == 0);
    assert_int_equal(big.fwd.evictions, 0);
    free_result(&off);
    free_result(&tiny);
    free_result(&big);
    model_fixture_close(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lru_counts_hits_misses_evictions_and_keeps_pinned_pieces),
        cmocka_unit_test(packed_pieces_are_dequantized_and_dropped_alone),
        cmocka_unit_test(results_are_identical_with_and_without_the_cache),
        cmocka_unit_test(panels_are_packed_conversions_keyed_by_version),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
