/* The GPU training ops (worker/engine/ops_cuda_train.h) against the CPU training functions
 * (worker/engine/ops.h, qw_train_*) on random inputs. Tolerances (max |gpu - cpu| / max |cpu|,
 * printed per tensor):
 * - exact (0): embedding forward/backward, RoPE forward/backward, RMSNorm weight gradient,
 *   cross-entropy backward, the RHT of both tile sizes (16 and 32, on the device: no CPU
 *   fallback) (the same float operations in the same order; nvcc --fmad=false);
 * - 1e-6: RMSNorm forward and input gradient, SwiGLU forward/backward, cross-entropy forward
 *   (probabilities and losses): double sums in another order, CUDA expf;
 * - 1e-5: GEMM-based ops (linear forward/dgrad/wgrad): cuBLAS SGEMM sums in another order
 *   than the CPU's GEMM; the blocked attention (forward, logsumexp, backward) against the CPU's
 *   whole-T kernels: FP32 sums in another order and the online softmax's rescaling;
 * - 1e-4: gemm_abt_bf16 on BF16-exact inputs: the same products, summed in FP32 on the tensor
 *   cores, whose additions may truncate instead of rounding (Fasi, Higham, Mikaitis and
 *   Pranesh, "Numerical behavior of NVIDIA tensor cores", PeerJ CS 2021).
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

#include "gpu_test_util.h"
#include "hadamard.h"
#include "ops.h"
#include "ops_cuda.h"
#include "ops_cuda_train.h"
#include "quant.h"

static qw_backend gpu;
static uint64_t rs = 0x2545F4914F6CDD1Dull;

static float urand(void) {
    rs ^= rs >> 12;
    rs ^= rs << 25;
    rs ^= rs >> 27;
    return (float)((double)((rs * 2685821657736338717ull) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* Managed buffer of n floats filled with uniform [-s, s) (s = 0: zeros): the test's, host
 * visible (the backend's own alloc gives device memory). */
static float *buf(size_t n, float s) {
    float *p = qwt_managed(n * sizeof(float));
    assert_non_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = s ? urand() * s : 0.0f;
    return p;
}

static float *host_copy(const float *p, size_t n) {
    float *h = malloc(n * sizeof(float));
    memcpy(h, p, n * sizeof(float));
    return h;
}

static int close_to(const char *what, const float *a, const float *ref, size_t n, double tol) {
    double md = 0.0, mr = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (!(d <= md)) md = d;
        if (fabs(ref[i]) > mr) mr = fabs(ref[i]);
    }
    double r = mr > 0 ? md / mr : md;
    printf("  %-30s rel err %.3g (tol %.3g) %s\n", what, r, tol, r <= tol ? "OK" : "NOT OK");
    return r <= tol;
}

#define OK(call)                                                                                   \
    do {                                                                                           \
        qs_error e_ = {0};                                                                         \
        qs_status s_ = (call);                                                                     \
        if (s_ != QS_OK) fprintf(stderr, "%s\n", e_.msg);                                          \
        assert_int_equal(s_, QS_OK);                                                               \
    } while (0)
#define ERR (&e_)

static void test_embedding_exact(void **state) {
    (void)state;
    int N = 300, D = 64, V = 50;
    uint32_t *tok = qwt_managed((size_t)N * sizeof(uint32_t));
    for (int i = 0; i < N; i++)
        tok[i] = (uint32_t)(i * 7 % V); /* repeated tokens: rows add in token order */
    float *emb = buf((size_t)V * D, 1.0f), *out = buf((size_t)N * D, 0.0f);
    float *ref = malloc((size_t)N * D * sizeof(float));
    qw_train_embedding_forward(ref, tok, emb, N, D);
    OK(qw_cuda_train_embedding_forward(&gpu, out, tok, emb, N, D, ERR));
    assert_true(close_to("embedding forward", out, ref, (size_t)N * D, 0.0));
    float *demb = buf((size_t)V * D, 1.0f), *dout = buf((size_t)N * D, 1.0f);
    float *dref = host_copy(demb, (size_t)V * D);
    qw_train_embedding_backward(dref, dout, tok, N, D);
    OK(qw_cuda_train_embedding_backward(&gpu, demb, dout, tok, N, D, ERR));
    assert_true(close_to("embedding backward", demb, dref, (size_t)V * D, 0.0));
    free(ref);
    free(dref);
}

