/* Quantization policies: isolation modes select the right linears, applying a policy changes
 * the logits, and applying "none" restores the unquantized model bit for bit (policy.h, model.h).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "eval.h"
#include "golden.h"
#include "model.h"
#include "policy.h"

/* Which (block, kind) an isolation selects: a bitmap [layers][7] of the policy's weight specs. */
static int selected(const qw_policy *p, int b, int k) {
    return qw_policy_linear_const(p, b, (qw_linear_kind)k)->weight != NULL;
}

static void isolation_modes_select_their_parts(void **state) {
    (void)state;
    const int L = 4;
    qw_policy p;
    qs_error err = {0};
    assert_int_equal(qw_policy_init(&p, L, &err), QS_OK);
    qw_quant_spec s = {.weight = qk_format_by_name("nvfp4")};
    assert_non_null(s.weight);
    struct {
        qw_isolation mode;
        qw_linear_kind kind;
        int block;
        int count;
    } cases[] = {
        {QW_ISO_NONE, 0, 0, 0},
        {QW_ISO_ALL, 0, 0, 7 * L},
        {QW_ISO_COMPONENT, QW_LINEAR_UP, 0, L},
        {QW_ISO_BLOCK, 0, 2, 7},
        {QW_ISO_LAYER, QW_LINEAR_O, 3, 1},
        {QW_ISO_LOO_COMPONENT, QW_LINEAR_V, 0, 6 * L},
        {QW_ISO_LOO_BLOCK, 0, 1, 7 * (L - 1)},
        {QW_ISO_LOO_LAYER, QW_LINEAR_DOWN, 0, 7 * L - 1},
        {QW_ISO_CUMULATIVE, 0, 1, 14},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(
            qw_policy_isolation(&p, cases[i].mode, cases[i].kind, cases[i].block, &s, &err), QS_OK);
        assert_int_equal(qw_policy_count(&p), cases[i].count);
        for (int b = 0; b < L; b++)
            for (int k = 0; k < 7; k++) {
                int want;
                switch (cases[i].mode) {
                case QW_ISO_COMPONENT:
                    want = k == (int)cases[i].kind;
                    break;
                case QW_ISO_BLOCK:
                    want = b == cases[i].block;
                    break;
                case QW_ISO_LAYER:
                    want = b == cases[i].block && k == (int)cases[i].kind;
                    break;
                case QW_ISO_LOO_COMPONENT:
                    want = k != (int)cases[i].kind;
                    break;
                case QW_ISO_LOO_BLOCK:
                    want = b != cases[i].block;
                    break;
                case QW_ISO_LOO_LAYER:
                    want = !(b == cases[i].block && k == (int)cases[i].kind);
                    break;
                case QW_ISO_CUMULATIVE:
                    want = b <= cases[i].block;
                    break;
                case QW_ISO_ALL:
                    want = 1;
                    break;
                default:
                    want = 0;
                }
                if (selected(&p, b, k) != want)
                    fail_msg("%s: block %d %s selected %d, expected %d",
                             qw_isolation_name(cases[i].mode), b,
                             qw_linear_kind_name((qw_linear_kind)k), selected(&p, b, k), want);
            }
    }
    qw_policy_free(&p);
}

static void isolation_refuses_bad_arguments(void **state) {
    (void)state;
    qw_policy p;
    qs_error err = {0};
    assert_int_equal(qw_policy_init(&p, 2, &err), QS_OK);
    qw_quant_spec s = {.weight = qk_format_by_name("mxfp4")};
    assert_int_equal(qw_policy_isolation(&p, QW_ISO_BLOCK, 0, 2, &s, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "block 2"));
    assert_int_equal(qw_policy_isolation(&p, QW_ISO_COMPONENT, (qw_linear_kind)7, 0, &s, &err),
                     QS_EINVAL);
    assert_non_null(strstr(err.msg, "kind 7"));
    assert_int_equal(qw_policy_isolation(&p, QW_ISO_ALL, 0, 0, NULL, &err), QS_EINVAL);
    qw_policy_free(&p);
    assert_int_equal(qw_policy_init(&p, 0, &err), QS_EINVAL);
    assert_null(p.linears);
}

