/* The CUDA backend of the ops table (worker/engine/ops_cuda.h) against the CPU reference
 * (ops.h's free functions) on random inputs, one test per op, each with its tolerance stated
 * beside it. Tolerances are relative to the largest magnitude of the reference output
 * (max |gpu - cpu| <= tol * max |cpu|) unless said otherwise:
 * - exact (0): lookups and element-wise ops whose arithmetic is the same IEEE operations in the
 *   same order on both sides (embedding, RoPE, residual: nvcc --fmad=false, gcc
 *   -ffp-contract=off), and the activation fake-quant on the device (bit-exact by qk_cuda);
 * - 1e-6: RMSNorm, SwiGLU (CUDA expf is within 2 ulp of glibc's), log-softmax (double sums
 *   in another order);
 * - 1e-5: FP32 GEMMs (linear, lm_head, attention): cuBLAS sums K products in another order
 *   than OpenBLAS; for K <= 1024 of O(1) values the difference stays near 1e-6;
 * - 1e-2: the BF16 GEMM path (activations rounded to 8 bits of mantissa: 2^-9 relative each).
 * Exits 77 (ctest: skipped) with a message when no CUDA device is visible. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ops.h"
#include "gpu_test_util.h"
#include "ops_cuda.h"
#include "quant.h"
#include "weights.h"

static qw_backend gpu, gpu16;

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

/* Uniform in [-1, 1) (xorshift64*). */
static float urand(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    uint64_t r = rng_state * 2685821657736338717ull;
    return (float)((double)(r >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void fill(float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++)
        x[i] = urand() * scale;
}

/* A test buffer of n floats the host writes and reads and b's kernels take (managed memory:
 * the backend's own alloc gives device memory). */
static float *dev(qw_backend *b, size_t n) {
    (void)b;
    float *p = qwt_managed(n * sizeof(float));
    assert_non_null(p);
    return p;
}

/* max |a - ref| / max |ref|, printed with the op's name and tolerance. */
static double rel_err(const char *what, const float *a, const float *ref, size_t n, double tol) {
    double md = 0.0, mr = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (!(d <= md)) md = d; /* NaN propagates */
        if (fabs(ref[i]) > mr) mr = fabs(ref[i]);
    }
    double r = mr > 0 ? md / mr : md;
    printf("  %-28s rel err %.3g (tol %.3g) %s\n", what, r, tol, r <= tol ? "OK" : "NOT OK");
    return r;
}

static void check_ok(qw_backend *b) {
    qs_error err = {0};
    qs_status st = qw_backend_cuda_check(b, &err);
    if (st != QS_OK) fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(st, QS_OK);
}

static qw_weight f32_weight(const float *w, int64_t rows, int64_t cols) {
    qw_weight x;
    memset(&x, 0, sizeof x);
    x.form = QW_WEIGHT_F32;
    x.rows = rows;
    x.cols = cols;
    x.f32 = w;
    return x;
}

static void test_embedding_f32_and_packed_exact(void **state) {
    (void)state;
    int V = 1000, D = 96, T = 77;
    float *table = malloc((size_t)V * D * sizeof(float));
    fill(table, (size_t)V * D, 1.0f);
    uint32_t tok[77];
    for (int t = 0; t < T; t++)
        tok[t] = (uint32_t)((urand() + 1.0f) * 0.5f * (V - 1));
    tok[0] = 0;
    tok[1] = (uint32_t)V - 1;
    qw_weight w = f32_weight(table, V, D);
    float *ref = malloc((size_t)T * D * sizeof(float));
    qw_embedding_forward(ref, tok, T, &w, 1);
    float *out = dev(&gpu, (size_t)T * D);
    qw_tensor x = {out, T, D};
    gpu.ops->embedding(&gpu, &x, tok, &w);
    check_ok(&gpu);
    assert_true(rel_err("embedding f32", out, ref, (size_t)T * D, 0.0) == 0.0);
    /* The packed form (NVFP4): the device copy holds qw_weight_rows_f32's values. */
    qs_error err = {0};
    qk_packed p;
    const qk_format *f = qk_format_by_name("nvfp4");
    assert_int_equal(qk_packed_init(&p, f, NULL, (size_t)V, (size_t)D, &err), QS_OK);
    assert_int_equal(qk_quantize(f, NULL, table, (size_t)V, (size_t)D, &p, &err), QS_OK);
    qw_weight wp = qw_weight_from_packed(&p);
    qw_embedding_forward(ref, tok, T, &wp, 1);
    gpu.ops->embedding(&gpu, &x, tok, &wp);
    check_ok(&gpu);
    assert_true(rel_err("embedding nvfp4", out, ref, (size_t)T * D, 0.0) == 0.0);
    qk_packed_release(&p);
    qwt_managed_free(out);
    free(ref);
    free(table);
}

static void test_rmsnorm(void **state) {
    (void)state;
    int T = 37, D = 576;
    float *x = dev(&gpu, (size_t)T * D), *out = dev(&gpu, (size_t)T * D);
    float *w = malloc(D * sizeof(float)), *ref = malloc((size_t)T * D * sizeof(float));
    fill(x, (size_t)T * D, 3.0f);
    fill(w, (size_t)D, 1.0f);
    qw_rmsnorm_forward(ref, NULL, x, w, T, D, 1e-5f, 1);
    qs_error err = {0};
    /* w is host memory: uploaded once */
    assert_int_equal(gpu.ops->rmsnorm(&gpu, out, NULL, x, w, T, D, 1e-5f, &err), QS_OK);
    check_ok(&gpu);
    assert_true(rel_err("rmsnorm", out, ref, (size_t)T * D, 1e-6) <= 1e-6);
    /* In place (out == x), as the final norm of the forward is not, but the op allows. */
    assert_int_equal(gpu.ops->rmsnorm(&gpu, x, NULL, x, w, T, D, 1e-5f, &err), QS_OK);
    check_ok(&gpu);
    assert_true(rel_err("rmsnorm in place", x, ref, (size_t)T * D, 1e-6) <= 1e-6);
    qwt_managed_free(x);
    qwt_managed_free(out);
    free(w);
    free(ref);
}

static void test_rope_exact(void **state) {
    (void)state;
    int T = 70, H = 5, E = 64;
    qw_config c;
    memset(&c, 0, sizeof c);
    c.head_dim = E;
    c.rope_theta = 10000.0f;
    float *cosb = dev(&gpu, (size_t)T * E / 2), *sinb = dev(&gpu, (size_t)T * E / 2);
    qw_rope_tables(&c, T, cosb, sinb); /* managed memory, filled by the host */
    float *x = dev(&gpu, (size_t)T * H * E), *ref = malloc((size_t)T * H * E * sizeof(float));
    fill(x, (size_t)T * H * E, 2.0f);
    memcpy(ref, x, (size_t)T * H * E * sizeof(float));
    qw_rope_forward(ref, cosb, sinb, 1, T, H, E, 1);
    qs_error err = {0};
    assert_int_equal(gpu.ops->rope(&gpu, x, cosb, sinb, 1, T, H, E, &err), QS_OK);
    check_ok(&gpu);
    assert_true(rel_err("rope", x, ref, (size_t)T * H * E, 0.0) == 0.0);
    qwt_managed_free(x);
    qwt_managed_free(cosb);
    qwt_managed_free(sinb);
    free(ref);
}

static void attention_case(int T, int H, int G, int E) {
    size_t nq = (size_t)T * H * E, nk = (size_t)T * G * E;
    float *q = dev(&gpu, nq), *k = dev(&gpu, nk), *v = dev(&gpu, nk), *att = dev(&gpu, nq);
    fill(q, nq, 1.0f);
    fill(k, nk, 1.0f);
    fill(v, nk, 1.0f);
    float *ref = malloc(nq * sizeof(float));
    float *scores = malloc((size_t)QW_ATT_TILE * T * sizeof(float));
    qw_attention_forward(ref, q, k, v, scores, T, H, G, E, 1);
    qw_tensor tq = {q, T, H * E}, tk = {k, T, G * E}, tv = {v, T, G * E}, ta = {att, T, H * E};
    gpu.ops->attention(&gpu, &ta, &tq, &tk, &tv, NULL, H, G, E);
    check_ok(&gpu);
    char name[64];
    snprintf(name, sizeof name, "attention T%d H%d G%d E%d", T, H, G, E);
    assert_true(rel_err(name, att, ref, nq, 1e-5) <= 1e-5);
    qwt_managed_free(q);
    qwt_managed_free(k);
    qwt_managed_free(v);
    qwt_managed_free(att);
    free(ref);
    free(scores);
}

/* GQA groups of 3 and 1 (MHA), a length crossing the CPU's 64-row tiles, T = 1. */
static void test_attention_gqa_causal(void **state) {
    (void)state;
    attention_case(130, 6, 2, 32);
    attention_case(64, 4, 4, 64);
    attention_case(1, 9, 3, 64);
}

static void test_swiglu_residual(void **state) {
    (void)state;
    size_t n = 12345;
    float *g = dev(&gpu, n), *u = dev(&gpu, n), *out = dev(&gpu, n);
    float *ref = malloc(n * sizeof(float));
    fill(g, n, 8.0f);
    fill(u, n, 2.0f);
    qw_swiglu_forward(ref, g, u, n, 1);
    qs_error err = {0};
    assert_int_equal(gpu.ops->swiglu(&gpu, out, g, u, n, &err), QS_OK);
    check_ok(&gpu);
    assert_true(rel_err("swiglu", out, ref, n, 1e-6) <= 1e-6);
    memcpy(ref, g, n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        ref[i] += u[i];
    assert_int_equal(gpu.ops->add(&gpu, g, g, u, n, &err), QS_OK);
    check_ok(&gpu);
    assert_true(rel_err("residual", g, ref, n, 0.0) == 0.0);
    qwt_managed_free(g);
    qwt_managed_free(u);
    qwt_managed_free(out);
    free(ref);
}

/* One linear on both backends with weight w and activation format act (or NULL). */
static double linear_case(qw_backend *b, const char *what, const qw_weight *w,
                          const qw_act_quant *act, int T, double tol) {
    int in = (int)w->cols, out = (int)w->rows;
    float *x = dev(b, (size_t)T * in), *xq = dev(b, (size_t)T * in), *y = dev(b, (size_t)T * out);
    fill(x, (size_t)T * in, 1.0f);
    float *ref = malloc((size_t)T * out * sizeof(float)), *xqc = malloc((size_t)T * in * 4);
    float *ws = malloc((size_t)QW_GEMM_COLS * in * sizeof(float));
    qs_error err = {0};
    assert_int_equal(qw_linear_forward(ref, x, T, w, act, xqc, ws, 1, &err), QS_OK);
    qw_tensor tx = {x, T, in}, ty = {y, T, out};
    qs_status st = b->ops->linear(b, &ty, &tx, w, act, xq, &err);
    if (st != QS_OK) fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(st, QS_OK);
    double r = rel_err(what, y, ref, (size_t)T * out, tol);
    if (act && act->fmt)
        assert_true(rel_err("  its fake-quant input", xq, xqc, (size_t)T * in, 0.0) == 0.0);
    qwt_managed_free(x);
    qwt_managed_free(xq);
    qwt_managed_free(y);
    free(ref);
    free(xqc);
    free(ws);
    return r;
}

static void test_linear_forms_and_act_formats(void **state) {
    (void)state;
    int out = 300, in = 200, T = 50;
    float *W = malloc((size_t)out * in * sizeof(float));
    fill(W, (size_t)out * in, 0.1f);
    qw_weight wf = f32_weight(W, out, in);
    assert_true(linear_case(&gpu, "linear f32", &wf, NULL, T, 1e-5) <= 1e-5);
    /* A BF16 master (stored form): exact weights on both GEMM paths. */
    uint16_t *W16 = malloc((size_t)out * in * 2);
    for (size_t i = 0; i < (size_t)out * in; i++) {
        uint32_t u;
        memcpy(&u, &W[i], 4);
        W16[i] = (uint16_t)(u >> 16);
    }
    qw_stored_tensor v = {QW_DT_BF16, (const uint8_t *)W16, out, in, (size_t)in * 2, 0};
    qw_weight wb = qw_weight_from_view(&v);
    assert_true(linear_case(&gpu, "linear bf16 master", &wb, NULL, T, 1e-5) <= 1e-5);
    assert_true(linear_case(&gpu16, "linear bf16 gemm", &wb, NULL, T, 1e-2) <= 1e-2);
    /* Packed NVFP4 weights with NVFP4 activations, then INT8 per-channel activations: both
     * fake-quantized on the device (qk_cuda_fake_quant, bit-exact), or by the CPU quantizer on
     * a host copy where the device has none. */
    qs_error err = {0};
    qk_packed p;
    const qk_format *f = qk_format_by_name("nvfp4");
    assert_int_equal(qk_packed_init(&p, f, NULL, (size_t)out, (size_t)in, &err), QS_OK);
    assert_int_equal(qk_quantize(f, NULL, W, (size_t)out, (size_t)in, &p, &err), QS_OK);
    qw_weight wp = qw_weight_from_packed(&p);
    qw_act_quant a4 = {f, {0}, NULL};
    assert_true(linear_case(&gpu, "linear nvfp4 W4A4", &wp, &a4, T, 1e-5) <= 1e-5);
    qw_act_quant a8 = {qk_format_by_name("int8_channel"), {0}, NULL};
    assert_non_null(a8.fmt);
    assert_true(linear_case(&gpu, "linear nvfp4 W4 int8 act", &wp, &a8, T, 1e-5) <= 1e-5);
    /* lm_head is the same op over a vocabulary-wide weight. */
    int V = 4099;
    float *Wv = malloc((size_t)V * 64 * sizeof(float));
    fill(Wv, (size_t)V * 64, 0.5f);
    qw_weight wv = f32_weight(Wv, V, 64);
    int Tl = 9;
    float *x = dev(&gpu, (size_t)Tl * 64), *y = dev(&gpu, (size_t)Tl * V);
    fill(x, (size_t)Tl * 64, 1.0f);
    float *ref = malloc((size_t)Tl * V * sizeof(float));
    qw_matmul_forward(ref, x, Wv, Tl, 64, V, 1);
    qw_tensor tx = {x, Tl, 64}, ty = {y, Tl, V};
    assert_int_equal(gpu.ops->lm_head(&gpu, &ty, &tx, &wv, NULL, NULL, &err), QS_OK);
    assert_true(rel_err("lm_head", y, ref, (size_t)Tl * V, 1e-5) <= 1e-5);
    qwt_managed_free(x);
    qwt_managed_free(y);
    free(ref);
    free(Wv);
    qk_packed_release(&p);
    free(W16);
    free(W);
}

/* Device weights are made once and kept; a packed slot whose contents change (a new policy:
 * another seed of stochastic rounding) is uploaded again, and the result follows it. */
static void test_weight_cache_keeps_and_refreshes(void **state) {
    (void)state;
    qw_backend b;
    qs_error err = {0};
    assert_int_equal(qw_backend_cuda_init(&b, 0, QW_CUDA_GEMM_FP32, &err), QS_OK);
    int out = 256, in = 128, T = 16;
    float *W = malloc((size_t)out * in * sizeof(float));
    fill(W, (size_t)out * in, 0.2f);
    qw_weight wf = f32_weight(W, out, in);
    qw_cuda_cache_stats s0, s1, s2, s3;
    linear_case(&b, "cache: first use", &wf, NULL, T, 1e-5);
    qw_backend_cuda_cache_stats(&b, &s0);
    linear_case(&b, "cache: second use", &wf, NULL, T, 1e-5);
    qw_backend_cuda_cache_stats(&b, &s1);
    assert_int_equal(s1.uploads, s0.uploads);
    assert_int_equal(s1.hits, s0.hits + 1);
    assert_int_equal(s0.bytes, (size_t)out * in * sizeof(float));
    const qk_format *f = qk_format_by_name("nvfp4");
    qk_quant_options o = {0};
    o.rounding = QK_ROUND_SR;
    o.seed = 1;
    qk_packed p;
    assert_int_equal(qk_packed_init(&p, f, &o, (size_t)out, (size_t)in, &err), QS_OK);
    assert_int_equal(qk_quantize(f, &o, W, (size_t)out, (size_t)in, &p, &err), QS_OK);
    qw_weight wp = qw_weight_from_packed(&p);
    assert_true(linear_case(&b, "cache: packed seed 1", &wp, NULL, T, 1e-5) <= 1e-5);
    qw_backend_cuda_cache_stats(&b, &s2);
    o.seed = 2;
    assert_int_equal(qk_quantize(f, &o, W, (size_t)out, (size_t)in, &p, &err), QS_OK);
    assert_true(linear_case(&b, "cache: packed seed 2", &wp, NULL, T, 1e-5) <= 1e-5);
    qw_backend_cuda_cache_stats(&b, &s3);
    assert_int_equal(s3.uploads, s2.uploads + 1);
    assert_int_equal(s3.bytes, s2.bytes); /* replaced in place, not added */
    qw_backend_cuda_forget_weights(&b);
    qw_backend_cuda_cache_stats(&b, &s3);
    assert_int_equal(s3.bytes, 0);
    qk_packed_release(&p);
    free(W);
    qw_backend_cuda_release(&b);
}

/* The cuBLASLt path (QW_CUDA_GEMM_LT, kernels/cuda/qk_gemm.h): W4A4 NVFP4 through the
 * block-scaled layout (native where the device's probe matched, exact BF16 emulation
 * elsewhere) equals the CPU's
 * fake-quantized FP32 GEMM up to summation order (1e-5: the FP4 products are exact on both
 * sides); W4A16 and weights exact in BF16 round the activations to BF16 (1e-2); F32 weights
 * take the FP32 GEMM on activations rounded to BF16 as the path's other linears round them
 * (1e-2). In a tree without
 * qk_gemm.h the path is refused at init, saying so. */
static void test_linear_cublaslt_fp4_paths(void **state) {
    (void)state;
    qw_backend lt;
    qs_error err = {0};
    qs_status st = qw_backend_cuda_init(&lt, 0, QW_CUDA_GEMM_LT, &err);
    if (st == QS_EUNSUPPORTED) {
        printf("  gemm lt: %s\n", err.msg);
        assert_non_null(strstr(err.msg, "qk_gemm.h"));
        return;
    }
    assert_int_equal(st, QS_OK);
    int out = 256, in = 512, T = 40;
    float *W = malloc((size_t)out * in * sizeof(float));
    fill(W, (size_t)out * in, 0.1f);
    uint16_t *W16 = malloc((size_t)out * in * 2);
    for (size_t i = 0; i < (size_t)out * in; i++) {
        uint32_t u;
        memcpy(&u, &W[i], 4);
        W16[i] = (uint16_t)(u >> 16);
    }
    qw_stored_tensor v = {QW_DT_BF16, (const uint8_t *)W16, out, in, (size_t)in * 2, 0};
    qw_weight wb = qw_weight_from_view(&v);
    assert_true(linear_case(&lt, "lt bf16 x bf16", &wb, NULL, T, 1e-2) <= 1e-2);
    assert_string_equal(qw_backend_gemm_path(&lt), "bf16");
    /* FP16 masters (Llama 2): one FP16 device copy (2 bytes an element, no FP32 one), an FP16
       tensor-core GEMM with FP32 accumulation over FP16-rounded activations (master_gemm.h) */
    uint16_t *Wh = malloc((size_t)out * in * 2);
    for (size_t i = 0; i < (size_t)out * in; i++) {
        _Float16 h = (_Float16)W[i];
        memcpy(&Wh[i], &h, 2);
    }
    qw_stored_tensor vh = {QW_DT_F16, (const uint8_t *)Wh, out, in, (size_t)in * 2, 0};
    qw_weight wh = qw_weight_from_view(&vh);
    qw_cuda_cache_stats c0, c1;
    qw_backend_cuda_cache_stats(&lt, &c0);
    assert_true(linear_case(&lt, "lt f16 x f16", &wh, NULL, T, 1e-2) <= 1e-2);
    qw_backend_cuda_cache_stats(&lt, &c1);
    assert_int_equal(c1.bytes - c0.bytes, (size_t)out * in * 2);
    assert_string_equal(qw_backend_gemm_path(&lt), "fp16");
    /* F32 values BF16 would change: the FP32 GEMM (no TF32) on the one FP32 copy, activations
       rounded to BF16 as every BF16 linear of the path rounds them */
    qw_stored_tensor v32 = {QW_DT_F32, (const uint8_t *)W, out, in, (size_t)in * 4, 0};
    qw_weight w32 = qw_weight_from_view(&v32);
    assert_true(linear_case(&lt, "lt f32 weights", &w32, NULL, T, 1e-2) <= 1e-2);
    assert_string_equal(qw_backend_gemm_path(&lt), "fp32");
    const qk_format *f = qk_format_by_name("nvfp4");
    qk_packed p;
    assert_int_equal(qk_packed_init(&p, f, NULL, (size_t)out, (size_t)in, &err), QS_OK);
    assert_int_equal(qk_quantize(f, NULL, W, (size_t)out, (size_t)in, &p, &err), QS_OK);
    qw_weight wp = qw_weight_from_packed(&p);
    assert_true(linear_case(&lt, "lt nvfp4 W4A16", &wp, NULL, T, 1e-2) <= 1e-2);
    assert_string_equal(qw_backend_gemm_path(&lt), "emulated_bf16");
    qw_act_quant a4 = {f, {0}, NULL};
    /* The device quantizer writes the layout directly (xq unused on this path); the CPU
     * reference fake-quantizes into its own copy. */
    float *x = dev(&lt, (size_t)T * in), *y = dev(&lt, (size_t)T * out),
          *xq = dev(&lt, (size_t)T * in);
    fill(x, (size_t)T * in, 1.0f);
    float *ref = malloc((size_t)T * out * 4), *xqc = malloc((size_t)T * in * 4);
    float *ws = malloc((size_t)QW_GEMM_COLS * in * 4);
    assert_int_equal(qw_linear_forward(ref, x, T, &wp, &a4, xqc, ws, 1, &err), QS_OK);
    qw_tensor tx = {x, T, in}, ty = {y, T, out};
    st = lt.ops->linear(&lt, &ty, &tx, &wp, &a4, xq, &err);
    if (st != QS_OK) fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(st, QS_OK);
    assert_true(rel_err("lt nvfp4 W4A4", y, ref, (size_t)T * out, 1e-5) <= 1e-5);
    const char *path = qw_backend_gemm_path(&lt);
    printf("  lt W4A4 path: %s\n", path);
    assert_true(strcmp(path, "native_fp4") == 0 || strcmp(path, "emulated_bf16") == 0);
    qwt_managed_free(x);
    qwt_managed_free(y);
    qwt_managed_free(xq);
    free(ref);
    free(xqc);
    free(ws);
    qk_packed_release(&p);
    free(W16);
    free(Wh);
    free(W);
    qw_backend_cuda_release(&lt);
}

/* The tensor-parallel entries (ops.h): amax ignores NaN/Inf as qw_amax_forward does (exact),
 * download gathers rows into a wider host row (exact); an activation fake-quantized with a
 * given group amax equals the CPU's (bit-exact). The ranks' all-reduce is the group's
 * (worker/comm/comm.h), tested over NCCL by engine_comm_nccl. */
static void test_tensor_parallel_entries(void **state) {
    (void)state;
    size_t n = 3000;
    float *x = dev(&gpu, n), *out = dev(&gpu, 1);
    fill(x, n, 5.0f);
    x[17] = NAN;
    x[18] = INFINITY;
    x[19] = -INFINITY;
    qw_tensor tx = {x, 1, (int64_t)n};
    gpu.ops->amax(&gpu, &tx, out);
    check_ok(&gpu);
    assert_true(out[0] == qw_amax_forward(x, n));
    float *a = dev(&gpu, n);
    fill(a, n, 1.0f);
    float host[4 * 10];
    memset(host, 0, sizeof host);
    qw_tensor src = {a, 4, 6};
    gpu.ops->download(&gpu, host + 2, 10, &src);
    check_ok(&gpu);
    for (int r = 0; r < 4; r++)
        for (int cc = 0; cc < 6; cc++)
            assert_true(host[r * 10 + 2 + cc] == a[r * 6 + cc]);
    assert_true(host[0] == 0.0f && host[8] == 0.0f);
    /* A given group amax drives the activation's NVFP4 tensor scale on both sides. */
    int out_f = 64, in = 128, T = 8;
    float *W = malloc((size_t)out_f * in * 4);
    fill(W, (size_t)out_f * in, 0.1f);
    qw_weight wf = f32_weight(W, out_f, in);
    float *gam = dev(&gpu, 1);
    gam[0] = 37.5f;
    qw_act_quant a4 = {qk_format_by_name("nvfp4"), {0}, gam};
    assert_true(linear_case(&gpu, "linear nvfp4 act, given amax", &wf, &a4, T, 1e-5) <= 1e-5);
    free(W);
    qwt_managed_free(gam);
    qwt_managed_free(a);
    qwt_managed_free(x);
    qwt_managed_free(out);
}

static void test_logsoftmax_sqnr_scores(void **state) {
    (void)state;
    int R = 5, V = 49152;
    size_t n = (size_t)R * V;
    float *l = dev(&gpu, n), *lp = dev(&gpu, n), *ref_lp = dev(&gpu, n);
    fill(l, n, 12.0f);
    fill(ref_lp, n, 12.0f);
    float *ref = malloc(n * sizeof(float));
    qw_logsoftmax_forward(ref, l, R, V, 1);
    qw_tensor tl = {l, R, V}, tlp = {lp, R, V};
    gpu.ops->logsoftmax(&gpu, &tlp, &tl);
    check_ok(&gpu);
    /* Absolute: log-probs are O(10). */
    double md = 0.0;
    for (size_t i = 0; i < n; i++)
        md = fmax(md, fabs((double)lp[i] - ref[i]));
    printf("  %-28s abs err %.3g (tol 1e-5)\n", "logsoftmax", md);
    assert_true(md <= 1e-5);
    /* SQNR sums: double, relative 1e-12. */
    double sg, ng, sc, nc;
    qw_tensor ty = {lp, R, V}, tr = {ref, R, V};
    float *dref = dev(&gpu, n);
    memcpy(dref, ref, n * sizeof(float));
    tr.data = dref;
    gpu.ops->sqnr_sums(&gpu, &ty, &tr, &sg, &ng);
    check_ok(&gpu);
    qw_sqnr_sums_forward(lp, dref, n, &sc, &nc);
    printf("  sqnr sums gpu %.17g %.17g cpu %.17g %.17g\n", sg, ng, sc, nc);
    assert_true(fabs(sg - sc) <= 1e-12 * sc);
    assert_true(fabs(ng - nc) <= 1e-12 * nc + 1e-300);
    /* Score rows: NLL, KL and both argmaxes against eval.h's definitions computed here. The
     * baseline rows are made log-probabilities first. */
    qw_logsoftmax_forward(ref_lp, ref_lp, R, V, 1);
    uint32_t tgt[5] = {0, 1, 49151, 777, 12345};
    double nll[5], kl[5];
    int32_t am[5], ram[5];
    qs_error err = {0};
    assert_int_equal(qw_cuda_score_rows(&gpu, &tl, tgt, ref_lp, nll, kl, am, ram, &err), QS_OK);
    for (int r = 0; r < R; r++) {
        const float *row = l + (size_t)r * V, *p = ref_lp + (size_t)r * V;
        double lse = qw_logsoftmax_row(row, V, NULL), k = 0.0;
        int a = 0, pa = 0;
        for (int i = 0; i < V; i++) {
            float q = (float)((double)row[i] - lse);
            k += exp((double)p[i]) * ((double)p[i] - (double)q);
            if (row[i] > row[a]) a = i;
            if (p[i] > p[pa]) pa = i;
        }
        double want_nll = lse - row[tgt[r]];
        printf("  row %d nll %.12g/%.12g kl %.12g/%.12g top1 %d/%d ref %d/%d\n", r, nll[r],
               want_nll, kl[r], k, am[r], a, ram[r], pa);
        assert_true(fabs(nll[r] - want_nll) <= 1e-9 * fmax(1.0, fabs(want_nll)));
        assert_true(fabs(kl[r] - k) <= 1e-9 * fmax(1.0, k));
        assert_int_equal(am[r], a);
        assert_int_equal(ram[r], pa);
    }
    /* The table's entry, which the evaluation calls, against the CPU table's (the host
     * scoring's bits): the same argmaxes, NLL and KL within 1e-9. */
    double cn[5], ck[5];
    int32_t ca[5], cra[5];
    qw_backend cpu = {.ops = qw_ops_cpu(), .threads = 1};
    assert_int_equal(gpu.ops->score_rows(&gpu, &tl, tgt, ref_lp, nll, kl, am, ram, &err), QS_OK);
    assert_int_equal(cpu.ops->score_rows(&cpu, &tl, tgt, ref_lp, cn, ck, ca, cra, &err), QS_OK);
    for (int r = 0; r < R; r++) {
        assert_true(fabs(nll[r] - cn[r]) <= 1e-9 * fmax(1.0, fabs(cn[r])));
        assert_true(fabs(kl[r] - ck[r]) <= 1e-9 * fmax(1.0, ck[r]));
        assert_int_equal(am[r], ca[r]);
        assert_int_equal(ram[r], cra[r]);
    }
    tgt[3] = (uint32_t)V;
    assert_int_equal(qw_cuda_score_rows(&gpu, &tl, tgt, NULL, nll, NULL, NULL, NULL, &err),
                     QS_EINVAL);
    assert_non_null(strstr(err.msg, "row 3"));
    qwt_managed_free(l);
    qwt_managed_free(lp);
    qwt_managed_free(ref_lp);
    qwt_managed_free(dref);
    free(ref);
}

static void test_init_rejects_bad_device(void **state) {
    (void)state;
    qw_backend b;
    qs_error err = {0};
    assert_int_equal(qw_backend_cuda_init(&b, 4096, QW_CUDA_GEMM_FP32, &err), QS_EINVAL);
    assert_non_null(strstr(err.msg, "device 4096"));
    assert_null(b.ops);
    assert_int_equal(qw_backend_cuda_init(&b, 0, (qw_cuda_gemm)7, &err), QS_EINVAL);
    assert_string_equal(qw_backend_gemm_path(&gpu), "fp32");
    assert_string_equal(qw_backend_gemm_path(&gpu16), "bf16");
}

static int setup(void **state) {
    (void)state;
    return qwt_cuda_up(&gpu, QW_CUDA_GEMM_FP32) || qwt_cuda_up(&gpu16, QW_CUDA_GEMM_BF16) ? -1 : 0;
}

static int teardown(void **state) {
    (void)state;
    qw_backend_cuda_release(&gpu);
    qw_backend_cuda_release(&gpu16);
    return 0;
}

int main(void) {
    if (qwt_cuda_skip("gpu_ops")) return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_embedding_f32_and_packed_exact),
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_rope_exact),
        cmocka_unit_test(test_attention_gqa_causal),
        cmocka_unit_test(test_swiglu_residual),
        cmocka_unit_test(test_linear_forms_and_act_formats),
        cmocka_unit_test(test_weight_cache_keeps_and_refreshes),
        cmocka_unit_test(test_linear_cublaslt_fp4_paths),
        cmocka_unit_test(test_tensor_parallel_entries),
        cmocka_unit_test(test_logsoftmax_sqnr_scores),
        cmocka_unit_test(test_init_rejects_bad_device),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