static void test_rmsnorm(void **state) {
    (void)state;
    int N = 33, D = 320;
    float *x = buf((size_t)N * D, 2.0f), *w = buf(D, 1.0f), *out = buf((size_t)N * D, 0.0f),
          *rstd = buf(N, 0.0f);
    float *ro = malloc((size_t)N * D * 4), *rr = malloc((size_t)N * 4);
    qw_rmsnorm_forward(ro, rr, x, w, N, D, 1e-5f, 1);
    OK(qw_cuda_rmsnorm_forward(&gpu, out, rstd, x, w, N, D, 1e-5f, ERR));
    assert_true(close_to("rmsnorm forward", out, ro, (size_t)N * D, 1e-6));
    assert_true(close_to("rmsnorm rstd", rstd, rr, (size_t)N, 1e-6));
    /* The backward from the CPU's rstd on both sides: the weight gradient is then exact. */
    memcpy(rstd, rr, (size_t)N * 4);
    float *dout = buf((size_t)N * D, 1.0f), *dx = buf((size_t)N * D, 0.5f), *dw = buf(D, 0.5f);
    float *rdx = host_copy(dx, (size_t)N * D), *rdw = host_copy(dw, D);
    qw_train_rmsnorm_backward(rdx, rdw, dout, x, w, rr, N, D, 1);
    OK(qw_cuda_train_rmsnorm_backward(&gpu, dx, dw, dout, x, w, rstd, N, D, ERR));
    assert_true(close_to("rmsnorm dx", dx, rdx, (size_t)N * D, 1e-6));
    assert_true(close_to("rmsnorm dw", dw, rdw, D, 0.0));
    free(ro);
    free(rr);
    free(rdx);
    free(rdw);
}

static void test_rope_exact(void **state) {
    (void)state;
    int B = 2, T = 40, nh = 3, E = 32;
    size_t n = (size_t)B * T * nh * E;
    float *cs = buf((size_t)T * E / 2, 1.0f), *sn = buf((size_t)T * E / 2, 1.0f);
    float *x = buf(n, 1.0f), *ref = host_copy(x, n);
    qw_rope_forward(ref, cs, sn, B, T, nh, E, 1);
    OK(qw_cuda_rope_forward(&gpu, x, cs, sn, B, T, nh, E, ERR));
    assert_true(close_to("rope forward", x, ref, n, 0.0));
    qw_train_rope_backward(ref, cs, sn, B, T, nh, E, 1);
    OK(qw_cuda_train_rope_backward(&gpu, x, cs, sn, B, T, nh, E, ERR));
    assert_true(close_to("rope backward", x, ref, n, 0.0));
    free(ref);
}

/* The training table's RHT entry on the device for d = 16 and 32 against qk_rht, bit for bit;
 * another d is refused. */
static void test_rht_exact(void **state) {
    (void)state;
    size_t rows = 37, k = 192;
    for (int d = 16; d <= 32; d += 16) {
        float *x = buf(rows * k, 4.0f), *ref = host_copy(x, rows * k);
        qs_error e = {0};
        assert_int_equal(qk_rht(ref, rows, k, d, 0x1234ABCDull + (uint64_t)d, 0, 1, &e), QS_OK);
        OK(qw_cuda_train_rht(&gpu, x, rows, k, d, 0x1234ABCDull + (uint64_t)d, ERR));
        assert_true(close_to(d == 16 ? "rht16 on the device" : "rht32 on the device", x, ref,
                             rows * k, 0.0));
        free(ref);
        qwt_managed_free(x);
    }
    float *x = buf(rows * k, 1.0f);
    qs_error e = {0};
    assert_int_equal(qw_cuda_train_rht(&gpu, x, rows, k, 64, 1, &e), QS_EINVAL);
    assert_non_null(strstr(e.msg, "d=64"));
    qwt_managed_free(x);
}