static void names_round_trip(void **state) {
    (void)state;
    qs_error err = {0};
    for (int k = 0; k < QW_LINEAR_KINDS; k++) {
        qw_linear_kind got;
        assert_int_equal(qw_linear_kind_by_name(qw_linear_kind_name((qw_linear_kind)k), &got, &err),
                         QS_OK);
        assert_int_equal(got, k);
    }
    qw_linear_kind got;
    assert_int_equal(qw_linear_kind_by_name("gate_proj", &got, &err), QS_OK);
    assert_int_equal(got, QW_LINEAR_GATE);
    assert_int_equal(qw_linear_kind_by_name("qkv", &got, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "\"qkv\""));
    for (int i = 0; i <= QW_ISO_CUMULATIVE; i++) {
        qw_isolation mode;
        assert_int_equal(qw_isolation_by_name(qw_isolation_name((qw_isolation)i), &mode, &err),
                         QS_OK);
        assert_int_equal(mode, i);
    }
    qw_isolation mode;
    assert_int_equal(qw_isolation_by_name("blocks", &mode, &err), QS_EINVAL);
}

typedef struct fixture {
    qw_checkpoint *ck;
    qw_model *m;
    uint32_t tokens[40];
    int n;
    float *base; /* [n x vocab] unquantized logits */
    size_t nl;
} fixture;

static void fixture_open(fixture *f, const char *name) {
    memset(f, 0, sizeof *f);
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", engine_data_dir(), name);
    qs_error err = {0};
    if (qw_checkpoint_open(path, &f->ck, &err) != QS_OK) fail_msg("%s", err.msg);
    if (qw_model_create(f->ck, 64, 0, &f->m, &err) != QS_OK) fail_msg("%s", err.msg);
    int vocab = qw_model_config(f->m)->vocab_size;
    f->n = 40;
    for (int i = 0; i < f->n; i++)
        f->tokens[i] = (uint32_t)((i * 37 + 11) % vocab);
    const float *l;
    if (qw_model_forward(f->m, f->tokens, f->n, &l, &err) != QS_OK) fail_msg("%s", err.msg);
    f->nl = (size_t)f->n * vocab;
    f->base = malloc(f->nl * sizeof(float));
    assert_non_null(f->base);
    memcpy(f->base, l, f->nl * sizeof(float));
}

static void fixture_close(fixture *f) {
    free(f->base);
    qw_model_destroy(f->m);
    qw_checkpoint_close(f->ck);
}

static const float *run(fixture *f) {
    const float *l;
    qs_error err = {0};
    if (qw_model_forward(f->m, f->tokens, f->n, &l, &err) != QS_OK) fail_msg("%s", err.msg);
    return l;
}

static void quantizing_weights_changes_logits_and_none_restores_them_bit_exactly(void **state) {
    (void)state;
    fixture f;
    fixture_open(&f, "llama3_gqa");
    qw_policy p;
    qs_error err = {0};
    assert_int_equal(qw_policy_init(&p, qw_model_config(f.m)->n_layers, &err), QS_OK);
    qw_quant_spec s = {.weight = qk_format_by_name("nvfp4")};
    assert_int_equal(qw_policy_isolation(&p, QW_ISO_ALL, 0, 0, &s, &err), QS_OK);
    if (qw_model_apply_policy(f.m, &p, &err) != QS_OK) fail_msg("%s", err.msg);
    double e = rel_err(run(&f), f.base, f.nl);
    printf("NVFP4 W4A16 on every block linear: relative change of the logits %.4g\n", e);
    assert_true(e > 1e-3);
    /* The same policy again starts from the masters: identical bits, not quantized twice. */
    float *q1 = malloc(f.nl * sizeof(float));
    assert_non_null(q1);
    memcpy(q1, run(&f), f.nl * sizeof(float));
    if (qw_model_apply_policy(f.m, &p, &err) != QS_OK) fail_msg("%s", err.msg);
    assert_memory_equal(run(&f), q1, f.nl * sizeof(float));
    /* Policy none (an all-none policy, and NULL) restores the unquantized logits bit for bit. */
    assert_int_equal(qw_policy_isolation(&p, QW_ISO_NONE, 0, 0, NULL, &err), QS_OK);
    if (qw_model_apply_policy(f.m, &p, &err) != QS_OK) fail_msg("%s", err.msg);
    assert_memory_equal(run(&f), f.base, f.nl * sizeof(float));
    assert_int_equal(qw_policy_isolation(&p, QW_ISO_LAYER, QW_LINEAR_DOWN, 1, &s, &err), QS_OK);
    if (qw_model_apply_policy(f.m, &p, &err) != QS_OK) fail_msg("%s", err.msg);
    assert_true(rel_err(run(&f), f.base, f.nl) > 0.0);
    if (qw_model_apply_policy(f.m, NULL, &err) != QS_OK) fail_msg("%s", err.msg);
    assert_memory_equal(run(&f), f.base, f.nl * sizeof(float));
    free(q1);
    qw_policy_free(&p);
    fixture_close(&f);
}

