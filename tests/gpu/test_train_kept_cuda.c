/* The kept operand on CUDA (ops.h quant_operand, gemm_abt_quant_kept: ops_cuda_train.cu) against
 * the per-call quantization of gemm_abt_quant, bit for bit:
 * - one GEMM: B quantized once into a buffer of quant_operand_bytes, then gemm_abt_quant_kept,
 *   gives gemm_abt_quant's C and path from the source B, for fprop's pairing (nvfp4 x nvfp4_2d),
 *   dgrad's (nvfp4 with SR x the 2D weight's transpose, quantized along out), mxfp4 x mxfp4, beta
 *   0 and 1, on the GEMM path table's backend and on the forced emulation;
 * - what is not kept: fp8_e4m3 (quant_operand_bytes 0) and an output width not a multiple of 4;
 * - training: the nvfp4 and mxfp4 recipes on CUDA with the weight cache (packed copies made once
 *   per step) and without it (every GEMM quantizes its weight), gradient accumulation 2, three
 *   optimizer steps: every loss and the final weights equal bit for bit, and the cache holds
 *   less than the FP32 copy the CPU keeps.
 * Exits 77 (skipped) with a message when no CUDA device is visible. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cuda_runtime.h>

#include "format.h"
#include "gpu_test_util.h"
#include "ops_cuda.h"
#include "optim.h"
#include "qk_gemm_path.h"
#include "quant.h"
#include "recipe.h"
#include "tmodel.h"

static qw_backend lt, emu;
static uint64_t rs = 0x9e3779b97f4a7c15ull;

static float urand(void) {
    rs ^= rs >> 12;
    rs ^= rs << 25;
    rs ^= rs >> 27;
    return (float)((double)((rs * 2685821657736338717ull) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static float *mbuf(size_t n) {
    float *p = qwt_managed(n * sizeof(float));
    assert_non_null(p);
    return p;
}

static int setup(void **s) {
    (void)s;
    return qwt_cuda_up(&lt, QW_CUDA_GEMM_LT) || qwt_cuda_up(&emu, QW_CUDA_GEMM_EMULATED) ? -1 : 0;
}

static int teardown(void **s) {
    (void)s;
    qw_backend_release(&lt);
    qw_backend_release(&emu);
    return 0;
}

/* C [M x N] of A [M x K] in fa times B [N x K] in fb (transposed from a [K x N] source when
 * b_transposed), kept and per call, on be: the same bits and path. */
