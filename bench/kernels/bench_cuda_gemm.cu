// GEMM throughput per path (qk_gemm.h) against cuBLASLt BF16 on the same shapes, measured in
// the same run; not a test. Shapes: the linears of Llama-2-7B (d 4096, FFN 11008) and of
// SmolLM2-135M (d 576, FFN 1536) at T tokens. Paths: bf16, fp8 (E4M3, scales in alpha), nvfp4
// and mxfp4 (native_fp4 on cc 10.x, else emulated_bf16: dequantize + BF16 GEMM, both timed),
// w4a16 (NVFP4 weights, BF16 activations: emulated_bf16). TFLOP/s = 2 T out in / time; the
// ratio column divides by the BF16 figure of the same shape. Best of `reps` after a warm-up
// (which builds the plans), CUDA events. Usage: bench_cuda_gemm [T [reps]]
#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_cuda_timer.cuh"
#include "format.h"
#include "qk_cuda.h"
#include "qk_gemm.h"

#define QCHECK(call)                                                                               \
    do {                                                                                           \
        qs_error err_ = {};                                                                        \
        qs_error *err = &err_;                                                                     \
        if ((call) != QS_OK) {                                                                     \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, err_.msg);                          \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

__global__ void fill_f32(float *x, size_t n, unsigned seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)(i * 2654435761u) ^ seed;
        h *= 0x9E3779B1u;
        x[i] = ((float)(h >> 8) * 0x1p-24f - 0.5f) * 2.0f;
    }
}

__global__ void to_bf16(const float *x, uint16_t *y, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = (uint16_t)(__float_as_uint(x[i]) >> 16);
}

__global__ void to_e4m3(const float *x, uint8_t *y, size_t n) { // small magnitudes: any code
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        unsigned b = __float_as_uint(x[i]);
        y[i] = (uint8_t)(((b >> 24) & 0x80u) | ((b >> 16) % 0x70u)); // never 0x7F (NaN)
    }
}

struct operand_set {
    qk_gemm_operand bf16, fp8, nvfp4, mxfp4;
};

// Returns 0, or 1 on a CUDA error (CHECK).
static int make_operands(size_t rows, size_t in, unsigned seed, operand_set *s) {
    float *x;
    size_t n = rows * in;
    CHECK(cudaMalloc((void **)&x, n * 4));
    fill_f32<<<1024, 256>>>(x, n, seed);
    memset(s, 0, sizeof *s);
    uint16_t *b;
    uint8_t *f8;
    CHECK(cudaMalloc((void **)&b, n * 2));
    CHECK(cudaMalloc((void **)&f8, n));
    to_bf16<<<1024, 256>>>(x, b, n);
    to_e4m3<<<1024, 256>>>(x, f8, n);
    s->bf16.type = QK_GEMM_BF16;
    s->bf16.data = b;
    s->bf16.ld = in;
    s->fp8.type = QK_GEMM_FP8_E4M3;
    s->fp8.data = f8;
    s->fp8.ld = in;
    s->fp8.tensor_scale = 1.0f;
    const char *names[2] = {"nvfp4", "mxfp4"};
    qk_gemm_operand *ops[2] = {&s->nvfp4, &s->mxfp4};
    for (int i = 0; i < 2; i++) {
        const qk_format *fmt = qk_format_by_name(names[i]);
        qk_gemm_operand *o = ops[i];
        o->type = i == 0 ? QK_GEMM_NVFP4 : QK_GEMM_MXFP4;
        QCHECK(qk_lt_layout_init(fmt, rows, in, &o->layout, err));
        uint8_t *c, *sc;
        CHECK(cudaMalloc((void **)&c, o->layout.codes_bytes));
        CHECK(cudaMalloc((void **)&sc, o->layout.scale_bytes));
        QCHECK(qk_cuda_quantize_lt(fmt, NULL, x, rows, in, &o->layout, c, sc, &o->tensor_scale,
                                   NULL, NULL, err));
        o->data = c;
        o->scales = sc;
    }
    CHECK(cudaFree(x));
    return 0;
}

