/* The training linears' block-scaled GEMMs on the GPU (ops.h gemm_abt_quant, CUDA:
 * ops_cuda_train.cu) against the CPU's scale-folded BF16 emulation of the same operands
 * (worker/train/recipe_emul.h), which equals the fake-quant FP32 GEMM of the CPU training path
 * (tests/train/test_recipe_emul.c):
 * - nvfp4 activations x nvfp4_2d weights (fprop), nvfp4 x nvfp4 with SR (dgrad's dY), mxfp4 x
 *   mxfp4, on the backend of the GEMM path table (QW_CUDA_GEMM_LT: native_fp4 where the probe
 *   proved the format, else emulated_bf16) and on the forced emulation (QW_CUDA_GEMM_EMULATED:
 *   emulated_bf16 always), beta 0 and 1: within twice the FP32 summation bound
 *   (2K + 8) 2^-23 sum_k |Aq Bq| (the same exact products; a tensor core's FP32 additions may
 *   truncate: Fasi, Higham, Mikaitis and Pranesh, PeerJ CS 2021);
 * - the path each backend reports is the table's (recipe_path.h) for the device's probe;
 * - fp8_e4m3 x fp8_e4m3 on FP8 tensor cores (cc >= 8.9) within the same bound, path fp8, and
 *   declined elsewhere (worker/engine/quant_gemm_route.h);
 * - the quantized linear of the nvfp4 recipe (qlinear.h, no hook) on the GPU against the same
 *   code on the CPU: y, dx and dW within 1e-4 of max |cpu|, and the model's per-kind record
 *   names native_fp4 or emulated_bf16.
 * - dequantize once (kernels/cuda/qk_gemm.h resident): on the forced emulation a resident NVFP4
 *   weight is dequantized on its first GEMM only (1 copy made, 1 reuse), its GEMMs give the
 *   per-call path's bits, qk_gemm_forget drops the copy, and a budget below the weight's size
 *   falls back to the per-call dequantization with the same bits.
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

#include "bf16_exact.h"
#include "gpu_test_util.h"
#include "ops_cuda.h"
#include "qk_cuda.h"
#include "qk_gemm.h"
#include "qk_gemm_path.h"
#include "qlinear.h"
#include "quant.h"
#include "recipe.h"
#include "recipe_emul.h"

static qw_backend lt, emu, cpu;
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
    qs_error err = {0};
    if (qwt_cuda_up(&lt, QW_CUDA_GEMM_LT) || qwt_cuda_up(&emu, QW_CUDA_GEMM_EMULATED)) return -1;
    return qw_backend_cpu_init(&cpu, 1, 1, &err) == QS_OK ? 0 : -1;
}

static int teardown(void **s) {
    (void)s;
    qw_backend_release(&lt);
    qw_backend_release(&emu);
    qw_backend_release(&cpu);
    return 0;
}

/* One case: A [M x K] in fa, B [N x K] in fb, on backend be; expect path `want` (-1: native_fp4
 * or emulated_bf16). */
