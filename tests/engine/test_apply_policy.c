/* Applying a policy (apply_policy.c) quantizes each master a chunk of rows at a time, with no
 * FP32 copy of a whole master: the packed result of every linear (block linears, lm_head, the
 * embeddings) equals qk_quantize of the whole master converted to FP32, bit for bit (codes,
 * block scales, tensor scales), for chunks of 16 rows, of 48 rows with a short last chunk, and
 * the default 16 MiB; for masters in place (F32), converted (BF16, F16, odd k) and synthetic;
 * for formats with a tensor scale (own and given amax), MX, integer and 2D blocks, RNE and
 * SR; and the logits do not depend on the chunking. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "checkpoint.h"
#include "format.h"
#include "golden.h"
#include "model.h"
#include "model_internal.h"
#include "policy.h"
#include "weights.h"

/* Fails unless every quantized linear of m holds what one qk_quantize of its whole master
 * (as FP32) with the linear's options gives. Returns how many linears it compared. */
static int assert_linears_one_shot(qw_model *m, const qw_policy *p, const char *what) {
    int nlin = m->cfg.n_layers * QW_LINEAR_KINDS, compared = 0;
    for (int i = 0; i < nlin + 2; i++) {
        const qw_quant_spec *s = i < nlin ? &p->linears[i] : i == nlin ? &p->lm_head : &p->embed;
        if (!s->weight || strcmp(qk_format_name(s->weight), "bf16") == 0) continue;
        const qw_linear *L = &m->lin[i];
        size_t rows = (size_t)L->out, k = (size_t)L->in;
        float *x = malloc(rows * k * sizeof *x);
        assert_non_null(x);
        qs_error err = {0};
        assert_int_equal(qw_weight_rows_f32(L->master, 0, (int64_t)rows, x, &err), QS_OK);
        qk_quant_options o = s->weight_opt;
        o.tensor_id += (uint32_t)L->tensor_index;
        qk_packed ref;
        assert_int_equal(qk_packed_init(&ref, s->weight, &o, rows, k, &err), QS_OK);
        assert_int_equal(qk_quantize(s->weight, &o, x, rows, k, &ref, &err), QS_OK);
        const qk_packed *got = &L->packed;
        assert_non_null(got->storage_);
        assert_true(L->w.form == QW_WEIGHT_PACKED && L->w.packed == got);
        if (memcmp(ref.codes, got->codes, rows * ref.row_bytes) != 0)
            fail_msg("%s: linear %d [%zu x %zu]: codes differ from one-shot", what, i, rows, k);
        if (ref.scales && memcmp(ref.scales, got->scales, rows * ref.blocks_per_row) != 0)
            fail_msg("%s: linear %d: block scales differ", what, i);
        if (ref.scales_f32 &&
            memcmp(ref.scales_f32, got->scales_f32, rows * ref.blocks_per_row * sizeof(float)))
            fail_msg("%s: linear %d: FP32 block scales differ", what, i);
        if (memcmp(&ref.tensor_scale, &got->tensor_scale, sizeof(float)) != 0 ||
            memcmp(&ref.tensor_amax, &got->tensor_amax, sizeof(float)) != 0 ||
            ref.tensor_scale_exp2 != got->tensor_scale_exp2)
            fail_msg("%s: linear %d: tensor scale %a (amax %a) vs one-shot %a (amax %a)", what, i,
                     (double)got->tensor_scale, (double)got->tensor_amax, (double)ref.tensor_scale,
                     (double)ref.tensor_amax);
        qk_packed_release(&ref);
        free(x);
        compared++;
    }
    return compared;
}

/* The policies tried: every block linear, lm_head and the embeddings in one format with one
 * set of options. */
typedef struct case_ {
    const char *format;
    qk_quant_options opt;
} case_;

static const case_ cases[] = {
    {"nvfp4", {0}},
    {"nvfp4", {.rounding = QK_ROUND_SR, .seed = 11, .tensor_id = 100}},
    {"nvfp4", {.tensor_amax_given = 1, .tensor_amax = 0.03f}}, /* given: no first pass */
    {"nvfp4_2d", {0}},
    {"mxfp4", {.rounding = QK_ROUND_SR, .seed = 5}},
    {"mxfp6_e3m2", {.mx_rule = QK_MX_FLOOR}},
    {"fp8_e4m3", {0}},
    {"int4_group", {.group_size = 32}},
    {"int8_channel", {.rounding = QK_ROUND_RZ}}, /* the reference path */
};