static void activation_quantization_adds_error_to_weight_only(void **state) {
    (void)state;
    fixture f;
    fixture_open(&f,
                 "oddk"); /* K = 72 and 200: ragged NVFP4 blocks on both weights and activations */
    qw_policy p;
    qs_error err = {0};
    assert_int_equal(qw_policy_init(&p, qw_model_config(f.m)->n_layers, &err), QS_OK);
    qw_quant_spec w = {.weight = qk_format_by_name("nvfp4")};
    qw_quant_spec wa = {.weight = w.weight, .act = w.weight};
    assert_int_equal(qw_policy_isolation(&p, QW_ISO_ALL, 0, 0, &w, &err), QS_OK);
    if (qw_model_apply_policy(f.m, &p, &err) != QS_OK) fail_msg("%s", err.msg);
    double e_w = rel_err(run(&f), f.base, f.nl);
    assert_int_equal(qw_policy_isolation(&p, QW_ISO_ALL, 0, 0, &wa, &err), QS_OK);
    if (qw_model_apply_policy(f.m, &p, &err) != QS_OK) fail_msg("%s", err.msg);
    double e_wa = rel_err(run(&f), f.base, f.nl);
    printf("NVFP4 relative change of the logits: W4A16 %.4g, W4A4 %.4g\n", e_w, e_wa);
    assert_true(e_w > 0.0);
    assert_true(e_wa > e_w);
    qw_policy_free(&p);
    fixture_close(&f);
}

/* SQNR is measured for each quantized linear against the unquantized linear on the same input,
 * and for no other linear. */
static void sqnr_probe_measures_quantized_linears_only(void **state) {
    (void)state;
    fixture f;
    fixture_open(&f, "llama2_mha");
    const qw_config *c = qw_model_config(f.m);
    qw_policy p;
    qs_error err = {0};
    assert_int_equal(qw_policy_init(&p, c->n_layers, &err), QS_OK);
    qw_quant_spec s = {.weight = qk_format_by_name("mxfp4")};
    assert_int_equal(qw_policy_isolation(&p, QW_ISO_BLOCK, 0, 1, &s, &err), QS_OK);
    if (qw_model_apply_policy(f.m, &p, &err) != QS_OK) fail_msg("%s", err.msg);
    assert_int_equal(qw_model_set_sqnr_probe(f.m, 1, &err), QS_OK);
    run(&f);
    int n_probed = 0;
    char name[128];
    for (int i = 0; i < qw_model_n_linears(f.m); i++) {
        double sig, noise;
        int got = qw_model_sqnr_sums(f.m, i, &sig, &noise);
        int want = i / QW_LINEAR_KINDS == 1 && i < c->n_layers * QW_LINEAR_KINDS;
        assert_int_equal(got == 0, want);
        if (got == 0) {
            double db = 10.0 * log10(sig / noise);
            printf("%s: SQNR %.2f dB\n", qw_model_linear_name(f.m, i, name, sizeof name), db);
            assert_true(isfinite(db) && db > 0.0);
            n_probed++;
        }
    }
    assert_int_equal(n_probed, 7);
    assert_int_equal(qw_model_set_sqnr_probe(f.m, 0, &err), QS_OK);
    qw_policy_free(&p);
    fixture_close(&f);
}

/* Block 0's q_proj reads rmsnorm(embeddings): its probe SQNR equals 10 log10(sum y^2 / sum
 * (y_q - y)^2) with y = x W^T and y_q = x Q(W)^T, computed here in double from the checkpoint's
 * tensors and qk_fake_quant on a copy of W. */