static void gemm_case(qw_backend *be, const char *fa_name, const char *fb_name, int sr_a,
                      float beta, int M, int N, int K) {
    const qk_format *fa = qk_format_by_name(fa_name), *fb = qk_format_by_name(fb_name);
    float *A = mbuf((size_t)M * K), *B = mbuf((size_t)N * K), *C = mbuf((size_t)M * N);
    float *ce = malloc(sizeof(float) * M * N), *aq = malloc(sizeof(float) * M * K),
          *bq = malloc(sizeof(float) * N * K);
    for (size_t i = 0; i < (size_t)M * K; i++)
        A[i] = urand() * 2.0f;
    for (size_t i = 0; i < (size_t)N * K; i++)
        B[i] = urand() * 0.05f;
    for (size_t i = 0; i < (size_t)M * N; i++)
        C[i] = ce[i] = urand();
    qk_quant_options oa = {0}, ob = {0};
    oa.rounding = sr_a ? QK_ROUND_SR : QK_ROUND_RNE;
    oa.seed = ob.seed = 77;
    oa.tensor_id = 2;
    ob.tensor_id = 3;
    oa.step = ob.step = 5;
    oa.threads = ob.threads = 1;
    qs_error err = {0};
    int path = -1;
    if (be->ops->gemm_abt_quant(be, C, A, fa, &oa, B, fb, &ob, M, N, K, beta, &path, &err) != QS_OK)
        fail_msg("gemm_abt_quant %s x %s: %s", fa_name, fb_name, err.msg);
    qk_packed pa = {0}, pb = {0};
    assert_int_equal(qk_packed_init(&pa, fa, &oa, M, K, &err), QS_OK);
    assert_int_equal(qk_packed_init(&pb, fb, &ob, N, K, &err), QS_OK);
    assert_int_equal(qk_quantize(fa, &oa, A, M, K, &pa, &err), QS_OK);
    assert_int_equal(qk_quantize(fb, &ob, B, N, K, &pb, &err), QS_OK);
    assert_int_equal(qw_emul_gemm_abt(ce, &pa, &pb, beta, &err), QS_OK);
    assert_int_equal(qk_dequantize(&pa, aq, 1, &err), QS_OK);
    assert_int_equal(qk_dequantize(&pb, bq, 1, &err), QS_OK);
    double worst = 0;
    for (int m = 0; m < M; m++)
        for (int j = 0; j < N; j++) {
            double mag = 0;
            for (int k = 0; k < K; k++)
                mag += fabs((double)aq[(size_t)m * K + k] * bq[(size_t)j * K + k]);
            double bound = (2.0 * K + 8.0) * ldexp(1.0, -23) * mag +
                           (beta != 0 ? ldexp(fabs(ce[(size_t)m * N + j]), -23) : 0);
            double d = fabs((double)C[(size_t)m * N + j] - ce[(size_t)m * N + j]);
            if (bound > 0 && d / bound > worst) worst = d / bound;
            if (d > bound)
                fail_msg("%s x %s [%d, %d]: gpu %.9g, cpu emulation %.9g, bound %.3g", fa_name,
                         fb_name, m, j, (double)C[(size_t)m * N + j], (double)ce[(size_t)m * N + j],
                         bound);
        }
    printf("  %-8s x %-8s %s beta %g %d x %d x %d: path %s, worst %.3g of the bound\n", fa_name,
           fb_name, sr_a ? "SR " : "RNE", (double)beta, M, N, K,
           qk_gemm_path_name((qk_gemm_path)path), worst);
    if (!strcmp(fa_name, "fp8_e4m3"))
        assert_int_equal(path, QK_GEMM_PATH_FP8);
    else if (be == &emu)
        assert_int_equal(path, QK_GEMM_PATH_EMULATED_BF16);
    else
        assert_true(path == QK_GEMM_PATH_EMULATED_BF16 || path == QK_GEMM_PATH_NATIVE_FP4);
    qk_packed_release(&pa);
    qk_packed_release(&pb);
    qwt_managed_free(A), qwt_managed_free(B), qwt_managed_free(C);
    free(ce), free(aq), free(bq);
}

static void gemms_match_the_cpu_emulation(void **s) {
    (void)s;
    qw_backend *bes[2] = {&lt, &emu};
    for (int i = 0; i < 2; i++) {
        gemm_case(bes[i], "nvfp4", "nvfp4_2d", 0, 0.0f, 64, 96, 128);
        gemm_case(bes[i], "nvfp4", "nvfp4", 1, 1.0f, 64, 128, 96);
        gemm_case(bes[i], "mxfp4", "mxfp4", 1, 1.0f, 96, 128, 64);
    }
}

/* FP8 E4M3 x E4M3 (the fp8 recipe's GEMMs): on the FP8 tensor cores where the device has them
 * (cc >= 8.9, the GEMM path table's handle), within the bound above of the CPU emulation, path
 * fp8, K a multiple of 16 and not (the codes padded with zeros); declined (QS_EUNSUPPORTED, C
 * untouched) below 8.9 and on the forced emulation, where the caller's fake-quant GEMM runs
 * (worker/engine/quant_gemm_route.h). */