static void kept_case(qw_backend *be, const char *fa_name, const char *fb_name, int sr_a,
                      int b_transposed, float beta, int M, int N, int K) {
    const qk_format *fa = qk_format_by_name(fa_name), *fb = qk_format_by_name(fb_name);
    qs_error err = {0};
    float *A = mbuf((size_t)M * K), *src = mbuf((size_t)N * K), *Bm = mbuf((size_t)N * K);
    float *C[2] = {mbuf((size_t)M * N), mbuf((size_t)M * N)};
    for (size_t i = 0; i < (size_t)M * K; i++)
        A[i] = urand() * 2.0f;
    for (size_t i = 0; i < (size_t)N * K; i++)
        src[i] = urand() * 0.05f;
    for (size_t i = 0; i < (size_t)M * N; i++)
        C[0][i] = C[1][i] = urand();
    if (b_transposed) /* dgrad's W^T [in x out] from W [out x in] */
        assert_int_equal(be->ops->transpose(be, Bm, src, K, N, &err), QS_OK);
    else
        memcpy(Bm, src, sizeof(float) * N * K);
    qk_quant_options oa = {0}, ob = {0};
    oa.rounding = sr_a ? QK_ROUND_SR : QK_ROUND_RNE;
    oa.seed = ob.seed = 77;
    oa.tensor_id = 2;
    ob.tensor_id = 3;
    oa.step = ob.step = 5;
    oa.threads = ob.threads = 1;
    size_t bytes = be->ops->quant_operand_bytes(be, fb, (size_t)N, (size_t)K);
    assert_true(bytes > 0);
    void *bq = be->ops->alloc(be, bytes);
    assert_non_null(bq);
    if (be->ops->quant_operand(be, fb, &ob, bq, Bm, (size_t)N, (size_t)K, &err) != QS_OK)
        fail_msg("quant_operand %s: %s", fb_name, err.msg);
    int path[2] = {-1, -1};
    if (be->ops->gemm_abt_quant_kept(be, C[0], A, fa, &oa, bq, fb, M, N, K, beta, &path[0], &err) !=
        QS_OK)
        fail_msg("gemm_abt_quant_kept %s x %s: %s", fa_name, fb_name, err.msg);
    if (be->ops->gemm_abt_quant(be, C[1], A, fa, &oa, Bm, fb, &ob, M, N, K, beta, &path[1], &err) !=
        QS_OK)
        fail_msg("gemm_abt_quant %s x %s: %s", fa_name, fb_name, err.msg);
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    size_t differ = 0;
    for (size_t i = 0; i < (size_t)M * N; i++)
        differ += memcmp(&C[0][i], &C[1][i], sizeof(float)) != 0;
    printf("%s %-8s x %-8s%s %s beta %g %d x %d x %d: kept %zu bytes, path %s / %s, %zu of %d "
           "differ\n",
           differ || path[0] != path[1] ? "NOT OK" : "OK", fa_name, fb_name,
           b_transposed ? " (W^T)" : "", sr_a ? "SR " : "RNE", (double)beta, M, N, K, bytes,
           qk_gemm_path_name((qk_gemm_path)path[0]), qk_gemm_path_name((qk_gemm_path)path[1]),
           differ, M * N);
    assert_int_equal(differ, 0);
    assert_int_equal(path[0], path[1]);
    be->ops->free(be, bq);
    qwt_managed_free(A), qwt_managed_free(src), qwt_managed_free(Bm);
    qwt_managed_free(C[0]), qwt_managed_free(C[1]);
}

static void kept_operand_gives_the_per_call_bits(void **s) {
    (void)s;
    qw_backend *bes[2] = {&lt, &emu};
    for (int i = 0; i < 2; i++) {
        kept_case(bes[i], "nvfp4", "nvfp4_2d", 0, 0, 0.0f, 64, 96, 128);
        kept_case(bes[i], "nvfp4", "nvfp4_2d", 1, 1, 1.0f, 64, 128, 96);
        kept_case(bes[i], "mxfp4", "mxfp4", 1, 0, 1.0f, 96, 128, 64);
    }
}

/* FP8 and an output width the block-scaled GEMM does not write are not kept. */
static void what_is_not_kept(void **s) {
    (void)s;
    const qk_format *f8 = qk_format_by_name("fp8_e4m3"), *f4 = qk_format_by_name("nvfp4");
    assert_int_equal(lt.ops->quant_operand_bytes(&lt, f8, 64, 64), 0);
    assert_int_equal(lt.ops->quant_operand_bytes(&lt, f4, 66, 64), 0);
    assert_true(lt.ops->quant_operand_bytes(&lt, f4, 64, 64) > 0);
}

enum { B = 2, T = 32, STEPS = 3, ACCUM = 2 };

/* dim 64, FFN 128, 2 blocks of 4 heads (2 KV) of 16, vocabulary 64 */
static qw_config config(void) {
    qw_config c = {0};
    c.dim = 64, c.hidden_dim = 128, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2;
    c.head_dim = 16, c.vocab_size = 64, c.max_seq_len = 64, c.norm_eps = 1e-5f;
    c.rope_theta = 10000.0f;
    return c;
}

/* Losses of STEPS steps of ACCUM micro-batches of recipe name on be, the cache on or off, into
 * loss, the final parameters into p; *bytes the cache's. */
