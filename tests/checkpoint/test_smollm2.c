/* The real SmolLM2-135M-Instruct Q4_1 GGUF (tools/fetch_smollm2.sh) through qw_checkpoint:
 * the config the issue states (30 blocks, d 576, 9 heads / 3 KV heads, FFN 1536, vocab 49152,
 * tied embeddings, rope theta 1e5), and dequantized tensors in HF order against gguf-py's
 * dequantization (fixtures/smollm2_golden.json, tools/smollm2_checkpoint_golden.py).
 * Skipped (exit 77) when the file is absent: set QSWEEP_SMOLLM2_GGUF or run the fetch script. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "fixture.h"

static char gguf_path[4096];

static int find_model(void) {
    const char *env = getenv("QSWEEP_SMOLLM2_GGUF");
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (env && *env)
        snprintf(gguf_path, sizeof gguf_path, "%s", env);
    else if (xdg && *xdg)
        snprintf(gguf_path, sizeof gguf_path, "%s/qsweep/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                 xdg);
    else
        snprintf(gguf_path, sizeof gguf_path,
                 "%s/.cache/qsweep/models/SmolLM2-135M-Instruct.Q4_1.gguf", home ? home : "");
    return access(gguf_path, R_OK) == 0;
}

static void config_is_smollm2_135m(void **state) {
    (void)state;
    qw_checkpoint *ck = NULL;
    qs_error err = {0};
    if (qw_checkpoint_open(gguf_path, &ck, &err)) fail_msg("%s", err.msg);
    const qw_config *c = qw_checkpoint_config(ck);
    /* SmolLM2-135M's published config.json. */
    assert_int_equal(c->n_layers, 30);
    assert_int_equal(c->dim, 576);
    assert_int_equal(c->n_heads, 9);
    assert_int_equal(c->n_kv_heads, 3);
    assert_int_equal(c->head_dim, 64);
    assert_int_equal(c->hidden_dim, 1536);
    assert_int_equal(c->vocab_size, 49152);
    assert_int_equal(c->tied_embeddings, 1);
    assert_float_equal(c->rope_theta, 1e5f, 0);
    /* The file's remaining llama.* keys, as gguf-py reads them. */
    json_error_t je;
    json_t *g = json_load_file(fx_path("smollm2_golden.json"), 0, &je);
    assert_non_null(g);
    json_t *gc = json_object_get(g, "config");
    assert_int_equal(c->max_seq_len,
                     json_integer_value(json_object_get(gc, "llama.context_length")));
    assert_float_equal(
        c->norm_eps,
        (float)json_number_value(json_object_get(gc, "llama.attention.layer_norm_rms_epsilon")), 0);
    assert_int_equal(c->bos_token_id,
                     json_integer_value(json_object_get(gc, "tokenizer.ggml.bos_token_id")));
    assert_int_equal(c->eos_token_id,
                     json_integer_value(json_object_get(gc, "tokenizer.ggml.eos_token_id")));
    json_decref(g);
    qw_checkpoint_close(ck);
}

static void tensors_match_gguf_py_dequantize(void **state) {
    (void)state;
    qw_checkpoint *ck = NULL;
    qs_error err = {0};
    if (qw_checkpoint_open(gguf_path, &ck, &err)) fail_msg("%s", err.msg);
    json_error_t je;
    json_t *g = json_load_file(fx_path("smollm2_golden.json"), 0, &je);
    assert_non_null(g);
    json_t *ts = json_object_get(g, "tensors");
    assert_true(json_array_size(ts) >= 5);
    for (size_t i = 0; i < json_array_size(ts); i++) {
        json_t *t = json_array_get(ts, i);
        const char *name = json_string_value(json_object_get(t, "name"));
        const float *d;
        int64_t s[2];
        int nd;
        if (qw_checkpoint_tensor(ck, name, &d, s, &nd, &err)) fail_msg("%s", err.msg);
        json_t *shape = json_object_get(t, "shape");
        assert_int_equal(nd, (int)json_array_size(shape));
        for (int k = 0; k < nd; k++)
            assert_int_equal(s[k], json_integer_value(json_array_get(shape, (size_t)k)));
        int64_t cols = nd == 2 ? s[1] : s[0];
        const char *row;
        json_t *vals;
        json_object_foreach(json_object_get(t, "rows"), row, vals) {
            long r = strtol(row, NULL, 10);
            for (size_t k = 0; k < json_array_size(vals); k++) {
                float want = (float)json_number_value(json_array_get(vals, k));
                float got = d[r * cols + (int64_t)k];
                if (memcmp(&want, &got, sizeof want) != 0)
                    fail_msg("%s row %ld col %zu: %.9g, gguf-py %.9g", name, r, k, got, want);
            }
        }
        double sum = 0, sumsq = 0;
        for (int64_t k = 0; k < s[0] * s[1]; k++) {
            sum += d[k];
            sumsq += (double)d[k] * d[k];
        }
        double wsum = json_number_value(json_object_get(t, "sum")),
               wsq = json_number_value(json_object_get(t, "sumsq"));
        /* Same float32 values summed in another order: differences are double rounding only. */
        if (fabs(sumsq - wsq) > 1e-9 * wsq ||
            fabs(sum - wsum) > 1e-9 * sqrt(wsq * (double)(s[0] * s[1])))
            fail_msg("%s: sum %.17g sumsq %.17g, gguf-py %.17g %.17g", name, sum, sumsq, wsum, wsq);
        printf("OK %s [%lld, %lld] %s\n", name, (long long)s[0], (long long)s[1],
               json_string_value(json_object_get(t, "type")));
    }
    json_decref(g);
    qw_checkpoint_close(ck);
}

int main(void) {
    if (!find_model()) {
        printf("checkpoint_smollm2: SKIPPED: %s is absent (run tools/fetch_smollm2.sh)\n",
               gguf_path);
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(config_is_smollm2_135m),
        cmocka_unit_test(tensors_match_gguf_py_dequantize),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
