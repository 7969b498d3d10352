/* kernels_cuda_gemm (label gpu): the packed GPU quantizer and the cuBLASLt GEMMs against the
 * CPU reference.
 * - qk_cuda_quantize_lt: codes and swizzled scales byte for byte equal to qk_quantize +
 *   qk_lt_pack (nvfp4, nvfp4_2d, mxfp4; RNE, RZ, SR; MX rules; NaN/Inf/-0/subnormal inputs;
 *   shapes not multiples of 128 / 4), tensor scale equal to the CPU's;
 * - qk_gemm_dequant_bf16: bit for bit qk_lt_element_bf16;
 * - qk_gemm_linear: FP4 (native on cc 10.x, emulated elsewhere, both on Blackwell) against
 *   qk_lt_linear_ref, BF16 and FP8 against a double GEMM of the same values, W4A16, BF16
 *   output, beta; tolerance relative to sum |x_i w_i|: 1e-4 for BF16 and FP4 (FP32 accumulation
 *   in an unspecified order, docs/numerics.md 4.2, and tensor cores' truncating inner adds, Fasi et
 *   al. 2021), 2e-3 for FP8 (Hopper's FP8 MMA keeps fewer accumulator bits); a wrong layout or
 *   scale gives errors of order 1; plan reuse; errors for bad pairings and shapes.
 * Prints OK / NOT OK per case; exits 77 (ctest: skipped) without a GPU. Plain C, no cmocka. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cublaslt_layout.h"
#include "cuda_test_util.h"
#include "philox.h"
#include "qk_cuda.h"
#include "qk_gemm.h"
#include "quant.h"

#define TOL_GEMM 1e-4
#define TOL_FP8 2e-3

static int failures;

static void report(int ok, const char *what) {
    printf("%s %s\n", ok ? "OK" : "NOT OK", what);
    if (!ok) failures++;
}

/* Random inputs of the GEMM tests: uniform in [-1, 1), one in 97 times 30, specials on request. */
static float *make_matrix(size_t rows, size_t k, uint64_t seed, int specials) {
    return qkt_random_matrix(rows, k, seed, 1.0f, 30.0f, specials ? QKT_SPECIALS : 0);
}

static void *dev_copy(const void *h, size_t bytes) {
    void *d = NULL;
    if (cudaMalloc(&d, bytes ? bytes : 1) != cudaSuccess) abort();
    if (bytes && cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) != cudaSuccess) abort();
    return d;
}

static void *dev_alloc(size_t bytes) {
    void *d = NULL;
    if (cudaMalloc(&d, bytes) != cudaSuccess) abort();
    if (cudaMemset(d, 0, bytes) != cudaSuccess) abort();
    return d;
}

static void host_copy(void *h, const void *d, size_t bytes) {
    if (cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) abort();
}