/* The blocked attention (FlashAttention-2: logsumexp saved, probabilities recomputed in the
 * backward) against the CPU's whole-T kernels: out, dq, dk, dv within 1e-5 of max |cpu| (FP32
 * sums in another order, the online softmax's rescaling, CUDA expf), and each saved logsumexp
 * within 1e-5 of the CPU's max - log(1/sum) from its tiled forward (absolute: values near 1).
 * Shapes cover one and several key tiles of 32, a T not a multiple of 32, GQA and MHA, and
 * head_dim in each of the kernels' lane widths (<= 32, 64, 128) and one not a multiple of 32. */
static void attention_case(int B, int T, int H, int G, int E) {
    printf("  attention B %d T %d H %d G %d E %d\n", B, T, H, G, E);
    size_t nq = (size_t)B * T * H * E, nk = (size_t)B * T * G * E, np = (size_t)B * H * T * T;
    size_t nl = (size_t)B * H * T;
    float *q = buf(nq, 1.0f), *k = buf(nk, 1.0f), *v = buf(nk, 1.0f), *out = buf(nq, 0.0f),
          *lse = buf(nl, 0.0f);
    float *ro = malloc(nq * 4), *rp = malloc(np * 4), *ro2 = malloc(nq * 4);
    float *rs = malloc(qw_train_attention_tiled_saved_floats(B, T, H) * 4);
    float *rsc = malloc(qw_train_attention_tiled_scratch_floats(T, E, 1) * 4);
    qw_train_attention_forward(ro, rp, q, k, v, B, T, H, G, E, 1);
    qw_train_attention_forward_tiled(ro2, rs, rsc, q, k, v, B, T, H, G, E, 1);
    OK(qw_cuda_train_attention_forward(&gpu, out, lse, NULL, q, k, v, B, T, H, G, E, ERR));
    assert_true(close_to("attention out", out, ro, nq, 1e-5));
    double mdl = 0.0;
    for (size_t r = 0; r < nl; r++) {
        double want = (double)rs[2 * r] - log((double)rs[2 * r + 1]);
        double d = fabs((double)lse[r] - want);
        if (!(d <= mdl)) mdl = d;
    }
    printf("  %-30s abs err %.3g (tol 1e-05) %s\n", "attention logsumexp", mdl,
           mdl <= 1e-5 ? "OK" : "NOT OK");
    assert_true(mdl <= 1e-5);
    float *dout = buf(nq, 1.0f), *dq = buf(nq, 0.0f), *dk = buf(nk, 9.0f), *dv = buf(nk, 9.0f);
    float *dS = buf((size_t)H * T, 0.0f); /* qw_train_attention_scratch_floats on CUDA */
    float *rdq = malloc(nq * 4), *rdk = malloc(nk * 4), *rdv = malloc(nk * 4);
    float *rdS = malloc((size_t)T * T * 4);
    qw_train_attention_backward(rdq, rdk, rdv, rdS, dout, q, k, v, rp, B, T, H, G, E, 1);
    OK(qw_cuda_train_attention_backward(&gpu, dq, dk, dv, dS, dout, q, k, v, lse, B, T, H, G, E,
                                        ERR));
    assert_true(close_to("attention dq", dq, rdq, nq, 1e-5));
    assert_true(close_to("attention dk (overwritten)", dk, rdk, nk, 1e-5));
    assert_true(close_to("attention dv (overwritten)", dv, rdv, nk, 1e-5));
    free(ro), free(ro2), free(rp), free(rs), free(rsc), free(rdq), free(rdk), free(rdv), free(rdS);
    float *m[] = {q, k, v, out, lse, dout, dq, dk, dv, dS};
    for (size_t i = 0; i < sizeof m / sizeof *m; i++)
        qwt_managed_free(m[i]);
}

static void test_attention(void **state) {
    (void)state;
    attention_case(2, 70, 6, 2, 32);
    attention_case(1, 200, 4, 4, 64);
    attention_case(1, 129, 2, 1, 128);
    attention_case(2, 33, 3, 3, 20);
    attention_case(1, 1, 2, 2, 16);
}

/* head_dim beyond the kernels' 128 is refused, naming it, before anything is queued. */
static void test_attention_rejects_wide_heads(void **state) {
    (void)state;
    float *x = buf(4 * 2 * 160, 0.0f), *lse = buf(4 * 2, 0.0f);
    qs_error e = {0};
    assert_int_equal(
        qw_cuda_train_attention_forward(&gpu, x, lse, NULL, x, x, x, 1, 4, 2, 2, 160, &e),
        QS_EINVAL);
    assert_non_null(strstr(e.msg, "head_dim 160"));
    qwt_managed_free(x);
    qwt_managed_free(lse);
}

