/* kinds_tp_rule: the submit-time tensor-parallel rule (kinds/resources.h qs_tp_splits) says
 * yes exactly when the engine's shard plan (worker/engine/shard.c qw_shard_plan) succeeds,
 * over every shape of up to 24 heads, 24 kv heads and 24 ranks, and small hidden/vocab sizes;
 * and on real configs (Hugging Face config.json values) the refusals name the value. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "resources.h"
#include "shard.h"

static void the_rule_agrees_with_the_shard_plan_on_every_small_shape(void **state) {
    (void)state;
    static qw_shard out[QW_TP_MAX];
    const int small[] = {1, 2, 3, 5, 64};
    size_t checked = 0, refused = 0;
    for (int h = 1; h <= 24; h++)
        for (int g = 1; g <= h; g++)
            for (int tp = 1; tp <= 24; tp++)
                for (size_t k = 0; k < sizeof small / sizeof small[0]; k++) {
                    int f = small[k], v = small[(k + 2) % 5];
                    qw_config c = {.dim = 64,
                                   .hidden_dim = f,
                                   .n_layers = 1,
                                   .n_heads = h,
                                   .n_kv_heads = g,
                                   .head_dim = 8,
                                   .vocab_size = v};
                    qs_model_shape s = {.dim = 64,
                                        .hidden_dim = f,
                                        .n_layers = 1,
                                        .n_heads = h,
                                        .n_kv_heads = g,
                                        .head_dim = 8,
                                        .vocab_size = v};
                    qs_error err = {0};
                    char why[200] = "";
                    bool engine = qw_shard_plan(&c, tp, out, &err) == QS_OK;
                    bool rule = qs_tp_splits(&s, tp, why, sizeof why);
                    if (engine != rule)
                        fail_msg("heads %d kv %d hidden %d vocab %d tp %d: engine %s (%s), "
                                 "rule %s (%s)",
                                 h, g, f, v, tp, engine ? "splits" : "refuses", err.msg,
                                 rule ? "splits" : "refuses", why);
                    checked++;
                    refused += !rule;
                }
    assert_true(refused > 0 && refused < checked); /* both answers occur */
}

static void real_configs_split_as_their_heads_allow(void **state) {
    (void)state;
    char why[200];
    /* meta-llama/Llama-2-7b-hf: 32 heads, 32 kv heads */
    qs_model_shape l2 = {.dim = 4096,
                         .hidden_dim = 11008,
                         .n_layers = 32,
                         .n_heads = 32,
                         .n_kv_heads = 32,
                         .head_dim = 128,
                         .vocab_size = 32000};
    for (int tp = 1; tp <= 32; tp *= 2)
        assert_true(qs_tp_splits(&l2, tp, why, sizeof why));
    assert_false(qs_tp_splits(&l2, 3, why, sizeof why));
    assert_non_null(strstr(why, "tensor parallel 3: n_heads 32 is not a multiple"));
    /* meta-llama/Meta-Llama-3-8B: 32 heads, 8 kv heads: 16 ranks replicate each kv head */
    qs_model_shape l3 = l2;
    l3.n_kv_heads = 8;
    l3.vocab_size = 128256;
    assert_true(qs_tp_splits(&l3, 16, why, sizeof why));
    assert_false(qs_tp_splits(&l3, 64, why, sizeof why));
    /* HuggingFaceTB/SmolLM2-135M: 9 heads, 3 kv heads: 3 and 9 ranks, not 2 */
    qs_model_shape sm = {.dim = 576,
                         .hidden_dim = 1536,
                         .n_layers = 30,
                         .n_heads = 9,
                         .n_kv_heads = 3,
                         .head_dim = 64,
                         .vocab_size = 49152};
    assert_true(qs_tp_splits(&sm, 3, why, sizeof why));
    assert_true(qs_tp_splits(&sm, 9, why, sizeof why));
    assert_false(qs_tp_splits(&sm, 2, why, sizeof why));
    /* 12 heads, 8 kv heads over 6 ranks: heads split, kv heads neither split nor replicate */
    qs_model_shape odd = sm;
    odd.n_heads = 12;
    odd.n_kv_heads = 8;
    assert_false(qs_tp_splits(&odd, 6, why, sizeof why));
    assert_non_null(strstr(why, "n_kv_heads 8 neither a multiple nor a divisor"));
    assert_false(qs_tp_splits(&l2, 65, why, sizeof why));
    assert_non_null(strstr(why, "outside 1..64"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_rule_agrees_with_the_shard_plan_on_every_small_shape),
        cmocka_unit_test(real_configs_split_as_their_heads_allow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