static void sqnr_probe_matches_direct_computation(void **state) {
    (void)state;
    fixture f;
    fixture_open(&f, "llama2_mha");
    const qw_config *c = qw_model_config(f.m);
    qw_policy p;
    qs_error err = {0};
    assert_int_equal(qw_policy_init(&p, c->n_layers, &err), QS_OK);
    qw_quant_spec s = {.weight = qk_format_by_name("nvfp4")};
    assert_int_equal(qw_policy_isolation(&p, QW_ISO_LAYER, QW_LINEAR_Q, 0, &s, &err), QS_OK);
    if (qw_model_apply_policy(f.m, &p, &err) != QS_OK) fail_msg("%s", err.msg);
    assert_int_equal(qw_model_set_sqnr_probe(f.m, 1, &err), QS_OK);
    run(&f);
    double sig, noise;
    assert_int_equal(qw_model_sqnr_sums(f.m, QW_LINEAR_Q, &sig, &noise), 0);
    double probe_db = 10.0 * log10(sig / noise);

    const float *emb, *norm, *wq;
    int64_t shape[2];
    int ndim;
    assert_int_equal(
        qw_checkpoint_tensor(f.ck, "model.embed_tokens.weight", &emb, shape, &ndim, &err), QS_OK);
    assert_int_equal(qw_checkpoint_tensor(f.ck, "model.layers.0.input_layernorm.weight", &norm,
                                          shape, &ndim, &err),
                     QS_OK);
    assert_int_equal(qw_checkpoint_tensor(f.ck, "model.layers.0.self_attn.q_proj.weight", &wq,
                                          shape, &ndim, &err),
                     QS_OK);
    int D = c->dim, O = (int)shape[0];
    float *wqq = malloc((size_t)O * D * sizeof(float));
    double *x = malloc((size_t)D * sizeof(double));
    assert_true(wqq && x);
    memcpy(wqq, wq, (size_t)O * D * sizeof(float));
    qk_quant_options opt = {0};
    assert_int_equal(qk_fake_quant(s.weight, &opt, wqq, (size_t)O, (size_t)D, NULL, &err), QS_OK);
    double dsig = 0.0, dnoise = 0.0;
    for (int t = 0; t < f.n; t++) {
        const float *e = emb + (size_t)f.tokens[t] * D;
        double ss = 0.0;
        for (int i = 0; i < D; i++)
            ss += (double)e[i] * e[i];
        double r = 1.0 / sqrt(ss / D + c->norm_eps);
        for (int i = 0; i < D; i++)
            x[i] = e[i] * r * norm[i];
        for (int o = 0; o < O; o++) {
            double y = 0.0, yq = 0.0;
            for (int i = 0; i < D; i++) {
                y += x[i] * wq[(size_t)o * D + i];
                yq += x[i] * wqq[(size_t)o * D + i];
            }
            dsig += y * y;
            dnoise += (yq - y) * (yq - y);
        }
    }
    double direct_db = 10.0 * log10(dsig / dnoise);
    printf("q_proj of block 0, NVFP4: probe %.4f dB, direct %.4f dB\n", probe_db, direct_db);
    assert_close(probe_db, direct_db, 0.01);
    free(wqq);
    free(x);
    qw_policy_free(&p);
    fixture_close(&f);
}

static void lm_head_and_embeddings_are_quantized_on_request(void **state) {
    (void)state;
    fixture f;
    fixture_open(&f, "llama32_tied"); /* tied: lm_head and embeddings share one master */
    qw_policy p;
    qs_error err = {0};
    assert_int_equal(qw_policy_init(&p, qw_model_config(f.m)->n_layers, &err), QS_OK);
    p.lm_head.weight = qk_format_by_name("nvfp4");
    if (qw_model_apply_policy(f.m, &p, &err) != QS_OK) fail_msg("%s", err.msg);
    double e_head = rel_err(run(&f), f.base, f.nl);
    memset(&p.lm_head, 0, sizeof p.lm_head);
    p.embed.weight = qk_format_by_name("nvfp4");
    if (qw_model_apply_policy(f.m, &p, &err) != QS_OK) fail_msg("%s", err.msg);
    double e_emb = rel_err(run(&f), f.base, f.nl);
    printf("NVFP4 lm_head only %.4g, embeddings only %.4g\n", e_head, e_emb);
    assert_true(e_head > 0.0 && e_emb > 0.0);
    assert_int_equal(qw_model_apply_policy(f.m, NULL, &err), QS_OK);
    assert_memory_equal(run(&f), f.base, f.nl * sizeof(float));
    qw_policy_free(&p);
    fixture_close(&f);
}