static void check_model(qw_model *m, const char *name) {
    const qw_config *c = qw_model_config(m);
    const int n = 24;
    uint32_t tokens[24];
    for (int i = 0; i < n; i++)
        tokens[i] = (uint32_t)((i * 53 + 7) % c->vocab_size);
    size_t nl = (size_t)n * (size_t)c->vocab_size;
    float *logits = malloc(nl * sizeof *logits);
    assert_non_null(logits);
    /* 1 float: 16-row chunks; 48 rows of 64: 48-row chunks of the dim-wide linears (a short
     * last chunk of gate/up and lm_head) and 16 of the wider ones; 0 stands for the default */
    const size_t chunk_floats[] = {1, 48 * 64, 0};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        qs_error err = {0};
        qw_policy p;
        qw_quant_spec s = {.weight = qk_format_by_name(cases[ci].format),
                           .weight_opt = cases[ci].opt};
        assert_non_null(s.weight);
        assert_int_equal(qw_policy_init(&p, c->n_layers, &err), QS_OK);
        assert_int_equal(qw_policy_isolation(&p, QW_ISO_ALL, 0, 0, &s, &err), QS_OK);
        p.lm_head = s;
        p.embed = s;
        for (size_t k = 0; k < sizeof chunk_floats / sizeof chunk_floats[0]; k++) {
            qs_status st = chunk_floats[k]
                               ? qw_model_apply_policy_chunked(m, &p, chunk_floats[k], &err)
                               : qw_model_apply_policy(m, &p, &err);
            if (st != QS_OK) fail_msg("%s %s: %s", name, cases[ci].format, err.msg);
            char what[128];
            snprintf(what, sizeof what, "%s %s case %zu chunk %zu", name, cases[ci].format, ci,
                     chunk_floats[k]);
            assert_int_equal(assert_linears_one_shot(m, &p, what), c->n_layers * 7 + 2);
            const float *l;
            assert_int_equal(qw_model_forward(m, tokens, n, &l, &err), QS_OK);
            if (k == 0)
                memcpy(logits, l, nl * sizeof *l);
            else if (memcmp(logits, l, nl * sizeof *l) != 0)
                fail_msg("%s: logits depend on the chunking", what);
        }
        qw_policy_free(&p);
    }
    assert_int_equal(qw_model_apply_policy(m, NULL, NULL), QS_OK);
    free(logits);
}

/* Checkpoint masters: F32 in place (llama32_tied), BF16 (llama3_gqa), F16 with odd k
 * (oddk). */
static void checkpoint_masters_quantize_as_one_shot(void **state) {
    (void)state;
    const char *names[] = {"llama32_tied", "llama3_gqa", "oddk"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", engine_data_dir(), names[i]);
        qs_error err = {0};
        qw_checkpoint *ck;
        qw_model *m;
        if (qw_checkpoint_open(path, &ck, &err) != QS_OK) fail_msg("%s", err.msg);
        if (qw_model_create(ck, 32, 2, &m, &err) != QS_OK) fail_msg("%s", err.msg);
        check_model(m, names[i]);
        qw_model_destroy(m);
        qw_checkpoint_close(ck);
    }
}

/* Synthetic BF16 masters (the builder's), 3 threads. */
static void synthetic_masters_quantize_as_one_shot(void **state) {
    (void)state;
    qs_error err = {0};
    qw_model *m;
    if (qw_model_create_synthetic("synthetic:tiny-llama2:3", 32, 3, &m, &err) != QS_OK)
        fail_msg("%s", err.msg);
    check_model(m, "tiny-llama2");
    qw_model_destroy(m);
}

/* Linear i's master as FP32 [out x in] (heap). */
static float *master_f32(const qw_model *m, int i) {
    const qw_linear *L = &m->lin[i];
    float *x = malloc((size_t)L->out * (size_t)L->in * sizeof *x);
    assert_non_null(x);
    qs_error err = {0};
    assert_int_equal(qw_weight_rows_f32(L->master, 0, L->out, x, &err), QS_OK);
    return x;
}

/* Fused groups (policy.h fuse): with q/k/v and gate/up fused, a quantized member's packed
 * weights are the rows of its group's tensors concatenated and quantized as one (the shared
 * per-tensor scale of a fused GEMM), in NVFP4 and FP8 per tensor, whether or not the other
 * members are quantized; o and down keep their own scale; MXFP4 (no tensor scale) is as
 * unfused. */
