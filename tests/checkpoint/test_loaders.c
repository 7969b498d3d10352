/* Checkpoint and token-file loaders on well-formed files: every way make_fixtures.py wrote
 * the tiny Llama gives back the same FP32 tensors, in HF layout, as the independent
 * writers (safetensors, gguf-py) and their numpy conversions say. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "fixture.h"

/* Tiny model of make_fixtures.py (DIM, FFN, LAYERS, HEADS, KV_HEADS, VOCAB). */
enum { DIM = 64, FFN = 96, LAYERS = 2, HEADS = 4, KV_HEADS = 2, VOCAB = 64 };

static const char *const roles[] = {
    "input_layernorm",  "post_attention_layernorm", "self_attn.q_proj", "self_attn.k_proj",
    "self_attn.v_proj", "self_attn.o_proj",         "mlp.gate_proj",    "mlp.up_proj",
    "mlp.down_proj"};

static qw_checkpoint *open_ok(const char *path) {
    qw_checkpoint *ck = NULL;
    qs_error err = {0};
    if (qw_checkpoint_open(path, &ck, &err) != QS_OK) fail_msg("%s", err.msg);
    assert_non_null(ck);
    return ck;
}

/* Calls fn(name) for each tensor name of the tiny model; with_head adds lm_head.weight. */
static void for_each_name(int with_head, void (*fn)(const char *name, void *ctx), void *ctx) {
    fn("model.embed_tokens.weight", ctx);
    fn("model.norm.weight", ctx);
    if (with_head) fn("lm_head.weight", ctx);
    for (int l = 0; l < LAYERS; l++)
        for (size_t r = 0; r < sizeof roles / sizeof roles[0]; r++) {
            char name[128];
            snprintf(name, sizeof name, "model.layers.%d.%s.weight", l, roles[r]);
            fn(name, ctx);
        }
}

/* Bitwise comparison of two FP32 arrays, reporting the first difference. */
static void assert_same_floats(const char *what, const float *a, const float *b, int64_t n) {
    if (memcmp(a, b, (size_t)n * sizeof(float)) == 0) return;
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0)
            fail_msg("%s: element %lld: %.9g vs %.9g", what, (long long)i, a[i], b[i]);
}

typedef struct pair_ctx {
    qw_checkpoint *a, *b;
    fx_expect *x;
    int count;
} pair_ctx;

static void compare_checkpoints(const char *name, void *p) {
    pair_ctx *c = p;
    const float *da, *db;
    int64_t sa[2], sb[2];
    int na, nb;
    qs_error err = {0};
    if (qw_checkpoint_tensor(c->a, name, &da, sa, &na, &err)) fail_msg("%s", err.msg);
    if (qw_checkpoint_tensor(c->b, name, &db, sb, &nb, &err)) fail_msg("%s", err.msg);
    assert_int_equal(na, nb);
    assert_int_equal(sa[0], sb[0]);
    assert_int_equal(sa[1], sb[1]);
    assert_same_floats(name, da, db, sa[0] * sa[1]);
    c->count++;
}

static void compare_with_expect(const char *name, void *p) {
    pair_ctx *c = p;
    const float *d;
    int64_t s[2], n;
    int nd;
    qs_error err = {0};
    if (qw_checkpoint_tensor(c->a, name, &d, s, &nd, &err)) fail_msg("%s", err.msg);
    const float *want = fx_expect_tensor(c->x, name, &n);
    assert_int_equal(s[0] * s[1], n);
    assert_same_floats(name, d, want, n);
    c->count++;
}

