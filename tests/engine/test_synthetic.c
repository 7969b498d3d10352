/* Synthetic models (synthetic.h): the shape table holds the published configs, the weights are
 * seeded, thread-count independent and drawn N(0, 0.02) as BF16, a synthetic model evaluates
 * through the engine, and tied embeddings are handled explicitly (quantizing lm_head of a tied
 * model quantizes the head's copy only). */
#include <math.h>
#include <setjmp.h>
#include <sodium.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model.h"
#include "policy.h"
#include "synthetic.h"

/* Published config.json values (meta-llama on the Hugging Face hub), written out. */
static void shapes_hold_the_published_configs(void **state) {
    (void)state;
    const qw_synthetic_shape *s = qw_synthetic_shape_by_name("llama2-7b");
    assert_non_null(s);
    assert_int_equal(s->cfg.dim, 4096);
    assert_int_equal(s->cfg.hidden_dim, 11008);
    assert_int_equal(s->cfg.n_layers, 32);
    assert_int_equal(s->cfg.n_kv_heads, 32);
    assert_int_equal(s->cfg.vocab_size, 32000);
    assert_int_equal(s->cfg.tied_embeddings, 0);
    s = qw_synthetic_shape_by_name("llama3-70b");
    assert_int_equal(s->cfg.dim, 8192);
    assert_int_equal(s->cfg.hidden_dim, 28672);
    assert_int_equal(s->cfg.n_layers, 80);
    assert_int_equal(s->cfg.n_heads, 64);
    assert_int_equal(s->cfg.n_kv_heads, 8);
    assert_int_equal(s->cfg.vocab_size, 128256);
    assert_true(s->cfg.rope_theta == 500000.0f && s->cfg.rope_factor == 0.0f);
    s = qw_synthetic_shape_by_name("llama3.1-405b");
    assert_int_equal(s->cfg.dim, 16384);
    assert_int_equal(s->cfg.hidden_dim, 53248);
    assert_int_equal(s->cfg.n_layers, 126);
    assert_int_equal(s->cfg.n_heads, 128);
    assert_int_equal(s->cfg.max_seq_len, 131072);
    assert_true(s->cfg.rope_factor == 8.0f && s->cfg.rope_high_freq_factor == 4.0f);
    s = qw_synthetic_shape_by_name("llama3.2-3b");
    assert_int_equal(s->cfg.dim, 3072);
    assert_int_equal(s->cfg.n_layers, 28);
    assert_int_equal(s->cfg.n_heads, 24);
    assert_int_equal(s->cfg.head_dim, 128);
    assert_int_equal(s->cfg.tied_embeddings, 1);
    assert_true(s->cfg.rope_factor == 32.0f && s->cfg.rope_original_max_pos == 8192);
    /* every shape is a valid config whose heads tile dim the way HF's do */
    size_t n;
    const qw_synthetic_shape *all = qw_synthetic_shapes(&n);
    assert_true(n >= 12);
    for (size_t i = 0; i < n; i++) {
        qs_error err = {0};
        assert_int_equal(qw_config_check(&all[i].cfg, &err), QS_OK);
        /* initializer_range: 0.02 in every Llama 2/3 config.json, 1/24 in SmolLM2's */
        assert_true(all[i].init_std ==
                    (strcmp(all[i].name, "smollm2-135m") ? 0.02f : 0.041666668f));
        assert_ptr_equal(qw_synthetic_shape_by_name(all[i].name), &all[i]);
    }
}

static void specs_parse_and_bad_ones_are_named(void **state) {
    (void)state;
    const qw_synthetic_shape *s;
    uint64_t seed = 1;
    qs_error err = {0};
    assert_int_equal(qw_synthetic_parse("synthetic:llama2-13b", &s, &seed, &err), QS_OK);
    assert_string_equal(s->name, "llama2-13b");
    assert_int_equal(seed, 0);
    assert_int_equal(qw_synthetic_parse("tiny-llama3:42", &s, &seed, &err), QS_OK);
    assert_int_equal(seed, 42);
    assert_int_equal(qw_synthetic_parse("synthetic:llama9-1t:1", &s, &seed, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "unknown shape 'llama9-1t'"));
    assert_non_null(strstr(err.msg, "llama3.2-1b"));
    assert_int_equal(qw_synthetic_parse("synthetic:llama2-7b:x1", &s, &seed, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "seed 'x1' is not a number"));
    assert_int_equal(qw_synthetic_parse("synthetic:llama2-7b:-1", &s, &seed, &err), QS_EINVAL);
    assert_true(qw_synthetic_is("synthetic:tiny-llama2"));
    assert_false(qw_synthetic_is("/models/llama"));
}

