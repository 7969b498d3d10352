/* The CUDA module's entry (cuda_module.h): the table over worker/engine/model_cuda.h, the CUDA
 * backend's table (backend_cuda.h) and NCCL ranks (comm_group_nccl.h, when built with NCCL).
 * Built into libqsweep_cuda.so only. */
#include "cuda_module.h"

#include "backend_cuda.h"
#include "model_cuda.h"
#include "qk_gemm.h"
#include "qk_gemm_probe.h"
#ifdef QW_MODULE_HAVE_NCCL
#include "comm_group_nccl.h"
#endif

static qs_status use_cuda(qw_model *m, int device, int gemm, qs_error *err) {
    return qw_model_use_cuda(m, device, (qw_cuda_gemm)gemm, err);
}

/* A GEMM handle on device just for the probe (whose answer is cached per device). */
static qs_status gemm_probe(int device, qk_gemm_probe *out, qs_error *err) {
    qk_gemm *g = NULL;
    qs_status st = qk_gemm_create(device, &g, err);
    if (st == QS_OK) st = qk_gemm_probe_run(g, device, out, err);
    qk_gemm_destroy(g);
    return st;
}

static qw_cuda_module table = {
    .abi = QW_CUDA_MODULE_ABI,
    .model_use_cuda = use_cuda,
    .model_use_cpu = qw_model_use_cpu,
    .model_gemm_path = qw_model_gemm_path,
    .model_gemm_path_reset = qw_model_gemm_path_reset,
    .model_gemm_fallback = qw_model_gemm_fallback,
    .model_gemm_probe = qw_model_gemm_probe,
    .gemm_probe = gemm_probe,
};

/* Exported (the module's one public symbol). */
__attribute__((visibility("default"))) const qw_cuda_module *qw_cuda_module_entry(void);

const qw_cuda_module *qw_cuda_module_entry(void) {
    /* the tables come from functions: filled here rather than in a constant initializer */
    table.backend_cuda = qw_backend_cuda_table();
#ifdef QW_MODULE_HAVE_NCCL
    table.group_nccl = qw_comm_group_impl();
#endif
    return &table;
}
