/* The tiled training attention (ops.h qw_train_attention_*_tiled) against the whole-T x T
 * kernels it replaces on the CPU backend, on the fixed-order GEMM (the default numerics path):
 * forward output and dq, dk, dv bit for bit, on every ISA path of the GEMM, for any thread
 * count, with GQA and sequence lengths that are and are not a multiple of the tile; its saved
 * state is O(T), not O(T^2); the openblas path keeps the whole-T kernels. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../lib/floats.h"

#include "gemm_cpu.h"
#include "gemm_fixed.h"
#include "ops.h"

/* One shape: B sequences of T, H heads over G kv heads of E, nt threads; both kernels, the
 * number of differing elements of out, dq, dk, dv. */
static size_t differing(int B, int T, int H, int G, int E, int nt) {
    size_t N = (size_t)B * T, nq = N * H * E, nk = N * G * E;
    float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nk * 4), *dout = malloc(nq * 4);
    float *o1 = malloc(nq * 4), *o2 = malloc(nq * 4), *probs = malloc((size_t)B * H * T * T * 4);
    float *saved = malloc(qw_train_attention_tiled_saved_floats(B, T, H) * 4);
    float *s1 = malloc((size_t)nt * T * T * 4);
    float *s2 = malloc(qw_train_attention_tiled_scratch_floats(T, E, nt) * 4);
    float *g1 = malloc((nq + 2 * nk) * 4), *g2 = malloc((nq + 2 * nk) * 4);
    qwt_fill(q, nq, 1, 2.0f);
    qwt_fill(k, nk, 2, 2.0f);
    qwt_fill(v, nk, 3, 1.0f);
    qwt_fill(dout, nq, 4, 0.1f);
    qw_train_attention_forward(o1, probs, q, k, v, B, T, H, G, E, nt);
    qw_train_attention_forward_tiled(o2, saved, s2, q, k, v, B, T, H, G, E, nt);
    qw_train_attention_backward(g1, g1 + nq, g1 + nq + nk, s1, dout, q, k, v, probs, B, T, H, G, E,
                                nt);
    qw_train_attention_backward_tiled(g2, g2 + nq, g2 + nq + nk, s2, dout, q, k, v, saved, B, T, H,
                                      G, E, nt);
    /* real values to compare: the last query's output, the first key's gradient */
    assert_true(o2[nq - 1] != 0.0f && g2[nq] != 0.0f && g2[nq + nk] != 0.0f);
    size_t bad = qwt_differing(o1, o2, nq) + qwt_differing(g1, g2, nq + 2 * nk);
    free(q), free(k), free(v), free(dout), free(o1), free(o2), free(probs), free(saved);
    free(s1), free(s2), free(g1), free(g2);
    return bad;
}

static void tiled_attention_is_the_whole_t_kernel_bit_for_bit(void **s) {
    (void)s;
    qw_cpu_gemm_force(QW_CPU_GEMM_FIXED);
    static const int shapes[][5] = {
        /* B, T, H, G, E */
        {2, 96, 4, 2, 16},  /* T a multiple of the tile (48) */
        {1, 77, 4, 1, 8},   /* a last tile of 29 rows, one kv head for all */
        {3, 7, 2, 2, 32},   /* shorter than one tile */
        {1, 97, 6, 3, 24},  /* a last tile of 1 row; E not a multiple of the vector width */
        {2, 128, 4, 2, 32}, /* bench_train's tiny shape */
    };
    static const qw_gemm_isa isas[] = {QW_GEMM_ISA_SCALAR, QW_GEMM_ISA_AVX2, QW_GEMM_ISA_AVX512};
    for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++) {
        if (!qw_gemm_fixed_isa_supported(isas[i])) continue;
        assert_int_equal(qw_gemm_fixed_force_isa(isas[i], NULL), QS_OK);
        for (size_t j = 0; j < sizeof shapes / sizeof shapes[0]; j++)
            for (int nt = 1; nt <= 2; nt++) {
                const int *sh = shapes[j];
                size_t bad = differing(sh[0], sh[1], sh[2], sh[3], sh[4], nt);
                printf("%s %-6s B %d T %3d H %d G %d E %2d threads %d: %zu elements differ\n",
                       bad ? "NOT OK" : "OK", qw_gemm_isa_name(isas[i]), sh[0], sh[1], sh[2], sh[3],
                       sh[4], nt, bad);
                assert_int_equal(bad, 0);
            }
    }
    assert_int_equal(qw_gemm_fixed_force_isa(QW_GEMM_ISA_AUTO, NULL), QS_OK);
}

