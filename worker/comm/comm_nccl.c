/* The NCCL communicator (comm_nccl.h). */
#include "comm_nccl.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

struct qw_comm {
    int n;
    int device[QW_COMM_MAX_RANKS];
    ncclComm_t comm[QW_COMM_MAX_RANKS];
    cudaStream_t stream[QW_COMM_MAX_RANKS];
};

#define CUDA_TRY(call, what)                                                                       \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return qs_error_set(err, QS_EIO, "comm: %s: %s", what, cudaGetErrorString(e_));        \
    } while (0)

#define NCCL_TRY(call, what)                                                                       \
    do {                                                                                           \
        ncclResult_t r_ = (call);                                                                  \
        if (r_ != ncclSuccess)                                                                     \
            return qs_error_set(err, QS_EIO, "comm: %s: %s", what, ncclGetErrorString(r_));        \
    } while (0)

int qw_comm_device_count(qs_error *err) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        qs_error_set(err, QS_EIO, "comm: cudaGetDeviceCount: %s", cudaGetErrorString(e));
        return 0;
    }
    return n;
}

qs_status qw_comm_init_all(int n, const int *devices, qw_comm **out, qs_error *err) {
    *out = NULL;
    if (n < 1 || n > QW_COMM_MAX_RANKS)
        return qs_error_set(err, QS_EINVAL, "comm: %d ranks outside 1..%d", n, QW_COMM_MAX_RANKS);
    int have = qw_comm_device_count(err);
    qw_comm *c = calloc(1, sizeof *c);
    if (!c) return qs_error_set(err, QS_ENOMEM, "comm");
    for (int i = 0; i < n; i++) {
        c->device[i] = devices ? devices[i] : i;
        int bad = c->device[i] < 0 || c->device[i] >= have;
        for (int j = 0; j < i && !bad; j++)
            bad = c->device[j] == c->device[i];
        if (bad) {
            int d = c->device[i];
            free(c);
            return qs_error_set(err, QS_EINVAL,
                                "comm: rank %d on device %d: %d devices visible, each used once", i,
                                d, have);
        }
    }
    ncclResult_t r = ncclCommInitAll(c->comm, n, c->device);
    if (r != ncclSuccess) {
        /* the communicators made before the failure are freed, not leaked (c is zeroed, so an
           entry NCCL did not fill is NULL) */
        for (int i = 0; i < n; i++)
            if (c->comm[i]) ncclCommDestroy(c->comm[i]);
        free(c);
        return qs_error_set(err, QS_EIO, "comm: ncclCommInitAll over %d devices: %s", n,
                            ncclGetErrorString(r));
    }
    c->n = n;
    for (int i = 0; i < n; i++) {
        cudaError_t e = cudaSetDevice(c->device[i]);
        if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&c->stream[i], cudaStreamNonBlocking);
        if (e != cudaSuccess) {
            int d = c->device[i];
            qw_comm_destroy(c);
            return qs_error_set(err, QS_EIO, "comm: stream of rank %d (device %d): %s", i, d,
                                cudaGetErrorString(e));
        }
    }
    *out = c;
    return QS_OK;
}

void qw_comm_destroy(qw_comm *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) {
        if (c->stream[i]) {
            (void)cudaSetDevice(c->device[i]);
            (void)cudaStreamDestroy(c->stream[i]);
        }
        if (c->comm[i]) (void)ncclCommDestroy(c->comm[i]);
    }
    free(c);
}

int qw_comm_ranks(const qw_comm *c) {
    return c->n;
}

int qw_comm_device(const qw_comm *c, int rank) {
    return rank >= 0 && rank < c->n ? c->device[rank] : -1;
}

void *qw_comm_stream(const qw_comm *c, int rank) {
    return rank >= 0 && rank < c->n ? (void *)c->stream[rank] : NULL;
}

static ncclRedOp_t nccl_op(qw_comm_op op) {
    return op == QW_COMM_MAX ? ncclMax : op == QW_COMM_AVG ? ncclAvg : ncclSum;
}

