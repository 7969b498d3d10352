/* The GPU benchmarks' baseline: the rate cuBLAS reaches on a model's linear GEMMs, measured in
 * the same run as what it is compared with (bench_gpu_eval: the forward's GEMMs; bench_train
 * --backend cuda: a training step's). Built only with CUDA (cublas_rate.c); the header alone
 * gives bench_train's CPU mode its shapes. */
#ifndef QB_CUBLAS_RATE_H
#define QB_CUBLAS_RATE_H

#include <stddef.h>

/* One linear of the model: y[rows x out] = x[rows x in] W[out x in]^T. */
typedef struct qb_linear {
    int in, out, rows;
} qb_linear;

/* The GEMM type of the baseline. */
typedef enum qb_gemm {
    QB_GEMM_BF16 = 0, /* cublasGemmEx: BF16 A and B, FP32 C, CUBLAS_COMPUTE_32F (cuBLASLt's
                         tensor-core kernels, what cuBLAS calls for it) */
    QB_GEMM_FP32 = 1, /* cublasSgemm: FP32 in and out (what the training ops run today) */
} qb_gemm;

/* Which GEMMs of each linear a pass runs. */
typedef enum qb_pass {
    QB_PASS_FORWARD = 0,  /* fprop y = x W^T: 2*rows*in*out FLOPs */
    QB_PASS_TRAINING = 1, /* fprop, dgrad dx = dy W, wgrad dW += dy^T x: 6*rows*in*out FLOPs */
} qb_pass;

/* 1 when a CUDA device is visible to the runtime, 0 otherwise; name[cap] receives the device's
 * name, memory and compute capability ("NVIDIA H200, 139.8 GiB, cc 9.0"), or why there is none
 * (the runtime's error text). */
int qb_cuda_device(char *name, size_t cap);

/* TFLOP/s of one pass over the linears lin[n] on device 0, the best of reps passes after one
 * warm-up (CUDA events); *best_ms (may be NULL) gets that pass's milliseconds. Every GEMM reads
 * one pair of device buffers sized for the largest operand and filled with small deterministic
 * values (so the operands of a pass may sit in L2: the baseline is an upper bound of what the
 * measured GEMMs can reach). Returns a negative value after writing the CUDA or cuBLAS error
 * into why[cap]. */
double qb_cublas_tflops(const qb_linear *lin, int n, qb_pass pass, qb_gemm type, int reps,
                        double *best_ms, char *why, size_t cap);

#endif