/* The prefix cache skips the unquantized blocks before the first quantized one and gives the
 * same bits as a model without it. llama3_gqa has 3 blocks; the run order below stores
 * boundaries 1..3 on the first (unquantized) forward, then block 0 quantized cannot reuse,
 * block 1 skips 1 block, block 2 skips 2, none skips 3, lm_head only skips 3: 4 hits, 9 blocks. */
static void prefix_cache_reuses_unquantized_blocks_bit_exactly(void **state) {
    (void)state;
    fixture f, g;
    fixture_open(&f, "llama3_gqa");
    fixture_open(&g, "llama3_gqa");
    qs_error err = {0};
    assert_int_equal(qw_model_set_prefix_cache(f.m, 1, &err), QS_EINVAL);
    assert_int_equal(qw_model_set_prefix_cache(f.m, 1u << 20, &err),
                     QS_OK); /* room for a few entries */
    int L = qw_model_config(f.m)->n_layers;
    assert_int_equal(L, 3);
    qw_policy p;
    assert_int_equal(qw_policy_init(&p, L, &err), QS_OK);
    qw_quant_spec s = {.weight = qk_format_by_name("nvfp4"), .act = qk_format_by_name("mxfp4")};
    const float *lf, *lg;
    /* baseline, block 0, block 1, block 2, none, lm_head only */
    for (int step = 0; step < 6; step++) {
        if (step == 0 || step == 4)
            assert_int_equal(qw_policy_isolation(&p, QW_ISO_NONE, 0, 0, NULL, &err), QS_OK);
        else if (step <= 3)
            assert_int_equal(qw_policy_isolation(&p, QW_ISO_BLOCK, 0, step - 1, &s, &err), QS_OK);
        else
            p.lm_head = s;
        if (qw_model_apply_policy(f.m, &p, &err) != QS_OK ||
            qw_model_apply_policy(g.m, &p, &err) != QS_OK)
            fail_msg("%s", err.msg);
        if (qw_model_forward(f.m, f.tokens, f.n, &lf, &err) != QS_OK ||
            qw_model_forward(g.m, g.tokens, g.n, &lg, &err) != QS_OK)
            fail_msg("%s", err.msg);
        assert_memory_equal(lf, lg, f.nl * sizeof(float));
    }
    size_t hits, skipped;
    qw_model_prefix_cache_stats(f.m, &hits, &skipped);
    printf("prefix cache: %zu hits, %zu blocks skipped\n", hits, skipped);
    assert_int_equal(hits, 4);
    assert_int_equal(skipped, 9);
    /* Other tokens are another entry: computed in full, still identical. */
    f.tokens[5] ^= 1;
    g.tokens[5] ^= 1;
    if (qw_model_forward(f.m, f.tokens, f.n, &lf, &err) != QS_OK ||
        qw_model_forward(g.m, g.tokens, g.n, &lg, &err) != QS_OK)
        fail_msg("%s", err.msg);
    assert_memory_equal(lf, lg, f.nl * sizeof(float));
    qw_model_prefix_cache_stats(f.m, &hits, &skipped);
    assert_int_equal(hits, 4);
    qw_policy_free(&p);
    fixture_close(&f);
    fixture_close(&g);
}

/* forward_rows gives the same rows as the full forward (the evaluation uses it). */
static void forward_rows_matches_full_forward(void **state) {
    (void)state;
    fixture f;
    fixture_open(&f, "oddk");
    const float *l;
    qs_error err = {0};
    int vocab = qw_model_config(f.m)->vocab_size, row0 = f.n / 2;
    if (qw_model_forward_rows(f.m, f.tokens, f.n, row0, &l, &err) != QS_OK) fail_msg("%s", err.msg);
    double e = rel_err(l, f.base + (size_t)row0 * vocab, (size_t)(f.n - row0) * vocab);
    printf("rows %d..%d: relative difference %.3g\n", row0, f.n - 1, e);
    assert_true(e <= 1e-6);
    assert_int_equal(qw_model_forward_rows(f.m, f.tokens, f.n, f.n, &l, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "row0"));
    fixture_close(&f);
}