static void tiled_attention_saves_two_floats_a_row(void **s) {
    (void)s;
    /* B 8 x T 2048, 32 heads of 128, 2 threads: 4 MiB of row statistics a layer where the
     * probabilities were 4 GiB, and one scratch of a few tiles and head slices per thread, the
     * backward's, which the forward borrows */
    qw_cpu_gemm_force(QW_CPU_GEMM_FIXED);
    size_t saved = qw_train_attention_tiled_saved_floats(8, 2048, 32);
    assert_int_equal(saved, (size_t)8 * 32 * 2048 * 2);
    size_t slice = (size_t)2048 * 128; /* one head's packed K^T, V, Q, ... (E a multiple of 16) */
    assert_int_equal(qw_train_attention_tiled_scratch_floats(2048, 128, 2),
                     (size_t)2 * ((size_t)2 * QW_TRAIN_ATT_TILE * 2048 + 5 * slice));
    /* E 24 packs as 2 panels of 16 columns over T 100 rows; T 100 as 7 panels over E 24 rows */
    assert_int_equal(qw_train_attention_tiled_scratch_floats(100, 24, 1),
                     (size_t)2 * QW_TRAIN_ATT_TILE * 100 + 2 * (7 * 16 * 24) + 3 * (2 * 16 * 100));
    qw_backend be;
    assert_int_equal(qw_backend_cpu_init(&be, 2, 16, NULL), QS_OK);
    assert_int_equal(qw_train_attention_saved_floats(&be, 8, 2048, 32), saved);
    assert_int_equal(qw_train_attention_scratch_floats(&be, 2048, 32, 128),
                     qw_train_attention_tiled_scratch_floats(2048, 128, 2));
    /* the openblas path keeps the whole-T kernels (their results unchanged), and their sizes */
    qw_cpu_gemm_force(QW_CPU_GEMM_OPENBLAS);
    assert_int_equal(qw_train_attention_saved_floats(&be, 8, 2048, 32),
                     (size_t)8 * 32 * 2048 * 2048);
    assert_int_equal(qw_train_attention_scratch_floats(&be, 2048, 32, 128),
                     (size_t)32 * 2048 * 2048);
    qw_cpu_gemm_force(QW_CPU_GEMM_FIXED);
    qw_backend_release(&be);
}

/* The CUDA backend's training attention is blocked too (ops_cuda_train.h): it saves each row's
 * logsumexp, one float a row, and its backward's scratch is one sequence's row sums [H x T]. The
 * sizes follow the table's name, so a CPU table renamed "cuda" gets them here. */
static void cuda_attention_saves_one_float_a_row(void **s) {
    (void)s;
    qw_backend be;
    assert_int_equal(qw_backend_cpu_init(&be, 2, 16, NULL), QS_OK);
    qw_ops named = *be.ops;
    named.name = "cuda";
    const qw_ops *cpu = be.ops;
    be.ops = &named;
    assert_int_equal(qw_train_attention_saved_floats(&be, 8, 2048, 32), (size_t)8 * 32 * 2048);
    assert_int_equal(qw_train_attention_scratch_floats(&be, 2048, 32, 128), (size_t)32 * 2048);
    be.ops = cpu;
    qw_backend_release(&be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cuda_attention_saves_one_float_a_row),
        cmocka_unit_test(tiled_attention_is_the_whole_t_kernel_bit_for_bit),
        cmocka_unit_test(tiled_attention_saves_two_floats_a_row),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