static void fp8_gemms_run_on_fp8_tensor_cores(void **s) {
    (void)s;
    int dev = 0, major = 0, minor = 0;
    assert_int_equal(cudaGetDevice(&dev), cudaSuccess);
    assert_int_equal(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), 0);
    assert_int_equal(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev), 0);
    const qk_format *f8 = qk_format_by_name("fp8_e4m3");
    qk_quant_options o = {0};
    float *A = mbuf(64 * 64), *C = mbuf(64 * 64);
    for (int i = 0; i < 64 * 64; i++)
        A[i] = urand(), C[i] = 7.0f;
    qs_error err = {0};
    int path = -1;
    assert_int_equal(emu.ops->gemm_abt_quant(&emu, C, A, f8, &o, A, f8, &o, 64, 64, 64, 0.0f,
                                             &path, &err),
                     QS_EUNSUPPORTED);
    assert_true(C[0] == 7.0f && C[64 * 64 - 1] == 7.0f);
    if (major * 10 + minor < 89) {
        printf("  fp8: compute capability %d.%d has no FP8 tensor cores: declined\n", major, minor);
        assert_int_equal(lt.ops->gemm_abt_quant(&lt, C, A, f8, &o, A, f8, &o, 64, 64, 64, 0.0f,
                                                &path, &err),
                         QS_EUNSUPPORTED);
    } else {
        gemm_case(&lt, "fp8_e4m3", "fp8_e4m3", 0, 0.0f, 64, 96, 128);
        gemm_case(&lt, "fp8_e4m3", "fp8_e4m3", 1, 1.0f, 48, 64, 72);
    }
    qwt_managed_free(A), qwt_managed_free(C);
}

static double rel(const float *a, const float *ref, size_t n) {
    double md = 0, mr = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (!(d <= md)) md = d;
        if (fabs(ref[i]) > mr) mr = fabs(ref[i]);
    }
    return mr > 0 ? md / mr : md;
}

static void qlinear_nvfp4_matches_the_cpu(void **s) {
    (void)s;
    qs_error err = {0};
    qw_recipe r;
    assert_int_equal(qw_recipe_by_name("nvfp4", &r, &err), QS_OK);
    int N = 64, in = 128, out = 96, L = 4, lin = 2;
    size_t sc = qw_qlinear_scratch_floats(N, in, out);
    float *x = mbuf((size_t)N * in), *W = mbuf((size_t)out * in), *dy = mbuf((size_t)N * out);
    float *y[2], *dx[2], *dW[2], *ba[2], *bb[2];
    for (int i = 0; i < 2; i++) {
        y[i] = mbuf((size_t)N * out), dx[i] = mbuf((size_t)N * in), dW[i] = mbuf((size_t)out * in);
        ba[i] = mbuf(sc), bb[i] = mbuf(sc);
        memset(dW[i], 0, sizeof(float) * out * in);
    }
    for (size_t i = 0; i < (size_t)N * in; i++)
        x[i] = urand() * 3.0f;
    for (size_t i = 0; i < (size_t)out * in; i++)
        W[i] = urand() * 0.05f;
    for (size_t i = 0; i < (size_t)N * out; i++)
        dy[i] = urand() * 1e-3f;
    unsigned ran[2][QW_N_LINEAR_GEMMS] = {{0}};
    qw_backend *bes[2] = {&cpu, &lt};
    for (int i = 0; i < 2; i++) {
        qw_qlinear_env e = {bes[i], &r,     L,    42, 7,    ba[i], bb[i], NULL,
                            NULL,   ran[i], NULL, 0,  NULL, 0,     NULL,  -1};
        if (qw_qlinear_forward(&e, 0, lin, y[i], x, W, N, in, out, &err) != QS_OK ||
            qw_qlinear_backward(&e, 0, lin, dx[i], 0, dW[i], dy, x, W, N, in, out, &err) != QS_OK)
            fail_msg("%s: %s", i ? "gpu" : "cpu", err.msg);
    }
    double ry = rel(y[1], y[0], (size_t)N * out), rx = rel(dx[1], dx[0], (size_t)N * in),
           rw = rel(dW[1], dW[0], (size_t)out * in);
    printf("  nvfp4 block 0: y %.3g dx %.3g dW %.3g of max |cpu|; gpu fprop ran 0x%x\n", ry, rx, rw,
           ran[1][0]);
    assert_true(ry <= 1e-4 && rx <= 1e-4 && rw <= 1e-4);
    for (int g = 0; g < 3; g++) {
        assert_true(ran[1][g] &
                    ((1u << QK_GEMM_PATH_NATIVE_FP4) | (1u << QK_GEMM_PATH_EMULATED_BF16)));
        assert_int_equal(ran[0][g], 1u << QK_GEMM_PATH_FP32); /* the CPU's fake-quant FP32 */
    }
}