/* The digest is BLAKE2b-256 of the path, as coordinator/grid computes it. */
static void digest_is_the_grids(void **state) {
    (void)state;
    const char *path = "synthetic:llama2-7b:3";
    unsigned char h[32];
    char want[65], got[65];
    crypto_generichash(h, sizeof h, (const unsigned char *)path, strlen(path), NULL, 0);
    sodium_bin2hex(want, sizeof want, h, sizeof h);
    qw_synthetic_digest(path, got);
    assert_string_equal(got, want);
}

static float bf16_value(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Same seed, same bytes for 1 and 3 threads; another seed, other weights; BF16 masters drawn
 * N(0, 0.02) (mean and standard deviation of 100k+ draws within 3 standard errors / 2%);
 * norms 1. */
static void weights_are_seeded_and_drawn_as_the_family_does(void **state) {
    (void)state;
    qw_weights a, b, c;
    qs_error err = {0};
    assert_int_equal(qw_synthetic_build("tiny-llama2:7", 1, &a, &err), QS_OK);
    assert_int_equal(qw_synthetic_build("synthetic:tiny-llama2:7", 3, &b, &err), QS_OK);
    assert_int_equal(qw_synthetic_build("tiny-llama2:8", 2, &c, &err), QS_OK);
    assert_int_equal(a.embed.form, QW_WEIGHT_STORED);
    assert_int_equal(a.embed.view.dtype, QW_DT_BF16);
    size_t bytes = qw_weights_bytes(&a);
    assert_int_equal(bytes, qw_weights_bytes(&b));
    /* every matrix equal across thread counts; different across seeds */
    for (int k = 0; k < QW_LINEAR_KINDS; k++)
        for (int l = 0; l < a.cfg.n_layers; l++) {
            const qw_weight *wa = &a.lin[k][l], *wb = &b.lin[k][l], *wc = &c.lin[k][l];
            size_t n = (size_t)wa->rows * wa->view.row_bytes;
            assert_memory_equal(wa->view.data, wb->view.data, n);
            assert_memory_not_equal(wa->view.data, wc->view.data, n);
        }
    assert_memory_equal(a.lm_head.view.data, b.lm_head.view.data,
                        (size_t)a.lm_head.rows * a.lm_head.view.row_bytes);
    assert_ptr_not_equal(a.lm_head.view.data, a.embed.view.data); /* untied */
    /* statistics over the embeddings and every block linear */
    double s1 = 0.0, s2 = 0.0;
    size_t n = 0;
    const qw_weight *all[1 + 7 * 2];
    all[0] = &a.embed;
    for (int k = 0; k < 7; k++)
        for (int l = 0; l < 2; l++)
            all[1 + k * 2 + l] = &a.lin[k][l];
    for (size_t t = 0; t < sizeof all / sizeof all[0]; t++) {
        const uint16_t *v = (const uint16_t *)(const void *)all[t]->view.data;
        for (int64_t i = 0; i < all[t]->rows * all[t]->cols; i++) {
            double x = bf16_value(v[i]);
            s1 += x;
            s2 += x * x;
            n++;
        }
    }
    double mean = s1 / (double)n, sd = sqrt(s2 / (double)n - mean * mean);
    assert_true(n > 100000);
    assert_true(fabs(mean) < 3.0 * 0.02 / sqrt((double)n));
    assert_true(fabs(sd - 0.02) < 0.02 * 0.02);
    for (int i = 0; i < a.cfg.dim; i++)
        assert_true(a.final_norm[i] == 1.0f && a.attn_norm[1][i] == 1.0f &&
                    a.ffn_norm[0][i] == 1.0f);
    qw_weights_release(&a);
    qw_weights_release(&b);
    qw_weights_release(&c);
}

static uint32_t *tokens_for(int n, int vocab) {
    uint32_t *t = malloc((size_t)n * sizeof *t), s = 5;
    for (int i = 0; i < n; i++) {
        s = s * 1103515245u + 12345u;
        t[i] = (s >> 8) % (uint32_t)vocab;
    }
    return t;
}

/* A synthetic model runs: finite logits, the same for 1 and 2 threads, and a synthetic llama3.2
 * layout (GQA, tied, llama3 rope scaling) evaluates like any checkpoint. */
static void synthetic_models_evaluate(void **state) {
    (void)state;
    const int T = 70;
    qw_model *m1, *m2;
    qs_error err = {0};
    assert_int_equal(qw_model_create_synthetic("synthetic:tiny-llama3:3", T, 1, &m1, &err), QS_OK);
    assert_int_equal(qw_model_create_synthetic("tiny-llama3:3", T, 2, &m2, &err), QS_OK);
    const qw_config *c = qw_model_config(m1);
    assert_int_equal(c->n_kv_heads, 2);
    uint32_t *tok = tokens_for(T, c->vocab_size);
    const float *l1, *l2;
    assert_int_equal(qw_model_forward(m1, tok, T, &l1, &err), QS_OK);
    assert_int_equal(qw_model_forward(m2, tok, T, &l2, &err), QS_OK);
    size_t n = (size_t)T * c->vocab_size;
    assert_memory_equal(l1, l2, n * sizeof *l1);
    for (size_t i = 0; i < n; i++)
        assert_true(isfinite(l1[i]));
    /* Random weights of std 0.02 give near-uniform next-token distributions: logits small. */
    for (size_t i = 0; i < n; i++)
        assert_true(fabsf(l1[i]) < 5.0f);
    qw_model_destroy(m1);
    qw_model_destroy(m2);
    assert_int_equal(qw_model_create_synthetic("synthetic:nope", T, 1, &m1, &err), QS_EINVAL);
    assert_null(m1);
    free(tok);
}

/* Tied embeddings: quantizing lm_head quantizes the head's copy only. The embeddings stay
 * unquantized (the prefix cache, which needs an unquantized prefix, still serves every block),
 * the packed bytes are one [V x D] NVFP4 tensor, and quantizing embed as well is a second,
 * separate tensor that changes the logits again. */
static void tied_lm_head_quantizes_the_head_copy_only(void **state) {
    (void)state;
    const int T = 40;
    qw_model *m;
    qs_error err = {0};
    assert_int_equal(qw_model_create_synthetic("tiny-llama3:1", T, 2, &m, &err), QS_OK);
    assert_true(qw_model_tied_embeddings(m));
    const qw_config *c = qw_model_config(m);
    size_t V = (size_t)c->vocab_size, D = (size_t)c->dim, n = (size_t)T * V;
    uint32_t *tok = tokens_for(T, c->vocab_size);
    float *base = malloc(n * sizeof *base), *head = malloc(n * sizeof *head);
    const float *l;
    assert_int_equal(qw_model_set_prefix_cache(m, 1u << 20, &err), QS_OK);
    assert_int_equal(qw_model_forward(m, tok, T, &l, &err), QS_OK);
    memcpy(base, l, n * sizeof *l);
    qw_model_bytes mb;
    qw_model_memory(m, &mb);
    assert_int_equal(mb.packed, 0);
    qw_policy p;
    assert_int_equal(qw_policy_init(&p, c->n_layers, &err), QS_OK);
    p.lm_head.weight = qk_format_by_name("nvfp4");
    assert_int_equal(qw_model_apply_policy(m, &p, &err), QS_OK);
    qw_model_memory(m, &mb);
    assert_int_equal(mb.packed, V * D / 2 + V * D / 16);
    assert_int_equal(qw_model_forward(m, tok, T, &l, &err), QS_OK);
    memcpy(head, l, n * sizeof *l);
    assert_memory_not_equal(base, head, n * sizeof *l);
    size_t hits, skipped;
    qw_model_prefix_cache_stats(m, &hits, &skipped);
    assert_int_equal(hits, 1);
    assert_int_equal(skipped, (size_t)c->n_layers); /* every block: the embeddings unquantized */
    p.embed.weight = qk_format_by_name("nvfp4");
    assert_int_equal(qw_model_apply_policy(m, &p, &err), QS_OK);
    qw_model_memory(m, &mb);
    assert_int_equal(mb.packed, 2 * (V * D / 2 + V * D / 16));
    assert_int_equal(qw_model_forward(m, tok, T, &l, &err), QS_OK);
    assert_memory_not_equal(l, head, n * sizeof *l);
    qw_model_prefix_cache_stats(m, &hits, &skipped);
    assert_int_equal(hits, 1); /* quantized embeddings: nothing to reuse */
    /* back to unquantized: the first logits, bit for bit */
    assert_int_equal(qw_model_apply_policy(m, NULL, &err), QS_OK);
    assert_int_equal(qw_model_forward(m, tok, T, &l, &err), QS_OK);
    assert_memory_equal(l, base, n * sizeof *l);
    qw_policy_free(&p);
    qw_model_destroy(m);
    free(tok);
    free(base);
    free(head);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(shapes_hold_the_published_configs),
        cmocka_unit_test(specs_parse_and_bad_ones_are_named),
        cmocka_unit_test(digest_is_the_grids),
        cmocka_unit_test(weights_are_seeded_and_drawn_as_the_family_does),
        cmocka_unit_test(synthetic_models_evaluate),
        cmocka_unit_test(tied_lm_head_quantizes_the_head_copy_only),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
