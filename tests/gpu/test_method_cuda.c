/* A quantization method on the CUDA backend (ops_cuda_method.cu, worker/method):
 * - the CUDA table's method_input equals the CPU entry bit for bit (the same divisions,
 *   butterfly and norm, rounded alike), tiles 16, 32, 128, 8192 and all of K, with and without
 *   s, odd T, in place, more tiles than one grid holds; a tile over 8192 is refused;
 * - rotate16, smoothquant and gptq on a synthetic Llama moved to CUDA (QW_CUDA_GEMM_FP32)
 *   against the same job on the CPU: with the identity weight format the logits within 1e-4 of
 *   the largest CPU logit's magnitude (cuBLAS SGEMM sums in another order; calibration sees
 *   the device's activations, equal to FP32 rounding); in NVFP4 W4A16 within 5e-2 (a value
 *   on a rounding boundary may land on the neighbouring FP4 code, and GPTQ carries that error
 *   on). Each comparison prints its measured difference. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "format.h"
#include "gpu_test_util.h"
#include "method_apply.h"
#include "model.h"
#include "model_cuda.h"
#include "ops.h"
#include "ops_cuda_method.h"
#include "policy.h"

static qw_backend gpu, cpu;

static uint64_t rng = 0x2545f4914f6cdd1dull;

static float uniform(float lo, float hi) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return lo + (hi - lo) * (float)((rng >> 40) * (1.0 / 16777216.0));
}

/* One shape through both entries, into another buffer and in place. */
static void same_bits(int T, int K, int tile, int with_s) {
    const size_t n = (size_t)T * (size_t)K;
    float *x = qwt_managed(n * sizeof *x), *y = qwt_managed(n * sizeof *y);
    float *s = qwt_managed((size_t)K * sizeof *s), *ref = malloc(n * sizeof *ref);
    assert_true(x && y && s && ref);
    for (size_t i = 0; i < n; i++)
        x[i] = uniform(-8.0f, 8.0f);
    for (int j = 0; j < K; j++)
        s[j] = uniform(0.05f, 3.0f);
    const float *sc = with_s ? s : NULL;
    qs_error err = {0};
    if (cpu.ops->method_input(&cpu, ref, x, T, K, sc, tile, &err)) fail_msg("%s", err.msg);
    if (gpu.ops->method_input(&gpu, y, x, T, K, sc, tile, &err)) fail_msg("%s", err.msg);
    if (memcmp(y, ref, n * sizeof *y))
        fail_msg("T=%d K=%d tile %d s %d: the GPU's bits differ from the CPU's", T, K, tile,
                 with_s);
    if (gpu.ops->method_input(&gpu, x, x, T, K, sc, tile, &err)) fail_msg("%s", err.msg);
    assert_memory_equal(x, ref, n * sizeof *x);
    qwt_managed_free(x);
    qwt_managed_free(y);
    qwt_managed_free(s);
    free(ref);
}

static void cuda_entry_equals_the_cpu_bit_for_bit(void **state) {
    (void)state;
    const int tiles[] = {16, 32, 128, 1024, 0};
    for (int ti = 0; ti < 5; ti++)
        for (int with_s = 0; with_s < 2; with_s++)
            if (tiles[ti] || with_s) same_bits(7, 1024, tiles[ti], with_s);
    same_bits(3, 8192, 8192, 1);  /* the largest tile the kernel holds */
    same_bits(301, 4096, 16, 1);  /* 77056 tiles: more than one grid's 65535 blocks */
    same_bits(5, 24576, 8192, 0); /* three 8192-point tiles a row */
    qs_error err = {0};
    float *x = qwt_managed(16384 * sizeof *x);
    assert_non_null(x);
    assert_int_equal(gpu.ops->method_input(&gpu, x, x, 1, 16384, NULL, 16384, &err),
                     QS_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "16384-point rotation tile is over the 8192"));
    qwt_managed_free(x);
}

enum { CTX = 32 };
static uint32_t tokens[4 * CTX];

static void policy_all(qw_model *m, const char *wfmt) {
    qw_policy p;
    qs_error err = {0};
    assert_int_equal(qw_policy_init(&p, qw_model_config(m)->n_layers, &err), QS_OK);
    qw_quant_spec s = {.weight = qk_format_by_name(wfmt)};
    assert_int_equal(qw_policy_isolation(&p, QW_ISO_ALL, QW_LINEAR_Q, 0, &s, &err), QS_OK);
    if (qw_model_apply_policy(m, &p, &err)) fail_msg("%s", err.msg);
    qw_policy_free(&p);
}

