/* Shared GPU test fixtures (gpu_test_util.h). */
#include "gpu_test_util.h"

#include <stdio.h>

#include <cuda_runtime_api.h>

int qwt_cuda_skip(const char *name) {
    if (qw_cuda_available() != 0) return 0;
    printf("%s: no CUDA device visible: skipped\n", name);
    return 1;
}

int qwt_cuda_up(qw_backend *b, qw_cuda_gemm gemm) {
    qs_error err = {0};
    if (qw_backend_cuda_init(b, 0, gemm, &err) == QS_OK) return 0;
    fprintf(stderr, "%s\n", err.msg);
    return -1;
}

void *qwt_managed(size_t bytes) {
    void *p = NULL;
    if (cudaMallocManaged(&p, bytes ? bytes : 1, cudaMemAttachGlobal) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}

void qwt_managed_free(void *p) {
    if (p) cudaFree(p);
}