static void hf_config_read_from_config_json(void **state) {
    (void)state;
    qw_checkpoint *ck = open_ok(fx_path("tiny_f32"));
    const qw_config *c = qw_checkpoint_config(ck);
    /* Values written by make_fixtures.py config(). */
    assert_int_equal(c->dim, DIM);
    assert_int_equal(c->hidden_dim, FFN);
    assert_int_equal(c->n_layers, LAYERS);
    assert_int_equal(c->n_heads, HEADS);
    assert_int_equal(c->n_kv_heads, KV_HEADS);
    assert_int_equal(c->head_dim, DIM / HEADS);
    assert_int_equal(c->vocab_size, VOCAB);
    assert_int_equal(c->max_seq_len, 256);
    assert_float_equal(c->norm_eps, 1e-5f, 0);
    assert_float_equal(c->rope_theta, 10000.0f, 0);
    assert_int_equal(c->tied_embeddings, 0);
    assert_float_equal(c->rope_factor, 0.0f, 0);
    assert_int_equal(c->bos_token_id, 1);
    assert_int_equal(c->eos_token_id, 2);
    qw_checkpoint_close(ck);
}

static void gguf_config_read_from_llama_keys(void **state) {
    (void)state;
    qw_checkpoint *f = open_ok(fx_path("tiny_f32"));
    const char *ggufs[] = {"tiny_f32.gguf", "tiny_quant.gguf"};
    for (int i = 0; i < 2; i++) {
        qw_checkpoint *g = open_ok(fx_path(ggufs[i]));
        qw_config a = *qw_checkpoint_config(f), b = *qw_checkpoint_config(g);
        /* tiny_quant.gguf is tied (no output.weight); tiny_f32.gguf carries output.weight. */
        assert_int_equal(b.tied_embeddings, i == 1);
        a.tied_embeddings = b.tied_embeddings;
        assert_memory_equal(&a, &b, sizeof a);
        qw_checkpoint_close(g);
    }
    qw_checkpoint_close(f);
}

/* llama.cpp keeps Llama 3.1 rope scaling only as rope_freqs.weight; the config must come back
 * with the HF config.json values it was made from (fixtures/rope_cases.json, written by
 * make_fixtures.py with convert_hf_to_gguf.py's formula). */
static void gguf_llama3_rope_scaling_from_rope_freqs(void **state) {
    (void)state;
    json_error_t je;
    json_t *cases = json_load_file(fx_path("rope_cases.json"), 0, &je);
    assert_non_null(cases);
    const char *file;
    json_t *c;
    int n = 0;
    json_object_foreach(cases, file, c) {
        qw_checkpoint *ck = open_ok(fx_path(file));
        const qw_config *cfg = qw_checkpoint_config(ck);
        assert_int_equal(cfg->head_dim, json_integer_value(json_object_get(c, "head_dim")));
        assert_float_equal(cfg->rope_theta, json_number_value(json_object_get(c, "rope_theta")), 0);
        assert_float_equal(cfg->rope_factor, json_number_value(json_object_get(c, "factor")), 0);
        assert_float_equal(cfg->rope_low_freq_factor,
                           json_number_value(json_object_get(c, "low_freq_factor")), 0);
        assert_float_equal(cfg->rope_high_freq_factor,
                           json_number_value(json_object_get(c, "high_freq_factor")), 0);
        assert_int_equal(cfg->rope_original_max_pos, json_integer_value(json_object_get(
                                                         c, "original_max_position_embeddings")));
        /* The tensor itself stays available under its GGUF name. */
        const float *d;
        int64_t s[2];
        int nd;
        qs_error err = {0};
        assert_int_equal(qw_checkpoint_tensor(ck, "rope_freqs.weight", &d, s, &nd, &err), QS_OK);
        json_t *rf = json_object_get(c, "rope_freqs");
        assert_int_equal(s[0], (int64_t)json_array_size(rf));
        for (size_t i = 0; i < json_array_size(rf); i++)
            assert_float_equal(d[i], (float)json_number_value(json_array_get(rf, i)), 0);
        qw_checkpoint_close(ck);
        n++;
    }
    assert_int_equal(n, 3);
    json_decref(cases);
}