static void resident_weights_dequantize_once(void **s) {
    (void)s;
    enum { T = 64, OUT = 96, IN = 128 };
    qs_error err = {0};
    qk_gemm *g = NULL;
    assert_int_equal(qk_gemm_create(0, &g, &err), QS_OK);
    qk_gemm_force_emulation(g, 1);
    const qk_format *f = qk_format_by_name("nvfp4");
    float *x = mbuf((size_t)T * IN), *w = mbuf((size_t)OUT * IN);
    float *y[4];
    for (int i = 0; i < 4; i++)
        y[i] = mbuf((size_t)T * OUT);
    for (size_t i = 0; i < (size_t)T * IN; i++)
        x[i] = urand();
    for (size_t i = 0; i < (size_t)OUT * IN; i++)
        w[i] = urand() * 0.1f;
    qk_gemm_operand xo, wo;
    memset(&xo, 0, sizeof xo);
    memset(&wo, 0, sizeof wo);
    xo.type = wo.type = QK_GEMM_NVFP4;
    assert_int_equal(qk_lt_layout_init(f, T, IN, &xo.layout, &err), QS_OK);
    assert_int_equal(qk_lt_layout_init(f, OUT, IN, &wo.layout, &err), QS_OK);
    uint8_t *xc = qwt_managed(xo.layout.codes_bytes), *xs = qwt_managed(xo.layout.scale_bytes);
    uint8_t *wc = qwt_managed(wo.layout.codes_bytes), *ws = qwt_managed(wo.layout.scale_bytes);
    qk_quant_options opt = {0};
    assert_int_equal(qk_cuda_quantize_lt(f, &opt, x, T, IN, &xo.layout, xc, xs, &xo.tensor_scale,
                                         NULL, NULL, &err),
                     QS_OK);
    assert_int_equal(qk_cuda_quantize_lt(f, &opt, w, OUT, IN, &wo.layout, wc, ws, &wo.tensor_scale,
                                         NULL, NULL, &err),
                     QS_OK);
    xo.data = xc, xo.scales = xs, wo.data = wc, wo.scales = ws;
    qk_gemm_path path;
    for (int i = 0; i < 3; i++) {
        wo.resident = i > 0;
        if (qk_gemm_linear(g, &xo, &wo, T, OUT, IN, 1.0f, 0.0f, y[i], QK_GEMM_OUT_F32, OUT, NULL,
                           &path, &err) != QS_OK)
            fail_msg("%s", err.msg);
        assert_int_equal(path, QK_GEMM_PATH_EMULATED_BF16);
    }
    assert_int_equal(cudaDeviceSynchronize(), 0);
    qk_gemm_dq_stats st;
    qk_gemm_dequant_stats(g, &st);
    printf("  resident NVFP4 %d x %d: %llu copies made, %llu reused, %zu bytes of %zu\n", OUT, IN,
           (unsigned long long)st.misses, (unsigned long long)st.hits, st.bytes, st.budget);
    assert_int_equal(st.misses, 1);
    assert_int_equal(st.hits, 1);
    assert_int_equal(st.weights, 1);
    assert_memory_equal(y[1], y[0], sizeof(float) * T * OUT);
    assert_memory_equal(y[2], y[0], sizeof(float) * T * OUT);
    qk_gemm_forget(g, wc);
    qk_gemm_dequant_stats(g, &st);
    assert_int_equal(st.weights, 0);
    assert_int_equal(st.bytes, 0);
    qk_gemm_set_dequant_budget(g, 1024); /* below the weight's 96 x 128 x 2 bytes */
    assert_int_equal(qk_gemm_linear(g, &xo, &wo, T, OUT, IN, 1.0f, 0.0f, y[3], QK_GEMM_OUT_F32, OUT,
                                    NULL, &path, &err),
                     QS_OK);
    assert_int_equal(cudaDeviceSynchronize(), 0);
    qk_gemm_dequant_stats(g, &st);
    assert_int_equal(st.weights, 0);
    assert_memory_equal(y[3], y[0], sizeof(float) * T * OUT);
    qk_gemm_destroy(g);
    qwt_managed_free(xc), qwt_managed_free(xs), qwt_managed_free(wc), qwt_managed_free(ws);
    qwt_managed_free(x), qwt_managed_free(w);
    for (int i = 0; i < 4; i++)
        qwt_managed_free(y[i]);
}

int main(void) {
    if (qwt_cuda_skip("gpu_train_quant")) return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gemms_match_the_cpu_emulation),
        cmocka_unit_test(fp8_gemms_run_on_fp8_tensor_cores),
        cmocka_unit_test(qlinear_nvfp4_matches_the_cpu),
        cmocka_unit_test(resident_weights_dequantize_once),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
