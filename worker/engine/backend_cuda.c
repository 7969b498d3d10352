/* The CUDA backend as backend.h's table (backend_cuda.h). */
#include "backend_cuda.h"

#include "ops_cuda.h"

static qs_status init(qw_backend *b, int device, int gemm, qs_error *err) {
    return qw_backend_cuda_init(b, device, (qw_cuda_gemm)gemm, err);
}

static const qw_backend_cuda_impl table = {
    .available = qw_cuda_available,
    .init = init,
    .release = qw_backend_cuda_release,
    .gemm_path = qw_backend_gemm_path,
    .ops = qw_ops_cuda,
};

const qw_backend_cuda_impl *qw_backend_cuda_table(void) {
    return &table;
}
