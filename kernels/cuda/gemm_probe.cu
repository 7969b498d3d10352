// The probe's device half (qk_gemm_probe.h): one small GEMM of each kind qk_gemm runs, native
// against the exact BF16 emulation (FP4) or against exact integer sums (FP8), once per device.
#include <cuda_runtime.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cublaslt_layout.h"
#include "qk_cuda.h"
#include "qk_gemm.h"
#include "qk_gemm_probe.h"
#include "quant.h"

namespace {

// The probe's shape: M = N = 128 rows, K = 256 (a multiple of NVFP4's 64 and MX's 128).
constexpr size_t kRows = 128, kK = 256;

// Deterministic inputs in [-1, 1) (an LCG: the probe needs no particular distribution).
void fill(float *x, size_t n, uint32_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)(seed >> 8) / 8388608.0f - 1.0f;
    }
}

struct dev_bufs {
    void *p[8];
    int n;
    ~dev_bufs() {
        for (int i = 0; i < n; i++)
            cudaFree(p[i]);
    }
    void *get(size_t bytes) {
        void *q = nullptr;
        if (n >= 8 || cudaMalloc(&q, bytes) != cudaSuccess) return nullptr;
        return p[n++] = q;
    }
};

// An outcome from a qk_gemm_linear that did not run natively: "no algorithm" when cuBLASLt
// refused the layout or offered nothing (NOT_SUPPORTED, or qk_gemm's QS_EUNSUPPORTED), else a
// failed matmul.
qk_probe_outcome refused(const char *status, qs_status st) {
    if (st == QS_EUNSUPPORTED || (status && strstr(status, "NOT_SUPPORTED")))
        return QK_PROBE_NO_ALGORITHM;
    return QK_PROBE_FAILED;
}

// Largest |a - b| within tol * max(1, max |b|): the two differ only in summation order.
bool close(const float *a, const float *b, size_t n, float tol) {
    float big = 1.0f, worst = 0.0f;
    for (size_t i = 0; i < n; i++) {
        big = fmaxf(big, fabsf(b[i]));
        worst = fmaxf(worst, fabsf(a[i] - b[i]));
    }
    return worst <= tol * big;
}

// One FP4 format: x and W quantized on the device, the native GEMM (allowed by a tentative
// "ok" in the handle's probe) against the emulated one.
void probe_fp4(qk_gemm *g, qk_gemm_probe *p, qk_probe_format f, const char *fmt_name) {
    const qk_format *fmt = qk_format_by_name(fmt_name);
    qs_error err = {};
    qk_gemm_operand ops[2];
    memset(ops, 0, sizeof ops);
    dev_bufs d = {};
    float *hx = (float *)malloc(2 * kRows * kK * sizeof(float));
    float *hy = (float *)malloc(2 * kRows * kRows * sizeof(float));
    p->outcome[f] = QK_PROBE_FAILED;
    if (!fmt || !hx || !hy) goto done;
    fill(hx, 2 * kRows * kK, 12345u + (uint32_t)f);
    for (int i = 0; i < 2; i++) {
        qk_gemm_operand *o = &ops[i];
        float *dx = (float *)d.get(kRows * kK * sizeof(float));
        if (!dx || qk_lt_layout_init(fmt, kRows, kK, &o->layout, &err) != QS_OK) goto done;
        uint8_t *codes = (uint8_t *)d.get(o->layout.codes_bytes);
        uint8_t *scales = (uint8_t *)d.get(o->layout.scale_bytes);
        if (!codes || !scales ||
            cudaMemcpy(dx, hx + i * kRows * kK, kRows * kK * sizeof(float),
                       cudaMemcpyHostToDevice) != cudaSuccess)
            goto done;
        qk_quant_options opt;
        memset(&opt, 0, sizeof opt); // the defaults (quant.h)
        float ts = 1.0f;
        if (qk_cuda_quantize_lt(fmt, &opt, dx, kRows, kK, &o->layout, codes, scales, &ts, NULL,
                                NULL, &err) != QS_OK)
            goto done;
        o->type = f == QK_PROBE_NVFP4 ? QK_GEMM_NVFP4 : QK_GEMM_MXFP4;
        o->data = codes;
        o->scales = scales;
        o->tensor_scale = ts > 0.0f ? ts : 1.0f;
    }
    {
        float *y = (float *)d.get(2 * kRows * kRows * sizeof(float));
        if (!y) goto done;
        p->outcome[f] = QK_PROBE_OK; // tentative: lets qk_gemm_linear try the native path
        qk_gemm_set_probe(g, p);
        qk_gemm_force_emulation(g, 0);
        qk_gemm_fallback_clear(g);
        qk_gemm_path path = QK_GEMM_PATH_EMULATED_BF16;
        qs_status st = qk_gemm_linear(g, &ops[0], &ops[1], kRows, kRows, kK, 1.0f, 0.0f, y,
                                      QK_GEMM_OUT_F32, kRows, NULL, &path, &err);
        if (st != QS_OK || path != QK_GEMM_PATH_NATIVE_FP4) {
            p->outcome[f] = refused(qk_gemm_fallback_status(g), st);
            snprintf(p->status[f], sizeof p->status[f], "%s",
                     st != QS_OK ? "qs_error" : qk_gemm_fallback_status(g));
            qk_gemm_fallback_clear(g);
            goto done;
        }
        qk_gemm_force_emulation(g, 1);
        st = qk_gemm_linear(g, &ops[0], &ops[1], kRows, kRows, kK, 1.0f, 0.0f, y + kRows * kRows,
                            QK_GEMM_OUT_F32, kRows, NULL, &path, &err);
        qk_gemm_force_emulation(g, 0);
        if (st != QS_OK || cudaDeviceSynchronize() != cudaSuccess ||
            cudaMemcpy(hy, y, 2 * kRows * kRows * sizeof(float), cudaMemcpyDeviceToHost) !=
                cudaSuccess) {
            p->outcome[f] = QK_PROBE_FAILED;
            goto done;
        }
        // FP32 sums of the same exact products in another order: 1e-3 of the largest output
        // is far above their rounding (K = 256) and far below a wrong layout or scale
        p->outcome[f] = close(hy, hy + kRows * kRows, kRows * kRows, 1e-3f) ? QK_PROBE_OK
                                                                             : QK_PROBE_MISMATCH;
    }
done:
    free(hx);
    free(hy);
}