static void free_operands(operand_set *s) {
    cudaFree((void *)s->bf16.data);
    cudaFree((void *)s->fp8.data);
    cudaFree((void *)s->nvfp4.data);
    cudaFree((void *)s->nvfp4.scales);
    cudaFree((void *)s->mxfp4.data);
    cudaFree((void *)s->mxfp4.scales);
}

// Best time in ms of y = x W^T, or -1 with the message when the GEMM is refused.
static float time_gemm(qk_gemm *g, const qk_gemm_operand *x, const qk_gemm_operand *w, size_t T,
                       size_t out, size_t in, float *y, int reps, qk_gemm_path *path) {
    float best = -1.0f;
    int rc = qkb_best_of(
        reps, qkb_no_prep,
        [&]() -> int {
            qs_error err = {};
            if (qk_gemm_linear(g, x, w, T, out, in, 1.0f, 0.0f, y, QK_GEMM_OUT_F32, out, NULL, path,
                               &err) == QS_OK)
                return 0;
            printf("  (refused: %s)\n", err.msg);
            return 1;
        },
        &best);
    return rc ? -1.0f : best;
}

int main(int argc, char **argv) {
    size_t T = 4096;
    int reps = 10;
    if (argc >= 2) T = strtoul(argv[1], NULL, 10);
    if (argc >= 3) reps = atoi(argv[2]);
    if (qk_cuda_device_count() == 0) {
        printf("bench_cuda_gemm: no CUDA device\n");
        return 77;
    }
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    qk_gemm *g = nullptr;
    QCHECK(qk_gemm_create(0, &g, err));
    printf("bench_cuda_gemm on %s (cc %d, native FP4 %d), T = %zu, best of %d\n", prop.name,
           qk_gemm_compute_capability(g), qk_gemm_native_fp4(g), T, reps);
    printf("%-22s %-7s %-14s %9s %9s %8s\n", "shape (out x in)", "type", "path", "ms", "TFLOP/s",
           "x bf16");
    static const struct {
        const char *model;
        size_t out, in;
    } shapes[] = {{"llama2-7b qkvo", 4096, 4096},  {"llama2-7b gate/up", 11008, 4096},
                  {"llama2-7b down", 4096, 11008}, {"smollm2 qo", 576, 576},
                  {"smollm2 gate/up", 1536, 576},  {"smollm2 down", 576, 1536}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        size_t out = shapes[s].out, in = shapes[s].in;
        operand_set xs, ws;
        if (make_operands(T, in, 1, &xs) || make_operands(out, in, 2, &ws)) return 1;
        float *y;
        CHECK(cudaMalloc((void **)&y, T * out * 4));
        double flop = 2.0 * (double)T * (double)out * (double)in;
        const struct {
            const char *type;
            const qk_gemm_operand *x, *w;
        } cases[] = {{"bf16", &xs.bf16, &ws.bf16},
                     {"fp8", &xs.fp8, &ws.fp8},
                     {"nvfp4", &xs.nvfp4, &ws.nvfp4},
                     {"mxfp4", &xs.mxfp4, &ws.mxfp4},
                     {"w4a16", &xs.bf16, &ws.nvfp4}};
        double bf16_tflops = 0.0;
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            qk_gemm_path path = QK_GEMM_PATH_BF16;
            float ms = time_gemm(g, cases[c].x, cases[c].w, T, out, in, y, reps, &path);
            if (ms < 0) continue;
            double tf = flop / (ms * 1e-3) / 1e12;
            if (c == 0) bf16_tflops = tf;
            char label[64];
            snprintf(label, sizeof label, "%s %zux%zu", shapes[s].model, out, in);
            printf("%-22s %-7s %-14s %9.3f %9.1f %8.2f\n", label, cases[c].type,
                   qk_gemm_path_name(path), ms, tf, bf16_tflops > 0 ? tf / bf16_tflops : 0.0);
        }
        cudaFree(y);
        free_operands(&xs);
        free_operands(&ws);
    }
    printf("bench_cuda_gemm: %zu plans cached\n", qk_gemm_plan_count(g));
    qk_gemm_destroy(g);
    return 0;
}
