/* A stand-in for libqsweep_cuda.so in gpu_cuda_module (test_cuda_module.c): exports the module
 * entry with the ABI version FAKE_ABI and functions that only say they were called. */
#include "cuda_module.h"

static int calls;

static qs_status use_cuda(qw_model *m, int device, int gemm, qs_error *err) {
    (void)m, (void)gemm;
    calls++;
    return qs_error_set(err, QS_EUNSUPPORTED, "fake module: device %d", device);
}

static qs_status use_cpu(qw_model *m, qs_error *err) {
    (void)m, (void)err;
    calls++;
    return QS_OK;
}

static const char *gemm_path(const qw_model *m) {
    (void)m;
    return "fake";
}

static void gemm_path_reset(qw_model *m) {
    (void)m;
}

static int gemm_fallback(const qw_model *m, char *status, size_t status_cap, char *why,
                         size_t why_cap) {
    (void)m, (void)status, (void)status_cap, (void)why, (void)why_cap;
    return 0;
}

static const qw_cuda_module table = {
    .abi = FAKE_ABI,
    .model_use_cuda = use_cuda,
    .model_use_cpu = use_cpu,
    .model_gemm_path = gemm_path,
    .model_gemm_path_reset = gemm_path_reset,
    .model_gemm_fallback = gemm_fallback,
};

const qw_cuda_module *qw_cuda_module_entry(void);

const qw_cuda_module *qw_cuda_module_entry(void) {
    return &table;
}