static void fused_groups_share_one_tensor_scale(void **state) {
    (void)state;
    char path[1024];
    snprintf(path, sizeof path, "%s/llama3_gqa", engine_data_dir());
    qs_error err = {0};
    qw_checkpoint *ck;
    qw_model *m;
    if (qw_checkpoint_open(path, &ck, &err) != QS_OK) fail_msg("%s", err.msg);
    if (qw_model_create(ck, 32, 2, &m, &err) != QS_OK) fail_msg("%s", err.msg);
    const int nl = qw_model_config(m)->n_layers;
    const char *formats[] = {"nvfp4", "fp8_e4m3", "mxfp4"};
    const qw_isolation modes[] = {QW_ISO_ALL, QW_ISO_COMPONENT};
    for (size_t fi = 0; fi < 3; fi++)
        for (size_t mi = 0; mi < 2; mi++) {
            qw_quant_spec s = {.weight = qk_format_by_name(formats[fi])};
            qw_policy p;
            assert_int_equal(qw_policy_init(&p, nl, &err), QS_OK);
            /* component mode: k alone, so its group's q and v are not quantized */
            assert_int_equal(qw_policy_isolation(&p, modes[mi], QW_LINEAR_K, 0, &s, &err), QS_OK);
            p.fuse = QW_FUSE_QKV | QW_FUSE_GATE_UP;
            assert_int_equal(qw_model_apply_policy_chunked(m, &p, 48 * 64, &err), QS_OK);
            for (int b = 0; b < nl; b++)
                for (int k = 0; k < QW_LINEAR_KINDS; k++) {
                    int i = b * QW_LINEAR_KINDS + k;
                    if (!p.linears[i].weight) continue;
                    int first = k, count = 1; /* o, down, and every MX linear: alone */
                    if (s.weight->tensor_scale && k <= QW_LINEAR_V) first = QW_LINEAR_Q, count = 3;
                    if (s.weight->tensor_scale && (k == QW_LINEAR_GATE || k == QW_LINEAR_UP))
                        first = QW_LINEAR_GATE, count = 2;
                    /* the group's rows stacked, this linear's rows at `at` */
                    size_t rows = 0, at = 0, in = (size_t)m->lin[i].in;
                    for (int g = first; g < first + count; g++) {
                        if (g == k) at = rows;
                        rows += (size_t)m->lin[b * QW_LINEAR_KINDS + g].out;
                    }
                    float *cat = malloc(rows * in * sizeof *cat);
                    assert_non_null(cat);
                    for (int g = first, r = 0; g < first + count; g++) {
                        const qw_linear *G = &m->lin[b * QW_LINEAR_KINDS + g];
                        float *x = master_f32(m, b * QW_LINEAR_KINDS + g);
                        memcpy(cat + (size_t)r * in, x, (size_t)G->out * in * sizeof *x);
                        r += G->out;
                        free(x);
                    }
                    qk_quant_options o = {.tensor_id = (uint32_t)m->lin[i].tensor_index};
                    qk_packed ref;
                    assert_int_equal(qk_packed_init(&ref, s.weight, &o, rows, in, &err), QS_OK);
                    assert_int_equal(qk_quantize(s.weight, &o, cat, rows, in, &ref, &err), QS_OK);
                    const qk_packed *got = &m->lin[i].packed;
                    size_t n = (size_t)m->lin[i].out;
                    if (memcmp(ref.codes + at * ref.row_bytes, got->codes, n * ref.row_bytes))
                        fail_msg("%s %s: block %d %s: codes differ from the stacked group",
                                 formats[fi], qw_isolation_name(modes[mi]), b,
                                 qw_linear_kind_name((qw_linear_kind)k));
                    if (ref.scales && memcmp(ref.scales + at * ref.blocks_per_row, got->scales,
                                             n * ref.blocks_per_row))
                        fail_msg("%s: block %d %s: block scales differ", formats[fi], b,
                                 qw_linear_kind_name((qw_linear_kind)k));
                    assert_memory_equal(&ref.tensor_scale, &got->tensor_scale, sizeof(float));
                    assert_memory_equal(&ref.tensor_amax, &got->tensor_amax, sizeof(float));
                    qk_packed_release(&ref);
                    free(cat);
                }
            qw_policy_free(&p);
        }
    assert_int_equal(qw_model_apply_policy(m, NULL, NULL), QS_OK);
    qw_model_destroy(m);
    qw_checkpoint_close(ck);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(checkpoint_masters_quantize_as_one_shot),
        cmocka_unit_test(synthetic_masters_quantize_as_one_shot),
        cmocka_unit_test(fused_groups_share_one_tensor_scale),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
