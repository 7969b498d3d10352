/* A stand-in for libqsweep_cuda.so in gpu_cuda_module (test_cuda_module.c): exports the module
 * entry with the ABI version FAKE_ABI and functions whose answers show they were the ones
 * called: model_use_cuda and a CUDA backend on a device other than 0 fail naming the device; a
 * backend on device 0 opens with this module's own ops table, its GEMM path "fake" until one
 * was released, then "fake_released"; NCCL ranks open one communicator at a time (a second
 * before the first is destroyed fails) and their all-reduce writes the element count into
 * element 0 of every rank's buffer; the GEMM probe of device 0 (and of any model) says cc 12.0
 * with NVFP4 and fp8_tensor ok, MXFP4 refused, MXFP8 untried (native where the capability
 * table says emulated, so a caller that follows the table shows), and fails on any other
 * device. */
#include <string.h>

#include "backend.h"
#include "comm.h"
#include "cuda_module.h"
#include "qk_gemm_probe.h"

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

static void fake_probe(qk_gemm_probe *out) {
    memset(out, 0, sizeof *out);
    out->cc = 120;
    out->outcome[QK_PROBE_NVFP4] = QK_PROBE_OK;
    out->outcome[QK_PROBE_MXFP4] = QK_PROBE_NO_ALGORITHM;
    strcpy(out->status[QK_PROBE_MXFP4], "CUBLAS_STATUS_NOT_SUPPORTED");
    out->outcome[QK_PROBE_MXFP8] = QK_PROBE_UNTRIED;
    out->outcome[QK_PROBE_FP8_TENSOR] = QK_PROBE_OK;
}

static int model_probe(const qw_model *m, qk_gemm_probe *out) {
    (void)m;
    fake_probe(out);
    return 1;
}

static qs_status device_probe(int device, qk_gemm_probe *out, qs_error *err) {
    if (device != 0) return qs_error_set(err, QS_EUNSUPPORTED, "fake module: no device %d", device);
    fake_probe(out);
    return QS_OK;
}

/* The backend: an ops table of its own (its entries are never called: the test only opens,
 * names and closes backends). */
static const qw_ops fake_ops = {.name = "fake"};
static int released;

static int be_available(void) {
    return 1;
}

static qs_status be_init(qw_backend *b, int device, int gemm, qs_error *err) {
    (void)gemm;
    memset(b, 0, sizeof *b);
    if (device != 0) return qs_error_set(err, QS_EUNSUPPORTED, "fake module: no device %d", device);
    b->ops = &fake_ops;
    b->threads = 1;
    return QS_OK;
}

static void be_release(qw_backend *b) {
    released++;
    memset(b, 0, sizeof *b);
}

static const char *be_gemm_path(const qw_backend *b) {
    (void)b;
    return released ? "fake_released" : "fake";
}

static const qw_ops *be_ops(void) {
    return &fake_ops;
}

static const qw_backend_cuda_impl backend = {be_available, be_init, be_release, be_gemm_path,
                                             be_ops};

/* NCCL ranks: one live communicator, of `live` ranks (0: none). */
static int live;

static qs_status nccl_init(int n, const int *devices, void **comm, qs_error *err) {
    (void)devices;
    *comm = NULL;
    if (live) return qs_error_set(err, QS_EIO, "fake module: a communicator is live");
    live = n;
    *comm = &live;
    return QS_OK;
}

static void nccl_destroy(void *comm) {
    *(int *)comm = 0;
}

static qs_status nccl_allreduce(void *comm, float *const *bufs, size_t count, qw_group_op op,
                                qs_error *err) {
    (void)op, (void)err;
    for (int r = 0; r < *(int *)comm; r++)
        bufs[r][0] = (float)count;
    return QS_OK;
}

static qs_status nccl_allreduce_rank(void *comm, int rank, float *buf, size_t count, qw_group_op op,
                                     qs_error *err) {
    (void)comm, (void)rank, (void)op, (void)err;
    buf[0] = (float)count;
    return QS_OK;
}

static const qw_group_nccl_impl nccl = {nccl_init, nccl_destroy, nccl_allreduce,
                                        nccl_allreduce_rank};

static const qw_cuda_module table = {
    .abi = FAKE_ABI,
    .model_use_cuda = use_cuda,
    .model_use_cpu = use_cpu,
    .model_gemm_path = gemm_path,
    .model_gemm_path_reset = gemm_path_reset,
    .model_gemm_fallback = gemm_fallback,
    .backend_cuda = &backend,
    .group_nccl = &nccl,
    .model_gemm_probe = model_probe,
    .gemm_probe = device_probe,
};

const qw_cuda_module *qw_cuda_module_entry(void);

const qw_cuda_module *qw_cuda_module_entry(void) {
    return &table;
}
