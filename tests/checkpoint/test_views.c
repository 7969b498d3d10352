/* Stored views of checkpoint tensors (checkpoint.h, qw_checkpoint_tensor_stored): the engine reads
 * its masters this way, converting a range of rows right before a GEMM. Converting any row range
 * must give exactly the FP32 values the independent writers' dequantization gives (gguf-py for
 * the GGUF block types and the Q/K row permutation, numpy for F16 and BF16), i.e. the values of
 * the load-time FP32 copy, and no byte is copied at view time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fixture.h"

enum { DIM = 64, FFN = 96, LAYERS = 2, VOCAB = 64 };

static const char *const roles[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                    "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                    "mlp.down_proj"};

static qw_checkpoint *open_ok(const char *path) {
    qw_checkpoint *ck = NULL;
    qs_error err = {0};
    if (qw_checkpoint_open(path, &ck, &err) != QS_OK) fail_msg("%s", err.msg);
    return ck;
}

/* Every matrix of checkpoint `ck_name`, converted in row ranges of `step` rows (the last one
 * shorter), equals the expect file's FP32 tensor bit for bit. Returns how many were checked. */
static int views_match(const char *ck_name, const char *expect_name, int step) {
    qw_checkpoint *ck = open_ok(fx_path(ck_name));
    fx_expect x;
    fx_expect_open(&x, expect_name);
    int checked = 0;
    char name[128];
    for (int i = -1; i < LAYERS * 7; i++) {
        if (i < 0)
            snprintf(name, sizeof name, "model.embed_tokens.weight");
        else
            snprintf(name, sizeof name, "model.layers.%d.%s.weight", i / 7, roles[i % 7]);
        qw_stored_tensor v;
        int64_t shape[2];
        int ndim = 0;
        qs_error err = {0};
        if (qw_checkpoint_tensor_stored(ck, name, &v, shape, &ndim, &err) != QS_OK)
            fail_msg("%s: %s", ck_name, err.msg);
        assert_int_equal(ndim, 2);
        assert_int_equal(v.rows, shape[0]);
        assert_int_equal(v.cols, shape[1]);
        int64_t n = 0;
        const float *want = fx_expect_tensor(&x, name, &n);
        assert_int_equal(n, v.rows * v.cols);
        float *got = malloc((size_t)n * sizeof *got);
        for (int64_t r0 = 0; r0 < v.rows; r0 += step) {
            int64_t rows = r0 + step <= v.rows ? step : v.rows - r0;
            qw_stored_rows_f32(&v, r0, rows, got + r0 * v.cols);
        }
        if (memcmp(got, want, (size_t)n * sizeof *got) != 0)
            fail_msg("%s: %s converted in pieces of %d rows differs from the reference", ck_name,
                     name, step);
        free(got);
        checked++;
    }
    fx_expect_close(&x);
    qw_checkpoint_close(ck);
    return checked;
}

/* GGUF Q8_0/Q4_0/Q4_1/F16/BF16/F32 tensors with llama.cpp's Q/K row permutation: row ranges of
 * 1, 3 (odd, cutting heads) and 128 rows (a GEMM piece) against gguf-py's dequantization. */
static void gguf_block_types_convert_by_rows_as_gguf_py(void **state) {
    (void)state;
    int steps[] = {1, 3, 128};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
        assert_int_equal(views_match("tiny_quant.gguf", "tiny_quant_expect.safetensors", steps[i]),
                         1 + LAYERS * 7);
}

/* BF16 and F16 safetensors against bits << 16 and numpy's float16 -> float32. */
static void bf16_and_f16_convert_by_rows_exactly(void **state) {
    (void)state;
    assert_int_equal(views_match("tiny_bf16", "tiny_bf16_expect.safetensors", 5), 1 + LAYERS * 7);
    assert_int_equal(views_match("tiny_f16_sharded", "tiny_f16_expect.safetensors", 7),
                     1 + LAYERS * 7);
}

/* The view gives the same values as qw_checkpoint_tensor's FP32 copy, and an aligned F32 tensor
 * that is not permuted is served in place (no conversion needed by the GEMM). */
static void views_agree_with_the_fp32_copy_and_f32_is_in_place(void **state) {
    (void)state;
    const char *cks[] = {"tiny_f32.gguf", "tiny_quant.gguf", "tiny_bf16"};
    for (size_t c = 0; c < 3; c++) {
        qw_checkpoint *ck = open_ok(fx_path(cks[c]));
        const char *names[] = {"model.layers.1.self_attn.q_proj.weight",
                               "model.layers.0.mlp.down_proj.weight", "model.embed_tokens.weight"};
        for (size_t i = 0; i < 3; i++) {
            qw_stored_tensor v;
            int64_t shape[2];
            int ndim;
            const float *copy;
            qs_error err = {0};
            assert_int_equal(qw_checkpoint_tensor_stored(ck, names[i], &v, shape, &ndim, &err), QS_OK);
            assert_int_equal(qw_checkpoint_tensor(ck, names[i], &copy, shape, &ndim, &err), QS_OK);
            float *got = malloc((size_t)(v.rows * v.cols) * sizeof *got);
            qw_stored_rows_f32(&v, 0, v.rows, got);
            assert_memory_equal(got, copy, (size_t)(v.rows * v.cols) * sizeof *got);
            const float *inplace = qw_stored_f32(&v);
            if (v.dtype == QW_DT_F32 && !v.permute_heads) {
                assert_ptr_equal(inplace, copy); /* the copy is the map itself */
            } else {
                assert_null(inplace);
            }
            free(got);
        }
        qw_checkpoint_close(ck);
    }
}

/* A 1-D tensor is a [1 x n] view; an absent tensor is QS_ENOTFOUND naming it. */
static void vectors_are_one_row_and_absent_tensors_are_named(void **state) {
    (void)state;
    qw_checkpoint *ck = open_ok(fx_path("tiny_bf16"));
    qw_stored_tensor v;
    int64_t shape[2];
    int ndim;
    qs_error err = {0};
    assert_int_equal(qw_checkpoint_tensor_stored(ck, "model.norm.weight", &v, shape, &ndim, &err),
                     QS_OK);
    assert_int_equal(ndim, 1);
    assert_int_equal(v.rows, 1);
    assert_int_equal(v.cols, DIM);
    assert_int_equal(shape[0], DIM);
    assert_int_equal(shape[1], 1);
    assert_int_equal(qw_checkpoint_tensor_stored(ck, "lm_head.weight", &v, shape, &ndim, &err),
                     QS_ENOTFOUND);
    fx_assert_msg(&err, "lm_head.weight", "not in the checkpoint", NULL);
    qw_checkpoint_close(ck);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gguf_block_types_convert_by_rows_as_gguf_py),
        cmocka_unit_test(bf16_and_f16_convert_by_rows_exactly),
        cmocka_unit_test(views_agree_with_the_fp32_copy_and_f32_is_in_place),
        cmocka_unit_test(vectors_are_one_row_and_absent_tensors_are_named),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