qs_status qw_comm_allreduce(qw_comm *c, float *const *bufs, size_t count, qw_comm_op op,
                            void *const *streams, qs_error *err) {
    if (count == 0) return qs_error_set(err, QS_EINVAL, "comm: all-reduce of 0 elements");
    for (int i = 0; i < c->n; i++)
        if (!bufs[i]) return qs_error_set(err, QS_EINVAL, "comm: rank %d: NULL buffer", i);
    /* the backends' ops return before their kernels finish, on streams of their own: wait for
     * each device's work before NCCL reads the buffers (the caller's streams wait themselves) */
    if (!streams)
        for (int i = 0; i < c->n; i++) {
            CUDA_TRY(cudaSetDevice(c->device[i]), "cudaSetDevice");
            CUDA_TRY(cudaDeviceSynchronize(), "waiting for a rank's device before the all-reduce");
        }
    NCCL_TRY(ncclGroupStart(), "ncclGroupStart");
    for (int i = 0; i < c->n; i++) {
        cudaStream_t s = streams && streams[i] ? (cudaStream_t)streams[i] : c->stream[i];
        ncclResult_t r =
            ncclAllReduce(bufs[i], bufs[i], count, ncclFloat32, nccl_op(op), c->comm[i], s);
        if (r != ncclSuccess) {
            (void)ncclGroupEnd();
            return qs_error_set(err, QS_EIO, "comm: ncclAllReduce of rank %d (%zu floats): %s", i,
                                count, ncclGetErrorString(r));
        }
    }
    NCCL_TRY(ncclGroupEnd(), "ncclGroupEnd");
    return QS_OK;
}

qs_status qw_comm_allreduce_rank(qw_comm *c, int rank, float *buf, size_t count, qw_comm_op op,
                                 qs_error *err) {
    if (rank < 0 || rank >= c->n)
        return qs_error_set(err, QS_EINVAL, "comm: rank %d of %d", rank, c->n);
    if (count == 0) return qs_error_set(err, QS_EINVAL, "comm: all-reduce of 0 elements");
    if (!buf) return qs_error_set(err, QS_EINVAL, "comm: rank %d: NULL buffer", rank);
    CUDA_TRY(cudaSetDevice(c->device[rank]), "cudaSetDevice");
    /* the backend's ops return before their kernels finish (ops_cuda.cu), on a stream of their
     * own: this comm point waits for the device's work before NCCL reads buf */
    CUDA_TRY(cudaDeviceSynchronize(), "waiting for the rank's device before the all-reduce");
    ncclResult_t r =
        ncclAllReduce(buf, buf, count, ncclFloat32, nccl_op(op), c->comm[rank], c->stream[rank]);
    if (r != ncclSuccess)
        return qs_error_set(err, QS_EIO, "comm: ncclAllReduce of rank %d (%zu floats): %s", rank,
                            count, ncclGetErrorString(r));
    cudaError_t e = cudaStreamSynchronize(c->stream[rank]);
    if (e != cudaSuccess)
        return qs_error_set(err, QS_EIO, "comm: rank %d (device %d): %s", rank, c->device[rank],
                            cudaGetErrorString(e));
    ncclResult_t async = ncclSuccess;
    NCCL_TRY(ncclCommGetAsyncError(c->comm[rank], &async), "ncclCommGetAsyncError");
    if (async != ncclSuccess)
        return qs_error_set(err, QS_EIO, "comm: rank %d: %s", rank, ncclGetErrorString(async));
    return QS_OK;
}

qs_status qw_comm_allreduce_gradients(qw_comm *c, float *const *grads, size_t n, int average,
                                      qs_error *err) {
    qs_status st = qw_comm_allreduce(c, grads, n, average ? QW_COMM_AVG : QW_COMM_SUM, NULL, err);
    if (st != QS_OK) return qs_error_wrap(err, "gradient all-reduce");
    return qw_comm_sync(c, err);
}

qs_status qw_comm_sync(qw_comm *c, qs_error *err) {
    for (int i = 0; i < c->n; i++) {
        CUDA_TRY(cudaSetDevice(c->device[i]), "cudaSetDevice");
        cudaError_t e = cudaStreamSynchronize(c->stream[i]);
        if (e != cudaSuccess)
            return qs_error_set(err, QS_EIO, "comm: rank %d (device %d): %s", i, c->device[i],
                                cudaGetErrorString(e));
        ncclResult_t async = ncclSuccess;
        NCCL_TRY(ncclCommGetAsyncError(c->comm[i], &async), "ncclCommGetAsyncError");
        if (async != ncclSuccess)
            return qs_error_set(err, QS_EIO, "comm: rank %d: %s", i, ncclGetErrorString(async));
    }
    return QS_OK;
}