/* The method on m in format wfmt, the logits of chunk 0 into out [CTX x V]. *ms is kept until
 * the end: the device weight cache finds an FP32 weight by its host address, so a later
 * method's weight must not reuse a freed one's. */
static void method_logits(qw_model *m, const char *wfmt, const qw_method_plan *plan,
                          qw_method_state **ms, float *out) {
    qs_error err = {0};
    qw_method_info info;
    policy_all(m, wfmt);
    if (qw_method_apply(m, plan, ms, &info, &err)) fail_msg("%s: %s", plan->name, err.msg);
    const float *l;
    if (qw_model_forward(m, tokens, CTX, &l, &err)) fail_msg("%s: %s", plan->name, err.msg);
    const int V = qw_model_config(m)->vocab_size;
    qw_backend *lb = qw_model_logits_backend(m); /* the logits are in its memory */
    if (lb->ops->fetch(lb, out, l, (size_t)CTX * V * sizeof *out, &err))
        fail_msg("%s: %s", plan->name, err.msg);
}

static void method_job_on_cuda_matches_the_cpu(void **state) {
    (void)state;
    qs_error err = {0};
    qw_model *mc, *mg;
    if (qw_model_create_synthetic("synthetic:tiny-llama3:7", CTX, 2, &mc, &err) ||
        qw_model_create_synthetic("synthetic:tiny-llama3:7", CTX, 2, &mg, &err))
        fail_msg("%s", err.msg);
    const int V = qw_model_config(mc)->vocab_size;
    uint64_t r = 88172645463325252ull;
    for (size_t i = 0; i < sizeof tokens / sizeof tokens[0]; i++) {
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        tokens[i] = (uint32_t)(r % (uint64_t)V);
    }
    if (qw_model_use_cuda(mg, 0, QW_CUDA_GEMM_FP32, &err)) fail_msg("%s", err.msg);
    const qw_method_plan plans[] = {
        {.name = "rotate16", .rotate = 16},
        {.name = "smoothquant", .smooth = 1, .alpha = 0.5},
        {.name = "gptq", .gptq = 1},
    };
    const char *fmts[] = {"bf16", "nvfp4"};
    const double bound[] = {1e-4, 5e-2};
    qw_method_state *kept[12] = {0};
    int nk = 0;
    float *lc = malloc((size_t)CTX * V * sizeof *lc), *lg = malloc((size_t)CTX * V * sizeof *lg);
    assert_true(lc && lg);
    for (int fi = 0; fi < 2; fi++)
        for (int pi = 0; pi < 3; pi++) {
            qw_method_plan p = plans[pi];
            p.calib = tokens + CTX;
            p.calib_chunks = 3;
            p.ctx = CTX;
            method_logits(mc, fmts[fi], &p, &kept[nk++], lc);
            method_logits(mg, fmts[fi], &p, &kept[nk++], lg);
            double amax = 0.0, worst = 0.0;
            for (size_t i = 0; i < (size_t)CTX * V; i++) {
                amax = fmax(amax, fabs(lc[i]));
                worst = fmax(worst, fabs((double)lg[i] - lc[i]));
            }
            printf("%s %s: cuda vs cpu logits: max |diff| %.3g of max |logit| %.3g (%.2g, bound "
                   "%.0e)\n",
                   p.name, fmts[fi], worst, amax, worst / amax, bound[fi]);
            if (!(worst <= bound[fi] * amax)) fail_msg("%s %s: out of bound", p.name, fmts[fi]);
        }
    for (int i = 0; i < nk; i++)
        qw_method_state_free(kept[i]); /* the device buffers through the CUDA backend, still up */
    free(lc);
    free(lg);
    qw_model_apply_policy(mg, NULL, &err);
    if (qw_model_use_cpu(mg, &err)) fail_msg("%s", err.msg);
    qw_model_destroy(mg);
    qw_model_destroy(mc);
}

static int setup(void **state) {
    (void)state;
    qs_error err = {0};
    if (qw_backend_cpu_init(&cpu, 1, 1, &err)) return -1;
    return qwt_cuda_up(&gpu, QW_CUDA_GEMM_FP32) ? -1 : 0;
}

static int teardown(void **state) {
    (void)state;
    qw_backend_cuda_release(&gpu);
    qw_backend_release(&cpu);
    return 0;
}

int main(void) {
    if (qwt_cuda_skip("gpu_method_cuda")) return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cuda_entry_equals_the_cpu_bit_for_bit),
        cmocka_unit_test(method_job_on_cuda_matches_the_cpu),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