static void test_swiglu(void **state) {
    (void)state;
    size_t n = 5000;
    float *g = buf(n, 6.0f), *u = buf(n, 2.0f), *h = buf(n, 0.0f), *dh = buf(n, 1.0f);
    float *dg = buf(n, 0.0f), *du = buf(n, 0.0f);
    float *rh = malloc(n * 4), *rdg = malloc(n * 4), *rdu = malloc(n * 4);
    qw_swiglu_forward(rh, g, u, n, 1);
    OK(qw_cuda_swiglu_forward(&gpu, h, g, u, n, ERR));
    assert_true(close_to("swiglu forward", h, rh, n, 1e-6));
    qw_train_swiglu_backward(rdg, rdu, dh, g, u, n, 1);
    OK(qw_cuda_train_swiglu_backward(&gpu, dg, du, dh, g, u, n, ERR));
    assert_true(close_to("swiglu dg", dg, rdg, n, 1e-6));
    assert_true(close_to("swiglu du", du, rdu, n, 1e-6));
    free(rh);
    free(rdg);
    free(rdu);
}

static void test_crossentropy(void **state) {
    (void)state;
    int N = 7, V = 3001;
    uint32_t *tg = qwt_managed((size_t)N * sizeof(uint32_t));
    for (int i = 0; i < N; i++)
        tg[i] = (uint32_t)(i * 431 % V);
    tg[N - 1] = (uint32_t)V - 1;
    float *l = buf((size_t)N * V, 10.0f), *loss = buf(N, 0.0f);
    float *rl = host_copy(l, (size_t)N * V), *rloss = malloc((size_t)N * 4);
    qw_train_crossentropy_forward(rl, rloss, tg, N, V, 1);
    OK(qw_cuda_train_crossentropy_forward(&gpu, l, loss, tg, N, V, ERR));
    assert_true(close_to("crossentropy probs", l, rl, (size_t)N * V, 1e-6));
    assert_true(close_to("crossentropy losses", loss, rloss, (size_t)N, 1e-6));
    memcpy(l, rl, (size_t)N * V * 4); /* the same probabilities into the backward */
    qw_train_crossentropy_backward(rl, tg, N, V, 1.0f / N, 1);
    OK(qw_cuda_train_crossentropy_backward(&gpu, l, tg, N, V, 1.0f / N, ERR));
    assert_true(close_to("crossentropy dlogits", l, rl, (size_t)N * V, 0.0));
    free(rl);
    free(rloss);
}

static void test_linear(void **state) {
    (void)state;
    int N = 64, in = 200, out = 150;
    float *x = buf((size_t)N * in, 1.0f), *W = buf((size_t)out * in, 0.1f),
          *y = buf((size_t)N * out, 0.0f);
    float *ry = malloc((size_t)N * out * 4);
    qw_train_gemm_abt(ry, x, W, N, out, in, 0.0f, 1);
    OK(qw_cuda_train_linear_forward(&gpu, y, x, W, N, in, out, ERR));
    assert_true(close_to("linear forward", y, ry, (size_t)N * out, 1e-5));
    for (int acc = 0; acc < 2; acc++) {
        float *dy = buf((size_t)N * out, 1.0f), *dx = buf((size_t)N * in, 1.0f),
              *dW = buf((size_t)out * in, 1.0f);
        float *rdx = host_copy(dx, (size_t)N * in), *rdW = host_copy(dW, (size_t)out * in);
        qw_train_linear_backward(rdx, acc, rdW, dy, x, W, N, in, out, 1);
        OK(qw_cuda_train_linear_backward(&gpu, dx, acc, dW, dy, x, W, N, in, out, ERR));
        assert_true(close_to(acc ? "linear dgrad (accumulated)" : "linear dgrad", dx, rdx,
                             (size_t)N * in, 1e-5));
        assert_true(close_to("linear wgrad (+=)", dW, rdW, (size_t)out * in, 1e-5));
        free(rdx);
        free(rdW);
    }
    free(ry);
}

