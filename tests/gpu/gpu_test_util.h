/* Fixture helpers shared by the GPU tests of tests/gpu (label gpu): the skip without a device
 * and bringing a CUDA backend up in a cmocka group setup. */
#ifndef QW_GPU_TEST_UTIL_H
#define QW_GPU_TEST_UTIL_H

#include "ops_cuda.h"

/* Returns 1, printing "<name>: no CUDA device visible: skipped", when no CUDA device is
 * visible (main then returns 77, ctest's skip code); 0 otherwise. */
int qwt_cuda_skip(const char *name);

/* Initialises *b as CUDA device 0 with GEMM path `gemm`. Returns 0, or -1 (a cmocka group
 * setup failure) after printing the error when the backend cannot be made. */
int qwt_cuda_up(qw_backend *b, qw_cuda_gemm gemm);

/* A buffer of `bytes` in CUDA managed memory (cudaMallocManaged, cudaMemAttachGlobal): what a
 * test fills and checks on the host and hands to the backend's ops, whose own alloc gives plain
 * device memory. NULL on failure; qwt_managed_free(NULL) is a no-op. */
void *qwt_managed(size_t bytes);
void qwt_managed_free(void *p);

#endif
