/* bench_train's GPU baseline: the rate cuBLAS reaches on a training step's linear GEMMs, measured
 * in the same run as the step it is compared with (bench_train --backend cuda). Built only with
 * CUDA (bench_train_cublas.c); the CPU mode never calls it. */
#ifndef QW_BENCH_TRAIN_CUBLAS_H
#define QW_BENCH_TRAIN_CUBLAS_H

#include <stddef.h>

/* One linear of the model: y[N x out] = x[N x in] W[out x in]^T. */
typedef struct bt_shape {
    int in, out;
} bt_shape;

/* The GEMM type of the baseline. */
typedef enum bt_gemm {
    BT_GEMM_BF16 = 0, /* cublasGemmEx: BF16 A and B, FP32 C, CUBLAS_COMPUTE_32F (cuBLASLt's
                         tensor-core kernels, what cuBLAS calls for it) */
    BT_GEMM_FP32 = 1, /* cublasSgemm: FP32 in and out (what the training ops run today) */
} bt_gemm;

/* 1 when a CUDA device is visible to the runtime, 0 otherwise; name[cap] receives the device's
 * name, memory and compute capability ("NVIDIA H200, 139.8 GiB, cc 9.0"), or why there is none
 * (the runtime's error text). */
int bt_cuda_device(char *name, size_t cap);

/* TFLOP/s of one pass over the three GEMMs of every linear in sh[n] (fprop y = x W^T, dgrad
 * dx = dy W, wgrad dW += dy^T x, 2*N*in*out FLOPs each) over N rows on device 0, the best of
 * reps passes after one warm-up. Every GEMM reads one pair of device buffers sized for the
 * largest operand and filled with small deterministic values (so the operands of a pass may
 * sit in L2: the baseline is an upper bound of what the step's GEMMs can reach). Returns a negative
 * value after writing the CUDA or cuBLAS error into why[cap]. */
double bt_cublas_tflops(const bt_shape *sh, int n, int N, bt_gemm type, int reps, char *why,
                        size_t cap);

#endif