/* gemm_abt_bf16 on inputs exact in BF16 (rounded with qw_round_bf16, as the bf16 recipe's; and
 * MXFP4 fake-quantized, as the mxfp4 recipe's) against the CPU's gemm_abt, beta 0 and 1, on an
 * FP32 backend (its pedantic handle: the call switches to the default math mode and back, so the
 * SGEMM after it still matches, 1e-5). The products are exact in FP32; the tensor cores sum them
 * in another order and may truncate: 1e-4 of max |cpu|. */
static void test_gemm_abt_bf16(void **state) {
    (void)state;
    int M = 96, Ncol = 160, K = 256;
    float *A = buf((size_t)M * K, 1.0f), *Bm = buf((size_t)Ncol * K, 0.1f);
    const qk_format *mx = qk_format_by_name("mxfp4");
    for (int mode = 0; mode < 2; mode++) {
        if (mode == 0) {
            for (size_t i = 0; i < (size_t)M * K; i++)
                A[i] = qw_round_bf16(A[i]);
            for (size_t i = 0; i < (size_t)Ncol * K; i++)
                Bm[i] = qw_round_bf16(Bm[i]);
        } else {
            assert_int_equal(qk_fake_quant(mx, NULL, A, (size_t)M, (size_t)K, NULL, NULL), QS_OK);
            assert_int_equal(qk_fake_quant(mx, NULL, Bm, (size_t)Ncol, (size_t)K, NULL, NULL),
                             QS_OK);
        }
        for (int acc = 0; acc < 2; acc++) {
            float *C = buf((size_t)M * Ncol, 1.0f);
            float *ref = host_copy(C, (size_t)M * Ncol);
            qw_train_gemm_abt(ref, A, Bm, M, Ncol, K, acc ? 1.0f : 0.0f, 1);
            OK(gpu.ops->gemm_abt_bf16(&gpu, C, A, Bm, M, Ncol, K, acc ? 1.0f : 0.0f, ERR));
            char what[64];
            snprintf(what, sizeof what, "gemm_abt_bf16 %s%s", mode ? "mxfp4" : "bf16",
                     acc ? " (+=)" : "");
            assert_true(close_to(what, C, ref, (size_t)M * Ncol, 1e-4));
            gpu.ops->free(&gpu, C);
            free(ref);
        }
    }
    /* the handle is pedantic again: an SGEMM of FP32 values still matches the CPU */
    float *x = buf((size_t)M * K, 1.0f), *y = buf((size_t)M * Ncol, 0.0f);
    float *ry = malloc((size_t)M * Ncol * sizeof(float));
    qw_train_gemm_abt(ry, x, Bm, M, Ncol, K, 0.0f, 1);
    OK(gpu.ops->gemm_abt(&gpu, y, x, Bm, M, Ncol, K, 0.0f, ERR));
    assert_true(close_to("gemm_abt after gemm_abt_bf16", y, ry, (size_t)M * Ncol, 1e-5));
    free(ry);
    gpu.ops->free(&gpu, x);
    gpu.ops->free(&gpu, y);
    gpu.ops->free(&gpu, A);
    gpu.ops->free(&gpu, Bm);
}

static void test_rejects_cpu_backend(void **state) {
    (void)state;
    qw_backend cpu;
    qs_error err = {0};
    assert_int_equal(qw_backend_cpu_init(&cpu, 1, 8, &err), QS_OK);
    assert_int_equal(qw_cuda_swiglu_forward(&cpu, NULL, NULL, NULL, 0, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "not a CUDA backend"));
    qw_backend_release(&cpu);
}

static int setup(void **state) {
    (void)state;
    return qwt_cuda_up(&gpu, QW_CUDA_GEMM_FP32);
}

static int teardown(void **state) {
    (void)state;
    qw_backend_cuda_release(&gpu);
    return 0;
}

int main(void) {
    if (qwt_cuda_skip("gpu_train")) return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_embedding_exact), cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_rope_exact),      cmocka_unit_test(test_attention),
        cmocka_unit_test(test_attention_rejects_wide_heads),
        cmocka_unit_test(test_swiglu),          cmocka_unit_test(test_crossentropy),
        cmocka_unit_test(test_linear),          cmocka_unit_test(test_rejects_cpu_backend),
        cmocka_unit_test(test_rht_exact),       cmocka_unit_test(test_gemm_abt_bf16),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