static void train(qw_backend *be, const char *name, int cache, const uint32_t *stream, double *loss,
                  float *p, size_t *bytes) {
    qs_error err = {0};
    qw_config c = config();
    qw_recipe r;
    assert_int_equal(qw_recipe_by_name(name, &r, &err), QS_OK);
    qw_tmodel *m = NULL;
    assert_int_equal(qw_tmodel_create_on(&c, B, T, be, &m, &err), QS_OK);
    assert_int_equal(qw_tmodel_set_recipe(m, &r, 9, &err), QS_OK);
    qw_tmodel_set_weight_cache(m, cache);
    assert_int_equal(qw_tmodel_init_random(m, 3, 0.05f, &err), QS_OK);
    qw_adamw opt = {0.9f, 0.95f, 1e-8f, 0.1f};
    uint32_t micro = 0;
    for (int s = 0; s < STEPS; s++) {
        assert_int_equal(qw_tmodel_zero_grad(m, &err), QS_OK);
        loss[s] = 0;
        for (int a = 0; a < ACCUM; a++, micro++) {
            const uint32_t *tok = stream + (size_t)micro * B * T;
            double l = 0;
            if (qw_tmodel_forward(m, tok, tok + 1, micro, &l, &err) != QS_OK ||
                qw_tmodel_backward(m, 1.0f / ACCUM, &err) != QS_OK)
                fail_msg("%s: %s", name, err.msg);
            loss[s] += l;
        }
        assert_int_equal(qw_adamw_step(m, &opt, 1e-2f, 1.0f, s + 1, &err), QS_OK);
    }
    assert_int_equal(qw_tmodel_fetch(m, QW_TMODEL_PARAMS, p, &err), QS_OK);
    *bytes = qw_tmodel_weight_cache_bytes(m);
    qw_tmodel_destroy(m);
}

static void training_with_kept_weights_is_per_call_bit_for_bit(void **s) {
    (void)s;
    enum { NTOK = (STEPS * ACCUM + 1) * B * T };
    uint32_t *stream = malloc(NTOK * sizeof *stream);
    assert_non_null(stream);
    for (int i = 0; i < NTOK; i++)
        stream[i] = (uint32_t)((urand() + 1.0f) * 31.0f) % 64;
    static const char *const names[] = {"nvfp4", "mxfp4"};
    qw_config c = config();
    size_t n = 0, model_bytes = 0;
    qw_tmodel_plan(&c, B, T, 1, &n, &model_bytes);
    float *pa = malloc(n * sizeof *pa), *pb = malloc(n * sizeof *pb);
    assert_non_null(pa);
    assert_non_null(pb);
    for (int ri = 0; ri < 2; ri++) {
        double la[STEPS], lb[STEPS];
        size_t ba = 0, bb = 0;
        train(&lt, names[ri], 1, stream, la, pa, &ba);
        train(&lt, names[ri], 0, stream, lb, pb, &bb);
        int loss_same = !memcmp(la, lb, sizeof la);
        size_t differ = 0;
        for (size_t i = 0; i < n; i++)
            differ += memcmp(&pa[i], &pb[i], sizeof *pa) != 0;
        /* the FP32 copies the CPU keeps: 4 bytes per element of each quantized block's linears,
         * fprop's only for nvfp4's 2D weights, dgrad's too for mxfp4's 1D blocks */
        qw_recipe r;
        assert_int_equal(qw_recipe_by_name(names[ri], &r, NULL), QS_OK);
        size_t blocks = (size_t)(c.n_layers - r.bf16_first - r.bf16_last);
        size_t w = 2 * (size_t)64 * 64 + 2 * (size_t)32 * 64 + 3 * (size_t)128 * 64;
        size_t fp32_bytes = blocks * (r.w2d ? 1 : 2) * w * 4;
        printf("%s %s: losses %s (last %.17g), %zu of %zu weights differ, cache %zu bytes "
               "(FP32 copies: %zu)\n",
               loss_same && !differ ? "OK" : "NOT OK", names[ri], loss_same ? "equal" : "DIFFER",
               la[STEPS - 1], differ, n, ba, fp32_bytes);
        assert_true(loss_same);
        assert_int_equal(differ, 0);
        assert_int_equal(bb, ba);
        assert_true(ba > 0 && ba < fp32_bytes);
    }
    free(pa);
    free(pb);
    free(stream);
}

int main(void) {
    if (qwt_cuda_skip("gpu_train_kept")) return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(kept_operand_gives_the_per_call_bits),
        cmocka_unit_test(what_is_not_kept),
        cmocka_unit_test(training_with_kept_weights_is_per_call_bit_for_bit),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
