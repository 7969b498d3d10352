/* The CUDA backend (ops_cuda.h) as backend.h's qw_backend_cuda_impl table: what the CUDA
 * backend module offers the binary that loads it (worker/gpu/cuda_module.h), and what a test
 * linked with the CUDA backend registers with qw_backend_set_cuda to run code built on
 * qw_engine_backend (the trainer's qw_backend_open) on CUDA. Built only with CUDA
 * (qw_engine_cuda). */
#ifndef QW_BACKEND_CUDA_H
#define QW_BACKEND_CUDA_H

#include "backend.h"

/* The table over qw_cuda_available, qw_backend_cuda_init, qw_backend_cuda_release,
 * qw_backend_gemm_path and qw_ops_cuda. Static storage. */
const qw_backend_cuda_impl *qw_backend_cuda_table(void);

#endif