static void gguf_f32_gives_the_hf_tensors(void **state) {
    (void)state;
    pair_ctx c = {.a = open_ok(fx_path("tiny_f32")), .b = open_ok(fx_path("tiny_f32.gguf"))};
    for_each_name(1, compare_checkpoints, &c);
    assert_int_equal(c.count, 3 + 9 * LAYERS);
    qw_checkpoint_close(c.a);
    qw_checkpoint_close(c.b);
}

static void f32_tensors_point_into_the_mapped_file(void **state) {
    (void)state;
    qw_checkpoint *ck = open_ok(fx_path("tiny_f32"));
    const float *a, *b;
    int64_t s[2];
    int nd;
    qs_error err = {0};
    assert_int_equal(qw_checkpoint_tensor(ck, "model.norm.weight", &a, s, &nd, &err), QS_OK);
    assert_int_equal(nd, 1);
    assert_int_equal(s[0], DIM);
    assert_int_equal(s[1], 1);
    assert_int_equal(qw_checkpoint_tensor(ck, "model.norm.weight", &b, s, &nd, &err), QS_OK);
    assert_ptr_equal(a, b);
    qw_checkpoint_close(ck);
}

static void safetensors_bf16_tied_matches_numpy(void **state) {
    (void)state;
    fx_expect x;
    fx_expect_open(&x, "tiny_bf16_expect.safetensors");
    pair_ctx c = {.a = open_ok(fx_path("tiny_bf16")), .x = &x};
    assert_int_equal(qw_checkpoint_config(c.a)->tied_embeddings, 1);
    for_each_name(0, compare_with_expect, &c);
    const float *d;
    int64_t s[2];
    int nd;
    qs_error err = {0};
    assert_int_equal(qw_checkpoint_tensor(c.a, "lm_head.weight", &d, s, &nd, &err), QS_ENOTFOUND);
    fx_assert_msg(&err, "lm_head.weight", NULL);
    qw_checkpoint_close(c.a);
    fx_expect_close(&x);
}

static void safetensors_sharded_f16_matches_numpy(void **state) {
    (void)state;
    fx_expect x;
    fx_expect_open(&x, "tiny_f16_expect.safetensors");
    pair_ctx c = {.a = open_ok(fx_path("tiny_f16_sharded")), .x = &x};
    for_each_name(1, compare_with_expect, &c);
    assert_int_equal(c.count, 3 + 9 * LAYERS);
    qw_checkpoint_close(c.a);
    fx_expect_close(&x);
}

static void gguf_quantized_matches_gguf_py_dequantize(void **state) {
    (void)state;
    fx_expect x;
    fx_expect_open(&x, "tiny_quant_expect.safetensors");
    pair_ctx c = {.a = open_ok(fx_path("tiny_quant.gguf")), .x = &x};
    for_each_name(0, compare_with_expect, &c);
    assert_int_equal(c.count, 2 + 9 * LAYERS);
    qw_checkpoint_close(c.a);
    fx_expect_close(&x);
}

/* Every F16 bit pattern and 4096 BF16 patterns against numpy's conversion. */
static void f16_and_bf16_conversion_matches_numpy(void **state) {
    (void)state;
    fx_expect in, x;
    fx_expect_open(&x, "dtypes_expect.safetensors");
    memset(&in, 0, sizeof in);
    qs_error err = {0};
    assert_int_equal(qw_map_file(fx_path("dtypes.safetensors"), &in.file, &err), QS_OK);
    assert_int_equal(
        qw_safetensors_parse(in.file.path, in.file.data, in.file.size, 0, &in.table, &err), QS_OK);
    const char *names[] = {"f16", "bf16"};
    for (int i = 0; i < 2; i++) {
        qw_tensor_entry *e = qw_table_find(&in.table, names[i]);
        assert_non_null(e);
        float *got = malloc((size_t)e->numel * sizeof(float));
        assert_non_null(got);
        qw_dtype_to_f32(e->dtype, e->src, e->numel, got);
        int64_t n;
        const float *want = fx_expect_tensor(&x, names[i], &n);
        assert_int_equal(n, e->numel);
        assert_same_floats(names[i], got, want, n);
        free(got);
    }
    fx_expect_close(&in);
    fx_expect_close(&x);
}

