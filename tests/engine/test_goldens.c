/* The forward pass agrees with Hugging Face transformers: logits of every committed checkpoint
 * (tests/engine/data, made by tools/make_goldens.py) and of SmolLM2's GGUF are within 1e-4
 * relative error, max |ours - golden| / max |golden| per sequence. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "golden.h"
#include "model.h"

#define TOLERANCE 1e-4

/* Opens `ckpt`, runs every sequence of `goldens` and checks the logits; prints OK / NOT OK per
 * sequence with the error. */
static void check_goldens(const char *ckpt, const char *goldens) {
    qs_error err = {0};
    qw_checkpoint *ck = NULL;
    qs_status st = qw_checkpoint_open(ckpt, &ck, &err);
    if (st != QS_OK) fail_msg("%s: %s", ckpt, err.msg);
    golden g;
    assert_int_equal(golden_load(goldens, &g), 0);
    uint32_t max_n = 0;
    for (uint32_t s = 0; s < g.n_seqs; s++)
        max_n = g.seqs[s].n > max_n ? g.seqs[s].n : max_n;
    qw_model *m = NULL;
    st = qw_model_create(ck, (int)max_n, 0, &m, &err);
    if (st != QS_OK) fail_msg("%s: %s", ckpt, err.msg);
    assert_int_equal(qw_model_config(m)->vocab_size, (int)g.vocab);
    int bad = 0;
    for (uint32_t s = 0; s < g.n_seqs; s++) {
        const golden_seq *q = &g.seqs[s];
        const float *logits;
        st = qw_model_forward(m, q->tokens, (int)q->n, &logits, &err);
        if (st != QS_OK) fail_msg("%s: %s", ckpt, err.msg);
        double e = rel_err(logits + (size_t)q->row0 * g.vocab, q->logits,
                           (size_t)(q->n - q->row0) * g.vocab);
        int ok = e <= TOLERANCE;
        printf("%s %s: sequence %u (%u tokens): relative error %.3g (tolerance %.0e)\n",
               ok ? "OK" : "NOT OK", ckpt, s, q->n, e, TOLERANCE);
        bad += !ok;
    }
    qw_model_destroy(m);
    qw_checkpoint_close(ck);
    golden_free(&g);
    assert_int_equal(bad, 0);
}

static void check_dir(const char *name) {
    char dir[1024], gold[1100];
    snprintf(dir, sizeof dir, "%s/%s", engine_data_dir(), name);
    snprintf(gold, sizeof gold, "%s/goldens.bin", dir);
    check_goldens(dir, gold);
}

static void llama2_mha_logits_match_transformers(void **state) {
    (void)state;
    check_dir("llama2_mha");
}
static void llama3_gqa_rope_scaling_logits_match_transformers(void **state) {
    (void)state;
    check_dir("llama3_gqa");
}
static void llama32_tied_embeddings_logits_match_transformers(void **state) {
    (void)state;
    check_dir("llama32_tied");
}
static void k_not_multiple_of_16_logits_match_transformers(void **state) {
    (void)state;
    check_dir("oddk");
}
static void sharded_checkpoint_logits_match_transformers(void **state) {
    (void)state;
    check_dir("sharded");
}

static void smollm2_gguf_logits_match_transformers(void **state) {
    (void)state;
    char gguf[1024], gold[1100];
    if (!smollm2_gguf_path(gguf, sizeof gguf)) {
        printf("SKIP: %s absent (run tools/fetch_smollm2.sh)\n", gguf);
        skip();
    }
    snprintf(gold, sizeof gold, "%s/smollm2/goldens.bin", engine_data_dir());
    check_goldens(gguf, gold);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(llama2_mha_logits_match_transformers),
        cmocka_unit_test(llama3_gqa_rope_scaling_logits_match_transformers),
        cmocka_unit_test(llama32_tied_embeddings_logits_match_transformers),
        cmocka_unit_test(k_not_multiple_of_16_logits_match_transformers),
        cmocka_unit_test(sharded_checkpoint_logits_match_transformers),
        cmocka_unit_test(smollm2_gguf_logits_match_transformers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