static uint16_t bf16_of(float f) { /* RNE, finite inputs */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float float_of_bf16(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* A device FP4 operand quantized on the GPU, with the CPU's buffers beside it. */
typedef struct fp4_pair {
    qk_lt_layout l;
    uint8_t *d_codes, *d_scales;
    uint8_t *h_codes, *h_scales; /* CPU reference: qk_quantize + qk_lt_pack */
    float gpu_scale, cpu_scale;
    int bytes_equal;
} fp4_pair;

static int fp4_make(fp4_pair *o, const char *fmt_name, const qk_quant_options *opt, const float *x,
                    size_t rows, size_t k) {
    const qk_format *fmt = qk_format_by_name(fmt_name);
    qs_error err = {0};
    memset(o, 0, sizeof *o);
    if (qk_lt_layout_init(fmt, rows, k, &o->l, &err)) return 0;
    qk_packed p;
    if (qk_packed_init(&p, fmt, opt, rows, k, &err) || qk_quantize(fmt, opt, x, rows, k, &p, &err))
        return 0;
    o->h_codes = malloc(o->l.codes_bytes);
    o->h_scales = malloc(o->l.scale_bytes);
    if (qk_lt_pack(&p, &o->l, o->h_codes, o->l.codes_bytes, o->h_scales, o->l.scale_bytes, &err))
        return 0;
    o->cpu_scale = p.tensor_scale;
    qk_packed_release(&p);
    float *d_x = dev_copy(x, rows * k * sizeof *x);
    o->d_codes = dev_alloc(o->l.codes_bytes);
    o->d_scales = dev_alloc(o->l.scale_bytes);
    cudaMemset(o->d_codes, 0xAB, o->l.codes_bytes); /* garbage: padding must be written */
    cudaMemset(o->d_scales, 0xAB, o->l.scale_bytes);
    qs_status st = qk_cuda_quantize_lt(fmt, opt, d_x, rows, k, &o->l, o->d_codes, o->d_scales,
                                       &o->gpu_scale, NULL, NULL, &err);
    cudaFree(d_x);
    if (st) {
        printf("# %s\n", err.msg);
        return 0;
    }
    uint8_t *gc = malloc(o->l.codes_bytes), *gs = malloc(o->l.scale_bytes);
    host_copy(gc, o->d_codes, o->l.codes_bytes);
    host_copy(gs, o->d_scales, o->l.scale_bytes);
    o->bytes_equal = memcmp(gc, o->h_codes, o->l.codes_bytes) == 0 &&
                     memcmp(gs, o->h_scales, o->l.scale_bytes) == 0 &&
                     memcmp(&o->gpu_scale, &o->cpu_scale, sizeof o->cpu_scale) == 0;
    free(gc);
    free(gs);
    return 1;
}

static void fp4_free(fp4_pair *o) {
    cudaFree(o->d_codes);
    cudaFree(o->d_scales);
    free(o->h_codes);
    free(o->h_scales);
}

static qk_gemm_operand fp4_operand(const fp4_pair *o, qk_gemm_type t) {
    qk_gemm_operand op = {0};
    op.type = t;
    op.data = o->d_codes;
    op.scales = o->d_scales;
    op.layout = o->l;
    op.tensor_scale = o->gpu_scale;
    return op;
}

static void test_quantize_lt(void) {
    static const struct {
        size_t rows, k;
    } shapes[] = {{1, 16}, {33, 48}, {130, 100}, {257, 200}, {64, 1001}, {256, 4096}};
    static const char *const fmts[] = {"nvfp4", "nvfp4_2d", "mxfp4"};
    static const qk_rounding rnd[] = {QK_ROUND_RNE, QK_ROUND_RZ, QK_ROUND_SR};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t f = 0; f < 3; f++)
            for (size_t r = 0; r < 3; r++)
                for (int rule = 0; rule <= (f == 2 ? QK_MX_EVEN : 0); rule++) {
                    float *x = make_matrix(shapes[s].rows, shapes[s].k, 11 + s, 1);
                    qk_quant_options o = {0};
                    o.rounding = rnd[r];
                    o.mx_rule = (qk_mx_scale_rule)rule;
                    o.seed = 0x1234567890ull;
                    o.tensor_id = 7;
                    o.step = 3;
                    fp4_pair p;
                    char what[160];
                    snprintf(what, sizeof what, "quantize_lt %s rounding %d rule %d [%zu x %zu]",
                             fmts[f], (int)rnd[r], rule, shapes[s].rows, shapes[s].k);
                    int ok = fp4_make(&p, fmts[f], &o, x, shapes[s].rows, shapes[s].k);
                    report(ok && p.bytes_equal, what);
                    if (ok && f < 2 && r == 0) { /* the emulated path's dequantizer */
                        qk_gemm_operand op =
                            fp4_operand(&p, f == 2 ? QK_GEMM_MXFP4 : QK_GEMM_NVFP4);
                        size_t ldy = shapes[s].k + 2;
                        uint16_t *dy = dev_alloc(shapes[s].rows * ldy * 2);
                        uint16_t *hy = malloc(shapes[s].rows * ldy * 2);
                        qs_error err = {0};
                        int dok = qk_gemm_dequant_bf16(&op, dy, ldy, NULL, &err) == QS_OK &&
                                  cudaDeviceSynchronize() == cudaSuccess;
                        host_copy(hy, dy, shapes[s].rows * ldy * 2);
                        for (size_t i = 0; dok && i < shapes[s].rows; i++)
                            for (size_t c = 0; c < shapes[s].k; c++)
                                dok &= hy[i * ldy + c] ==
                                       qk_lt_element_bf16(&p.l, p.h_codes, p.h_scales, i, c);
                        snprintf(what, sizeof what, "dequant_bf16 %s [%zu x %zu]", fmts[f],
                                 shapes[s].rows, shapes[s].k);
                        report(dok, what);
                        cudaFree(dy);
                        free(hy);
                    }
                    if (ok) fp4_free(&p);
                    free(x);
                }
}

/* max over outputs of |y - ref| / sum |terms| (the relative error a GEMM test can bound). */
static double worst_rel(const float *y, size_t ldy, const double *ref, const double *mag, size_t T,
                        size_t out) {
    double w = 0.0;
    for (size_t t = 0; t < T; t++)
        for (size_t o = 0; o < out; o++) {
            double m = mag[t * out + o] > 0 ? mag[t * out + o] : 1e-30;
            double e = fabs((double)y[t * ldy + o] - ref[t * out + o]) / m;
            if (!(e <= w)) w = e; /* NaN propagates as a failure */
        }
    return w;
}

static void test_fp4_gemm(qk_gemm *g, const char *fmt, qk_gemm_type type, size_t T, size_t out,
                          size_t in, int force_emulation) {
    float *x = make_matrix(T, in, 21, 0), *w = make_matrix(out, in, 22, 0);
    fp4_pair px, pw;
    int ok = fp4_make(&px, fmt, NULL, x, T, in) && fp4_make(&pw, fmt, NULL, w, out, in);
    char what[160];
    snprintf(what, sizeof what, "gemm %s T=%zu out=%zu in=%zu%s", fmt, T, out, in,
             force_emulation ? " (forced emulation)" : "");
    if (!ok) {
        report(0, what);
        return;
    }
    qk_gemm_operand X = fp4_operand(&px, type), W = fp4_operand(&pw, type);
    size_t ldy = (out + 3) / 4 * 4;
    float *dy = dev_alloc(T * ldy * sizeof(float)), *hy = malloc(T * ldy * sizeof(float));
    float *ref = malloc(T * out * sizeof(float));
    qs_error err = {0};
    qk_gemm_force_emulation(g, force_emulation);
    qk_gemm_path path = QK_GEMM_PATH_BF16;
    qs_status st = qk_gemm_linear(g, &X, &W, T, out, in, 1.0f, 0.0f, dy, QK_GEMM_OUT_F32, ldy, NULL,
                                  &path, &err);
    size_t plans = qk_gemm_plan_count(g);
    if (st == QS_OK) /* the same shape again: no new plan */
        st = qk_gemm_linear(g, &X, &W, T, out, in, 1.0f, 0.0f, dy, QK_GEMM_OUT_F32, ldy, NULL, NULL,
                            &err);
    qk_gemm_force_emulation(g, 0);
    if (st) printf("# %s\n", err.msg);
    ok = st == QS_OK && cudaDeviceSynchronize() == cudaSuccess;
    host_copy(hy, dy, T * ldy * sizeof(float));
    float alpha = 0.0f;
    ok = ok && qk_lt_fold_alpha(1.0f, px.cpu_scale, 0, pw.cpu_scale, 0, &alpha, &err) == QS_OK &&
         qk_lt_linear_ref(&px.l, px.h_codes, px.h_scales, &pw.l, pw.h_codes, pw.h_scales, alpha,
                          ref, out, &err) == QS_OK;
    double *r = malloc(T * out * sizeof *r), *mag = malloc(T * out * sizeof *mag);
    for (size_t t = 0; t < T; t++)
        for (size_t o = 0; o < out; o++) {
            double m = 0;
            for (size_t c = 0; c < in; c++)
                m += fabs((double)qk_lt_element(&px.l, px.h_codes, px.h_scales, t, c) *
                          qk_lt_element(&pw.l, pw.h_codes, pw.h_scales, o, c));
            mag[t * out + o] = m * alpha;
            r[t * out + o] = ref[t * out + o];
        }
    double wr = ok ? worst_rel(hy, ldy, r, mag, T, out) : INFINITY;
    qk_gemm_path want = qk_gemm_native_fp4(g) && !force_emulation ? QK_GEMM_PATH_NATIVE_FP4
                                                                  : QK_GEMM_PATH_EMULATED_BF16;
    printf("# %s: path %s, worst relative error %.3g\n", what, qk_gemm_path_name(path), wr);
    /* a native shape cuBLASLt refuses falls back to emulated_bf16, also correct */
    report(ok && wr <= TOL_GEMM && (path == want || path == QK_GEMM_PATH_EMULATED_BF16) &&
               qk_gemm_plan_count(g) == plans,
           what);
    /* x's tensor decode scale left on the device (qk_cuda_quantize_lt_async): the same scale bit
       for bit, and the GEMM with alpha folded on the device (pointer mode device) within the
       same tolerance */
    float *d_ts = dev_alloc(sizeof(float)), h_ts = 0.0f;
    float *d_x = dev_copy(x, T * in * sizeof *x);
    qk_gemm_force_emulation(g, force_emulation);
    st = qk_cuda_quantize_lt_async(qk_format_by_name(fmt), NULL, d_x, T, in, &px.l, px.d_codes,
                                   px.d_scales, d_ts, NULL, &err);
    qk_gemm_operand X2 = X;
    X2.tensor_scale = 1.0f;
    X2.d_tensor_scale = d_ts;
    if (st == QS_OK)
        st = qk_gemm_linear(g, &X2, &W, T, out, in, 1.0f, 0.0f, dy, QK_GEMM_OUT_F32, ldy, NULL,
                            NULL, &err);
    qk_gemm_force_emulation(g, 0);
    if (st) printf("# %s\n", err.msg);
    int ok2 = st == QS_OK && cudaDeviceSynchronize() == cudaSuccess;
    host_copy(hy, dy, T * ldy * sizeof(float));
    host_copy(&h_ts, d_ts, sizeof h_ts);
    double wr2 = ok2 ? worst_rel(hy, ldy, r, mag, T, out) : INFINITY;
    char what2[200];
    snprintf(what2, sizeof what2, "%s, x's tensor scale on the device", what);
    printf("# %s: scale %a (host %a), worst relative error %.3g\n", what2, (double)h_ts,
           (double)px.gpu_scale, wr2);
    report(ok && ok2 && memcmp(&h_ts, &px.gpu_scale, sizeof h_ts) == 0 && wr2 <= TOL_GEMM, what2);
    cudaFree(d_ts);
    cudaFree(d_x);
    cudaFree(dy);
    free(hy);
    free(ref);
    free(r);
    free(mag);
    fp4_free(&px);
    fp4_free(&pw);
    free(x);
    free(w);
}

/* BF16 x BF16 (and W4A16: W NVFP4, x BF16) against a double GEMM of the same values; BF16
 * output and beta = 1 (y += x W^T) on the BF16 path. */
static void test_bf16_gemm(qk_gemm *g, size_t T, size_t out, size_t in, int w4a16) {
    float *x = make_matrix(T, in, 31, 0), *w = make_matrix(out, in, 32, 0);
    size_t ld = (in + 7) / 8 * 8;
    uint16_t *hx = calloc(T * ld, 2), *hw = calloc(out * ld, 2);
    for (size_t t = 0; t < T; t++)
        for (size_t c = 0; c < in; c++)
            hx[t * ld + c] = bf16_of(x[t * in + c]);
    for (size_t o = 0; o < out; o++)
        for (size_t c = 0; c < in; c++)
            hw[o * ld + c] = bf16_of(w[o * in + c]);
    qk_gemm_operand X = {0}, W = {0};
    X.type = W.type = QK_GEMM_BF16;
    X.data = dev_copy(hx, T * ld * 2);
    X.ld = ld;
    W.data = dev_copy(hw, out * ld * 2);
    W.ld = ld;
    fp4_pair pw;
    memset(&pw, 0, sizeof pw);
    if (w4a16) {
        if (!fp4_make(&pw, "nvfp4", NULL, w, out, in)) abort();
        cudaFree((void *)W.data);
        W = fp4_operand(&pw, QK_GEMM_NVFP4);
    }
    double *ref = malloc(T * out * sizeof *ref), *mag = malloc(T * out * sizeof *mag);
    for (size_t t = 0; t < T; t++)
        for (size_t o = 0; o < out; o++) {
            double s = 0, m = 0;
            for (size_t c = 0; c < in; c++) {
                double wv = w4a16 ? (double)qk_lt_element(&pw.l, pw.h_codes, pw.h_scales, o, c) *
                                        pw.cpu_scale
                                  : float_of_bf16(hw[o * ld + c]);
                double p = (double)float_of_bf16(hx[t * ld + c]) * wv;
                s += p;
                m += fabs(p);
            }
            ref[t * out + o] = s;
            mag[t * out + o] = m;
        }
    char what[160];
    snprintf(what, sizeof what, "gemm %s T=%zu out=%zu in=%zu", w4a16 ? "w4a16" : "bf16", T, out,
             in);
    size_t ldy = (out + 3) / 4 * 4;
    float *dy = dev_alloc(T * ldy * 4), *hy = malloc(T * ldy * 4);
    qs_error err = {0};
    qk_gemm_path path;
    qs_status st = qk_gemm_linear(g, &X, &W, T, out, in, 1.0f, 0.0f, dy, QK_GEMM_OUT_F32, ldy, NULL,
                                  &path, &err);
    if (st) printf("# %s\n", err.msg);
    int ok = st == QS_OK && cudaDeviceSynchronize() == cudaSuccess;
    host_copy(hy, dy, T * ldy * 4);
    double wr = ok ? worst_rel(hy, ldy, ref, mag, T, out) : INFINITY;
    printf("# %s: path %s, worst relative error %.3g\n", what, qk_gemm_path_name(path), wr);
    report(ok && wr <= TOL_GEMM && path == (w4a16 ? QK_GEMM_PATH_EMULATED_BF16 : QK_GEMM_PATH_BF16),
           what);
    if (!w4a16) { /* BF16 output, then beta = 1 doubles it */
        size_t ldb = (out + 7) / 8 * 8;
        uint16_t *db = dev_alloc(T * ldb * 2), *hb = malloc(T * ldb * 2);
        st = qk_gemm_linear(g, &X, &W, T, out, in, 1.0f, 0.0f, db, QK_GEMM_OUT_BF16, ldb, NULL,
                            NULL, &err);
        if (st == QS_OK)
            st = qk_gemm_linear(g, &X, &W, T, out, in, 1.0f, 1.0f, db, QK_GEMM_OUT_BF16, ldb, NULL,
                                NULL, &err);
        ok = st == QS_OK && cudaDeviceSynchronize() == cudaSuccess;
        host_copy(hb, db, T * ldb * 2);
        double worst = 0;
        for (size_t t = 0; ok && t < T; t++)
            for (size_t o = 0; o < out; o++) {
                double e = fabs(float_of_bf16(hb[t * ldb + o]) - 2.0 * ref[t * out + o]) /
                           (2.0 * mag[t * out + o] + 1e-30);
                worst = e > worst ? e : worst;
            }
        snprintf(what, sizeof what, "gemm bf16 output, beta 1, T=%zu out=%zu in=%zu", T, out, in);
        report(ok && worst <= 1e-2, what); /* BF16 output: 2^-8 relative per rounding */
        cudaFree(db);
        free(hb);
    }
    cudaFree((void *)X.data);
    if (!w4a16) cudaFree((void *)W.data);
    if (w4a16) fp4_free(&pw);
    cudaFree(dy);
    free(hy);
    free(ref);
    free(mag);
    free(hx);
    free(hw);
    free(x);
    free(w);
}

/* FP8 E4M3 per tensor (the CPU's fp8_e4m3 codes and decode scales), host scales in alpha and
 * device scales through A/B_SCALE_POINTER, against a double GEMM of the dequantized tensors. */
static void test_fp8_gemm(qk_gemm *g, size_t T, size_t out, size_t in) {
    const qk_format *fmt = qk_format_by_name("fp8_e4m3");
    float *x = make_matrix(T, in, 41, 0), *w = make_matrix(out, in, 42, 0);
    for (size_t i = 0; i < out * in; i++)
        w[i] *= 0.05f;
    qk_packed px, pw;
    qs_error err = {0};
    if (qk_packed_init(&px, fmt, NULL, T, in, &err) ||
        qk_quantize(fmt, NULL, x, T, in, &px, &err) ||
        qk_packed_init(&pw, fmt, NULL, out, in, &err) ||
        qk_quantize(fmt, NULL, w, out, in, &pw, &err))
        abort();
    size_t ld = (in + 15) / 16 * 16;
    uint8_t *hx = calloc(T * ld, 1), *hw = calloc(out * ld, 1);
    for (size_t t = 0; t < T; t++)
        memcpy(hx + t * ld, px.codes + t * px.row_bytes, in);
    for (size_t o = 0; o < out; o++)
        memcpy(hw + o * ld, pw.codes + o * pw.row_bytes, in);
    float *dx = malloc(T * in * 4), *dw = malloc(out * in * 4);
    qk_dequantize(&px, dx, 1, &err);
    qk_dequantize(&pw, dw, 1, &err);
    double *ref = malloc(T * out * sizeof *ref), *mag = malloc(T * out * sizeof *mag);
    for (size_t t = 0; t < T; t++)
        for (size_t o = 0; o < out; o++) {
            double s = 0, m = 0;
            for (size_t c = 0; c < in; c++) {
                double p = (double)dx[t * in + c] * dw[o * in + c];
                s += p;
                m += fabs(p);
            }
            ref[t * out + o] = s;
            mag[t * out + o] = m;
        }
    qk_gemm_operand X = {0}, W = {0};
    X.type = W.type = QK_GEMM_FP8_E4M3;
    X.data = dev_copy(hx, T * ld);
    W.data = dev_copy(hw, out * ld);
    X.ld = W.ld = ld;
    X.tensor_scale = px.tensor_scale;
    W.tensor_scale = pw.tensor_scale;
    size_t ldy = (out + 3) / 4 * 4;
    float *dy = dev_alloc(T * ldy * 4), *hy = malloc(T * ldy * 4);
    for (int device_scales = 0; device_scales < 2; device_scales++) {
        float *ds = NULL;
        if (device_scales) {
            float both[2] = {px.tensor_scale, pw.tensor_scale};
            ds = dev_copy(both, sizeof both);
            X.d_tensor_scale = ds;
            W.d_tensor_scale = ds + 1;
            X.tensor_scale = W.tensor_scale = 1.0f;
        }
        qk_gemm_path path;
        qs_status st = qk_gemm_linear(g, &X, &W, T, out, in, 1.0f, 0.0f, dy, QK_GEMM_OUT_F32, ldy,
                                      NULL, &path, &err);
        if (st) printf("# %s\n", err.msg);
        int ok = st == QS_OK && cudaDeviceSynchronize() == cudaSuccess;
        host_copy(hy, dy, T * ldy * 4);
        double wr = ok ? worst_rel(hy, ldy, ref, mag, T, out) : INFINITY;
        char what[160];
        snprintf(what, sizeof what, "gemm fp8 T=%zu out=%zu in=%zu, %s scales", T, out, in,
                 device_scales ? "device" : "alpha");
        printf("# %s: worst relative error %.3g\n", what, wr);
        report(ok && wr <= TOL_FP8 && path == QK_GEMM_PATH_FP8, what);
        cudaFree(ds);
    }
    cudaFree((void *)X.data);
    cudaFree((void *)W.data);
    cudaFree(dy);
    free(hy);
    free(ref);
    free(mag);
    free(dx);
    free(dw);
    free(hx);
    free(hw);
    qk_packed_release(&px);
    qk_packed_release(&pw);
    free(x);
    free(w);
}

static void test_errors(qk_gemm *g) {
    qk_gemm_operand X = {0}, W = {0};
    X.type = QK_GEMM_FP8_E4M3;
    W.type = QK_GEMM_NVFP4;
    qk_gemm_path path;
    qs_error err = {0};
    report(qk_gemm_path_for(g, X.type, W.type, &path, &err) == QS_EUNSUPPORTED,
           "gemm refuses fp8 x nvfp4");
    void *d = dev_alloc(4096);
    X.type = W.type = QK_GEMM_BF16;
    X.data = W.data = d;
    X.ld = W.ld = 8;
    report(qk_gemm_linear(g, &X, &W, 4, 4, 16, 1.0f, 0.0f, d, QK_GEMM_OUT_F32, 4, NULL, NULL,
                          &err) == QS_EINVAL,
           "gemm refuses ld < k");
    X.ld = W.ld = 16;
    report(qk_gemm_linear(g, &X, &W, 4, 4, 16, 1.0f, 0.0f, (char *)d + 4, QK_GEMM_OUT_F32, 4, NULL,
                          NULL, &err) == QS_EINVAL,
           "gemm refuses a misaligned y");
    report(strcmp(qk_gemm_path_name(QK_GEMM_PATH_NATIVE_FP4), "native_fp4") == 0 &&
               strcmp(qk_gemm_path_name(QK_GEMM_PATH_EMULATED_BF16), "emulated_bf16") == 0,
           "gemm path names");
    cudaFree(d);
}

int main(void) {
    if (qk_cuda_device_count() == 0) {
        printf("kernels_cuda_gemm: no CUDA device, skipped\n");
        return 77;
    }
    qk_gemm *g = NULL;
    qs_error err = {0};
    if (qk_gemm_create(0, &g, &err)) {
        printf("NOT OK qk_gemm_create: %s\n", err.msg);
        return 1;
    }
    printf("# device compute capability %d, native FP4 %d\n", qk_gemm_compute_capability(g),
           qk_gemm_native_fp4(g));
    test_quantize_lt();
    /* ragged rows (not multiples of 128) and K (not multiples of 4 scale blocks); the host
     * reference is O(T out in), so the big shapes are left to bench_cuda_gemm */
    static const size_t shapes[][3] = {{8, 40, 112}, {130, 260, 208}, {256, 512, 1024}};
    for (size_t s = 0; s < 3; s++) {
        for (int force = 0; force <= qk_gemm_native_fp4(g); force++) {
            test_fp4_gemm(g, "nvfp4", QK_GEMM_NVFP4, shapes[s][0], shapes[s][1], shapes[s][2],
                          force);
            test_fp4_gemm(g, "mxfp4", QK_GEMM_MXFP4, shapes[s][0], shapes[s][1], shapes[s][2],
                          force);
        }
        test_fp4_gemm(g, "nvfp4_2d", QK_GEMM_NVFP4, shapes[s][0], shapes[s][1], shapes[s][2], 0);
        test_bf16_gemm(g, shapes[s][0], shapes[s][1], shapes[s][2], 0);
        test_bf16_gemm(g, shapes[s][0], shapes[s][1], shapes[s][2], 1);
        test_fp8_gemm(g, shapes[s][0], shapes[s][1], shapes[s][2]);
    }
    test_errors(g);
    qk_gemm_destroy(g);
    printf("kernels_cuda_gemm: %d failure(s)\n", failures);
    return failures ? 1 : 0;
}