// FP8 E4M3 with per-tensor scales: operands of -2..2 (exact in E4M3), whose FP32 sums are
// exact integers, against those integers computed here.
void probe_fp8(qk_gemm *g, qk_gemm_probe *p) {
    const uint8_t code[5] = {0xC0, 0xB8, 0x00, 0x38, 0x40}; // -2, -1, 0, 1, 2 in E4M3
    uint8_t *h = (uint8_t *)malloc(2 * kRows * kK);
    float *want = (float *)malloc(kRows * kRows * sizeof(float));
    float *got = (float *)malloc(kRows * kRows * sizeof(float));
    int *v = (int *)malloc(2 * kRows * kK * sizeof(int));
    dev_bufs d = {};
    qs_error err = {};
    p->outcome[QK_PROBE_FP8_TENSOR] = QK_PROBE_FAILED;
    if (!h || !want || !got || !v) goto done;
    {
        uint32_t s = 777u;
        for (size_t i = 0; i < 2 * kRows * kK; i++) {
            s = s * 1664525u + 1013904223u;
            v[i] = (int)((s >> 16) % 5) - 2;
            h[i] = code[v[i] + 2];
        }
        for (size_t r = 0; r < kRows; r++) // y[r][c] = sum_k x[r][k] w[c][k]
            for (size_t c = 0; c < kRows; c++) {
                long acc = 0;
                for (size_t k = 0; k < kK; k++)
                    acc += (long)v[r * kK + k] * v[kRows * kK + c * kK + k];
                want[r * kRows + c] = (float)acc;
            }
        uint8_t *dx = (uint8_t *)d.get(2 * kRows * kK);
        float *y = (float *)d.get(kRows * kRows * sizeof(float));
        if (!dx || !y || cudaMemcpy(dx, h, 2 * kRows * kK, cudaMemcpyHostToDevice) != cudaSuccess)
            goto done;
        qk_gemm_operand x, w;
        memset(&x, 0, sizeof x);
        memset(&w, 0, sizeof w);
        x.type = w.type = QK_GEMM_FP8_E4M3;
        x.data = dx;
        w.data = dx + kRows * kK;
        x.ld = w.ld = kK;
        x.tensor_scale = w.tensor_scale = 1.0f;
        qk_gemm_fallback_clear(g);
        qk_gemm_path path = QK_GEMM_PATH_EMULATED_BF16;
        qs_status st = qk_gemm_linear(g, &x, &w, kRows, kRows, kK, 1.0f, 0.0f, y, QK_GEMM_OUT_F32,
                                      kRows, NULL, &path, &err);
        if (st != QS_OK || path != QK_GEMM_PATH_FP8) {
            p->outcome[QK_PROBE_FP8_TENSOR] = refused(NULL, st);
            snprintf(p->status[QK_PROBE_FP8_TENSOR], sizeof p->status[0], "%s",
                     st == QS_EUNSUPPORTED ? "not_supported" : "qs_error");
            goto done;
        }
        if (cudaMemcpy(got, y, kRows * kRows * sizeof(float), cudaMemcpyDeviceToHost) !=
            cudaSuccess)
            goto done;
        p->outcome[QK_PROBE_FP8_TENSOR] =
            close(got, want, kRows * kRows, 0.0f) ? QK_PROBE_OK : QK_PROBE_MISMATCH;
    }
done:
    free(h);
    free(want);
    free(got);
    free(v);
}

// The per-device cache.
constexpr int kDevices = 64;
pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
qk_gemm_probe cache[kDevices];
bool cached[kDevices];

} // namespace

extern "C" qs_status qk_gemm_probe_run(qk_gemm *g, int device, qk_gemm_probe *out, qs_error *err) {
    if (!g || !out) return qs_error_set(err, QS_EINVAL, "kernels/cuda: gemm probe: NULL argument");
    if (device < 0 || device >= kDevices)
        return qs_error_set(err, QS_EINVAL, "kernels/cuda: gemm probe: device %d outside 0..%d",
                            device, kDevices - 1);
    pthread_mutex_lock(&cache_lock);
    if (!cached[device]) {
        qk_gemm_probe *p = &cache[device];
        memset(p, 0, sizeof *p);
        p->cc = qk_gemm_compute_capability(g);
        if (p->cc >= qk_probe_min_cc(QK_PROBE_NVFP4)) probe_fp4(g, p, QK_PROBE_NVFP4, "nvfp4");
        if (p->cc >= qk_probe_min_cc(QK_PROBE_MXFP4)) probe_fp4(g, p, QK_PROBE_MXFP4, "mxfp4");
        if (p->cc >= qk_probe_min_cc(QK_PROBE_FP8_TENSOR)) probe_fp8(g, p);
        // MXFP8: qk_gemm has no MXFP8 operand (qk_gemm.h), so nothing runs it to probe
        (void)cudaGetLastError(); // a refused probe leaves no sticky state for the caller
        cached[device] = true;
    }
    *out = cache[device];
    pthread_mutex_unlock(&cache_lock);
    qk_gemm_set_probe(g, NULL); // the caller sets the cached copy it keeps
    return QS_OK;
}
