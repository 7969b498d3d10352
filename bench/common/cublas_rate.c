/* The cuBLAS baseline (cublas_rate.h). Row-major operands as the engine and the training ops
 * hold them, given to column-major cuBLAS as their transposes: y^T = W x^T is
 * gemm(T, N, out, N, in), dx^T = W^T dy^T is gemm(N, N, in, N, out), dW^T += x^T dy is
 * gemm(N, T, in, out, N) with beta 1 (N: the linear's rows). */
#include "cublas_rate.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int qb_cuda_device(char *name, size_t cap) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n < 1) {
        snprintf(name, cap, "%s", e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device");
        return 0;
    }
    struct cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) {
        snprintf(name, cap, "device 0: cudaGetDeviceProperties failed");
        return 0;
    }
    snprintf(name, cap, "%s, %.1f GiB, cc %d.%d", p.name, (double)p.totalGlobalMem / 1073741824.0,
             p.major, p.minor);
    return 1;
}

/* Small deterministic values (|v| < 0.7) as FP32 or as BF16 bits (truncated: any bits will do). */
static void *host_values(size_t n, int bf16) {
    void *h = malloc(n * (bf16 ? 2 : 4));
    if (!h) return NULL;
    for (size_t i = 0; i < n; i++) {
        float f = (float)((i * 7) % 13) * 0.05f - 0.3f;
        if (bf16) {
            uint32_t u;
            memcpy(&u, &f, 4);
            ((uint16_t *)h)[i] = (uint16_t)(u >> 16);
        } else {
            ((float *)h)[i] = f;
        }
    }
    return h;
}

/* C = op(A) op(B) (column-major, cuBLAS's m, n, k) in the baseline's type. */
static cublasStatus_t gemm(cublasHandle_t h, qb_gemm type, cublasOperation_t ta,
                           cublasOperation_t tb, int m, int n, int k, const void *A, int lda,
                           const void *B, int ldb, float beta, float *C, int ldc) {
    float one = 1.0f;
    if (type == QB_GEMM_FP32)
        return cublasSgemm(h, ta, tb, m, n, k, &one, A, lda, B, ldb, &beta, C, ldc);
    return cublasGemmEx(h, ta, tb, m, n, k, &one, A, CUDA_R_16BF, lda, B, CUDA_R_16BF, ldb, &beta,
                        C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

double qb_cublas_tflops(const qb_linear *lin, int n, qb_pass pass, qb_gemm type, int reps,
                        double *best_ms, char *why, size_t cap) {
    size_t mx = 0;
    for (int i = 0; i < n; i++) {
        size_t N = (size_t)lin[i].rows;
        size_t s[3] = {N * lin[i].in, N * lin[i].out, (size_t)lin[i].in * lin[i].out};
        for (int j = 0; j < 3; j++)
            mx = s[j] > mx ? s[j] : mx;
    }
    int bf16 = type == QB_GEMM_BF16;
    size_t esz = bf16 ? 2 : 4;
    void *A = NULL, *B = NULL, *h = host_values(mx, bf16);
    float *C = NULL;
    cublasHandle_t blas = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    double best = -1.0;
    cudaError_t ce = cudaSetDevice(0);
    if (ce == cudaSuccess) ce = cudaMalloc(&A, mx * esz);
    if (ce == cudaSuccess) ce = cudaMalloc(&B, mx * esz);
    if (ce == cudaSuccess) ce = cudaMalloc((void **)&C, mx * 4);
    if (ce == cudaSuccess && !h) ce = cudaErrorMemoryAllocation;
    if (ce == cudaSuccess) ce = cudaMemcpy(A, h, mx * esz, cudaMemcpyHostToDevice);
    if (ce == cudaSuccess) ce = cudaMemcpy(B, h, mx * esz, cudaMemcpyHostToDevice);
    if (ce == cudaSuccess) ce = cudaMemset(C, 0, mx * 4);
    if (ce == cudaSuccess) ce = cudaEventCreate(&e0);
    if (ce == cudaSuccess) ce = cudaEventCreate(&e1);
    if (ce != cudaSuccess) {
        snprintf(why, cap, "baseline buffers (%zu elements): %s", mx, cudaGetErrorString(ce));
        goto out;
    }
    if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) {
        snprintf(why, cap, "cublasCreate failed");
        goto out;
    }
    const int train = pass == QB_PASS_TRAINING;
    double flops = 0;
    for (int i = 0; i < n; i++)
        flops += (train ? 6.0 : 2.0) * lin[i].rows * lin[i].in * lin[i].out;
    for (int r = 0; r < reps + 1; r++) { /* pass 0 warms up (heuristics, clocks) */
        cudaEventRecord(e0, 0);
        for (int i = 0; i < n; i++) {
            int in = lin[i].in, out = lin[i].out, N = lin[i].rows;
            cublasStatus_t s = gemm(blas, type, CUBLAS_OP_T, CUBLAS_OP_N, out, N, in, A, in, B, in,
                                    0.0f, C, out); /* fprop */
            if (train && s == CUBLAS_STATUS_SUCCESS)
                s = gemm(blas, type, CUBLAS_OP_N, CUBLAS_OP_N, in, N, out, A, in, B, out, 0.0f, C,
                         in); /* dgrad */
            if (train && s == CUBLAS_STATUS_SUCCESS)
                s = gemm(blas, type, CUBLAS_OP_N, CUBLAS_OP_T, in, out, N, A, in, B, out, 1.0f, C,
                         in); /* wgrad, accumulated */
            if (s != CUBLAS_STATUS_SUCCESS) {
                snprintf(why, cap, "%s GEMM of linear %d [%d x %d], N %d: cuBLAS status %d",
                         bf16 ? "BF16" : "FP32", i, out, in, N, (int)s);
                best = -1.0;
                goto out;
            }
        }
        cudaEventRecord(e1, 0);
        ce = cudaEventSynchronize(e1);
        float ms = 0;
        if (ce == cudaSuccess) ce = cudaEventElapsedTime(&ms, e0, e1);
        if (ce != cudaSuccess) {
            snprintf(why, cap, "baseline pass: %s", cudaGetErrorString(ce));
            best = -1.0;
            goto out;
        }
        double tf = flops / (ms * 1e-3) * 1e-12;
        if (r > 0 && tf > best) {
            best = tf;
            if (best_ms) *best_ms = ms;
        }
    }
out:
    if (blas) cublasDestroy(blas);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaFree(A);
    cudaFree(B);
    cudaFree(C);
    free(h);
    return best;
}