/* qw_checkpoint_digest against hashlib.blake2b(digest_size=32) in make_fixtures.py. */
static void digest_matches_hashlib_blake2b(void **state) {
    (void)state;
    size_t n;
    uint8_t *txt = fx_read(fx_path("digests.txt"), &n);
    txt[n] = 0;
    const char *models[] = {"tiny_f32", "tiny_f16_sharded", "tiny_f32.gguf"};
    for (int i = 0; i < 3; i++) {
        char key[64];
        snprintf(key, sizeof key, "%s ", models[i]);
        const char *line = strstr((char *)txt, key);
        assert_non_null(line);
        qw_checkpoint *ck = open_ok(fx_path(models[i]));
        char hex[65], again[65];
        qs_error err = {0};
        assert_int_equal(qw_checkpoint_digest(ck, hex, &err), QS_OK);
        assert_int_equal(qw_checkpoint_digest(ck, again, &err), QS_OK);
        assert_string_equal(hex, again);
        assert_memory_equal(hex, line + strlen(key), 64);
        qw_checkpoint_close(ck);
    }
    qw_tokens t;
    qs_error err = {0};
    assert_int_equal(qw_tokens_load(fx_path("tokens_small.bin"), &t, &err), QS_OK);
    const char *line = strstr((char *)txt, "tokens_small.bin ");
    assert_non_null(line);
    assert_memory_equal(t.digest, line + strlen("tokens_small.bin "), 64);
    qw_tokens_free(&t);
    free(txt);
}

static void tokens_file_reads_ids_and_vocab(void **state) {
    (void)state;
    qw_tokens t;
    qs_error err = {0};
    assert_int_equal(qw_tokens_load(fx_path("tokens_small.bin"), &t, &err), QS_OK);
    /* Written by make_fixtures.py: [1, 5, 9, 63, 0, 2, 17, 33, 8, 40], vocab 64. */
    const uint32_t want[] = {1, 5, 9, 63, 0, 2, 17, 33, 8, 40};
    assert_int_equal(t.n, 10);
    assert_int_equal(t.vocab_size, VOCAB);
    assert_memory_equal(t.ids, want, sizeof want);
    assert_int_equal(strlen(t.digest), 64);
    qw_tokens_free(&t);
    assert_null(t.ids);
    qw_tokens_free(&t);
}

static void tokens_file_with_no_tokens_is_valid(void **state) {
    (void)state;
    char *dir = fx_scratch(), *p = fx_join(dir, "empty.tok");
    uint8_t hdr[32] = "QSWTOKS";
    uint32_t f[4] = {1, 10, 1, 0};
    memcpy(hdr + 8, f, sizeof f);
    fx_write(p, hdr, sizeof hdr);
    qw_tokens t;
    qs_error err = {0};
    assert_int_equal(qw_tokens_load(p, &t, &err), QS_OK);
    assert_int_equal(t.n, 0);
    assert_int_equal(t.vocab_size, 10);
    qw_tokens_free(&t);
    free(p);
    fx_rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(hf_config_read_from_config_json),
        cmocka_unit_test(gguf_config_read_from_llama_keys),
        cmocka_unit_test(gguf_llama3_rope_scaling_from_rope_freqs),
        cmocka_unit_test(gguf_f32_gives_the_hf_tensors),
        cmocka_unit_test(f32_tensors_point_into_the_mapped_file),
        cmocka_unit_test(safetensors_bf16_tied_matches_numpy),
        cmocka_unit_test(safetensors_sharded_f16_matches_numpy),
        cmocka_unit_test(gguf_quantized_matches_gguf_py_dequantize),
        cmocka_unit_test(f16_and_bf16_conversion_matches_numpy),
        cmocka_unit_test(digest_matches_hashlib_blake2b),
        cmocka_unit_test(tokens_file_reads_ids_and_vocab),
        cmocka_unit_test(tokens_file_with_no_tokens_is_valid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