/* Blocks run one range at a time, the residual carried through host memory between the calls,
 * give the bits of one call over all of them (GPTQ's calibration carries its chunks so), under
 * W4A4 on every block; a range outside the model and a carry without its residual are refused. */
static void blocks_carried_range_by_range_give_one_forwards_bits(void **state) {
    (void)state;
    fixture f;
    fixture_open(&f, "llama3_gqa");
    qs_error err = {0};
    const qw_config *c = qw_model_config(f.m);
    int L = c->n_layers;
    qw_policy p;
    assert_int_equal(qw_policy_init(&p, L, &err), QS_OK);
    qw_quant_spec s = {.weight = qk_format_by_name("nvfp4"), .act = qk_format_by_name("nvfp4")};
    assert_int_equal(qw_policy_isolation(&p, QW_ISO_ALL, 0, 0, &s, &err), QS_OK);
    if (qw_model_apply_policy(f.m, &p, &err) != QS_OK) fail_msg("%s", err.msg);
    size_t nd = (size_t)f.n * c->dim;
    float *whole = malloc(nd * sizeof(float)), *carried = malloc(nd * sizeof(float));
    assert_non_null(whole);
    assert_non_null(carried);
    if (qw_model_forward_blocks(f.m, f.tokens, f.n, 0, L, NULL, whole, &err) != QS_OK)
        fail_msg("%s", err.msg);
    for (int b = 0; b < L; b++)
        if (qw_model_forward_blocks(f.m, f.tokens, f.n, b, b + 1, carried, carried, &err) != QS_OK)
            fail_msg("block %d: %s", b, err.msg);
    assert_memory_equal(whole, carried, nd * sizeof(float));
    assert_int_equal(qw_model_forward_blocks(f.m, f.tokens, f.n, 1, L + 1, carried, NULL, &err),
                     QS_EINVAL);
    assert_non_null(strstr(err.msg, "blocks 1..4 of 3"));
    assert_int_equal(qw_model_forward_blocks(f.m, f.tokens, f.n, 1, 2, NULL, NULL, &err),
                     QS_EINVAL);
    assert_non_null(strstr(err.msg, "without the residual"));
    free(whole);
    free(carried);
    qw_policy_free(&p);
    fixture_close(&f);
}

static void policy_that_does_not_fit_the_model_is_refused(void **state) {
    (void)state;
    fixture f;
    fixture_open(&f, "llama2_mha");
    qw_policy p;
    qs_error err = {0};
    assert_int_equal(qw_policy_init(&p, qw_model_config(f.m)->n_layers + 1, &err), QS_OK);
    assert_int_equal(qw_model_apply_policy(f.m, &p, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "layers"));
    qw_policy_free(&p);
    assert_int_equal(qw_policy_init(&p, qw_model_config(f.m)->n_layers, &err), QS_OK);
    p.embed.act = qk_format_by_name("nvfp4");
    assert_int_equal(qw_model_apply_policy(f.m, &p, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "embed.act"));
    assert_memory_equal(run(&f), f.base, f.nl * sizeof(float));
    qw_policy_free(&p);
    fixture_close(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(isolation_modes_select_their_parts),
        cmocka_unit_test(isolation_refuses_bad_arguments),
        cmocka_unit_test(names_round_trip),
        cmocka_unit_test(quantizing_weights_changes_logits_and_none_restores_them_bit_exactly),
        cmocka_unit_test(activation_quantization_adds_error_to_weight_only),
        cmocka_unit_test(sqnr_probe_measures_quantized_linears_only),
        cmocka_unit_test(sqnr_probe_matches_direct_computation),
        cmocka_unit_test(lm_head_and_embeddings_are_quantized_on_request),
        cmocka_unit_test(prefix_cache_reuses_unquantized_blocks_bit_exactly),
        cmocka_unit_test(forward_rows_matches_full_forward),
        cmocka_unit_test(blocks_carried_range_by_range_give_one_forwards_bits),
        cmocka_unit_test(policy_that_does_not_fit_the_model_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
